"""cookbook.train._sections: notebook 06's training sections (size advice, the run's overview,
what decides its weights, the rerun, several hosts), each checked against what it must have read
or run and what it records."""

import ast
import json
import types
from pathlib import Path

import pytest

from cookbook import train
from cookbook.train import _pod, _sections

pytestmark = pytest.mark.jax_only


def test_runtime_advice_for_the_tiny_default_only(monkeypatch):
    from cookbook import fit

    advice = train.runtime_advice("tiny")  # the suite's CPU host
    assert "the default is the random tiny model (MODEL_PRESET = 'tiny')" in advice.describe()
    assert advice.results() == {}
    # A chosen size gets no advice, and the runtime is not asked.
    monkeypatch.setattr(fit, "size_advice", lambda runtime=None: pytest.fail("advice for a chosen size"))
    chosen = train.runtime_advice("gemma4_31b")
    assert chosen.advice is None and "'gemma4_31b' is chosen" in chosen.describe() and chosen.results() == {}


class _RunPath:
    """What ensure_trained may return: a path-like that is not a Path."""

    def __init__(self, path: Path):
        self._path = path

    def __fspath__(self) -> str:
        return str(self._path)


def _finished_run(root: Path) -> Path:
    """A run directory as a finished (and once resumed) run leaves it."""
    run = root / "tiny-0123"
    (run / "checkpoints" / "100").mkdir(parents=True)
    (run / "checkpoints" / "200").mkdir()
    (run / "checkpoints" / "200.orbax-checkpoint-tmp-1").mkdir()  # a save in flight, not a step
    lines = [
        ("train/loss", 1, 7.5),
        ("train/loss", 100, 0.4),
        ("eval/loss", 100, 0.6),
        ("train/loss", 200, 0.2),
        ("train/loss", 200, 0.1),  # the resumed run logged step 200 again: the later value wins
        ("eval/loss", 200, 0.3),
    ]
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"name": n, "step": s, "value": v}) + "\n" for n, s, v in lines)
    )
    summary = {
        "final_step": 200,
        "train_time_s": 31.5,
        "tokens_per_s": 6000.0,
        "final_train_loss": 0.1,
        "final_eval_loss": 0.3,
        "data_report": {"rows": 3000, "dropped": 0},
    }
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def test_run_overview_reads_the_finished_run(tmp_path, monkeypatch):
    run = _finished_run(tmp_path)
    config = train.train_preset("tiny")
    asked = []
    monkeypatch.setattr(_sections, "ensure_trained", lambda c, progress=True: asked.append(c) or _RunPath(run))
    overview = train.run_overview(config)
    assert asked == [config] and overview.run_dir == run
    assert overview.checkpoints == [100, 200]
    assert overview.results() == {
        "run_dir": str(run),
        "max_steps": config.max_steps,
        "first_train_loss": 7.5,
        "final_train_loss": 0.1,
        "final_eval_loss": 0.3,
        "train_time_s": 31.5,
        "tokens_per_s": 6000.0,
    }
    lines = overview.describe().splitlines()
    assert lines[0] == str(run) and lines[2] == "checkpoints: [100, 200]"
    assert ast.literal_eval(lines[1]) == {
        "final_step": 200,
        "train_time_s": 31.5,
        "tokens_per_s": 6000.0,
        "final_train_loss": 0.1,
        "final_eval_loss": 0.3,
    }
    assert lines[3] == str({"rows": 3000, "dropped": 0})
    ax = overview.plot_loss()
    assert ax.get_title() == "LoRA on tiny: answer-token cross-entropy"
    assert [line.get_label() for line in ax.get_lines()] == ["train/loss", "eval/loss"]
    assert list(ax.get_lines()[0].get_ydata()) == [7.5, 0.4, 0.1]


def test_reproducibility_names_this_process_setup():
    import jax

    r = train.reproducibility()
    given = r.results()["reproducible_given"]
    assert given["devices"] == jax.device_count() == 8 and given["platform"] == "cpu"  # the suite's fake devices
    assert json.loads(r.describe()) == given


def test_rerun_reports_where_it_resumed(monkeypatch, tmp_path):
    config = train.train_preset("tiny")
    calls = []

    def fake_train(c, run_dir, progress=True):
        calls.append((c, run_dir))
        return types.SimpleNamespace(resumed_from=config.max_steps, final_step=config.max_steps)

    monkeypatch.setattr(_sections, "train", fake_train)
    again = train.rerun(config, _RunPath(tmp_path))
    assert calls == [(config, tmp_path)]  # the run directory as a Path
    n = config.max_steps
    assert again.describe() == f"resumed from step {n}, now at step {n} of {n}"
    assert again.results() == {"rerun_resumed_from": n}


def test_multihost_skipped_still_shows_the_pods_commands(tmp_path):
    hosts = train.multihost(train.train_preset("tiny"), tmp_path / "two-hosts", processes=0, steps=4)
    assert hosts.run is None and hosts.results() == {}
    ran, commands = hosts.describe().split("\n", 1)
    assert "skipped (0 processes asked)" in ran
    assert commands.startswith("# gemma4_31b on v5p-32:") and "--worker=all" in commands
    assert not (tmp_path / "two-hosts").exists()


def test_multihost_runs_into_the_runs_work_directory_unless_told(tmp_path, monkeypatch):
    monkeypatch.setenv("COOKBOOK_RUN_DIR", str(tmp_path / "run"))
    asked = []
    monkeypatch.setattr(_sections, "train_on_local_processes", lambda config, out, *, processes: asked.append(out))
    train.multihost(train.train_preset("tiny"), processes=2, steps=4)
    assert asked == [tmp_path / "run" / "work" / "train" / "two-hosts"]


def test_multihost_runs_the_shortened_config_and_records_it(tmp_path, monkeypatch):
    asked = {}

    def fake_local(config, out, *, processes):
        asked.update(max_steps=config.max_steps, warmup=config.warmup_steps, out=out, processes=processes)
        return _pod.LocalHostsRun(
            2, str(out), (4, 2), ["train", "--max-steps", "4"], {"final_step": 4, "final_train_loss": 1.5}
        )

    monkeypatch.setattr(_sections, "train_on_local_processes", fake_local)
    hosts = train.multihost(train.train_preset("tiny"), tmp_path, processes=2, steps=4)
    assert asked == {"max_steps": 4, "warmup": 1, "out": tmp_path, "processes": 2}
    assert hosts.results() == {
        "multihost": {"returncode": 0, "mesh": [4, 2], "command": ["train", "--max-steps", "4"]},
        "multihost_final_step": 4,
    }
    assert hosts.describe().startswith("2 processes, mesh fsdp 4 x tp 2: step 4, train loss 1.5000")
