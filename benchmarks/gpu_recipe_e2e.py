"""The derived GPU recipe, run end to end on CPU, against the Tunix run of the same config.

``cookbook.gpu`` derives a TRL + PEFT recipe from a ``TrainConfig``; the unit
tests check a few steps of it against Tunix. This runs the *whole* recipe: the generated
``train_gpu.py`` (TRL ``SFTTrainer``, one process standing in for the GPUs, no FSDP,
float32) on the tiny training preset, then samples held-out prompts with transformers
``generate`` (``cookbook.evaluate``: greedy, and n = 5 at temperature 0.8 / top-p 0.95 as the
paper sampled) and scores exact match and functional pass@1 / pass@5 with Icarus Verilog; the
``quality`` row it writes is the GPU recipe's row of the report's quality table. Beside it, the Tunix run of the same config
(``cookbook.train.ensure_trained``, cached) and its losses. Same objective, so the same
final loss and accuracy are expected (data order differs, so not bit for bit).
Writes ``benchmarks/results/gpu_recipe_e2e.json``.

    .venv/bin/python benchmarks/gpu_recipe_e2e.py            # ~8 min on a busy 2-core host
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "gpu_recipe_e2e.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny", help="training preset (CPU: tiny)")
    parser.add_argument("--eval-rows", type=int, default=100, help="held-out prompts to decode")
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    from cookbook.core import setup_runtime_env

    setup_runtime_env()
    import torch

    torch.set_num_threads(1)  # a tiny model; two spinning OpenMP threads are slower on 2 cores
    from cookbook import data, evaluate, gpu, train

    config = train.train_preset(args.preset)
    run_dir = train.ensure_trained(config)
    tunix = json.loads((run_dir / "summary.json").read_text())
    recipe = gpu.derive_gpu_recipe(
        config, cluster=gpu.GpuCluster(num_gpus=1), base_model=str(train.resolve_base_dir(config))
    )
    work = Path(tempfile.mkdtemp(prefix="gpu-recipe-e2e-"))
    gpu.write_gpu_recipe(work, recipe)
    script = gpu.import_train_script(work)
    eval_rows = data.generate_rows("eval", n=config.num_eval_rows)
    start = time.time()
    trainer = script.build_trainer(
        model_path=recipe.base_model,
        train_rows=data.generate_rows("train", n=config.num_train_rows),
        eval_rows=eval_rows[:64],
        output_dir=work / "run",
        recipe_dir=work,
        sft_overrides={
            **gpu.CPU_OVERRIDES,
            "eval_strategy": "steps",
            "eval_steps": config.max_steps,
            "logging_steps": 10,
        },  # fmt: skip
    )
    trainer.train()
    train_time_s = time.time() - start
    logs = trainer.state.log_history

    tok, model = trainer.processing_class, trainer.model.eval()
    rows = eval_rows[: args.eval_rows]
    problems = evaluate.sample_task_problems(rows)
    greedy_sampling = evaluate.greedy_sampling(tok, rows)
    greedy_gen = evaluate.transformers_samples(model, tok, problems, greedy_sampling)
    completions = [greedy_gen.completions[p.name][0] for p in problems]
    greedy = evaluate.score_generation(problems, greedy_gen)
    sampled = evaluate.score_generation(
        problems,
        evaluate.transformers_samples(
            model, tok, problems, evaluate.PAPER_SAMPLING.replace(max_tokens=greedy_sampling.max_tokens)
        ),
    )
    result = {
        "preset": args.preset,
        "max_steps": config.max_steps,
        "gpu_recipe": {
            "final_train_loss": [x["loss"] for x in logs if "loss" in x][-1],
            "final_eval_loss": [x["eval_loss"] for x in logs if "eval_loss" in x][-1],
            "exact_match": data.exact_match_rate(completions, rows),
            "functional_pass1_greedy": greedy.pass_at(1),
            "pass_at_k": sampled.summary(),
            "eval_prompts": len(rows),
            "train_time_s": round(train_time_s, 1),
            "loss_normalisation": recipe.loss_normalisation,
        },
        "tunix": {k: tunix.get(k) for k in ("final_train_loss", "final_eval_loss", "train_time_s")},
        "quality": evaluate.quality_row(
            f"{args.preset} + LoRA", "GPU recipe (TRL + PEFT)", "transformers", greedy=greedy, sampled=sampled
        ),
        "torch_threads": 1,
        "load_average": os.getloadavg()[0],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    g, t = result["gpu_recipe"], result["tunix"]
    print(f"{'':28} {'GPU recipe (TRL, CPU)':>22} {'Tunix':>10}")
    print(f"{'final train loss':28} {g['final_train_loss']:>22.4f} {t['final_train_loss']:>10.4f}")
    print(f"{'final eval loss':28} {g['final_eval_loss']:>22.4f} {t['final_eval_loss']:>10.4f}")
    print(f"{'exact match (held out)':28} {g['exact_match']:>22.1%} {'':>10}")
    print(f"{'functional pass@1 (greedy)':28} {g['functional_pass1_greedy']:>22.1%} {'':>10}")
    print(f"{'pass@1 / pass@5 (n=5, T=0.8)':28} {g['pass_at_k']['pass@1']:>13.1%} / {g['pass_at_k']['pass@5']:.1%}")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
