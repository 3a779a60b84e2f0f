"""Gemma 4's own formats in the data pipeline: thinking and tool rows, the layouts users
bring (CodeV-R1 columns, alpaca, ShareGPT, prompt/completion), what the loss covers, the
row-numbered refusals and the length report."""

import json

import numpy as np
import pytest

from cookbook import data
from cookbook.data import _examples as data_examples
from cookbook.data import _formats, _rows

pytestmark = pytest.mark.jax_only

WEATHER = data_examples._WEATHER_TOOL  # the tool notebook 05 shows (test data, one copy)
THOUGHT = "A 4-bit sum needs 5 bits."
MODULE = "module add(input [3:0] a, b, output [4:0] y);\n  assign y = a + b;\nendmodule"
SYSTEM = "You design digital circuits."
PROMPT = "Write a 4-bit adder."


@pytest.fixture(scope="module")
def tok(tiny_base):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_base)


def _thinking_row():
    return {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": PROMPT},
            {"role": "assistant", "reasoning_content": THOUGHT, "content": MODULE},
        ]
    }


def _tool_row(arguments='{"city": "Paris"}'):
    return {
        "tools": [WEATHER],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "reasoning": "Ask the tool.",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "18 C, sunny"},
            {"role": "assistant", "content": "18 C and sunny."},
        ],
    }


def _trained_and_not(tok, row, **kw):
    ids, mask = data.tokenize_chat(tok, row, **kw)
    assert ids.shape == mask.shape and ids.dtype == mask.dtype == np.int32
    return tok.decode(ids[mask == 1]), tok.decode(ids[mask == 0]), ids, mask


def test_a_thinking_row_trains_on_the_thought_channel_and_the_answer(tok):
    trained, untrained, _, _ = _trained_and_not(tok, _thinking_row())
    assert trained == f"<|channel>thought\n{THOUGHT}\n<channel|>{MODULE}<turn|>"
    assert (
        untrained == f"<bos><|turn>system\n<|think|>\n{SYSTEM}<turn|>\n<|turn>user\n{PROMPT}<turn|>\n<|turn>model\n\n"
    )


def test_a_tool_row_trains_on_calls_and_answer_never_on_the_tool_response(tok):
    trained, untrained, _, _ = _trained_and_not(tok, _tool_row())
    assert trained == (
        '<|channel>thought\nAsk the tool.\n<channel|><|tool_call>call:get_weather{city:<|"|>Paris<|"|>}'
        "<tool_call|><|tool_response>18 C and sunny.<turn|>"
    )
    assert 'response:get_weather{value:<|"|>18 C, sunny<|"|>}<tool_response|>' in untrained
    assert "<|tool>declaration:get_weather" in untrained and "Weather in Paris?" in untrained
    # OpenAI's JSON-text arguments and an object give the same tokens.
    same = _trained_and_not(tok, _tool_row(arguments={"city": "Paris"}))
    np.testing.assert_array_equal(same[2], _trained_and_not(tok, _tool_row())[2])


def test_multi_turn_thoughts_before_the_last_user_turn_are_refused_not_dropped(tok):
    """Gemma 4's template renders only the thoughts after the last user turn: a row with an
    earlier thought would train without it. It is refused with the fix; split as the fix says,
    each row trains its turn's thought."""
    row = {
        "messages": [
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "<think>first</think>A1"},
            {"role": "user", "content": "two"},
            {"role": "assistant", "content": "A2", "reasoning_content": "second"},
        ]
    }
    with pytest.raises(_rows.RowError, match=r"message 1 \(assistant\) thought.*one row per assistant turn"):
        data.tokenize_chat(tok, row)
    first, second = data.split_turns(row)
    assert first["messages"][-1] == {"role": "assistant", "content": "A1", "reasoning_content": "first"}
    assert second["messages"][1] == {"role": "assistant", "content": "A1"}  # the earlier thought: in its own row
    assert data.split_turns(first) == [first]  # nothing to split
    trained, _, _, _ = _trained_and_not(tok, first)
    assert trained == "<|channel>thought\nfirst\n<channel|>A1<turn|>"
    trained, _, _, _ = _trained_and_not(tok, second)
    assert trained == "A1<turn|><|channel>thought\nsecond\n<channel|>A2<turn|>"


@pytest.mark.parametrize(
    "layout, row, kw",
    [
        ("codev-r1", {"system": SYSTEM, "prompt": PROMPT, "response": f"<think>\n{THOUGHT}\n</think>\n\n{MODULE}"}, {}),
        (
            "codev-r1, no opening tag",
            {"system": SYSTEM, "prompt": PROMPT, "response": f"{THOUGHT}</think>{MODULE}"},
            {},
        ),
        (
            "named format",
            {"system": SYSTEM, "prompt": PROMPT, "response": f"<think>{THOUGHT}</think>{MODULE}"},
            {"data_format": "codev-r1"},
        ),
        (
            "columns",
            {"sys": SYSTEM, "q": PROMPT, "a": f"<think>{THOUGHT}</think>{MODULE}"},
            {"data_format": "columns", "columns": _formats.parse_columns("system=sys,prompt=q,response=a")},
        ),
        (
            "sharegpt",
            {
                "system": SYSTEM,
                "conversations": [
                    {"from": "human", "value": PROMPT},
                    {"from": "gpt", "value": f"<think>{THOUGHT}</think>{MODULE}"},
                ],
            },
            {},
        ),
        (
            "alpaca",
            {
                "system": SYSTEM,
                "instruction": "Write a 4-bit",
                "input": "adder.",
                "output": f"<think>{THOUGHT}</think>{MODULE}",
            },
            {},
        ),
    ],
)
def test_every_layout_gives_the_tokens_and_mask_of_the_same_messages_row(tok, layout, row, kw):
    expected = _thinking_row()
    if layout == "alpaca":
        expected["messages"][1]["content"] = "Write a 4-bit\n\nadder."
    want = data.tokenize_chat(tok, expected)
    got = data.tokenize_chat(tok, row, **kw)
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_row_without_a_thought_renders_without_the_thinking_switch(tok):
    row = {"prompt": PROMPT, "response": MODULE}
    trained, untrained, _, _ = _trained_and_not(tok, row)
    assert trained == f"{MODULE}<turn|>" and "<|think|>" not in untrained


BAD_ROWS = {
    1: (
        {"messages": [{"role": "robot", "content": "a"}, {"role": "assistant", "content": "b"}]},
        "unknown role 'robot'",
    ),
    2: (
        {
            "messages": [
                {"role": "user", "content": "a"},
                {"role": "tool", "content": "x"},
                {"role": "assistant", "content": "b"},
            ]
        },
        "answers no tool call",
    ),
    3: (
        {
            **_tool_row(),
            "messages": [
                *_tool_row()["messages"][:2],
                {"role": "tool", "tool_call_id": "c9", "content": "x"},
                {"role": "assistant", "content": "b"},
            ],
        },
        "tool_call_id 'c9'",
    ),
    4: (
        {
            **_tool_row(),
            "messages": [
                *_tool_row()["messages"][:3],
                {"role": "tool", "content": "again"},
                {"role": "assistant", "content": "b"},
            ],
        },
        "made 1 call(s), and this is response 2",
    ),
    5: (_tool_row(arguments='{"city": '), "arguments are not valid JSON"),
    6: (_tool_row(arguments="[1, 2]"), "arguments must be a JSON object"),
    7: (
        {
            "messages": [
                {"role": "user", "content": "a"},
                {"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]},
            ]
        },
        "has no function name",
    ),
    8: (
        {**_tool_row(), "tools": [{**WEATHER, "function": {**WEATHER["function"], "name": "get_time"}}]},
        "which the row's tools do not declare",
    ),
    9: ({"prompt": "a", "response": "<think>never closed"}, "never closes it"),
    10: (
        {"messages": [{"role": "user", "content": "say <|turn>model"}, {"role": "assistant", "content": "b"}]},
        "control token '<|turn>'",
    ),
    11: ({"conversations": [{"from": "robot", "value": "a"}]}, "ShareGPT roles are"),
    12: (
        {
            "messages": [
                {"role": "user", "content": "a", "reasoning_content": "x"},
                {"role": "assistant", "content": "b"},
            ]
        },
        "only assistant turns think",
    ),
}


def test_bad_rows_are_refused_with_their_row_number_and_reason(tmp_path, tok):
    path = tmp_path / "rows.jsonl"
    good = [_thinking_row(), _tool_row()] * 30
    lines = [json.dumps(BAD_ROWS[n][0]) if n in BAD_ROWS else json.dumps(good[n]) for n in range(1, 53)]
    path.write_text("\n".join(lines) + "\n")
    examples, report = data.prepare_examples(path, tok, data.DataConfig(seq_len=512, max_bad_fraction=0.3))
    got = {p.row: str(p) for p in report.problems}
    assert set(got) == set(BAD_ROWS), got
    for n, (_, fragment) in BAD_ROWS.items():
        assert fragment in got[n] and got[n].startswith(f"row {n}: ") and "\n" not in got[n], got[n]
    assert report.num_kept == 52 - len(BAD_ROWS) == len(examples)


@pytest.mark.parametrize("too_long", ["drop", "truncate"])
def test_the_length_distribution_and_the_too_long_policy_are_reported(tok, too_long):
    rows = [{"prompt": "p", "response": f"<think>{'think ' * k}</think>{MODULE}"} for k in range(0, 200, 2)]
    lengths = sorted(len(data.tokenize_chat(tok, r)[0]) for r in rows)
    seq_len = lengths[89]  # 10 rows longer
    examples, report = data.prepare_examples(
        rows, tok, data.DataConfig(seq_len=seq_len, too_long=too_long, max_bad_fraction=0.2)
    )
    assert sorted(report.lengths) == lengths
    pct = report.length_percentiles()
    assert pct[50] == lengths[49] and pct[90] == lengths[89] and pct[99] == lengths[98] and pct[100] == lengths[-1]
    assert report.num_over == 10
    line = report.length_line()
    assert f"p50 {lengths[49]}" in line and f"max {lengths[-1]}" in line
    assert f"10 of 100 rows (10.0%) are over seq_len={seq_len}" in line and line in report.summary()
    if too_long == "drop":
        assert len(examples) == 90 and report.num_dropped == 10 and "dropped" in line
    else:
        assert len(examples) == 100 and report.num_truncated == 10 and "truncated" in line
        assert max(len(e.token_ids) for e in examples) == seq_len


def test_columns_and_formats_are_checked_before_any_row_is_read():
    with pytest.raises(ValueError, match="unknown part"):
        data.DataConfig(data_format="columns", columns="question=q,prompt=p,response=r")
    with pytest.raises(ValueError, match="no column for"):
        _formats.parse_columns("prompt=q")
    with pytest.raises(ValueError, match="needs a mapping"):
        data.DataConfig(data_format="columns")
    with pytest.raises(ValueError, match="is unknown; use one of"):
        data.DataConfig(data_format="json")
    mapped = data.DataConfig(data_format="columns", columns="prompt=q,response=a")
    assert mapped.columns == {"prompt": "q", "response": "a"}
    # Frozen configs stay hashable with a mapping inside, and equal ones hash alike.
    same = data.DataConfig(data_format="columns", columns={"response": "a", "prompt": "q"})
    assert same == mapped and hash(same) == hash(mapped) and len({mapped, same, data.DataConfig()}) == 2


def test_a_prompt_without_an_answer_renders_as_the_row_it_comes_from(tok):
    plain = {"messages": [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": MODULE}]}
    assert data.prompt_ids(tok, {"messages": plain["messages"][:1]}) == data.prompt_ids(tok, plain)
    assert data.prompt_text(tok, {"messages": plain["messages"][:1]}).endswith("<|turn>model\n")
    with pytest.raises(_rows.RowError, match="unknown role"):  # still checked
        data.prompt_ids(tok, {"messages": [{"role": "robot", "content": "x"}]})
