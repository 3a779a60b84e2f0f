"""``cookbook eval``: problems written, completions scored with no model, one JSON line per problem."""

import json

import pytest

from cookbook import evaluate, harness
from cookbook.evaluate import _problems, _score, _simulate
from cookbook.train import _run


@pytest.fixture
def problems_dir(tmp_path, capsys, iverilog):
    out = tmp_path / "problems"
    assert harness.main(["eval", "--write-sample-task", str(out), "--limit", "4"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    return out


def test_completions_file_is_scored_without_a_model(problems_dir, tmp_path, capsys):
    problems = evaluate.load_problems(problems_dir)
    assert len(problems) == 4
    answer = [p.ref.replace(_problems.REF_MODULE, p.module) for p in problems]  # the reference, renamed back
    wrong = answer[0].replace(" b;", " a;")
    _score.write_completions(
        tmp_path / "c.jsonl",
        {
            problems[0].name: [answer[0], wrong, answer[0], "prose", answer[0]],
            problems[1].name: [f"```verilog\n{answer[1]}```"] * 5,
            problems[2].name: ["no"] * 5,
            problems[3].name: [answer[3].replace(";", "", 1)] * 5,
        },
    )
    code = harness.main(
        [
            "eval",
            "--problems",
            str(problems_dir),
            "--completions",
            str(tmp_path / "c.jsonl"),
            "--summary",
            str(tmp_path / "s.json"),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert [row["problem"] for row in lines] == [p.name for p in problems]  # one JSON result per problem
    assert (lines[0]["n"], lines[0]["c"], lines[0]["pass@1"], lines[0]["pass@5"]) == (5, 3, 0.6, 1.0)
    assert lines[0]["outcomes"] == ["pass", "mismatch", "pass", "no_module", "pass"]
    assert lines[1]["c"] == 5 and lines[2]["outcomes"] == ["no_module"] * 5
    assert set(lines[3]["outcomes"]) == {"compile_error"}
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["pass@1"] == pytest.approx((0.6 + 1 + 0 + 0) / 4) and summary["pass@5"] == pytest.approx(0.5)
    assert summary["outcomes"] == {"pass": 8, "mismatch": 1, "compile_error": 5, "no_module": 6}
    assert "summary: " in captured.err and "simulating" in captured.err  # the progress bar


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--problems", "{tmp}/nope", "--completions", "{tmp}/c.jsonl"],
            "problems directory '{tmp}/nope' does not exist",
        ),
        (["--problems", "{problems}", "--completions", "{tmp}/bad.jsonl"], "bad.jsonl:2: invalid JSON"),
        (
            ["--problems", "{problems}", "--completions", "{tmp}/c.jsonl", "--k", "5"],
            "pass@5 needs 5 samples per problem",
        ),
        (["--problems", "{problems}"], "say where completions come from"),
        (["--problems", "{problems}", "--run", "{tmp}"], "is not a training run"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(problems_dir, tmp_path, capsys, args, message):
    names = [p.name for p in evaluate.load_problems(problems_dir)]
    _score.write_completions(tmp_path / "c.jsonl", {n: ["x"] for n in names})
    (tmp_path / "bad.jsonl").write_text(json.dumps({"problem": names[0], "completion": "x"}) + "\n{oops\n")
    fill = {"tmp": str(tmp_path), "problems": str(problems_dir)}
    assert harness.main(["eval", *(a.format(**fill) for a in args)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cookbook eval: ") and message.format(**fill) in err[0], err


def test_missing_simulator_stops_before_sampling(problems_dir, tmp_path, capsys, monkeypatch):
    _score.write_completions(tmp_path / "c.jsonl", {p.name: ["x"] for p in evaluate.load_problems(problems_dir)})
    monkeypatch.setenv("PATH", "/nonexistent")
    assert harness.main(["eval", "--problems", str(problems_dir), "--completions", str(tmp_path / "c.jsonl")]) == 1
    assert capsys.readouterr().err.strip() == f"cookbook eval: {_simulate.INSTALL_HINT}"


def test_run_trained_on_other_weights_is_refused_before_anything_loads(tmp_path, tiny_base, capsys):
    """`--run` on a run whose recorded base path now holds other weights: one line naming both
    fingerprints, before the problems, the simulator or the model are touched."""
    from cookbook import models, train

    rec = {**_run.recipe(train.train_preset("tiny"), tiny_base), "base_fingerprint": "0" * 20}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "recipe.json").write_text(json.dumps(rec))
    assert harness.main(["eval", "--problems", str(tmp_path / "none"), "--run", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cookbook eval: "), err
    assert "0" * 20 in err[0] and train.load_recipe(tmp_path / "run")["base_dir"] in err[0], err
    assert f"fingerprint {models.fingerprint(tiny_base)}" in err[0], err
