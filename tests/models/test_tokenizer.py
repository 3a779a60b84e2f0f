"""cookbook.models tokenizer: Gemma 4's special-token ids, stop tokens and chat template, offline."""

import pytest

from cookbook import models
from cookbook.models import _presets, _tokenizer

# Needs the JAX stack only: also runs in the TPU-host environment (scripts/run_tests.sh).
pytestmark = pytest.mark.jax_only


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    _tokenizer.save_tokenizer(d, vocab_size=512)
    return d


@pytest.fixture(scope="module")
def tok(tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir)


def test_special_token_ids_are_their_positions_with_the_released_first_five():
    assert list(models.SPECIAL_TOKEN_IDS) == list(models.SPECIAL_TOKENS)
    assert list(models.SPECIAL_TOKEN_IDS.values()) == list(range(len(models.SPECIAL_TOKENS)))
    assert [models.SPECIAL_TOKEN_IDS[t] for t in ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>")] == [0, 1, 2, 3, 4]
    assert len(set(models.SPECIAL_TOKENS)) == len(models.SPECIAL_TOKENS)
    assert {"<|turn>", "<turn|>", "<|image|>", "<|audio|>"} <= set(models.SPECIAL_TOKENS)


def test_the_tokenizer_encodes_each_special_token_to_its_id(tok):
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    for token, idx in models.SPECIAL_TOKEN_IDS.items():
        assert tok.convert_tokens_to_ids(token) == idx, token
        assert tok(f"a{token}b", add_special_tokens=False)["input_ids"][1:-1] == [idx], token
    assert tok.decode([models.SPECIAL_TOKEN_IDS["<|turn>"]]) == "<|turn>"


def test_stop_token_ids_are_eos_end_of_turn_and_the_tool_response_wait(tok):
    assert models.stop_token_ids()[:2] == [1, models.SPECIAL_TOKEN_IDS["<turn|>"]]
    assert models.stop_token_ids() == tok.convert_tokens_to_ids(["<eos>", "<turn|>", "<|tool_response>"])


@pytest.mark.parametrize("vocab_size", [400, 700])
def test_vocab_size_is_exactly_the_one_asked_for(tmp_path, vocab_size):
    from transformers import AutoTokenizer

    _tokenizer.save_tokenizer(tmp_path, vocab_size=vocab_size)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert len(tok) == vocab_size
    ids = tok("module adder(input a, output y); endmodule", add_special_tokens=False)["input_ids"]
    assert max(ids) < vocab_size


def test_too_small_a_vocab_is_refused(tmp_path):
    with pytest.raises(ValueError, match=f"at least {len(models.SPECIAL_TOKENS) + 256 + 64}"):
        _tokenizer.save_tokenizer(tmp_path, vocab_size=300)


def test_the_build_is_deterministic(tmp_path, tokenizer_dir):
    _tokenizer.save_tokenizer(tmp_path, vocab_size=512)
    assert (tmp_path / "tokenizer.json").read_bytes() == (tokenizer_dir / "tokenizer.json").read_bytes()


def test_chat_template_renders_turns_and_the_generation_prompt(tok):
    msgs = [{"role": "system", "content": "  be brief \n"}, {"role": "user", "content": "add two bits"}]
    prompt = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert prompt == "<bos><|turn>system\nbe brief<turn|>\n<|turn>user\nadd two bits<turn|>\n<|turn>model\n"
    assert prompt.endswith("<|turn>model\n")
    assert not tok.apply_chat_template(msgs, tokenize=False).endswith("<|turn>model\n")
    ids = tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert ids[0] == models.SPECIAL_TOKEN_IDS["<bos>"] and ids.count(models.SPECIAL_TOKEN_IDS["<bos>"]) == 1
    assert ids.count(models.SPECIAL_TOKEN_IDS["<|turn>"]) == 3 and ids.count(models.SPECIAL_TOKEN_IDS["<turn|>"]) == 2
    assert tok.decode(ids) == prompt


def test_any_utf8_text_encodes_without_unk(tok):
    text = "naïve 漢字 🙂 x<=y"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert models.SPECIAL_TOKEN_IDS["<unk>"] not in ids
    assert tok.decode(ids) == text


def test_tokenizer_renders_gemma4_chat_and_loads_in_transformers(tiny_base):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_base)
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "module m; endmodule"}]
    text = tok.apply_chat_template(msgs, tokenize=False)
    assert text == "<bos><|turn>user\nhi<turn|>\n<|turn>model\nmodule m; endmodule<turn|>\n"
    prompt = tok.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|turn>model\n")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids[:2] == [models.SPECIAL_TOKEN_IDS["<bos>"], models.SPECIAL_TOKEN_IDS["<|turn>"]]
    assert tok.decode(ids) == text
    assert max(ids) < _presets.tiny().vocab_size
    assert tok.chat_template == _tokenizer.CHAT_TEMPLATE  # the released template ships with the base
