"""``cookbook gpu-recipe``: derive and write the GPU recipe from a preset or a run, and its summary table."""

from __future__ import annotations

import argparse
from typing import Any

from cookbook import core
from cookbook.gpu._recipe import (
    GpuCluster,
    GpuRecipe,
    derive_gpu_recipe,
    launch_command,
    write_gpu_recipe,
)
from cookbook.gpu._recipe_dir import check_recipe_dir


def summary(recipe: GpuRecipe) -> dict[str, Any]:
    """A flat table of the settings that matter, for notebooks."""
    s, lo = recipe.sft, recipe.lora
    return {
        "GPUs": recipe.accelerate["num_processes"],
        "FSDP wrap unit": recipe.accelerate["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"],
        "per-device batch x accumulation": f"{s['per_device_train_batch_size']} x {s['gradient_accumulation_steps']}",
        "loss": f"answer tokens only, {recipe.loss_normalisation}",
        "lr / warm-up / schedule": f"{s['learning_rate']} / {s['warmup_steps']} / {s['lr_scheduler_type']}",
        "weight decay": s["weight_decay"],
        "max_grad_norm": s["max_grad_norm"],
        "LoRA r / alpha / dropout": f"{lo['r']} / {lo['lora_alpha']} / {lo['lora_dropout']}",
        "LoRA targets": lo["target_modules"],
        "bf16": s["bf16"],
    }


def format_summary(recipe: GpuRecipe) -> str:
    """:func:`summary`, one setting per line."""
    return "\n".join(f"{key:34} {value}" for key, value in summary(recipe).items())


# ----------------------------------------------------------------------------------------
# Command line: cookbook gpu-recipe


def register_cli(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``gpu-recipe`` (the SFT recipe) to ``sub``; returns its parser (``cookbook.harness`` adds ``--rl``)."""
    p = sub.add_parser(
        "gpu-recipe",
        help="write the GPU (TRL + PEFT + FSDP) recipe with the TPU run's objective",
        description="Derive from a training preset or a finished `cookbook train` run the TRL "
        "SFTConfig, PEFT LoraConfig and accelerate FSDP config a GPU user runs, with the same "
        "answer-only loss, batch weighting and LoRA parameterisation, and write them with "
        "train_gpu.py for `accelerate launch`.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--preset", help="training preset (cookbook.train.train_preset), e.g. gemma4_31b")
    src.add_argument("--run", help="a `cookbook train` run directory: use its exact config")
    p.add_argument(
        "--out",
        required=True,
        help="directory to write the recipe into: new or empty, or with --overwrite one that gpu-recipe wrote before",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="rewrite the recipe's own files (README.md, recipe.json, train_gpu.py, ...) in a directory "
        "gpu-recipe wrote before, keeping everything else there; any other non-empty --out is "
        "refused",
    )
    p.add_argument("--num-gpus", type=int, default=2, help="GPUs on the host (default 2, as the paper)")
    p.add_argument("--fsdp-version", type=int, default=2, choices=(1, 2), help="accelerate FSDP version")
    p.add_argument("--no-bf16", action="store_true", help="train in float32 even for bf16 presets")
    p.add_argument("--base-model", default=None, help="Hub id or path of the base checkpoint")
    p.set_defaults(func=_cli)
    return p


@core.user_errors("gpu-recipe", code=2)
def _cli(args: argparse.Namespace) -> int:
    check_recipe_dir(args.out, overwrite=args.overwrite)  # before reading a run or deriving anything
    from cookbook import train

    config = train.config_of_run(args.run) if args.run else train.train_preset(args.preset)
    cluster = GpuCluster(num_gpus=args.num_gpus, fsdp_version=args.fsdp_version, bf16=not args.no_bf16)
    recipe = derive_gpu_recipe(config, cluster=cluster, base_model=args.base_model)
    paths = write_gpu_recipe(args.out, recipe, overwrite=args.overwrite)
    for k, v in summary(recipe).items():
        print(f"{k:34} {v}")
    print(f"\nwrote {', '.join(sorted(paths))} to {args.out}")
    print(f"on the GPU host, in {args.out}:\n  {launch_command(recipe)}")
    return 0
