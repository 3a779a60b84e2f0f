"""`cookbook rl` on the suite's tiny SFT run: a real Tunix DAPO run rewarded by Icarus Verilog, killed
and resumed to the same adapters, read back by the stages that read an SFT run."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import userenv

from cookbook import evaluate, rl, train
from cookbook.merge import _checkpoint
from cookbook.rl import _run, _start
from cookbook.train import _runs

REPO = Path(__file__).resolve().parents[2]


def _rl_command(sft_run: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "cookbook", *["rl", "--run", str(sft_run), "--out", str(out)]]


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_batches_replay_the_same_order_and_cover_each_epoch():
    config = rl.RLConfig(prompts_per_step=3, seed=5)

    class Rollout:
        seed = None

    def take(n):
        rollout, got = Rollout(), []
        for batch in _run._batches([f"p{i}" for i in range(7)], [f"n{i}" for i in range(7)], config, rollout):
            got.append((list(batch["problem"]), rollout.seed))
            if len(got) == n:
                return got

    first, again = take(14), take(14)
    assert first == again  # a resumed run replays the same batches and sampling keys
    names = [n for chunk, _ in first for n in chunk]
    for epoch in range(6):  # 42 items: six whole epochs of the 7 problems, each in its own order
        assert sorted(names[7 * epoch : 7 * epoch + 7]) == [f"n{i}" for i in range(7)]
    assert names[:7] != names[7:14]
    assert len({seed for _, seed in first}) == 14
    assert isinstance(first[0][0][0], str) and all(len(chunk) == 3 for chunk, _ in first)


def test_the_config_refuses_what_cannot_train():
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        rl.RLConfig(group_size=1)
    with pytest.raises(ValueError, match="DAPO has no KL term"):
        rl.RLConfig(beta=0.04)
    with pytest.raises(ValueError, match="counts characters"):
        rl.RLConfig(overlong_buffer=4096)
    with pytest.raises(ValueError, match="epsilon <= epsilon_high"):
        rl.RLConfig(epsilon=0.3, epsilon_high=0.2)
    assert rl.RLConfig(algorithm="grpo", beta=0.04).beta == 0.04
    paper = rl.rl_preset("paper")
    assert (paper.group_size, paper.epsilon, paper.epsilon_high, paper.beta) == (16, 0.2, 0.28, 0.0)
    assert rl.RLConfig.from_dict(paper.to_dict()) == paper


class _Prepared(Exception):
    """Raised where train_rl would prepare its run directory: what it resolved, nothing trained."""


def test_rl_from_an_sft_start_takes_its_checkpoint_and_the_runs_work_directory(tmp_path, monkeypatch):
    sft_run = userenv.tiny_run()
    steps = train.checkpoint_steps(sft_run)
    start = _start.SftStart(
        recipe="tiny", run_dir=sft_run, step=steps[0], control_step=steps[-1], kept_steps=tuple(steps)
    )
    monkeypatch.setenv("COOKBOOK_RUN_DIR", str(tmp_path / "run"))

    def prepared(out, run, section):
        raise _Prepared(out, run, section["sft_step"])

    monkeypatch.setattr(_run, "_prepare_run_dir", prepared)
    with pytest.raises(_Prepared) as got:
        rl.train_rl(start, config=rl.rl_preset("tiny"))
    assert got.value.args == (tmp_path / "run" / "work" / "rl" / f"dapo-from-{steps[0]}", sft_run, steps[0])
    with pytest.raises(_Prepared) as got:  # a step given, and a directory given, win over the start's
        rl.train_rl(start, tmp_path / "mine", rl.rl_preset("tiny"), sft_step=steps[-1])
    assert got.value.args == (tmp_path / "mine", sft_run, steps[-1])


@pytest.mark.slow
def test_rl_runs_from_an_sft_run_and_resumes_after_a_kill_to_the_same_adapters(tmp_path):
    sft_run = userenv.tiny_run()  # notebook 06's run, shared with the demo and the evaluation tests
    env = userenv.user_env(PYTHONUNBUFFERED="1")  # one CPU device, as a user's process

    # Uninterrupted, on the command's defaults (the tiny preset: 8 steps, 2 prompts x 4 samples).
    straight = tmp_path / "straight"
    done = subprocess.run(
        _rl_command(sft_run, straight), cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["final_step"] == 8 and summary["resumed_from"] == 0
    assert summary["sft_step"] == train.checkpoint_steps(sft_run)[-1]
    rows = _rows(straight)
    assert [r["step"] for r in rows] == list(range(1, 9)) and all(r["completions"] == 8 for r in rows)
    assert all(0.0 <= r["reward"] <= 1.1 + 1e-9 and r["pass_rate"] <= 1.0 for r in rows)
    assert any(r["pass_rate"] < 1.0 for r in rows), "no group disagreed: every advantage was 0"
    # The completions keep the token that ended them (Tunix cuts it: core.compat.tunix_rollout_keeps_stop_token),
    # so the policy gradient trains the model to stop; without that, no completion shows its stop token.
    assert max(r["stopped_rate"] for r in rows) > 0, [r["stopped_rate"] for r in rows]
    assert "Skipping non-TPU device" not in done.stderr  # Tunix's CPU HBM warning is kept off the console
    assert (straight / "curves.png").stat().st_size > 0
    assert any((straight / "tensorboard").rglob("events.out.tfevents*"))

    # The run directory is read as an SFT run's is: same model, LoRA and base; its own adapters.
    recipe = json.loads((straight / "recipe.json").read_text())
    assert recipe["rl"]["config"] == rl.rl_preset("tiny").to_dict()
    assert train.config_of_run(straight) == train.config_of_run(sft_run)
    assert _checkpoint.find_step_dir(straight) == (straight / "actor" / "8").resolve()
    rl_lora = _runs.lora_arrays(train.restore_lora_model(straight))
    sft_lora = _runs.lora_arrays(train.restore_lora_model(sft_run))
    assert rl_lora.keys() == sft_lora.keys()
    assert max(float(np.abs(rl_lora[k] - sft_lora[k]).max()) for k in rl_lora) > 0  # RL moved the LoRA
    # Training problems only: none of the held-out problems is trained on.
    held_out = {p.name for p in evaluate.sample_task_problems(train.eval_rows(train.config_of_run(sft_run)))}
    assert recipe["rl"]["problems"] and not set(recipe["rl"]["problems"]) & held_out

    # The same command, killed after its step-4 checkpoint, then rerun: it resumes there.
    killed = tmp_path / "killed"
    before = userenv.kill_after_checkpoint(_rl_command(sft_run, killed), killed, 4, env)
    assert 4 in before and max(before) < 8 and not (killed / "summary.json").exists()
    rerun = subprocess.run(_rl_command(sft_run, killed), cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    resumed = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert resumed["resumed_from"] == max(before) and resumed["final_step"] == 8
    # Same batches, same sampling keys, restored LoRA and optimizer state: the same run, to the bit.
    assert _rows(killed) == rows
    got = _runs.lora_arrays(train.restore_lora_model(killed))
    for k in rl_lora:
        np.testing.assert_array_equal(got[k], rl_lora[k], err_msg=k)

    # Another config on the same directory is refused, naming the difference; nothing is touched.
    again = subprocess.run(
        [*_rl_command(sft_run, killed), "--max-steps", "9"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert again.returncode == 1 and "another config" in again.stderr and "choose another --out" in again.stderr
    assert train.checkpoint_steps(killed)[-1] == 8
