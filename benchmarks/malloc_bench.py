"""What glibc's malloc on huge pages saves the CPU runs: a tiny training run with and without it.

    python benchmarks/malloc_bench.py [--steps 80] [--repeats 2] [--out F]

XLA's CPU runtime allocates each execution's buffers afresh. Above glibc's mmap threshold (at
most 32 MiB) each allocation is a new mapping, so every step faults its pages in one 4 KiB page at
a time and hands them back when it ends. ``cookbook.core.CPU_GLIBC_TUNABLES``
(``glibc.malloc.hugetlb=1``) makes glibc ask for transparent huge pages on those mappings; the
Makefile exports it and ``cookbook.core.setup_runtime_env`` passes it to the processes it starts.

This runs what a user runs, ``python -m cookbook train --preset tiny`` (one CPU device, its own
process, checkpoints and eval off so the steps dominate), with ``GLIBC_TUNABLES`` unset and set,
interleaved ``--repeats`` times so a change in the machine's load hits both. Per run: wall
seconds, user and system CPU seconds and minor page faults of the process (``os.wait4``), and the
final train and eval losses, which must agree bit for bit (the allocator does not change what is
computed). Reported: the medians, and the ratios (huge pages / default), with the machine's load
average before and after. Writes ``benchmarks/results/malloc_bench_cpu.json``.

Hand-written: no library measures one process's page faults and CPU time beside its output.
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

from cookbook import core

OUT = core.RESULTS_DIR / "malloc_bench_cpu.json"


def run_once(steps: int, tunables: str | None, out_dir: Path, **env_vars: str) -> dict:
    """One ``cookbook train --preset tiny`` process: its wall and CPU seconds, faults and losses
    (``env_vars``: more of the child's environment)."""
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if tunables:
        env["GLIBC_TUNABLES"] = tunables
    env.update(env_vars)
    cmd = [sys.executable, "-m", "cookbook", "train", "--preset", "tiny", "--out", str(out_dir)]
    cmd += ["--max-steps", str(steps), "--eval-every", str(10 * steps), "--checkpoint-every", str(10 * steps)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=core.REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}")
    result = json.loads(stdout.decode().strip().splitlines()[-1])
    return {
        "wall_s": time.perf_counter() - t0,
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "minor_faults": usage.ru_minflt,
        "train_time_s": result["train_time_s"],
        "final_train_loss": result["final_train_loss"],
        "final_eval_loss": result["final_eval_loss"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()

    load_before = os.getloadavg()
    arms = {"default": None, "huge_pages": core.CPU_GLIBC_TUNABLES}
    runs: dict[str, list[dict]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for arm, tunables in arms.items():
                run = run_once(args.steps, tunables, Path(tmp) / f"{arm}-{r}")
                runs[arm].append(run)
                print(f"{arm:10s} repeat {r}: {run['wall_s']:.1f} s wall, {run['cpu_s']:.1f} CPU-s, "
                      f"{run['minor_faults']:,} faults", flush=True)  # fmt: skip
    losses = {(run["final_train_loss"], run["final_eval_loss"]) for arm in runs.values() for run in arm}
    if len(losses) != 1:
        raise SystemExit(f"the losses differ between runs, so the runs are not the same work: {sorted(losses)}")
    median = {arm: {k: statistics.median(run[k] for run in rs) for k in rs[0]} for arm, rs in runs.items()}
    keys = ("wall_s", "cpu_s", "sys_s", "minor_faults", "train_time_s")
    ratio = {k: median["huge_pages"][k] / median["default"][k] for k in keys}
    out = {
        "command": f"python benchmarks/malloc_bench.py --steps {args.steps} --repeats {args.repeats}",
        "what": f"python -m cookbook train --preset tiny --max-steps {args.steps}, one process per run",
        "tunables": core.CPU_GLIBC_TUNABLES,
        "runs": runs,
        "median": median,
        "ratio_huge_pages_over_default": ratio,
        "losses_identical": True,
        "cpus": len(os.sched_getaffinity(0)),
        "date": time.strftime("%Y-%m-%d"),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
    }
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({"ratio_huge_pages_over_default": ratio}, indent=2))


if __name__ == "__main__":
    main()
