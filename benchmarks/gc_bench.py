"""What raising Python's young-generation GC threshold saves a CPU training process.

    python benchmarks/gc_bench.py [--steps 48] [--repeats 3] [--tests FILE ...] [--out F]

``cookbook.core.setup_runtime_env`` (every entry point: the command line, the notebooks, the
tests) raises CPython's young-generation collection threshold from 700 (2000 from 3.13) to
``cookbook.core.GC_YOUNG_THRESHOLD``: JAX's tracing and lowering, Qwix's LoRA pass and Tunix's
per-step Python allocate millions of container objects, and at 700 the collector ran ~6% of a
short tiny run's samples (perf). This runs what a user runs, ``python -m cookbook train --preset
tiny`` (one CPU device, its own process, eval and checkpoints off), with
``COOKBOOK_GC_THRESHOLD`` at this Python's default and without it, interleaved ``--repeats`` times
so that a change in the machine's load hits both arms, on the CPUs this process may use (pin it
with ``taskset -c 1`` for the suite's one-core streams). Per run: wall, user and system CPU
seconds (``os.wait4``) and the final losses, which must agree bit for bit (the collector does not
change what is computed). Reported: the medians and the ratios (tuned / default), with the
machine's load average before and after. ``--tests`` also times one pytest run of those test
files per arm (``scripts/run_tests.sh``, the suite's environment and caches, warmed by a first run
that is not counted): the suite's own processes hold far more objects, so each collection costs
more there. Writes ``benchmarks/results/gc_bench_cpu.json``.

Hand-written on ``malloc_bench.run_once``: no library times one process beside its output.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from malloc_bench import run_once  # noqa: E402

from cookbook import core  # noqa: E402

OUT = core.RESULTS_DIR / "gc_bench_cpu.json"
# This Python's own young-generation threshold, as a fresh interpreter has it (700; 2000 from 3.13).
CPYTHON_DEFAULT = subprocess.run(
    [sys.executable, "-c", "import gc; print(gc.get_threshold()[0])"], capture_output=True, text=True, check=True
).stdout.strip()


def time_tests(files: list[str], env_vars: dict[str, str]) -> dict:
    """One ``scripts/run_tests.sh FILES -q``: wall and CPU seconds of it and its children."""
    env = os.environ | env_vars
    before = os.times()
    t0 = time.perf_counter()
    done = subprocess.run(["bash", "scripts/run_tests.sh", *files, "-q"], cwd=core.REPO_ROOT, env=env,
                          capture_output=True, text=True)  # fmt: skip
    after = os.times()
    if done.returncode:
        raise RuntimeError(f"the tests failed (exit {done.returncode}):\n{done.stdout[-2000:]}")
    user = after.children_user - before.children_user
    sys_s = after.children_system - before.children_system
    return {"wall_s": time.perf_counter() - t0, "user_s": user, "sys_s": sys_s, "cpu_s": user + sys_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tests", nargs="*", default=[], help="test files to time under both arms too")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()

    os.environ.pop("COOKBOOK_GC_THRESHOLD", None)  # each arm sets its own: the tuned arm must not inherit one
    load_before = os.getloadavg()
    arms = {"default": {"COOKBOOK_GC_THRESHOLD": CPYTHON_DEFAULT}, "tuned": {}}
    runs: dict[str, list[dict]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory() as tmp:
        run_once(args.steps, core.CPU_GLIBC_TUNABLES, Path(tmp) / "warm-up")  # the base, compiled steps: not counted
        for r in range(args.repeats):
            for arm, env in arms.items():
                run = run_once(args.steps, core.CPU_GLIBC_TUNABLES, Path(tmp) / f"{arm}-{r}", **env)
                runs[arm].append(run)
                print(f"{arm:8s} repeat {r}: {run['wall_s']:.1f} s wall, {run['cpu_s']:.1f} CPU-s", flush=True)
    losses = {(run["final_train_loss"], run["final_eval_loss"]) for arm in runs.values() for run in arm}
    if len(losses) != 1:
        raise SystemExit(f"the losses differ between runs, so the runs are not the same work: {sorted(losses)}")
    median = {arm: {k: statistics.median(run[k] for run in rs) for k in rs[0]} for arm, rs in runs.items()}
    keys = ("wall_s", "cpu_s", "user_s", "sys_s", "train_time_s")
    ratio = {k: median["tuned"][k] / median["default"][k] for k in keys}
    tests: dict[str, list[dict]] = {arm: [] for arm in arms}
    if args.tests:
        time_tests(args.tests, {})  # caches warmed (bases, compiled programs), not counted
        for r in range(args.repeats):
            for arm, env in arms.items():
                tests[arm].append(time_tests(args.tests, env))
                print(f"{arm:8s} tests {r}: {tests[arm][-1]['wall_s']:.1f} s wall, {tests[arm][-1]['cpu_s']:.1f} CPU-s")
        ratio["tests_wall_s"], ratio["tests_cpu_s"] = (
            statistics.median(t[k] for t in tests["tuned"]) / statistics.median(t[k] for t in tests["default"])
            for k in ("wall_s", "cpu_s")
        )
    command = f"python benchmarks/gc_bench.py --steps {args.steps} --repeats {args.repeats}"
    if args.tests:
        command += " --tests " + " ".join(args.tests)
    out = {
        "command": command,
        "what": f"python -m cookbook train --preset tiny --max-steps {args.steps}, one process per run",
        "thresholds": {"default": int(CPYTHON_DEFAULT), "tuned": core.GC_YOUNG_THRESHOLD},
        "runs": runs,
        "median": median,
        "ratio_tuned_over_default": ratio,
        "losses_identical": True,
        "tests": {"files": args.tests, "runs": tests},
        "cpus": len(os.sched_getaffinity(0)),
        "date": time.strftime("%Y-%m-%d"),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
    }
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({"ratio_tuned_over_default": ratio}, indent=2))


if __name__ == "__main__":
    main()
