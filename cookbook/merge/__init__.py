"""Stage 07: LoRA checkpoints merged into Hugging Face safetensors, streamed; PEFT adapters; verification."""

from cookbook.merge._cache import ensure_merged, ensure_peft, ensure_text_only_base  # noqa: F401
from cookbook.merge._checkpoint import (  # noqa: F401
    find_step_dir,
    open_lora_checkpoint,
    read_lora,
)
from cookbook.merge._layouts import (  # noqa: F401
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
from cookbook.merge._merge import (  # noqa: F401
    STOP_TOKENS,
    export_peft,
    hf_module_shape,
    merge_lora,
    plan_merge,
)
from cookbook.merge._merge_cli import parse_size  # noqa: F401
from cookbook.merge._merge_cli import register_cli as register_merge_cli  # noqa: E402, F401, I001
from cookbook.merge._outdir import check_out_dir  # noqa: F401
from cookbook.merge._safetensors import (  # noqa: F401
    OutTensor,
    TensorRef,
    header_bytes,
    plan_shards,
    read_header,
    shard_names,
    write_shard,
)
from cookbook.merge._verify import (  # noqa: F401
    ensure_random_lora_run,
    extrapolate_merge,
    sample_tokens,
    tunix_lora_logits,
    verify_merge,
)
