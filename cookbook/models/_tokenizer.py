"""A small tokenizer with Gemma 4's special tokens and chat template, trained offline.

Real presets use the tokenizer shipped with the checkpoint. The random CPU presets need a
tokenizer that nothing has to download, yet renders chats exactly as Gemma 4 does
(``<bos><|turn>user\\n...<turn|>\\n<|turn>model\\n``), so the data pipeline, the trainer
and vLLM all see the real format. It is a byte-level BPE trained here with the
``tokenizers`` library on a built-in corpus, so any UTF-8 text encodes.
"""

from __future__ import annotations

from pathlib import Path

# Gemma 4's special tokens, at ids below the learned merges. The first five keep the
# released ids (pad 0, eos 1, bos 2, unk 3, mask 4).
SPECIAL_TOKENS: tuple[str, ...] = (
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<mask>",
    "<|turn>",
    "<turn|>",
    "<|channel>",
    "<channel|>",
    "<|tool_call>",
    "<tool_call|>",
    "<|tool_response>",
    "<tool_response|>",
    '<|"|>',
    "<|think|>",
    "<|image>",
    "<image|>",
    "<|image|>",
    "<|video|>",
    "<|audio>",
    "<audio|>",
    "<|audio|>",
    "<|tool>",
    "<tool|>",
)
SPECIAL_TOKEN_IDS: dict[str, int] = {t: i for i, t in enumerate(SPECIAL_TOKENS)}

TURN_START = "<|turn>"
TURN_END = "<turn|>"
TOOL_RESPONSE_START = "<|tool_response>"

# Gemma 4's released chat template, verbatim: the current revision as TRL ships it
# (``trl/chat_templates/gemma4_v5.jinja``, TRL 1.16.0, "Published: 2026-07-09"). After
# ``<bos>``, each text turn is "<|turn>ROLE\n CONTENT <turn|>\n" with "assistant" spelled
# "model"; a generation prompt ends with "<|turn>model\n". It also renders a system turn
# opened by ``<|think|>`` when ``enable_thinking`` is set, an assistant's
# ``reasoning_content`` as ``<|channel>thought\n...\n<channel|>`` (after the last user
# turn only), tool declarations (``<|tool>...<tool|>``), tool calls
# (``<|tool_call>call:NAME{...}<tool_call|>``) and tool responses
# (``<|tool_response>response:NAME{...}<tool_response|>``). tests/models check that it is
# byte-identical to TRL's copy and renders every kind of conversation as TRL's does.
CHAT_TEMPLATE_FILE = Path(__file__).with_name("gemma4_chat_template.jinja")
CHAT_TEMPLATE = CHAT_TEMPLATE_FILE.read_text(encoding="utf-8")

_CORPUS_WORDS = """
write a verilog module named that takes two inputs and returns output the result of
adds subtracts multiplies ands ors xors compares shifts left right rotates negates
bit bits wide input output wire reg assign always begin end endmodule module parameter
logic posedge negedge clk rst reset if else case default localparam integer signed
unsigned sum diff prod and or xor xnor nand nor not equal greater less counter adder
register mux decoder encoder shifter comparator parity gray binary one hot fsm state
alu top core unit block data addr valid ready enable load store read write value of
user model system the an is are be to from with for on in by this these those it its
please create implement design give me show return make build compute produce generate
""".split()
_CORPUS_SYMBOLS = "a b c d e f g h i j k l m n o p q r s t u v w x y z _ 0 1 2 3 4 5 6 7 8 9"
_CORPUS_CODE = [
    "module {n}(input [{w}:0] a, input [{w}:0] b, output [{w}:0] y);",
    "  assign y = a {op} b;",
    "endmodule",
    "always @(posedge clk) begin q <= d; end",
    "wire [{w}:0] {n}_sum;",
]
_OPS = ["+", "-", "*", "&", "|", "^", "<<", ">>", "==", "!=", "<", ">", "~^"]


def _training_corpus() -> list[str]:
    """A deterministic corpus: English instruction words, identifiers and Verilog lines."""
    lines = [" ".join(_CORPUS_WORDS), _CORPUS_SYMBOLS]
    words = _CORPUS_WORDS
    for i, w in enumerate(words):
        other = words[(i * 7 + 3) % len(words)]
        lines.append(
            f"Write a Verilog module named {w}_{other} that {words[(i * 5) % len(words)]} two {i % 64 + 1}-bit inputs."
        )
        for j, template in enumerate(_CORPUS_CODE):
            lines.append(template.format(n=f"{w}_{other}", w=(i + j) % 64, op=_OPS[(i + j) % len(_OPS)]))
    lines.extend(str(n) for n in range(0, 130))
    return lines


def build_tokenizer(vocab_size: int = 1024):
    """Train the byte-level BPE tokenizer and wrap it for transformers.

    Returns a ``transformers.PreTrainedTokenizerFast`` with Gemma 4's special tokens and
    chat template. Deterministic: the same ``vocab_size`` always gives the same tokenizer.
    ``vocab_size`` is an upper bound: the small built-in corpus runs out of merges at 930
    tokens, so for the random presets (embedding of 1,024 rows) ids 930-1023 exist in the
    model but no text encodes to them; nothing in the cookbook samples or trains on them.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < len(SPECIAL_TOKENS) + 256 + 64:
        raise ValueError(
            f"vocab_size={vocab_size} leaves no room for the byte alphabet and merges; "
            f"use at least {len(SPECIAL_TOKENS) + 256 + 64}."
        )
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_corpus(), trainer=trainer)
    for token, idx in SPECIAL_TOKEN_IDS.items():
        assert tok.token_to_id(token) == idx, (token, tok.token_to_id(token), idx)

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
        additional_special_tokens=list(SPECIAL_TOKENS[5:]),
        padding_side="right",
        model_max_length=4096,
        add_bos_token=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def save_tokenizer(out_dir: str | Path, vocab_size: int = 1024) -> None:
    """Write tokenizer.json, tokenizer_config.json (with the chat template) to ``out_dir``."""
    build_tokenizer(vocab_size).save_pretrained(str(out_dir))


def stop_token_ids() -> list[int]:
    """Tokens that end a model's generation: ``<eos>``, ``<turn|>`` and ``<|tool_response>``.

    The last one is where a model that called a tool stops and waits: the chat template
    ends a turn whose last act is a tool call with ``<|tool_response>`` (the caller appends
    the response), and vLLM's Gemma 4 parser treats it as a turn boundary.
    """
    return [SPECIAL_TOKEN_IDS["<eos>"], SPECIAL_TOKEN_IDS[TURN_END], SPECIAL_TOKEN_IDS[TOOL_RESPONSE_START]]
