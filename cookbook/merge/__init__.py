"""Stage 07: LoRA checkpoints merged into Hugging Face safetensors, streamed; PEFT adapters; verification."""

from cookbook.merge._cache import ensure_merged, ensure_peft, ensure_text_only_base
from cookbook.merge._checkpoint import open_lora_checkpoint, read_lora
from cookbook.merge._layouts import (
    BENCH_COLUMNS,
    MergeMismatchError,
    adapter_summary,
    extrapolation_summary,
    inspect_checkpoint,
    load_merge_bench,
    merged_layout,
    peft_adapters,
    resolve_run_dir,
    show_refusals,
    verify_layouts,
)
from cookbook.merge._merge import merge_lora
from cookbook.merge._merge_cli import register_cli as register_merge_cli
from cookbook.merge._safetensors import OutTensor, TensorRef, header_bytes, read_header, write_shard

__all__ = [
    # notebook 07's steps, each a typed result
    "resolve_run_dir",
    "inspect_checkpoint",
    "merged_layout",
    "peft_adapters",
    "verify_layouts",
    "show_refusals",
    "adapter_summary",
    "extrapolation_summary",
    "load_merge_bench",
    "BENCH_COLUMNS",
    # a run's merged checkpoint, PEFT adapter and text-only base, built once and cached
    "ensure_merged",
    "ensure_peft",
    "ensure_text_only_base",
    # the streamed merge and the LoRA checkpoint it reads
    "merge_lora",
    "open_lora_checkpoint",
    "read_lora",
    # safetensors shards, read and written by hand
    "TensorRef",
    "OutTensor",
    "read_header",
    "header_bytes",
    "write_shard",
    # the command line (cookbook merge)
    "register_merge_cli",
    # errors: a merged layout whose logits miss Tunix + LoRA's by more than the bound
    "MergeMismatchError",
]
