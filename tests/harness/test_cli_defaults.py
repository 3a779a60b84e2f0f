"""Every subcommand on its defaults: given only the arguments it requires, on the tiny default
preset, it works. Those whose required input is something heavy (a trained run, a running server,
a command to launch) name the test that runs them with only that input, and this test checks the
call is there."""

from pathlib import Path

import pytest

from cookbook import data, harness, train
from cookbook.harness import _cli
from cookbook.train import _run

REPO = Path(__file__).resolve().parents[2]

# Only the required arguments; {tmp} is a fresh directory, {rows} a file of sample-task rows.
RUN_HERE = {
    "base": ["base"],
    "cost": ["cost"],
    "data": ["data", "--data", "{rows}"],
    "eval": ["eval", "--write-sample-task", "{tmp}/problems"],
    "gpu-recipe": ["gpu-recipe", "--preset", "tiny", "--out", "{tmp}/gpu"],
    "plan": ["plan"],
}
# Required input another test builds: (the test file, the call it makes with only that input).
ELSEWHERE = {
    "train": ("tests/harness/test_cli_defaults.py", "test_train_on_its_defaults_is_the_run_make_demo_trains"),
    "rl": ("tests/rl/test_rl.py", '["rl", "--run", str(sft_run), "--out", str(out)]'),
    "merge": ("tests/merge/test_merge.py", '["merge", "--lora", str(lora_run), "--out"'),
    "serve": ("tests/serve/test_serve.py", 'harness.main(["serve", str(tiny_text_base)]) == 0'),
    "bench": ("tests/serve/test_bench.py", '"--base-url",'),
    "demo": ("tests/harness/conftest.py", '["make", "demo", f"ARGS=--runs {runs}"]'),  # make demo: cookbook demo
    "launch": ("tests/train/test_multihost.py", '"launch",'),
}


def test_every_subcommand_is_run_on_its_defaults_here_or_by_a_named_test():
    assert set(RUN_HERE) | set(ELSEWHERE) == set(_cli.COMMANDS) and not set(RUN_HERE) & set(ELSEWHERE)
    for command, (path, call) in ELSEWHERE.items():
        assert call in (REPO / path).read_text(), f"{command}: {path} no longer makes {call!r}"


@pytest.mark.parametrize("command", sorted(RUN_HERE))
def test_a_subcommand_runs_on_its_defaults(command, tmp_path, capsys):
    rows = data.write_jsonl(data.generate_rows("train", n=40, seed=0), tmp_path / "rows.jsonl")
    argv = [a.format(tmp=tmp_path, rows=rows) for a in RUN_HERE[command]]
    code = harness.main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err[-2000:]
    assert out.strip(), f"cookbook {command} printed nothing"
    assert "Traceback" not in out + err


def test_train_on_its_defaults_is_the_run_make_demo_trains(tmp_path):
    """`cookbook train --out DIR` (--out is required to train) trains the tiny recipe: the very config
    notebook 06 and make demo train (tests/userenv.py), so its run is checked end to end there."""
    from cookbook.train._cli import config_from_args

    args = _cli.build_parser("train").parse_args(["train", "--out", str(tmp_path / "run")])
    config = config_from_args(args)
    assert config == train.train_preset("tiny")
    assert _run.cache_key(config) == _run.cache_key(train.train_preset("tiny"))
