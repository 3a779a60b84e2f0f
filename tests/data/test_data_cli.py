"""``cookbook data``: the report, rendered rows with the trained spans, ``--json``, refusals."""

import json

import numpy as np
import pytest

from cookbook import data
from cookbook.harness import main

pytestmark = pytest.mark.jax_only

ROWS = [
    {
        "system": "You write Verilog.",
        "prompt": "Write an inverter.",
        "response": "<think>One NOT gate.</think>module inv(input a, output y); assign y = ~a; endmodule",
    },
    {"messages": [{"role": "user", "content": "hi"}, {"role": "robot", "content": "x"}]},
    {"conversations": [{"from": "human", "value": "Name a gate."}, {"from": "gpt", "value": "NAND"}]},
    {"prompt": "Write a buffer.", "completion": "module buf1(input a, output y); assign y = a; endmodule"},
]


@pytest.fixture
def rows_file(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS) + "{not json\n")
    return path


def test_json_gives_the_report_and_spans_that_are_the_loss_mask(rows_file, tiny_base, capsys):
    from transformers import AutoTokenizer

    code = main(
        [
            "data",
            "--data",
            str(rows_file),
            "--base",
            str(tiny_base),
            "--show",
            "3",
            "--json",
            "--max-bad-fraction",
            "0.5",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    rep = out["report"]
    assert (rep["num_rows"], rep["num_kept"], rep["num_dropped"]) == (5, 3, 2) and rep["trainable"]
    assert {p["row"] for p in rep["problems"]} == {2, 5}
    assert set(rep["length_percentiles"]) == {"p50", "p90", "p99", "max"}
    tok = AutoTokenizer.from_pretrained(tiny_base)
    assert [r["row"] for r in out["rows"]] == [1, 3, 4]
    for shown in out["rows"]:
        ids, mask = data.tokenize_chat(tok, ROWS[shown["row"] - 1])
        text = shown["text"]
        assert tok.decode(ids) == text and shown["num_tokens"] == len(ids)
        assert shown["num_trained_tokens"] == int(mask.sum())
        spans_text = "".join(text[a:b] for a, b in shown["trained_spans"])
        assert spans_text == tok.decode(ids[mask == 1])
    assert out["rows"][0]["text"][slice(*out["rows"][0]["trained_spans"][0])].startswith("<|channel>thought\nOne NOT")
    assert np.sum([r["num_tokens"] for r in out["rows"]]) == rep["num_tokens"]


def test_text_view_marks_the_trained_spans_and_exits_1_when_training_would_refuse(rows_file, tiny_base, capsys):
    code = main(["data", "--data", str(rows_file), "--base", str(tiny_base), "--show", "1"])
    captured = capsys.readouterr()
    assert code == 1  # 2 of 5 rows bad > the default 5%
    assert "row 2: message 1 has unknown role 'robot'" in captured.out
    assert "row 5: invalid JSON" in captured.out and "lengths (tokens): p50" in captured.out
    assert "<|turn>model\n[[<|channel>thought\nOne NOT gate.\n<channel|>module inv" in captured.out
    assert "`cookbook train` would refuse this data" in captured.err


def test_bad_flags_are_one_line_errors(rows_file, tiny_base, capsys):
    assert main(["data", "--data", str(rows_file), "--base", str(tiny_base), "--format", "columns"]) == 1
    assert "needs a mapping" in capsys.readouterr().err
    assert main(["data", "--data", str(rows_file.with_name("missing.jsonl")), "--base", str(tiny_base)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the file does not exist" in err


def test_marked_tokens_is_the_loss_mask_token_by_token(tiny_base):
    """Notebook 06's view of a thinking row: the markers enclose exactly the trained tokens, one pair
    per run of them, and removed they leave the row's tokens decoded one by one."""
    tokenizer = data.load_tokenizer(base_dir=tiny_base)
    (row,) = data.generate_rows("train", n=1, seed=0, thinking=True)
    ids, mask = data.tokenize_chat(tokenizer, row)
    view = data.marked_tokens(tokenizer, row)
    runs = sum(1 for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1]))
    assert runs >= 1 and view.count("[[") == view.count("]]") == runs
    assert view.replace("[[", "").replace("]]", "") == "".join(tokenizer.decode([int(t)]) for t in ids)
    inside = "".join(part.split("]]")[0] for part in view.split("[[")[1:])
    assert inside == "".join(tokenizer.decode([int(t)]) for t, m in zip(ids, mask, strict=True) if m)
    assert data.thought_of(row) in inside  # the thought is trained, the prompt is not
    assert data.prompt_of(row) not in inside
