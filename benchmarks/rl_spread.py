"""Does RL on the simulator's verdict raise held-out pass@1, by more than its own spread? (notebook 10)

    python benchmarks/rl_spread.py [--seeds 0 1 2 3 4] [--sft-step 100] [--rl-steps 50] [--sft-seed S] [--out F]

Starts from the tiny plain recipe's SFT run (the run notebook 06 trains, in the cache) at one of
its checkpoints, runs ``cookbook.rl`` (DAPO, the tiny RL preset) once per seed (each seed draws
the problem order and the rollouts' sampling), and samples every result the same way on the same
held-out rows (n = 5, T = 0.8, the same sampling seeds; ``rl.held_out_pass``). Beside them: the SFT
checkpoint RL starts from, and the control, the same SFT run continued by SFT for as many steps as
RL took (its later checkpoint; ``--rl-steps`` must land on one). Each RL run is its own process,
as ``cookbook rl`` runs it (Tunix's metrics logger clears the process's monitoring listeners).

Writes ``benchmarks/results/rl_spread.json``, one draw per SFT run (``--sft-seed`` trains another,
as another machine's rounding would): every run's pass@1 and pass@5, the RL runs' min / max / mean,
the gain over the start against the control's, and the machine's load; and over all draws, the
range of the starts and of the gains.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cookbook import core

core.setup_runtime_env()

EVAL_ROWS = 48  # as notebook 10


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--sft-step", type=int, default=100, help="the SFT checkpoint RL starts from")
    ap.add_argument("--rl-steps", type=int, default=50)
    ap.add_argument(
        "--sft-seed",
        type=int,
        default=None,
        help="train the SFT run with this seed (LoRA init and data order; another draw of the SFT run, as "
        "another machine trains it); default: the recipe's own run",
    )
    ap.add_argument("--out", type=Path, default=core.RESULTS_DIR / "rl_spread.json")
    args = ap.parse_args()

    from cookbook import rl, train

    load_before = os.getloadavg()
    sft_config = train.train_preset("tiny")
    if args.sft_seed is not None:
        sft_config = sft_config.replace(seed=args.sft_seed, data={"seed": args.sft_seed})
    sft_run = train.ensure_trained(sft_config)
    control_step = args.sft_step + args.rl_steps
    steps = train.checkpoint_steps(sft_run)
    if args.sft_step not in steps or control_step not in steps:
        raise SystemExit(
            f"{sft_run} keeps checkpoints {steps}: --sft-step and --sft-step + --rl-steps must be among them"
        )
    work = Path(tempfile.mkdtemp(prefix="rl_spread_"))
    rl_runs, seconds = {}, {}
    for seed in args.seeds:
        out = work / f"seed{seed}"
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "cookbook", "rl", "--run", str(sft_run), "--sft-step", str(args.sft_step),
             "--out", str(out), "--max-steps", str(args.rl_steps), "--seed", str(seed)],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        rl_runs[f"rl seed {seed}"] = out
        seconds[seed] = time.perf_counter() - t0
    runs = {"sft": (sft_run, args.sft_step), **rl_runs, "control": (sft_run, control_step)}
    results = {r.label: r for r in rl.held_out_pass(runs, rows=EVAL_ROWS)}
    start, control = results["sft"].pass1, results["control"].pass1
    rl_pass = [results[k].pass1 for k in rl_runs]
    report = {
        "sft_run": sft_run.name,
        "sft_seed": args.sft_seed,
        "threads": len(os.sched_getaffinity(0)),  # this process's CPU threads (the SFT run's, if trained here)
        "sft_step": args.sft_step,
        "rl_steps": args.rl_steps,
        "rl_config": rl.rl_preset("tiny").replace(max_steps=args.rl_steps).to_dict(),
        "eval": {"rows": EVAL_ROWS, "n": 5, "temperature": 0.8, "top_p": 0.95},
        "runs": {label: {"pass1": r.pass1, "pass5": r.pass_k, "step": r.step} for label, r in results.items()},
        "rl_seconds": seconds,
        "start_pass1": start,
        "control_pass1": control,
        "rl_pass1": {"min": min(rl_pass), "max": max(rl_pass), "mean": sum(rl_pass) / len(rl_pass)},
        "rl_gain": {"min": min(rl_pass) - start, "max": max(rl_pass) - start},
        "control_gain": control - start,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "cpu_count": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
    }
    # One draw per SFT run: a rerun of the same SFT run replaces its draw, the others are kept.
    earlier = json.loads(args.out.read_text()) if args.out.is_file() else {}
    draws = [d for d in earlier.get("draws", []) if d["sft_run"] != sft_run.name] + [report]
    starts = [d["start_pass1"] for d in draws]
    gains = [g for d in draws for g in (d["rl_gain"]["min"], d["rl_gain"]["max"])]
    payload = {
        "what": __doc__.split("\n\n")[0],
        "draws": draws,
        "summary": {
            "sft_draws": len(draws),
            "start_pass1": {"min": min(starts), "max": max(starts)},
            "rl_gain": {"min": min(gains), "max": max(gains)},
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(rl.format_held_out(list(results.values())))
    print(f"RL gain over step {args.sft_step}: {report['rl_gain']['min']:+.1%} .. {report['rl_gain']['max']:+.1%} "
          f"over {len(rl_pass)} seeds; the control's (SFT to step {control_step}): {report['control_gain']:+.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
