"""A user's environment, and the training runs made in it that the suite shares with ``make demo``.

The suite's own process has 8 fake CPU devices (tests/conftest.py) so that sharding is really
exercised; a user's ``cookbook train`` or notebook kernel has one. The device count keys a run
(``cookbook.train.result_determinants``: it changes the float32 rounding, which the tiny recipes
amplify), so a run trained in the suite's process is not the run the demo trains. The tiny
recipes that the demo trains too (notebook 06: the plain and the thinking run) are therefore
trained here in a user's process, in the suite's cache, under the run's lock
(``train.ensure_trained``): whichever of the demo, a notebook test and a fixture asks first trains
it, and every other caller loads it. One run per recipe in one ``make test``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Set by scripts/run_tests.sh or tests/conftest.py for the test session, not by a user. The cache
# root (COOKBOOK_CACHE) stays: what a user's process builds there is what the suite reuses, and the
# other way round (every entry is keyed by what it was built from). A user's process derives the
# same JAX compilation cache under it (cookbook.core.setup_runtime_env).
SESSION_ONLY = (
    "XLA_FLAGS",
    "JAX_PLATFORMS",
    "VLLM_TARGET_DEVICE",
    "JAX_COMPILATION_CACHE_DIR",
    "JAX_COMPILATION_CACHE_MAX_SIZE",
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
    "TOKENIZERS_PARALLELISM",
    "PYTEST_CURRENT_TEST",
    "PYTEST_VERSION",
    "COOKBOOK_RUN_DIR",
    "COOKBOOK_TEST_PROFILE",
    "COOKBOOK_TEST_STREAM",
)

# A collective waits for every device's thread; XLA aborts the process when one has not arrived in
# 40 s. On a loaded 2-core host that happened to a 4-device tiny run in the suite (2026-12-06:
# "Expected 4 threads to join the rendezvous, but only 2 of them arrived on time"), a starved
# thread, not a hang. The suite's processes with several devices wait up to 10 minutes
# (tests/conftest.py, and the children that set their own XLA_FLAGS).
COLLECTIVE_TIMEOUT_FLAG = "--xla_cpu_collective_call_terminate_timeout_seconds=600"

_TRAIN = """
import json, sys
from cookbook import core
core.setup_runtime_env()
from cookbook import train
config = train.TrainConfig.from_dict(json.loads(sys.argv[1]))
print(train.ensure_trained(config, progress=False))
"""


def user_env(**extra: str) -> dict[str, str]:
    """This process's environment less what only the test session sets (8 fake devices, ...)."""
    env = {k: v for k, v in os.environ.items() if k not in SESSION_ONLY}
    env.update(extra)
    return env


def user_run(config) -> Path:
    """``train.ensure_trained(config)`` in a user's process (one CPU device), in the suite's cache."""
    done = subprocess.run(
        [sys.executable, "-c", _TRAIN, json.dumps(config.to_dict())],
        cwd=REPO,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=30 * 60,
    )
    if done.returncode != 0:
        raise RuntimeError(f"training {config.model_preset} in a user's process failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def tiny_run(sample_task: str = "plain") -> Path:
    """The tiny recipe's run (``sample_task`` ``plain`` or ``thinking``), as notebook 06 trains it."""
    from cookbook import train

    return user_run(train.train_preset("tiny", sample_task=sample_task))


# --- Bounds on the shared runs' outcomes, from their measured spread ---

SPREAD_FILE = REPO / "benchmarks" / "results" / "outcome_spread.json"
_METRICS = {"exact_match": "exact", "pass1": "passed", "thoughts_right": "thought"}


def outcome_rate(scores: dict, metric: str, rows: int) -> float:
    """One run's ``metric`` over the first ``rows`` held-out rows, from its per-row ``scores`` as
    ``benchmarks/outcome_spread.py`` records them; ``sampled_pass1``: pass@1 of n = 5 at T = 0.8,
    the lower of its two sampling draws."""
    if metric == "sampled_pass1":
        if rows > len(scores["sampled_passes"][0]):
            raise ValueError(f"sampled pass@1 was measured on {len(scores['sampled_passes'][0])} rows, not {rows}")
        return min(sum(c[:rows]) / (5 * rows) for c in scores["sampled_passes"])
    per_row = scores[_METRICS[metric]]
    if rows > len(per_row):
        raise ValueError(f"{metric} was measured on {len(per_row)} rows, not {rows}")
    return sum(per_row[:rows]) / rows


def spread_runs(recipe: str) -> list[dict]:
    """The committed runs of the tiny ``recipe`` (``plain``, ``thinking``, or ``qlora``: plain on an nf4
    base): seeds and controls."""
    return [r for r in json.loads(SPREAD_FILE.read_text())["runs"] if r["recipe"] == recipe]


def outcome_bound(recipe: str, metric: str, rows: int) -> float:
    """The least a working run of the tiny ``recipe`` may score on ``metric`` (``exact_match``,
    ``pass1``, ``thoughts_right``: greedy; ``sampled_pass1``: n = 5 at T = 0.8) over the first
    ``rows`` held-out rows.

    From ``benchmarks/outcome_spread.py``'s runs over seeds (each seed draws the LoRA initialisation
    and the data order; a run on another CPU is another such draw, since the rounding differs and
    the tiny recipes amplify it): the worst run seen, less the seeds' range once more, and at least
    0.15 below it (more on few rows: one row of ``rows``, or two of 5 x ``rows`` samples). Seeds
    that agree say little of the next machine: of the plain recipe's 7 runs, one ended 6 points
    under all the others (94% exact match on 200 rows against 99.5-100%), and CI's machine trained
    the earlier (200-step) thinking recipe's seed 0, 48 of 48 thoughts right here, to 38 of 48: 6
    points under the worst of its 7 runs here (41). 0.15 is about twice either.
    ``tests/benchmarks/test_outcome_spread.py`` checks that every bound the suite uses still
    separates a working run from the controls (the base and the recipe at a quarter of its steps).
    """
    values = [outcome_rate(r["scores"], metric, rows) for r in spread_runs(recipe) if r["case"].startswith("seed")]
    return bound_below(values, granule=2 / (5 * rows) if metric == "sampled_pass1" else 1 / rows)


def bound_below(values: list[float], *, granule: float) -> float:
    """The bound a measured spread of ``values`` (one per seed) gives: the worst, less the seeds'
    range once more, and at least 0.15 (and one ``granule``, a row's worth) below it."""
    return min(values) - max(max(values) - min(values), 0.15, granule)


def kill_after_checkpoint(command: list[str], out: Path, step: int, env: dict[str, str]) -> list[int]:
    """Start ``command`` (a training run writing checkpoints under ``out``), SIGKILL its whole
    process group as soon as the checkpoint of ``step`` is on disk, and return the checkpoint
    steps it left: what a preempted TPU VM leaves. Fails if the run ended before it was killed."""
    import signal
    import time

    from cookbook import train

    proc = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.time() + 600
    while step not in train.checkpoint_steps(out) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, "the run ended before it could be killed: " + proc.stderr.read().decode()[-2000:]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return train.checkpoint_steps(out)
