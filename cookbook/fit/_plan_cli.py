"""``cookbook plan``: compile a LoRA train step for a TPU slice with no TPU, or print a recommended layout.

Flag defaults are :class:`PlanConfig`'s field defaults (one list of defaults, not two).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from cookbook import core, models
from cookbook.fit._layouts import recommended_training
from cookbook.fit._plan import plan
from cookbook.fit._plan_config import PlanConfig

_DEFAULTS = PlanConfig()
_LORA = _DEFAULTS.lora


def register_cli(sub) -> None:
    p = sub.add_parser(
        "plan",
        help="compile the LoRA train step for a TPU slice, with no TPU: memory and FLOPs",
        description=(
            "Compile the real LoRA training step ahead of time for a TPU slice (no TPU, no "
            "weights needed) and report per-chip memory against HBM, FLOPs per step and the "
            "predicted step time at a stated MFU. With --recommended: print the layout the "
            "committed plans recommend for training (what `cookbook train` runs) as JSON."
        ),
    )
    d = _DEFAULTS
    p.add_argument("--preset", dest="model_preset", default=d.model_preset, help="model preset (tiny, gemma4_31b, ...)")
    p.add_argument("--slice", dest="slice_name", default=d.slice_name,
                   help=f"TPU slice: {', '.join(core.SLICES)}")
    p.add_argument("--recommended", action="store_true",
                   help="print the recommended training layout for --preset on --slice as JSON, compile nothing")
    p.add_argument("--fsdp", dest="mesh_fsdp", type=int, default=d.mesh_fsdp, help="fsdp axis size (default: chosen)")
    p.add_argument("--tp", dest="mesh_tp", type=int, default=d.mesh_tp, help="tensor-parallel axis size (default: chosen)")
    p.add_argument("--batch", dest="batch_size", type=int, default=d.batch_size, help="global batch per micro-step")
    p.add_argument("--seq-len", type=int, default=d.seq_len)
    p.add_argument("--remat", default=d.remat, choices=list(models.REMAT_CHOICES))
    p.add_argument("--flash", dest="flash_attention", action="store_true", help="splash attention")
    p.add_argument("--block", dest="flash_block", type=int, default=d.flash_block, help="splash attention block size")
    p.add_argument("--rank", type=int, default=_LORA.rank, help="LoRA rank")
    p.add_argument("--alpha", type=float, default=_LORA.alpha, help="LoRA alpha")
    p.add_argument("--quantize", default=d.quantize, choices=["nf4", "int8", "fp8"],
                   help="QLoRA: compile with the frozen base quantized")
    p.add_argument("--quant-tile", type=int, default=d.quant_tile, help="QLoRA quantization tile")
    p.add_argument("--mfu", type=float, default=d.mfu, help="assumed MFU for the predicted speed")
    p.add_argument("--json", default=None, help="also write the report to this JSON file")
    p.set_defaults(func=_cli)


def config_from_args(args) -> PlanConfig:
    fields = {f.name for f in dataclasses.fields(PlanConfig)} - {"lora"}
    given = {k: v for k, v in vars(args).items() if k in fields}
    return PlanConfig(lora=dataclasses.replace(_LORA, rank=args.rank, alpha=args.alpha), **given)


def _cli(args) -> int:
    if args.recommended:
        slice_given = args.slice_name if args.slice_name != _DEFAULTS.slice_name else None
        try:
            layout = recommended_training(args.model_preset, slice_given)
        except (ValueError, FileNotFoundError) as e:
            print(f"cookbook plan: {e}", file=sys.stderr)
            return 2
        print(json.dumps(layout, indent=2))
        return 0
    try:
        report = plan(config_from_args(args))
    except (ValueError, RuntimeError) as e:
        print(f"cookbook plan: {e}", file=sys.stderr)
        return 2
    print(report.summary())
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2))
    return 0 if report.fits else 1
