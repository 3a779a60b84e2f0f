"""``cookbook plan``: compile a LoRA train step for a TPU slice with no TPU, or print a recommended layout.

Flag defaults are :class:`PlanConfig`'s field defaults (one list of defaults, not two).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from cookbook import core, models
from cookbook import lora as lora_lib
from cookbook.fit._layouts import recommended_training
from cookbook.fit._plan import plan
from cookbook.fit._plan_config import PlanConfig
from cookbook.fit._plan_report import format_rows
from cookbook.fit._search import SINGLE_HOST_SLICES, SearchSpace
from cookbook.fit._search_results import results_dict

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
            "committed plans recommend for training (what `cookbook train` runs) as JSON. With "
            "--search: compile the candidate layouts for --slice and rank them by the compiler's "
            "estimated step time; with --cheapest: search every single-host slice and name the "
            "one with the lowest estimated cost per 1M trained tokens."
        ),
    )
    d = _DEFAULTS
    p.add_argument("--preset", dest="model_preset", default=d.model_preset, help="model preset (tiny, gemma4_31b, ...)")
    p.add_argument("--slice", dest="slice_name", default=d.slice_name, help=f"TPU slice: {', '.join(core.SLICES)}")
    p.add_argument(
        "--recommended",
        action="store_true",
        help="print the recommended training layout for --preset on --slice as JSON, compile nothing",
    )
    p.add_argument("--fsdp", dest="mesh_fsdp", type=int, default=d.mesh_fsdp, help="fsdp axis size (default: chosen)")
    p.add_argument(
        "--tp", dest="mesh_tp", type=int, default=d.mesh_tp, help="tensor-parallel axis size (default: chosen)"
    )
    p.add_argument(
        "--batch",
        dest="batch_size",
        type=int,
        default=None,
        help="global batch per micro-step (default: the smallest the mesh takes, its fsdp size; a search starts at 1)",
    )
    p.add_argument("--seq-len", type=int, default=d.seq_len)
    p.add_argument(
        "--objective",
        default=d.objective,
        choices=["sft", "dapo", "grpo", "decode"],
        help="the step: SFT (PeftTrainer), an RL actor update on --batch rollouts (Tunix's DAPO / GRPO learners), "
        "or one rollout token for --batch sequences against a KV cache of --seq-len (Tunix's sampler)",
    )
    p.add_argument(
        "--completion-len",
        type=int,
        default=d.completion_len,
        help="RL: sampled tokens of each rollout, out of --seq-len (the rest is its prompt)",
    )
    p.add_argument("--remat", default=d.remat, choices=list(models.REMAT_CHOICES))
    p.add_argument("--flash", dest="flash_attention", action="store_true", help="splash attention")
    p.add_argument("--block", dest="flash_block", type=int, default=d.flash_block, help="splash attention block size")
    p.add_argument("--rank", type=int, default=_LORA.rank, help="LoRA rank")
    p.add_argument("--alpha", type=float, default=_LORA.alpha, help="LoRA alpha")
    p.add_argument(
        "--quantize",
        default=d.quantize,
        choices=["nf4", "int8", "fp8"],
        help="QLoRA: compile with the frozen base quantized",
    )
    p.add_argument(
        "--quant-tile",
        type=int,
        default=None,
        help=f"QLoRA quantization tile (default: the largest up to {d.quant_tile} that divides every quantized weight)",
    )
    p.add_argument("--mfu", type=float, default=d.mfu, help="assumed MFU for the predicted speed")
    p.add_argument("--json", default=None, help="also write the report (or the search) to this JSON file")
    g = p.add_argument_group("layout search (--search, --cheapest)")
    g.add_argument("--search", action="store_true", help="compile and rank the candidate layouts on --slice")
    g.add_argument(
        "--cheapest",
        action="store_true",
        help=f"search each of {', '.join(SINGLE_HOST_SLICES)} and name the cheapest per 1M tokens",
    )
    g.add_argument("--slices", default=",".join(SINGLE_HOST_SLICES), help="slices for --cheapest")
    g.add_argument("--meshes", default=None, help="fsdp x tp shapes to try, e.g. 1x4,2x2 (default: every valid one)")
    g.add_argument("--remats", default="none,decoder", help="remat choices to try")
    g.add_argument("--attentions", default="dense,splash512", help="attentions to try: dense, splash<block>")
    g.add_argument("--quantizes", default="none", help="bases to try: none (bf16), nf4, int8, fp8")
    g.add_argument(
        "--grow-batch",
        type=int,
        default=SearchSpace.grow_batch,
        help="then double the best layout's batch up to this many times while it fits",
    )
    g.add_argument("--workers", type=int, default=1, help="compiles at a time, each in its own process")
    g.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="PLATFORM[:PRICING]=USD_PER_HOUR",
        help="a price the table lacks or you pay instead, e.g. tpu-v5e-8=9.6 (repeatable)",
    )
    p.set_defaults(func=_cli)


def _default_batch(args) -> int:
    """The smallest global batch the plan's mesh takes: the fsdp size (given, what ``--tp`` leaves,
    or ``cookbook.mesh.choose_mesh``'s with the most tensor parallelism the preset allows), so that
    ``cookbook plan`` runs on its defaults for a preset whose heads cap tp below the slice's chips
    (``tiny`` on v5p-8: 2 x 2, batch 2). A search starts at the config's default, 1, as committed."""
    if getattr(args, "search", False) or getattr(args, "cheapest", False):
        return _DEFAULTS.batch_size
    if args.mesh_fsdp:
        return args.mesh_fsdp
    devices = core.get_slice(args.slice_name).num_devices
    if args.mesh_tp:
        return max(1, devices // args.mesh_tp)
    from cookbook import mesh as mesh_lib

    return mesh_lib.choose_mesh(args.model_preset, args.slice_name, None).fsdp


def config_from_args(args) -> PlanConfig:
    fields = {f.name for f in dataclasses.fields(PlanConfig)} - {"lora"}
    given = {k: v for k, v in vars(args).items() if k in fields}
    if given.get("batch_size") is None:
        given["batch_size"] = _default_batch(args)
    if given.get("quant_tile") is None:  # 128 on every released size; tiny: 32
        tile = lora_lib.default_quant_tile(given["model_preset"]) if given.get("quantize") else _DEFAULTS.quant_tile
        given["quant_tile"] = tile
    return PlanConfig(lora=dataclasses.replace(_LORA, rank=args.rank, alpha=args.alpha), **given)


def space_from_args(args) -> SearchSpace:
    """The search space of ``--meshes/--remats/--attentions/--quantizes`` (ValueError names a bad item)."""

    def items(text: str) -> tuple[str, ...]:
        return tuple(x.strip() for x in text.split(",") if x.strip())

    meshes = None
    if args.meshes:
        try:
            meshes = tuple(tuple(int(v) for v in m.lower().split("x")) for m in items(args.meshes))
        except ValueError:
            raise ValueError(f"--meshes {args.meshes!r}: write FSDPxTP shapes, e.g. 1x4,2x2") from None
        if any(len(m) != 2 for m in meshes):
            raise ValueError(f"--meshes {args.meshes!r}: write FSDPxTP shapes, e.g. 1x4,2x2")
    quantize = tuple(None if q == "none" else q for q in items(args.quantizes))
    bad = [q for q in quantize if q not in (None, "nf4", "int8", "fp8")]
    if bad:
        raise ValueError(f"--quantizes: {bad[0]!r} is not one of none, nf4, int8, fp8")
    return SearchSpace(
        meshes=meshes,
        remats=items(args.remats),
        attentions=items(args.attentions),
        quantize=quantize,
        grow_batch=args.grow_batch,
    )


def _search_cli(args) -> int:
    from cookbook.fit import _search

    space = space_from_args(args)
    base = config_from_args(args)
    slices = args.slices.split(",") if args.cheapest else [args.slice_name]
    for s in slices:
        core.get_slice(s)  # ValueError naming the known slices, before any compile
    overrides = core.parse_price_overrides(args.price)
    results = []
    for s in slices:
        res = _search.search(args.model_preset, s, space, base=base, workers=args.workers)
        results.append(res)
        print(f"\n{args.model_preset} on {s} (ranked by the compiler's estimate; none of it run on a TPU):")
        print(format_rows(res.rows(overrides)) if res.reports else "  no layouts")
    data = results_dict(results, machine="this host (deviceless AOT compile)", overrides=overrides)
    if args.cheapest:
        win = data["cheapest"]["winner"]
        print(
            "\ncheapest: "
            + (
                f"{win['slice']}, {win['layout']}: ${win['usd_per_million_tokens']:.3f} per 1M "
                f"tokens at {win['estimated_tokens_per_s']:,.0f} tokens/s (compiler's estimate)"
                if win
                else "no priced slice fits"
            )
        )
        for row in data["cheapest"]["slices"]:
            if row.get("why"):
                print(f"  {row['slice']}: {row['why']}")
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=2, sort_keys=True))
    return 0 if any(r.ranked for r in results) else 1


def _cli(args) -> int:
    if args.search or args.cheapest:
        try:
            return _search_cli(args)
        except (ValueError, RuntimeError) as e:
            print(f"cookbook plan: {e}", file=sys.stderr)
            return 2
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
