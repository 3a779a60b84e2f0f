"""The generated Verilog task: deterministic, held-out names, answers that follow prompts."""

import re

import pytest

from cookbook import data
from cookbook.data import _sample_task

# Needs the JAX stack only: also runs in the TPU-host environment (scripts/run_tests.sh).
pytestmark = pytest.mark.jax_only

PROMPT_RE = re.compile(r"Write a Verilog module named (\w+) that (\w+) two (\d+)-bit inputs\.")
ANSWER_RE = re.compile(
    r"module (\w+)\(input \[(\d+):0\] a, b, output \[(\d+):0\] y\);\n  assign y = a (\S+) b;\nendmodule"
)


def test_rows_are_deterministic_and_seeded():
    a = data.generate_rows("train", n=50, seed=0)
    assert a == data.generate_rows("train", n=50, seed=0)
    assert a != data.generate_rows("train", n=50, seed=1)
    # The eval stream does not depend on how many train rows were drawn.
    assert data.generate_rows("eval", n=20) == data.generate_rows("eval")[:20]


def test_default_sizes_and_distinct_rows():
    train = data.generate_rows("train")
    evals = data.generate_rows("eval")
    assert (len(train), len(evals)) == (3000, 200)
    assert len({data.prompt_of(r) for r in train}) == 3000
    assert len({data.prompt_of(r) for r in evals}) == 200


def test_eval_names_are_held_out_but_their_pieces_are_seen():
    train_names, eval_names = set(_sample_task.module_names("train")), set(_sample_task.module_names("eval"))
    assert len(eval_names) == 32 and len(train_names) == 256 - 32
    assert not train_names & eval_names
    for name in eval_names:
        prefix, suffix = name.split("_")
        assert any(n.startswith(prefix + "_") for n in train_names)
        assert any(n.endswith("_" + suffix) for n in train_names)
    used = {PROMPT_RE.fullmatch(data.prompt_of(r)).group(1) for r in data.generate_rows("eval")}
    assert used <= eval_names


@pytest.mark.parametrize("split", ["train", "eval"])
def test_answer_follows_prompt(split):
    for row in data.generate_rows(split, n=300):
        name, verb, width = PROMPT_RE.fullmatch(data.prompt_of(row)).groups()
        got = ANSWER_RE.fullmatch(data.answer_of(row))
        assert got is not None, data.answer_of(row)
        assert got.group(1) == name
        assert int(got.group(2)) == int(got.group(3)) == int(width) - 1
        assert got.group(4) == _sample_task.OPERATIONS[verb]


def test_exact_match_ignores_end_markers_only():
    row = data.generate_rows("eval", n=1)[0]
    answer = data.answer_of(row)
    assert data.exact_match(answer, row)
    assert data.exact_match(answer + "<turn|>", row)
    assert data.exact_match(answer + "<turn|>\n<|turn>user\nmore", row)
    assert data.exact_match("  " + answer + "\n<eos>", row)
    assert not data.exact_match(answer.replace("a ", "b ", 1), row)
    assert not data.exact_match(answer[:-1], row)
    assert not data.exact_match("", row)
    other = data.generate_rows("eval", n=2)[1]
    assert data.exact_match_rate([answer, answer], [row, other]) == 0.5
    with pytest.raises(ValueError, match="completions"):
        data.exact_match_rate([answer], [row, other])


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="split='test'"):
        data.generate_rows("test")
    with pytest.raises(ValueError, match="unknown operation"):
        _sample_task.make_row("x_y", "divides", 8)


def test_thinking_rows_are_the_plain_rows_with_a_thought_from_their_own_spec():
    plain = data.generate_rows("eval", n=60)
    thinking = data.generate_rows("eval", n=60, thinking=True)
    assert [data.prompt_of(r) for r in thinking] == [data.prompt_of(r) for r in plain]
    assert [data.answer_of(r) for r in thinking] == [data.answer_of(r) for r in plain]
    assert all(data.thought_of(r) is None for r in plain)  # the default rows are unchanged
    assert all("reasoning_content" not in m for r in plain for m in r["messages"])
    for row in thinking:
        name, verb, width = PROMPT_RE.fullmatch(data.prompt_of(row)).groups()
        thought = data.thought_of(row)
        assert (
            thought == f"{name}: {width}-bit {_sample_task.OPERATION_NOUNS[verb]}, so [{int(width) - 1}:0] "
            f"and y = a {_sample_task.OPERATIONS[verb]} b."
        )
        assert "module" not in thought  # nothing the scorer could take for the answer
    assert thinking == data.generate_rows("eval", n=60, thinking=True)


def test_a_thinking_row_renders_gemma4s_thought_channel_and_trains_on_it():
    tokenizer = data.load_tokenizer("tiny")
    row = data.generate_rows("train", n=1, thinking=True)[0]
    thought, answer = data.thought_of(row), data.answer_of(row)
    prompt = data.prompt_text(tokenizer, row)
    assert prompt.startswith("<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\n")
    assert prompt.endswith("<turn|>\n<|turn>model\n")
    ids, mask = data.tokenize_chat(tokenizer, row)
    trained = tokenizer.decode(ids[mask.astype(bool)])
    assert trained == f"<|channel>thought\n{thought}\n<channel|>{answer}<turn|>"  # the loss covers both
    assert len(ids) <= 128  # ~100 tokens: two per row need the thinking recipe's 200 (cookbook.train)


def test_the_answer_is_judged_never_the_thought():
    row = data.generate_rows("eval", n=1)[0]
    answer = data.answer_of(row)
    wrong = answer.replace("a ", "b ", 1)
    channel = "<|channel>thought\n{}\n<channel|>"
    assert data.exact_match(channel.format("think first") + answer + "<turn|>", row)
    assert not data.exact_match(channel.format(answer) + wrong, row)  # the right module, but in the thought
    assert not data.exact_match(channel.format(answer), row)
    assert not data.exact_match("<|channel>thought\n" + answer, row)  # never closed: no answer yet
    assert data.exact_match(f"<think>{wrong}</think>\n{answer}", row)  # DeepSeek-R1 / CodeV-R1 layout
    assert not data.exact_match(f"<think>{answer}</think>{wrong}", row)
    assert not data.exact_match(f"{answer}</think>{wrong}", row)  # a closing tag alone ends a thought
    assert data.clean_completion(f"{channel.format('a')}x{channel.format('b')}y") == "xy"  # every span


def test_show_completions_marks_exact_matches_and_names_the_first_miss():
    rows = data.generate_rows("eval", n=4, seed=0)
    answers = [data.answer_of(r) for r in rows]
    completions = [answers[0] + "<turn|>", answers[1], "module nope(); endmodule", answers[3]]
    shown = data.show_completions(rows, completions, n=2)
    assert shown.count("[OK ]") == 2 and "[BAD]" not in shown  # the first two, both right
    assert shown.splitlines()[-1] == f"one miss: {data.prompt_of(rows[2])} -> 'module nope(); endmodule'"
    assert "one miss" not in data.show_completions(rows[:2], completions[:2], n=1)
