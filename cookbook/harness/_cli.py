"""The ``cookbook`` command line: one subcommand per step of the recipe.

Each subcommand lives in the stage package that does the work, which exports
``register_<command>_cli(subparsers)``; only the chosen package is imported, so ``cookbook
--help`` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from cookbook import core

# name -> (stage package, one-line help). Keep in recipe order.
COMMANDS: dict[str, tuple[str, str]] = {
    "base": ("cookbook.models", "build (random presets) or download (real presets) a base checkpoint"),
    "data": (
        "cookbook.data",
        "check a data file: rows kept and dropped, lengths, rendered rows with the trained spans",
    ),
    "plan": ("cookbook.fit", "compile the LoRA train step for a TPU slice, with no TPU: memory and FLOPs"),
    "train": ("cookbook.train", "LoRA fine-tuning with Tunix, Orbax checkpoints, resumable"),
    "rl": ("cookbook.rl", "RL (DAPO / GRPO with Tunix) on the simulator's verdict, from a training run; resumable"),
    "merge": ("cookbook.merge", "merge a LoRA checkpoint into Hugging Face safetensors, streamed"),
    "serve": ("cookbook.serve", "serve a checkpoint with vLLM on 127.0.0.1 (or print the TPU command)"),
    "bench": ("cookbook.serve", "load-test an OpenAI-compatible endpoint: TTFT, latency, throughput"),
    "eval": ("cookbook.harness", "functional pass@k with Icarus Verilog: an endpoint, a training run, or completions"),
    "gpu-recipe": ("cookbook.harness", "write the GPU (TRL + PEFT + FSDP) recipe with the TPU run's objective"),
    "cost": ("cookbook.cost", "training + serving cost, TPU against the GPU baseline"),
    "demo": ("cookbook.harness", "run every notebook end to end on the tiny default; write a report"),
    "launch": ("cookbook.mesh", "run a cookbook command in several local JAX processes (a multi-host slice here)"),
}


def build_parser(command: str | None) -> argparse.ArgumentParser:
    width = max(map(len, COMMANDS))
    parser = core.OneLineParser(
        prog="cookbook",
        description="Fine-tune Gemma 4 with LoRA on Cloud TPU and serve it with vLLM.",
        epilog="Commands:\n" + "\n".join(f"  {n:<{width}} {h}" for n, (_, h) in COMMANDS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # Every subcommand's parser answers a usage error with one line, like its other errors.
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=core.OneLineParser)
    if command in COMMANDS:
        package = importlib.import_module(COMMANDS[command][0])
        getattr(package, f"register_{command.replace('-', '_')}_cli")(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    core.setup_runtime_env()
    command = next((a for a in argv if not a.startswith("-")), None)
    if command is not None and command not in COMMANDS:
        print(f"cookbook: unknown command {command!r}; choose one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    parser = build_parser(command)
    args, extra = parser.parse_known_args(argv)
    if extra:
        prog = f"cookbook {command}" if command else "cookbook"
        print(f"{prog}: unrecognized arguments: {' '.join(extra)} (see `{prog} --help`)", file=sys.stderr)
        return 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if command is None else 2
    # A full disk or a refused write, in any subcommand: one line naming the path and the fix.
    return int(core.os_errors(command or "")(args.func)(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
