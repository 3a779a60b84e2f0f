"""``cookbook gpu-recipe``: the GPU recipe of a training run, or with ``--rl`` of its RL stage.

The SFT recipe's command line is ``cookbook.gpu``'s. ``--rl`` (TRL's ``GRPOTrainer`` recipe with
``cookbook rl``'s objective, ``cookbook.gpu.write_gpu_rl_recipe``) also needs ``cookbook.rl``'s
presets, which come after ``cookbook.gpu`` in the stages' order (and ``cookbook.evaluate``'s
problems); the command is put together here, in the stage that may import them all.
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import json
from pathlib import Path

from cookbook import core

_RL_FLAGS = ("rl_preset", "problems", "num_problems", "max_response_tokens", "per_device_batch")


def register_cli(sub: argparse._SubParsersAction) -> None:
    from cookbook import gpu, rl

    p = gpu.add_gpu_recipe_parser(sub)
    g = p.add_argument_group(
        "RL (--rl)",
        "TRL's GRPOTrainer recipe with `cookbook rl`'s objective: the same reward (Icarus Verilog on the final "
        "answer plus the format term), group size, clipping, token-mean loss and LoRA; --preset or --run gives "
        "the model and LoRA (an RL run's --run also its RL config).",
    )
    g.add_argument("--rl", action="store_true", help="write the RL (GRPO / DAPO) recipe instead of the SFT one")
    g.add_argument(
        "--rl-preset", default=None, choices=sorted(rl.RL_PRESETS), help="RL hyperparameters (default: tiny)"
    )
    g.add_argument(
        "--problems", default=None, help="problems RL trains on, verilog-eval layout (default: the training rows')"
    )
    g.add_argument("--num-problems", type=int, default=None, help="use only the first N problems (default: 64)")
    g.add_argument("--max-response-tokens", type=int, default=None, help="completion budget (default: the preset's)")
    g.add_argument("--per-device-batch", type=int, default=None, help="completions per GPU micro-batch")
    sft = p.get_default("func")
    p.set_defaults(func=lambda args: _rl_cli(args) if args.rl else _sft_only(args, sft))


def _sft_only(args: argparse.Namespace, sft) -> int:
    given = [f"--{f.replace('_', '-')}" for f in _RL_FLAGS if getattr(args, f) is not None]
    if given:
        return _refuse(f"{', '.join(given)} only go with --rl")
    return sft(args)


@core.user_errors("gpu-recipe", code=2)
def _refuse(message: str) -> int:
    raise ValueError(message)


@core.user_errors("gpu-recipe", code=2)  # evaluate.ProblemError is a ValueError
def _rl_cli(args: argparse.Namespace) -> int:
    from cookbook import evaluate, gpu, rl, train

    gpu.check_recipe_dir(args.out, overwrite=args.overwrite)  # before reading a run or deriving anything
    train_config = train.config_of_run(args.run) if args.run else train.train_preset(args.preset)
    rl_config = rl.rl_preset(args.rl_preset or "tiny")
    names = None
    if args.run and args.rl_preset is None:  # an RL run: its own RL config and problems
        section = json.loads((Path(args.run) / "recipe.json").read_text()).get("rl")
        if section:
            rl_config, names = rl.RLConfig.from_dict(section["config"]), section["problems"]
    if args.max_response_tokens is not None:
        rl_config = rl_config.replace(max_response_tokens=args.max_response_tokens)
    default_n = inspect.signature(rl.training_problems).parameters["n"].default  # cookbook rl's
    n = args.num_problems or (len(names) if names else default_n)
    rows = None
    if args.problems:
        problems = evaluate.load_problems(args.problems, names=names)
    elif args.run:
        problems, rows = rl.training_problems(args.run, max(n, default_n))
    elif train_config.train_data is not None:
        raise ValueError(f"preset {args.preset} trains on {train_config.train_data}: pass --problems DIR")
    else:
        rows = list(itertools.islice(train.train_rows(train_config), max(n, default_n)))
        problems = evaluate.sample_task_problems(rows)
    if names is not None and not args.problems:
        known = {q.name: q for q in problems}
        if set(names) - set(known):
            raise ValueError("the RL run's problems are not its SFT run's training rows: pass --problems DIR")
        problems = [known[x] for x in names]
    problems = problems[:n]
    thinking = train_config.sample_task == "thinking"
    cluster = gpu.GpuCluster(num_gpus=args.num_gpus, fsdp_version=args.fsdp_version, bf16=not args.no_bf16)
    recipe = gpu.derive_gpu_rl_recipe(
        rl_config,
        train_config,
        problems=problems,
        rows=rows,
        reward=rl.RewardConfig(format=rl_config.format_weight, thinking=thinking),
        cluster=cluster,
        per_device_batch=args.per_device_batch,
        base_model=args.base_model,
    )
    paths = gpu.write_gpu_rl_recipe(args.out, recipe, problems=problems, overwrite=args.overwrite)
    for k, v in gpu.rl_summary(recipe).items():
        print(f"{k:34} {v}")
    print(f"\nwrote {', '.join(sorted(paths))} to {args.out}")
    print(f"on the GPU host, in {args.out}:\n  {gpu.rl_launch_command(recipe)}")
    return 0
