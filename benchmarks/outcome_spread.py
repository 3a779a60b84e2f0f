"""The spread of the tiny recipes' training outcomes over seeds: where the suite's bounds come from.

    python benchmarks/outcome_spread.py [--seeds 0 1 2 3 4] [--recipes plain thinking qlora] [--out F]
    taskset -c 0 python benchmarks/outcome_spread.py --seeds 5 6 --no-controls   # one CPU thread

A training run on CPU is bit-for-bit reproducible for one config on one machine setup, but the
tiny recipes amplify float32 rounding chaotically (``cookbook.train.result_determinants``), so
another CPU, thread count or device count ends somewhere else. A bound on an outcome (exact
match, pass@1, thoughts right) set from one run fails on the next machine. This runs each recipe
with several seeds, each seed drawing both the LoRA initialisation (``TrainConfig.seed``) and the
data order (``DataConfig.seed``), as a user's process runs it (one CPU device: the environment
``make demo`` and the suite's shared runs train in), and scores every run as the suite does:
greedy Tunix decoding of the first 200 held-out rows, each row's outcome recorded (the suite's
bounds are over prefixes of them, 8 to 200 rows), and the paper's sampling (n = 5, T = 0.8) of
the first 16, twice. Controls: the base (LoRA B = 0) and the recipe cut to a quarter of its
steps, which the bounds must still separate from a working run.

Writes ``benchmarks/results/outcome_spread.json`` (per run, and the min / max per recipe) with
the machine's load average before and after.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import tempfile
import time
from pathlib import Path

from cookbook import core

core.setup_runtime_env()

ROWS = 200  # the most held-out rows a bound is asked for (notebook 06's default); fewer are prefixes
SAMPLED_ROWS = 16  # n = 5 at T = 0.8 (the paper's sampling): the suite samples 16 rows at most
SAMPLE_SEEDS = (100, 7)  # two sampling draws per run
SUMMARY_ROWS = (8, 16, 32, 48, 100, 200)  # the row counts the suite and the demo score


def score(run_dir: Path | None, config) -> dict:
    """Per-row outcomes of ``run_dir`` (None: the base, LoRA B = 0) on the first ``ROWS`` held-out rows.

    Greedy Tunix decoding: ``exact`` and ``passed`` per row (and ``thought`` for the thinking recipe:
    the row's own thought, verbatim); then the paper's sampling on the first ``SAMPLED_ROWS`` rows,
    ``passes`` out of 5 per row, once per seed in ``SAMPLE_SEEDS``. Any row count's rate is a
    prefix's mean, so one scoring serves every bound the suite asks for.
    """
    from cookbook import data, evaluate, train

    base_dir = train.resolve_base_dir(config)
    tokenizer = data.load_tokenizer(base_dir=base_dir)
    rows = train.eval_rows(config)[:ROWS]
    problems = evaluate.sample_task_problems(rows)
    thinking = config.sample_task == "thinking"
    greedy = evaluate.greedy_sampling(tokenizer, rows, thinking=thinking)
    model = train.restore_lora_model(run_dir) if run_dir else train.build_lora_model(config, base_dir)
    generation, sampler = evaluate.tunix_samples(model, tokenizer, problems, greedy, batch_size=50, thinking=thinking)
    scores = evaluate.score_generation(problems, generation)
    out = {
        "rows": len(rows),
        "exact": [bool(p.exact[0]) for p in scores.problems],
        "passed": [bool(p.results[0].passed) for p in scores.problems],
    }
    if thinking:
        completions = [generation.completions[p.name][0] for p in problems]
        # As the suite checks it: the thought channel holds the row's own thought, verbatim.
        channel = "<|channel>thought\n{}\n<channel|>"
        out["thought"] = [
            c.startswith(channel.format(data.thought_of(r))) for r, c in zip(rows, completions, strict=True)
        ]
    out["sampled_passes"] = []
    for seed in SAMPLE_SEEDS:
        sampling = evaluate.PAPER_SAMPLING.replace(max_tokens=greedy.max_tokens, seed=seed)
        few = problems[:SAMPLED_ROWS]
        gen, sampler = evaluate.tunix_samples(
            model, tokenizer, few, sampling, batch_size=40, sampler=sampler, thinking=thinking
        )
        out["sampled_passes"].append([p.c for p in evaluate.score_generation(few, gen).problems])
    return out


# The recipes measured: the tiny preset's plain and thinking sample tasks, and the plain task on an
# nf4 base (QLoRA, tile 32: tests/train/test_train.py's run).
RECIPES = ("plain", "thinking", "qlora")


def recipe_config(recipe: str):
    """The training config of ``recipe`` (one of :data:`RECIPES`), seed 0."""
    from cookbook import train

    if recipe == "qlora":
        return train.train_preset("tiny").replace(quantize="nf4", quant_tile=32)
    return train.train_preset("tiny", sample_task=recipe)


def rates(scores: dict, n: int) -> dict[str, float]:
    """The metrics a bound is asked for, over the first ``n`` rows of one run's per-row ``scores``."""
    out = {"exact_match": sum(scores["exact"][:n]) / n, "pass1": sum(scores["passed"][:n]) / n}
    if "thought" in scores:
        out["thoughts_right"] = sum(scores["thought"][:n]) / n
    if n <= SAMPLED_ROWS:
        out["sampled_pass1"] = min(sum(c[:n]) / (5 * n) for c in scores["sampled_passes"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--recipes", nargs="+", choices=RECIPES, default=["plain", "thinking"])
    ap.add_argument("--no-controls", action="store_true", help="seeds only (the base and quarter-steps runs are kept)")
    ap.add_argument("--out", type=Path, default=core.RESULTS_DIR / "outcome_spread.json")
    args = ap.parse_args()
    from cookbook import train

    load_before = os.getloadavg()
    # CPU threads change the float32 rounding (train.result_determinants), so a run pinned to one
    # core (``taskset -c 0``) is another machine's draw of the same seed.
    threads = len(os.sched_getaffinity(0))
    results = []
    for recipe in args.recipes:
        recipe_cfg = recipe_config(recipe)
        cases = [(f"seed {s}", recipe_cfg.replace(seed=s, data={"seed": s}), s) for s in args.seeds]
        if not args.no_controls:
            cases = [("base", recipe_cfg, None), *cases]
            cases += [("quarter steps", recipe_cfg.replace(max_steps=recipe_cfg.max_steps // 4), 0)]
        for label, cfg, seed in cases:
            t0 = time.perf_counter()
            run_dir = None if label == "base" else train.ensure_trained(cfg, progress=False)
            row = {
                "recipe": recipe,
                "case": label,
                "seed": seed,
                "threads": threads,
                "max_steps": cfg.max_steps,
                "scores": score(run_dir, cfg),
                "seconds": round(time.perf_counter() - t0, 1),
            }
            if run_dir is not None:  # what notebook 06 asserts on the losses
                metrics = train.read_metrics(run_dir)
                row["losses"] = {
                    "first_train": metrics["train/loss"][0][1],
                    "final_train": metrics["train/loss"][-1][1],
                    "final_eval": metrics["eval/loss"][-1][1],
                }
            results.append(row)
            print(json.dumps(row), flush=True)
    # Runs of other recipes already in --out are kept (one recipe can be measured at a time, or
    # both in two processes side by side); the file is rewritten under a lock.
    measured = [
        {
            "recipe": recipe,
            "seeds": args.seeds,
            "threads": threads,
            "date": time.strftime("%Y-%m-%d"),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
        }
        for recipe in args.recipes
    ]
    merge_into(args.out, results, measured, ("recipe", "case", "threads"), write)


def merge_into(out: Path, results: list[dict], measured: list[dict], key: tuple[str, ...], write) -> None:
    """Rewrite ``out`` under a lock: ``results`` replace its runs with the same ``key`` fields, the
    rest are kept, ``measured`` is appended to its record of measurements; ``write(out, runs,
    measured)`` writes the file. Several processes (one per core, or per thread count) can measure
    side by side into one file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    lock_path = Path(tempfile.gettempdir()) / f"{out.name}.lock"  # beside nothing that is committed
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        earlier = json.loads(out.read_text()) if out.is_file() else {"runs": [], "measured": []}
        done = {tuple(r[k] for k in key) for r in results}
        kept = [r for r in earlier["runs"] if tuple(r[k] for k in key) not in done]
        write(out, kept + results, earlier.get("measured", []) + measured)


def write(out: Path, results: list[dict], measured: list[dict]) -> None:
    """``out``: every run, and per recipe, row count and metric the seeds' min and max."""
    import jax

    from cookbook import train

    spread = {}
    for recipe in sorted({r["recipe"] for r in results}):
        seeded = [r for r in results if r["recipe"] == recipe and r["case"].startswith("seed")]
        for n in SUMMARY_ROWS:
            for metric in rates(seeded[0]["scores"], n):
                values = [rates(r["scores"], n)[metric] for r in seeded]
                spread[f"{recipe}/{n} rows/{metric}"] = {"min": min(values), "max": max(values), "runs": len(values)}
    payload = {
        "what": "tiny recipes' outcomes over seeds (LoRA init + data order), one CPU device",
        "command": "python benchmarks/outcome_spread.py --recipes RECIPE",
        "devices": jax.device_count(),
        "cpu_count": os.cpu_count(),
        "determinants": train.result_determinants(),
        "measured": measured,
        "spread": spread,
        "runs": results,
    }
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(core.to_jsonable(payload), indent=1) + "\n")
    tmp.replace(out)
    print(json.dumps(spread, indent=1))


if __name__ == "__main__":
    main()
