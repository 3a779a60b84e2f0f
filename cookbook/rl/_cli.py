"""``cookbook rl``: RL on the simulator's verdict from a finished SFT run; rerun the same command to resume."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from cookbook import core, evaluate
from cookbook.rl._config import ALGORITHMS, RL_PRESETS, rl_preset

# flag -> (RLConfig field, type, help)
_FLAGS = {
    "--algorithm": ("algorithm", str, f"one of {', '.join(ALGORITHMS)}"),
    "--max-steps": ("max_steps", int, "RL steps (each: a group per prompt, rewards, one optimizer step)"),
    "--group-size": ("group_size", int, "completions per prompt (GRPO's G)"),
    "--prompts-per-step": ("prompts_per_step", int, "prompts per step"),
    "--lr": ("learning_rate", float, "learning rate of the LoRA parameters"),
    "--temperature": ("temperature", float, "sampling temperature of the rollouts"),
    "--max-response-tokens": ("max_response_tokens", int, "rollout budget (default: the problems' answer budget)"),
    "--format-weight": ("format_weight", float, "weight of the reward's format term (the functional term is 1)"),
    "--checkpoint-every": ("checkpoint_every_steps", int, "steps between checkpoints"),
    "--seed": ("seed", int, "seeds the problem order and the sampling"),
}


def register_cli(sub) -> None:
    p = sub.add_parser(
        "rl",
        help="RL (DAPO / GRPO with Tunix) on the simulator's verdict, from a `cookbook train` run; resumable",
        description=(
            "Runs Tunix's DAPO (or GRPO) learner on a finished SFT run's LoRA: each step samples a group of "
            "completions per training problem, rewards each with Icarus Verilog's verdict on its answer "
            "(plus a format term) and steps the LoRA. The result is a run directory that `cookbook merge`, "
            "`serve` and `eval` take as they take an SFT run. Rerunning with the same --out resumes."
        ),
    )
    p.add_argument("--run", required=True, help="the SFT run directory (`cookbook train --out`)")
    p.add_argument("--out", required=True, help="the RL run directory (checkpoints, metrics, curves)")
    p.add_argument(
        "--problems",
        default=None,
        help="problems to train on, verilog-eval layout (default: the SFT run's sample-task training rows)",
    )
    p.add_argument("--num-problems", type=int, default=None, help="use only the first N problems")
    p.add_argument(
        "--sft-step", type=int, default=None, help="the SFT run's checkpoint to start from (default: its latest)"
    )
    p.add_argument(
        "--preset", default="tiny", choices=sorted(RL_PRESETS), help="hyperparameters to start from (default: tiny)"
    )
    for flag, (field, kind, text) in _FLAGS.items():
        p.add_argument(flag, dest=field, type=kind, default=None, help=f"{text} (default: the preset's)")
    p.add_argument("--show-config", action="store_true", help="print the resolved RL config as JSON and exit")
    p.set_defaults(func=_cli)


@core.user_errors("rl", evaluate.ProblemError, evaluate.SimulatorMissing, NotImplementedError)
def _cli(args) -> int:
    from cookbook.rl._run import DEFAULT_PROBLEMS, train_rl, training_problems

    changes = {field: getattr(args, field) for field, _, _ in _FLAGS.values() if getattr(args, field) is not None}
    config = rl_preset(args.preset).replace(**changes)
    if args.show_config:
        print(json.dumps(config.to_dict(), indent=2))
        return 0
    if args.problems:
        problems = evaluate.load_problems(args.problems)
        problems = problems[: args.num_problems] if args.num_problems else problems
    else:
        problems, _ = training_problems(args.run, args.num_problems or DEFAULT_PROBLEMS)
    result = train_rl(args.run, args.out, config, problems=problems if args.problems else None, sft_step=args.sft_step)
    out = {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(result).items() if k != "steps"}
    last = result.steps[-1] if result.steps else {}
    print(json.dumps({**out, "last_step": last}))
    return 0
