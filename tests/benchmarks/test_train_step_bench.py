"""benchmarks/train_step_bench.py at ``tiny`` size on CPU: both stacks' rows, their ratio, the estimate table.

A smoke test of the whole script as a user runs it (its own processes for the two stacks),
with no assertion on speed: a shared 2-core machine's timings say nothing. What it does
assert would be wrong if the script were: every figure of both rows is positive, the two
stacks saw the same tokens and computed the same first loss, each layout asked for has
its row with the compiler's FLOPs and the planner's estimate, and the JSON is valid and
written where it was told (never into ``benchmarks/results/``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "train_step_bench.py"
LAYOUTS = (("none", 1), ("decoder", 2))  # both remat choices and both micro-batches, in two compiles


def _results_listing() -> dict[str, int]:
    results = REPO / "benchmarks" / "results"
    return {p.name: p.stat().st_mtime_ns for p in results.iterdir()} if results.is_dir() else {}


# ~65 CPU-seconds (two stacks' imports, Qwix's eager LoRA call, two compiles): 2.5-3.5 min wall on a busy 2-core host
@pytest.mark.slow
def test_train_step_bench_tiny_cpu(tmp_path):
    out = tmp_path / "bench.json"
    before = _results_listing()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, str(SCRIPT), "--device", "cpu", "--preset", "tiny", "--seq-len", "64",
           "--warmup-steps", "1", "--steps", "2", "--layouts", ",".join(f"{r}:{b}" for r, b in LAYOUTS),
           "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert _results_listing() == before, "the smoke test must not write into benchmarks/results/"

    r = json.loads(out.read_text())
    assert r["measured"] is True and r["device"]["kind"] == "cpu" and not r["errors"]
    assert r["model"]["name"] == "tiny" and r["model"]["dtype"] == "float32"
    for stack in ("jax", "torch"):
        row = r[stack]
        for field in ("step_s", "tokens_per_s", "peak_memory_bytes", "mfu", "first_step_loss"):
            assert row[field] > 0, (stack, field, row[field])
        assert row["tokens_per_s"] * row["step_s"] == pytest.approx(64)
    assert r["ratio_jax_over_torch"]["tokens_per_s"] > 0
    assert r["ratio_jax_over_torch"]["tokens_per_s"] == pytest.approx(r["torch"]["step_s"] / r["jax"]["step_s"])

    # The same step on both sides: the same token ids, the same LoRA size (Qwix's shared K/V
    # A = PEFT's tied lora_A), and, since LoRA B starts at zero, the same first loss. The
    # exact float32 parity of the two stacks is tests/gpu/test_parity.py's; here 1e-4
    # relative only says that the benchmark fed both the same batch and objective.
    assert r["torch"]["same_tokens_as_jax"] is True
    assert r["torch"]["trainable_params"] == r["jax"]["lora_params"] == r["flops"]["lora_params"]
    assert abs(r["jax"]["first_step_loss"] - r["torch"]["first_step_loss"]) < 1e-4 * r["jax"]["first_step_loss"]

    layouts = r["layouts"]
    assert [(x["remat"], x["batch_size"]) for x in layouts] == list(LAYOUTS)
    for x in layouts:
        assert "error" not in x, x
        assert x["xla_flops"] > 0 and x["step_s"] > 0 and x["planner_estimate_s"] > 0
        assert len(x["step_times_s"]) == 3 and x["tokens_per_step"] == 64 * x["batch_size"]
    # remat recomputes the forward pass: the compiler counts more FLOPs per token for it
    per_token = {x["remat"]: x["xla_flops"] / x["tokens_per_step"] for x in layouts}
    assert per_token["decoder"] > per_token["none"]
    assert r["estimate_ranking"]["per_step"]["pairs"] == 1
    assert sorted(r["estimate_ranking"]["per_step"]["measured_order"]) == ["decoder/b2", "none/b1"]
    assert "ratio (a)/(b)" in proc.stdout
