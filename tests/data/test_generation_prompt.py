"""Training sees the prompt serving sends: the answer follows the template's whole generation prompt.

Gemma 4's 12B, 26B-A4B and 31B templates end the generation prompt, with thinking off, with an
empty thought block (``<|turn>model\\n<|channel>thought\\n<channel|>``); E2B/E4B's (the revision the
cookbook ships) end at ``<|turn>model\\n``. Neither renders that block in a finished conversation.
The big sizes' template file is not available offline, so ``BIG_TEMPLATE`` is the shipped
revision with exactly that difference made to its generation prompt, as the released templates
are described to differ (nothing else changed). On both, every kept row's tokens start with the
tokens of the prompt a server sends for it, the block is never trained, and the trained tokens are
the same; a template whose prompt differs from the row in any other way is refused.
"""

import pytest
from chat_rows import ROWS

from cookbook import data
from cookbook.data import _rows, _tokenize
from cookbook.models import _tokenizer

EMPTY_THOUGHT = "<|channel>thought\n<channel|>"
_OPENER = "{{- '<|turn>model\\n' -}}"


def _with_generation_prompt(opener: str) -> str:
    head, sep, tail = _tokenizer.CHAT_TEMPLATE.partition("{%- if add_generation_prompt -%}")
    assert sep and tail.count(_OPENER) == 1, "the shipped template's generation prompt moved"
    return head + sep + tail.replace(_OPENER, opener)


BIG_TEMPLATE = _with_generation_prompt(
    _OPENER + "{%- if not enable_thinking -%}{{- '" + EMPTY_THOUGHT.replace("\n", "\\n") + "' -}}{%- endif -%}"
)
KEPT = ["plain", "system", "thinking", "tool call", "tool response"]  # multi-turn thinking: split_turns


@pytest.fixture(scope="module")
def tokenizers(tiny_base) -> dict:
    out = {}
    for name, template in (("E2B/E4B", _tokenizer.CHAT_TEMPLATE), ("12B/26B/31B", BIG_TEMPLATE)):
        tok = _tokenize._load_from_dir(tiny_base)
        tok.chat_template = template
        out[name] = tok
    return out


def test_the_big_template_differs_only_in_the_generation_prompt(tokenizers):
    small, big = tokenizers["E2B/E4B"], tokenizers["12B/26B/31B"]
    for kind in KEPT:
        conv = _rows.to_conversation(ROWS[kind])
        assert _tokenize.render(big, conv) == _tokenize.render(small, conv), kind
    conv = _rows.to_conversation(ROWS["plain"])
    prompt = conv.messages[:1]
    assert _tokenize.render(big, conv, True, prompt) == _tokenize.render(small, conv, True, prompt) + EMPTY_THOUGHT
    # ... so on it, a finished row does not go on where the served prompt ends: the skew handled here.
    assert not _tokenize.render(big, conv).startswith(_tokenize.render(big, conv, True, prompt))


@pytest.mark.parametrize("template", ["E2B/E4B", "12B/26B/31B"])
@pytest.mark.parametrize("kind", KEPT)
def test_a_rows_tokens_start_with_the_served_prompt_and_train_the_same_tokens(kind, template, tokenizers):
    tok, row = tokenizers[template], ROWS[kind]
    ids, mask = data.tokenize_chat(tok, row)
    prompt = data.prompt_ids(tok, row)
    assert list(ids[: len(prompt)]) == prompt
    # Trained inside the prompt: only the model's earlier turns (the tool call before a tool response).
    earlier = [m for m in ROWS[kind]["messages"][:-1] if m["role"] == "assistant"]
    assert mask[: len(prompt)].any() == bool(earlier)
    small_ids, small_mask = data.tokenize_chat(tokenizers["E2B/E4B"], row)
    assert tok.decode(ids[mask == 1]) == tok.decode(small_ids[small_mask == 1])  # the model's words, unchanged
    thinking = bool(ROWS[kind]["messages"][-1].get("reasoning_content"))
    inserted = template == "12B/26B/31B" and not thinking and kind != "tool response"
    assert tok.decode(ids).count(EMPTY_THOUGHT) == int(inserted)
    if inserted:
        assert EMPTY_THOUGHT in tok.decode(ids[: len(prompt)]) and EMPTY_THOUGHT not in tok.decode(ids[mask == 1])


def test_a_template_whose_prompt_differs_otherwise_is_refused(tiny_base):
    tok = _tokenize._load_from_dir(tiny_base)
    tok.chat_template = _with_generation_prompt("{{- '<|turn>assistant\\n' -}}")
    with pytest.raises(_rows.RowError, match="never served") as caught:
        data.tokenize_chat(tok, ROWS["plain"])
    assert data.template_revision(tok) in str(caught.value) and "CHAT_TEMPLATE_FILE" in str(caught.value)


@pytest.mark.parametrize("kind", KEPT)
def test_the_gpu_recipe_tokenises_each_row_as_the_tpu_pipeline_on_the_big_template(kind, tokenizers):
    """train_gpu.py restates the pipeline (it runs where the cookbook is not installed): the same
    tokens and mask, the empty thought block included and untrained."""
    from cookbook.gpu import train_gpu

    tok = tokenizers["12B/26B/31B"]
    ids, mask = data.tokenize_chat(tok, ROWS[kind])
    got = train_gpu.tokenize_row(tok, ROWS[kind])
    assert got["input_ids"] == ids.tolist() and got["completion_mask"] == mask.tolist()


def test_after_a_tool_response_with_thinking_on_the_row_is_trained_as_rendered(tokenizers):
    """Notebook 05's row kind: a thought, a tool call, its response, then the answer. Served after a
    tool response, the generation prompt opens a thought (thinking on) inside the model's own turn,
    not a new turn: nothing is inserted, and the tool call is trained (make demo caught the miss)."""
    row = {
        "tools": ROWS["tool response"]["tools"],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {**ROWS["tool response"]["messages"][1], "reasoning_content": "Ask the weather tool."},
            *ROWS["tool response"]["messages"][2:],
        ],
    }
    for tok in tokenizers.values():
        conv = _rows.to_conversation(row)
        text = _tokenize.render(tok, conv)
        assert data.as_served(tok, conv, text) == (text, _tokenize.trained_spans(text))
        ids, mask = data.tokenize_chat(tok, row)
        assert "<|tool_call>call:get_weather" in tok.decode(ids[mask == 1])
