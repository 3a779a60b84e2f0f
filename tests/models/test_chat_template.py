"""The random bases ship Gemma 4's released chat template and render every kind of
conversation exactly as the released template (TRL's copy) does."""

import re
from pathlib import Path

import pytest

from cookbook import models

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
}
SYSTEM = {"role": "system", "content": "You design digital circuits."}
USER = {"role": "user", "content": "Write a 4-bit adder, naïve style 🙂"}
ANSWER = {
    "role": "assistant",
    "content": "module add(input [3:0] a, b, output [4:0] y);\n  assign y = a + b;\nendmodule",
}
THOUGHT = {**ANSWER, "reasoning_content": "A sum of two 4-bit values needs 5 bits."}

# (name, messages, tools, enable_thinking, add_generation_prompt)
CASES = [
    ("plain", [USER, ANSWER], None, False, False),
    ("system", [SYSTEM, USER, ANSWER], None, False, False),
    ("generation prompt", [SYSTEM, USER], None, False, True),
    ("thinking", [SYSTEM, USER, THOUGHT], None, True, False),
    ("thinking prompt", [USER], None, True, True),
    (
        "multi-turn thinking (earlier thoughts dropped)",
        [USER, THOUGHT, {"role": "user", "content": "Now 8 bits."}, {**THOUGHT, "reasoning": "Widen to 9 bits."}],
        None,
        True,
        False,
    ),
    ("tool call", [USER, {"role": "assistant", "content": "", "tool_calls": [CALL]}], [WEATHER], False, False),
    (
        "tool response and answer",
        [
            SYSTEM,
            USER,
            {"role": "assistant", "content": None, "reasoning_content": "Look it up.", "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
            {"role": "assistant", "content": "It is 18 C and sunny."},
        ],
        [WEATHER],
        True,
        False,
    ),
    (
        "tool response, generation continues",
        [
            USER,
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {"role": "tool", "name": "get_weather", "content": '{"temp": 18}'},
        ],
        [WEATHER],
        False,
        True,
    ),
]


def _trl_templates() -> dict[int, Path]:
    import trl

    folder = Path(trl.__file__).parent / "chat_templates"
    found = {}
    for path in folder.glob("gemma4*.jinja"):
        m = re.fullmatch(r"gemma4(?:_v(\d+))?\.jinja", path.name)
        if m:
            found[int(m.group(1) or 1)] = path
    return found


def test_the_shipped_template_is_trls_newest_gemma4_revision_byte_for_byte():
    revisions = _trl_templates()
    assert len(revisions) >= 5, sorted(revisions)  # TRL 1.16 ships revisions 1-5
    newest = revisions[max(revisions)]
    assert models.CHAT_TEMPLATE_FILE.read_bytes() == newest.read_bytes(), (
        f"TRL's newest Gemma 4 template is {newest.name}; copy it to {models.CHAT_TEMPLATE_FILE}"
    )


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_kind_of_conversation_renders_as_the_released_template(tiny_base, case):
    from transformers import AutoTokenizer

    name, messages, tools, thinking, gen = case
    tok = AutoTokenizer.from_pretrained(tiny_base)
    released = _trl_templates()[max(_trl_templates())].read_text(encoding="utf-8")
    kwargs = dict(tools=tools, enable_thinking=thinking, add_generation_prompt=gen, tokenize=False)
    ours = tok.apply_chat_template(messages, **kwargs)
    assert ours == tok.apply_chat_template(messages, chat_template=released, **kwargs)
    # The controls are single special tokens, and the text round-trips through the ids.
    ids = tok(ours, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == ours
    for marker in ("<|turn>", "<|channel>", "<|tool_call>", "<|tool_response>", "<|tool>", "<|think|>"):
        assert ours.count(marker) == ids.count(models.SPECIAL_TOKEN_IDS[marker]), marker
    if thinking:
        assert "<|think|>" in ours
    if name == "thinking":
        assert "<|channel>thought\nA sum of two 4-bit values needs 5 bits.\n<channel|>module add" in ours
    if name.startswith("multi-turn"):
        assert "A sum of two" not in ours and ours.count("<|channel>thought\nWiden to 9 bits.\n<channel|>") == 1
    if tools:
        assert "<|tool>declaration:get_weather{" in ours
        assert '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,unit:<|"|>celsius<|"|>}<tool_call|>' in ours
