"""``cookbook train``: one table of flags builds the parser, reads a config back, writes a command."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from cookbook import core, models
from cookbook import data as data_lib
from cookbook import lora as lora_lib
from cookbook import mesh as mesh_lib
from cookbook.train._config import (
    CLI_FLAGS,
    SAMPLE_TASKS,
    TRAIN_PRESETS,
    TrainConfig,
    recipe_of,
    train_preset,
)
from cookbook.train._evaluate import evaluate
from cookbook.train._pod import pod_commands
from cookbook.train._run import prepare
from cookbook.train._runs import restore_lora_model
from cookbook.train._trainer import NonFiniteLossError, train


def register_cli(sub) -> None:
    p = sub.add_parser(
        "train",
        help="LoRA fine-tuning with Tunix; rerun the same command to resume",
        description=(
            "LoRA SFT with Tunix's PeftTrainer. Starts from a training preset (--recipe, default: "
            "the model preset's) and overrides what is given (every setting defaults to the "
            "recipe's; --show-config prints the result). Rerunning with the same --out resumes "
            "from the latest checkpoint."
        ),
    )
    p.add_argument("--preset", default="tiny", help=f"model preset ({', '.join(models.PRESETS)})")
    p.add_argument(
        "--recipe", default=None, help=f"training preset to start from ({', '.join(TRAIN_PRESETS)}; default: --preset)"
    )
    p.add_argument(
        "--show-config",
        action="store_true",
        help="print the resolved training config as JSON and exit (nothing is trained)",
    )
    p.add_argument("--data", default=None, help="training data .jsonl/.parquet (default: the sample task)")
    p.add_argument("--eval-data", default=None, help="held-out rows (default: the sample task's eval split)")
    p.add_argument(
        "--format",
        dest="data_format",
        default=None,
        choices=list(data_lib.FORMATS),
        help="the rows' layout (default: auto, per row; `cookbook data --help` lists them)",
    )
    p.add_argument(
        "--columns",
        default=None,
        metavar="system=COL,prompt=COL,response=COL",
        help="with --format columns: which columns hold the system prompt, prompt and response",
    )
    p.add_argument(
        "--sample-task",
        default=None,
        choices=SAMPLE_TASKS,
        help="without --data: the sample task's plain rows (default) or its thinking variant "
        "(a thought in Gemma 4's thought channel before each module)",
    )
    p.add_argument("--out", default=None, help="run directory (checkpoints, metrics, recipe.json); required to train")
    p.add_argument("--base", default=None, help="base checkpoint directory (default: cookbook base)")
    for path, flag, kind, help_text in CLI_FLAGS:
        p.add_argument(flag, type=kind, dest=path.replace(".", "__"), default=None, help=help_text)
    p.add_argument("--no-packing", action="store_true", help="pad one example per row instead of packing")
    p.add_argument("--no-flash", action="store_true", help="dense attention even where the recipe uses splash")
    p.add_argument("--mesh", default=None, help="FSDPxTP, e.g. 1x4 (default: the recipe's)")
    p.add_argument("--eval-accuracy", type=int, default=0, metavar="N",
                   help="after training, greedy exact match on N held-out rows")  # fmt: skip
    g = p.add_argument_group("several hosts (JAX multi-controller; a TPU VM pod needs none of these)")
    g.add_argument(
        "--coordinator",
        default=None,
        metavar="HOST:PORT",
        help="process 0's address (or $COOKBOOK_COORDINATOR); with --num-processes and --process-id",
    )
    g.add_argument("--num-processes", type=int, default=None, help="processes in the job (or $COOKBOOK_NUM_PROCESSES)")
    g.add_argument("--process-id", type=int, default=None, help="this process's id (or $COOKBOOK_PROCESS_ID)")
    g.add_argument(
        "--print-pod-command",
        action="store_true",
        help="print the gcloud commands and bucket layout that train this config on --slice, and exit",
    )
    g.add_argument("--slice", default="v5p-32", help=f"with --print-pod-command: a slice ({', '.join(core.SLICES)})")
    g.add_argument("--tpu-name", default="my-tpu", help="with --print-pod-command: the TPU VM's name")
    g.add_argument("--zone", default="us-east5-a", help="with --print-pod-command: its zone")
    g.add_argument("--bucket", default="my-bucket", help="with --print-pod-command: the run directory's bucket")
    p.set_defaults(func=_cli)


def config_from_args(args) -> TrainConfig:
    recipe_name = args.recipe or args.preset
    if recipe_of(recipe_name) is None:
        why = (
            " (no TPU layout has been compiled and committed for it yet: `cookbook plan --preset "
            f"{recipe_name} --slice SLICE` checks one)"
            if recipe_name in models.PRESETS
            else ""
        )
        raise ValueError(
            f"no training recipe {recipe_name!r}{why} (recipes: {', '.join(TRAIN_PRESETS)}); pass "
            f"--recipe tiny (CPU) or --recipe gemma4_31b (TPU) and --preset {args.preset}"
        )
    config = train_preset(recipe_name, sample_task=args.sample_task or "plain")
    if args.recipe and args.preset != config.model_preset:
        config = config.replace(model_preset=args.preset)
    changes: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {"lora": {}, "data": {}}
    for path, _, _, _ in CLI_FLAGS:
        value = getattr(args, path.replace(".", "__"))
        if value is None:
            continue
        if "." in path:
            group, field = path.split(".")
            nested[group][field] = value
        else:
            changes[path] = value
    # Checked here, before any model is built: a typo should cost a second, not a compile.
    for flag, value in (("--data", args.data), ("--eval-data", args.eval_data)):
        if value and not Path(value).is_file():
            raise FileNotFoundError(
                f"{flag} {value}: no such file; pass a .jsonl or .parquet file of chat rows "
                f"(or leave {flag} out to use the sample task)"
            )
    if args.base and not Path(args.base).is_dir():
        raise FileNotFoundError(
            f"--base {args.base}: no such directory; pass a checkpoint directory "
            "(`cookbook base --preset NAME` prints one)"
        )
    if args.data:
        changes["train_data"] = str(Path(args.data).resolve())
    if args.eval_data:
        changes["eval_data"] = str(Path(args.eval_data).resolve())
    if args.base:
        changes["base_dir"] = str(Path(args.base).resolve())
    if args.no_flash:
        changes["flash_attention"] = False
    if args.mesh:
        try:
            fsdp, tp = (int(x) for x in args.mesh.lower().split("x"))
        except ValueError:
            raise ValueError(f"--mesh {args.mesh!r}: write FSDPxTP, e.g. 1x4") from None
        changes.update(mesh_fsdp=fsdp, mesh_tp=tp)
    if args.no_packing:
        nested["data"]["packing"] = False
    if args.data_format:
        nested["data"]["data_format"] = args.data_format
    if args.columns:
        nested["data"]["columns"] = args.columns
    if args.seed is not None:
        nested["data"]["seed"] = args.seed  # the seed also orders the data
    changes.update({k: v for k, v in nested.items() if v})
    auto_tile = changes.get("quantize", config.quantize) and args.quant_tile is None
    if auto_tile:  # the largest that divides this preset's quantized weights (128 on every released size)
        changes["quant_tile"] = lora_lib.default_quant_tile(changes.get("model_preset", config.model_preset))
    config = config.replace(**changes)  # validated here: a refused QLoRA says why in one line
    if auto_tile:  # on stderr, so that --show-config's stdout stays JSON
        print(
            f"cookbook train: QLoRA tile {config.quant_tile} (the largest up to {lora_lib.DEFAULT_QUANT_TILE} "
            f"that divides every quantized weight of {config.model_preset}; --quant-tile sets it)",
            file=sys.stderr,
        )
    return config


def _mesh_over_the_job(config: TrainConfig, info) -> TrainConfig:
    """A multi-process job with no --mesh: a mesh over all its devices that the preset's heads allow.

    The recipe's mesh is for one host (the CPU recipe's is 1 x 1); a job spans every process's
    devices, so the planner's choice for that device count replaces it, said once (process 0).
    """
    import jax

    n = jax.device_count()
    if config.mesh_fsdp * config.mesh_tp == n:
        return config
    choice = mesh_lib.choose_mesh(config.model_preset, n, config.data.batch_size)
    if info.process_index == 0:
        print(
            f"cookbook train: a {info.process_count}-process job over {n} devices and no --mesh: mesh fsdp "
            f"{choice.fsdp} x tp {choice.tp} ({choice.reason}); --mesh FSDPxTP sets another",
            file=sys.stderr,
            flush=True,
        )
    return config.replace(mesh_fsdp=choice.fsdp, mesh_tp=choice.tp)


@core.user_errors("train", NonFiniteLossError, data_lib.DataError, models.BaseDownloadError, RuntimeError)
def _cli(args) -> int:
    config = config_from_args(args)
    if args.print_pod_command:
        print(
            pod_commands(
                config,
                slice_name=args.slice,
                tpu_name=args.tpu_name,
                zone=args.zone,
                bucket=args.bucket,
                run_name=Path(args.out).name if args.out else "run",
            )
        )
        return 0
    if args.show_config:
        print(json.dumps(config.to_dict(), indent=2))
        return 0
    # Before anything touches a device: join the job (a no-op on one CPU host).
    info = mesh_lib.initialize_distributed(args.coordinator, args.num_processes, args.process_id)
    if info.process_count > 1 and not args.mesh:
        config = _mesh_over_the_job(config, info)
    if info.process_count > 1 and args.eval_accuracy:
        raise ValueError(
            "--eval-accuracy runs on one process: evaluate the finished run with "
            f"`cookbook train ... --out {args.out} --eval-accuracy N` on one host"
        )
    if not args.out:
        raise ValueError("--out RUN_DIR is required to train (or pass --show-config to only print the config)")
    run = prepare(config)  # the preset, base, fingerprint and rows, resolved once
    result = train(run, args.out)
    import jax

    if jax.process_count() > 1:
        jax.distributed.shutdown()  # every process finished its last step and checkpoint
        if jax.process_index() != 0:
            return 0  # the summary comes from process 0
    print(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(result).items()}))
    if args.eval_accuracy:
        model = restore_lora_model(args.out)
        rows = run.eval_rows[: args.eval_accuracy]
        res = evaluate(model, data_lib.load_tokenizer(base_dir=run.base_dir), rows)
        print(f"exact match on {res['n']} held-out rows: {res['accuracy']:.1%}")
    return 0
