"""The spread of the tiny recipes' training outcomes over seeds: where the suite's bounds come from.

    python benchmarks/outcome_spread.py [--seeds 0 1 2 3 4] [--recipes plain thinking] [--out F]

A training run on CPU is bit-for-bit reproducible for one config on one machine setup, but the
tiny recipes amplify float32 rounding chaotically (``cookbook.train.result_determinants``), so
another CPU, thread count or device count ends somewhere else. A bound on an outcome (exact
match, pass@1, thoughts right) set from one run fails on the next machine. This runs each recipe
with several seeds, each seed drawing both the LoRA initialisation (``TrainConfig.seed``) and the
data order (``DataConfig.seed``), as a user's process runs it (one CPU device: the environment
``make demo`` and the suite's shared runs train in), and scores every run as the suite does:
greedy Tunix decoding of the first 48 held-out rows (``tests/evaluate/conftest.py``) and of the
first 200 (notebook 06, the demo). Controls: the base (LoRA B = 0) and the recipe cut to a
quarter of its steps, which the bounds must still separate from a working run.

Writes ``benchmarks/results/outcome_spread.json`` (per run, and the min / max per recipe) with
the machine's load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from cookbook import core

core.setup_runtime_env()

ROWS = (48, 200)  # the suite's fixtures score 48 held-out rows, notebook 06 (the demo) 200


def score(run_dir: Path | None, config, n_rows: int) -> dict:
    """Greedy outcomes of ``run_dir`` (None: the base, LoRA B = 0) on the first ``n_rows`` held-out rows."""
    from cookbook import data, evaluate, train

    base_dir = train.resolve_base_dir(config)
    tokenizer = train.load_tokenizer(base_dir)
    rows = train.eval_rows(config)[:n_rows]
    problems = evaluate.sample_task_problems(rows)
    thinking = config.sample_task == "thinking"
    budget = evaluate.answer_budget(tokenizer, problems) + (evaluate.thought_budget(tokenizer, rows) if thinking else 0)
    model = train.restore_lora_model(run_dir) if run_dir else train.build_lora_model(config, base_dir)
    generation, _ = evaluate.tunix_samples(
        model, tokenizer, problems, evaluate.GREEDY.replace(max_tokens=budget), batch_size=50, thinking=thinking
    )
    scores = evaluate.score_generation(problems, generation)
    out = {"rows": n_rows, "exact_match": scores.exact_match, "pass1": scores.pass_at(1)}
    if thinking:
        completions = [generation.completions[p.name][0] for p in problems]
        out["thoughts_right"] = sum(data.thought_of(r) in c for r, c in zip(rows, completions, strict=True)) / n_rows
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--recipes", nargs="+", default=["plain", "thinking"])
    ap.add_argument("--out", type=Path, default=core.RESULTS_DIR / "outcome_spread.json")
    args = ap.parse_args()
    import jax

    from cookbook import train

    load_before = os.getloadavg()
    results = []
    for recipe in args.recipes:
        recipe_cfg = train.train_preset("tiny", sample_task=recipe)
        cases = [("base", recipe_cfg, None)]
        cases += [(f"seed {s}", recipe_cfg.replace(seed=s, data={"seed": s}), s) for s in args.seeds]
        cases += [("quarter steps", recipe_cfg.replace(max_steps=recipe_cfg.max_steps // 4), 0)]
        for label, cfg, seed in cases:
            t0 = time.perf_counter()
            run_dir = None if label == "base" else train.ensure_trained(cfg, progress=False)
            row = {
                "recipe": recipe,
                "case": label,
                "seed": seed,
                "max_steps": cfg.max_steps,
                "scores": [score(run_dir, cfg, n) for n in ROWS],
                "seconds": round(time.perf_counter() - t0, 1),
            }
            results.append(row)
            print(json.dumps(row), flush=True)
    spread = {}
    for recipe in args.recipes:
        seeded = [r for r in results if r["recipe"] == recipe and r["case"].startswith("seed")]
        for i, n in enumerate(ROWS):
            for metric in seeded[0]["scores"][i]:
                if metric == "rows":
                    continue
                values = [r["scores"][i][metric] for r in seeded]
                spread[f"{recipe}/{n} rows/{metric}"] = {"min": min(values), "max": max(values), "runs": len(values)}
    payload = {
        "what": "tiny recipes' greedy outcomes over seeds (LoRA init + data order), one CPU device",
        "date": time.strftime("%Y-%m-%d"),
        "devices": jax.device_count(),
        "cpu_count": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "determinants": train.result_determinants(),
        "spread": spread,
        "runs": results,
    }
    args.out.write_text(json.dumps(core.to_jsonable(payload), indent=1) + "\n")
    print(json.dumps(spread, indent=1))


if __name__ == "__main__":
    main()
