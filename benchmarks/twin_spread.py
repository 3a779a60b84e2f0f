"""The spread of the random twins' short runs over seeds: where the twins' tests take their bounds.

    python benchmarks/twin_spread.py [--twins tiny_e2b tiny_12b tiny_26b_a4b] [--seeds 0 1 2] [--out F]
    taskset -c 0 python benchmarks/twin_spread.py --seeds 3 4     # one CPU thread, as the suite's streams

``tests/twins.py`` trains each structural twin (``tiny_e2b``, ``tiny_12b``, ``tiny_26b_a4b``) on a
shortened CPU recipe (``SHORT_SCHEDULE``) and ``tests/train/test_train_twins.py`` asserts that the
held-out greedy exact match on 50 rows ends clearly above the base's 0, and that the eval loss
falls under a quarter of its first value. A bound set from one run fails on the next machine
(another CPU or thread count rounds differently, and the tiny recipes amplify that:
``cookbook.train.result_determinants``). This trains each twin's short schedule with several
seeds, each drawing the LoRA initialisation and the data order, in the suite's environment (8
fake CPU devices, where the twins' runs train), and scores each run as ``tests/twins.py``
``jax_eval`` does. The control is the base (LoRA B = 0), per twin.

Writes ``benchmarks/results/twin_spread.json`` (every run, and per twin the seeds' min and max),
with the machine's load average before and after; runs of other twins or thread counts already in
the file are kept, so two processes pinned to one core each can measure side by side.
"""

from __future__ import annotations

import os
import sys

# The suite's environment: 8 fake CPU devices before JAX starts (tests/conftest.py).
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from cookbook import core  # noqa: E402

core.setup_runtime_env()
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import outcome_spread  # noqa: E402  (its merge of side-by-side measurements into one file)
import twins  # noqa: E402  (the schedules the suite trains: one source for both)


def measure(name: str, seed: int | None) -> dict:
    """One twin's run for ``seed`` (None: the base, LoRA B = 0) scored on ``twins.EVAL_ROWS`` rows."""
    from cookbook import data, train

    config = twins.config(name)
    t0 = time.perf_counter()
    row: dict = {"twin": name, "case": "base" if seed is None else f"seed {seed}", "seed": seed}
    if seed is None:
        model = train.build_lora_model(config.replace(lora={"dropout": 0.0}))
        run_cfg = config
    else:
        run_cfg = config.replace(seed=seed, data={"seed": seed})
        run_dir = train.ensure_trained(run_cfg, progress=False)
        model = train.restore_lora_model(run_dir)
        metrics = train.read_metrics(run_dir)
        row["eval_loss"] = {"first": metrics["eval/loss"][0][1], "final": metrics["eval/loss"][-1][1]}
    rows = train.eval_rows(run_cfg)[: twins.EVAL_ROWS]
    tokenizer = data.load_tokenizer(base_dir=train.resolve_base_dir(run_cfg))
    result = train.evaluate(model, tokenizer, rows)
    row.update(
        correct=result["correct"],
        accuracy=result["accuracy"],
        max_steps=run_cfg.max_steps,
        threads=len(os.sched_getaffinity(0)),
        seconds=round(time.perf_counter() - t0, 1),
    )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--twins", nargs="+", default=list(twins.TWINS), choices=twins.TWINS)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--no-controls", action="store_true", help="seeds only (the base's runs already there are kept)")
    ap.add_argument("--out", type=Path, default=core.RESULTS_DIR / "twin_spread.json")
    args = ap.parse_args()
    load_before = os.getloadavg()
    results = []
    for name in args.twins:
        for seed in ([] if args.no_controls else [None]) + args.seeds:
            row = measure(name, seed)
            results.append(row)
            print(json.dumps(row), flush=True)
    measured = [
        {
            "twins": args.twins,
            "seeds": args.seeds,
            "threads": len(os.sched_getaffinity(0)),
            "date": time.strftime("%Y-%m-%d"),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
        }
    ]
    outcome_spread.merge_into(args.out, results, measured, ("twin", "case", "threads"), write)


def write(out: Path, runs: list[dict], measured: list[dict]) -> None:
    import jax

    from cookbook import train

    spread = {}
    for name in sorted({r["twin"] for r in runs}):
        seeded = [r for r in runs if r["twin"] == name and r["case"].startswith("seed")]
        if seeded:
            values = [r["accuracy"] for r in seeded]
            ratios = [r["eval_loss"]["final"] / r["eval_loss"]["first"] for r in seeded]
            spread[name] = {
                "exact_match": {"min": min(values), "max": max(values), "runs": len(values)},
                "eval_loss_ratio": {"min": min(ratios), "max": max(ratios)},
            }
    payload = {
        "what": "the random twins' short runs (tests/twins.py SHORT_SCHEDULE) over seeds, 8 fake CPU devices",
        "command": "python benchmarks/twin_spread.py --seeds ...",
        "rows": twins.EVAL_ROWS,
        "devices": jax.device_count(),
        "cpu_count": os.cpu_count(),
        "determinants": train.result_determinants(),
        "measured": measured,
        "spread": spread,
        "runs": sorted(runs, key=lambda r: (r["twin"], r["case"], r["threads"])),
    }
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(core.to_jsonable(payload), indent=1) + "\n")
    tmp.replace(out)
    print(json.dumps(spread, indent=1))


if __name__ == "__main__":
    main()
