"""``cookbook merge``: merge a LoRA checkpoint into Hugging Face safetensors (and a PEFT adapter) from the shell."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from cookbook import core, models
from cookbook import lora as lora_lib
from cookbook.merge._checkpoint import open_lora_checkpoint
from cookbook.merge._merge import DEFAULT_MAX_SHARD_BYTES, export_peft, merge_lora
from cookbook.merge._outdir import _inputs, check_out_dir


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)?", text.strip(), re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 5GB, 500MiB or 1048576")
    unit = (m.group(2) or "").upper().rstrip("B")
    mult = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}[
        unit
    ]
    return int(float(m.group(1)) * mult)


def register_cli(sub) -> None:
    p = sub.add_parser(
        "merge",
        help="merge a LoRA checkpoint into Hugging Face safetensors, streamed",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Fold a Tunix LoRA checkpoint (Orbax) into the base's safetensors, shard by shard, "
        "with flat memory; written beside OUT and renamed into place when complete.\n\n"
        "examples:\n"
        "  cookbook merge --lora RUN_DIR --out merged/             # released multimodal layout\n"
        "  cookbook merge --lora RUN_DIR --out merged-text/ --text-only --peft-out adapter/\n"
        "  cookbook merge --lora RUN_DIR/checkpoints/800 --base BASE_DIR --out merged/ --overwrite",
    )
    p.add_argument("--lora", required=True, help="training run dir, its checkpoints dir, or a step dir")
    p.add_argument(
        "--out",
        required=True,
        help="output directory: new, or with --overwrite an earlier merge output "
        "(never a training run, a base or another directory)",
    )
    p.add_argument("--base", help="base checkpoint dir (default: the one recorded by training)")
    p.add_argument("--step", type=int, help="checkpoint step (default: latest)")
    p.add_argument("--text-only", action="store_true", help="write Gemma4ForCausalLM (what vLLM on CPU serves)")
    p.add_argument("--max-shard-size", type=parse_size, default=DEFAULT_MAX_SHARD_BYTES, help="e.g. 5GB (default 5GiB)")
    p.add_argument("--peft-out", help="also write the unmerged adapter in PEFT format here")
    p.add_argument("--peft-layout", choices=sorted(lora_lib.LAYOUT_PREFIX), default="text")
    p.add_argument("--preset", help="architecture, if the checkpoint did not record it")
    p.add_argument("--alpha", type=float, help="LoRA alpha, if the checkpoint did not record it")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --out (and --peft-out) if they are earlier outputs of cookbook merge (or empty)",
    )
    p.set_defaults(func=_cli)


@core.user_errors("merge")
def _cli(args: argparse.Namespace) -> int:
    if args.base:  # a bad --base is found from its index alone, before the LoRA checkpoint is read
        models.read_checkpoint_index(args.base)
    ckpt = open_lora_checkpoint(args.lora, step=args.step, preset=args.preset, alpha=args.alpha)
    base_dir = args.base or ckpt.base_dir
    if base_dir is None:
        raise ValueError("no --base given and the checkpoint records no base dir: pass --base BASE_DIR")
    if args.peft_out:  # refused now, not after minutes of merging
        if Path(args.peft_out).resolve() == Path(args.out).resolve():
            raise ValueError(f"--peft-out and --out are both {args.out}: give the adapter a directory of its own")
        check_out_dir(args.peft_out, inputs=_inputs(base_dir, ckpt), overwrite=args.overwrite, flag="--peft-out")
    r = merge_lora(
        base_dir,
        ckpt,
        args.out,
        text_only=args.text_only,
        max_shard_bytes=args.max_shard_size,
        overwrite=args.overwrite,
        preset=args.preset,
    )
    print(
        f"merged {r.merged_tensors} tensors, copied {r.copied_tensors}, {r.bytes_written / 1e9:.2f} GB "
        f"in {r.num_shards} shard(s), {r.seconds:.1f} s -> {r.out_dir}"
    )
    if args.peft_out:
        print(
            "PEFT adapter ->",
            export_peft(ckpt, args.peft_out, layout=args.peft_layout, preset=args.preset, overwrite=args.overwrite),
        )
    return 0
