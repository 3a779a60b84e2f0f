"""``cookbook train``: one table of flags builds the parser, reads a config back, writes a command."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from cookbook import core, models
from cookbook import data as data_lib
from cookbook.train._config import TRAIN_PRESETS, TrainConfig, train_preset
from cookbook.train._evaluate import evaluate
from cookbook.train._runs import eval_rows, load_tokenizer, resolve_base_dir, restore_lora_model
from cookbook.train._trainer import NonFiniteLossError, train

# The overridable settings: (TrainConfig field path, flag, type, help). One table builds the
# parser, reads the parsed flags back into a config, and writes a config as a command line.
CLI_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("max_steps", "--max-steps", int, "optimizer steps"),
    ("learning_rate", "--lr", float, "peak learning rate"),
    ("warmup_steps", "--warmup-steps", int, "linear warm-up steps from 0"),
    ("weight_decay", "--weight-decay", float, "AdamW weight decay"),
    ("grad_accum_steps", "--grad-accum", int, "micro-batches per optimizer step"),
    ("max_grad_norm", "--clip", float, "global-norm gradient clipping"),
    ("eval_every_steps", "--eval-every", int, "eval loss every N steps"),
    ("checkpoint_every_steps", "--checkpoint-every", int, "Orbax checkpoint every N steps"),
    ("seed", "--seed", int, "LoRA initialisation and data-order seed"),
    ("remat", "--remat", str, "remat choice: " + ", ".join(models.REMAT_CHOICES)),
    ("lora.rank", "--rank", int, "LoRA rank"),
    ("lora.alpha", "--alpha", float, "LoRA alpha"),
    ("lora.dropout", "--dropout", float, "LoRA dropout"),
    ("data.seq_len", "--seq-len", int, "tokens per row"),
    ("data.batch_size", "--batch-size", int, "rows per micro-batch (global)"),
)


def _get(d: dict[str, Any], path: str) -> Any:
    for k in path.split("."):
        d = d[k]
    return d


def cli_command(config: TrainConfig, *, out: str, data: str | None = None) -> str:
    """The ``cookbook train`` command line that runs ``config`` (flags only where it differs
    from its preset's recipe)."""
    recipe_cfg = train_preset(config.model_preset).to_dict()
    mine = config.to_dict()
    parts = ["cookbook", "train", "--preset", config.model_preset]
    for path, flag, _, _ in CLI_FLAGS:
        a, b = _get(mine, path), _get(recipe_cfg, path)
        if a != b and a is not None:
            parts += [flag, str(a)]
    if not config.data.packing:
        parts.append("--no-packing")
    if recipe_cfg["flash_attention"] and not config.flash_attention:
        parts.append("--no-flash")
    if (config.mesh_fsdp, config.mesh_tp) != (recipe_cfg["mesh_fsdp"], recipe_cfg["mesh_tp"]):
        parts += ["--mesh", f"{config.mesh_fsdp}x{config.mesh_tp}"]
    if data or config.train_data:
        parts += ["--data", data or str(config.train_data)]
    return " ".join([*parts, "--out", out])


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
    p.add_argument("--recipe", default=None, help=f"training preset to start from ({', '.join(TRAIN_PRESETS)}; "
                                                  "default: --preset)")
    p.add_argument("--show-config", action="store_true",
                   help="print the resolved training config as JSON and exit (nothing is trained)")
    p.add_argument("--data", default=None, help="training data .jsonl/.parquet (default: the sample task)")
    p.add_argument("--eval-data", default=None, help="held-out rows (default: the sample task's eval split)")
    p.add_argument("--out", default=None, help="run directory (checkpoints, metrics, recipe.json); required to train")
    p.add_argument("--base", default=None, help="base checkpoint directory (default: cookbook base)")
    for path, flag, kind, help_text in CLI_FLAGS:
        p.add_argument(flag, type=kind, dest=path.replace(".", "__"), default=None, help=help_text)
    p.add_argument("--no-packing", action="store_true", help="pad one example per row instead of packing")
    p.add_argument("--no-flash", action="store_true", help="dense attention even where the recipe uses splash")
    p.add_argument("--mesh", default=None, help="FSDPxTP, e.g. 1x4 (default: the recipe's)")
    p.add_argument("--eval-accuracy", type=int, default=0, metavar="N",
                   help="after training, greedy exact match on N held-out rows")  # fmt: skip
    p.set_defaults(func=_cli)


def config_from_args(args) -> TrainConfig:
    recipe_name = args.recipe or args.preset
    if recipe_name not in TRAIN_PRESETS:
        raise ValueError(f"no training recipe {recipe_name!r} (recipes: {', '.join(TRAIN_PRESETS)}); pass "
                         f"--recipe tiny (CPU) or --recipe gemma4_31b (TPU) and --preset {args.preset}")
    config = train_preset(recipe_name)
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
            raise FileNotFoundError(f"{flag} {value}: no such file; pass a .jsonl or .parquet file of chat rows "
                                    f"(or leave {flag} out to use the sample task)")
    if args.base and not Path(args.base).is_dir():
        raise FileNotFoundError(f"--base {args.base}: no such directory; pass a checkpoint directory "
                                "(`cookbook base --preset NAME` prints one)")
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
    if args.seed is not None:
        nested["data"]["seed"] = args.seed  # the seed also orders the data
    changes.update({k: v for k, v in nested.items() if v})
    return config.replace(**changes)


@core.user_errors("train", NonFiniteLossError, data_lib.DataError, models.BaseDownloadError)
def _cli(args) -> int:
    config = config_from_args(args)
    if args.show_config:
        print(json.dumps(config.to_dict(), indent=2))
        return 0
    if not args.out:
        raise ValueError("--out RUN_DIR is required to train (or pass --show-config to only print the config)")
    result = train(config, args.out)
    print(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(result).items()}))
    if args.eval_accuracy:
        model = restore_lora_model(args.out)
        rows = eval_rows(config)[: args.eval_accuracy]
        res = evaluate(model, load_tokenizer(resolve_base_dir(config)), rows)
        print(f"exact match on {res['n']} held-out rows: {res['accuracy']:.1%}")
    return 0
