"""Stage 02: LoRA targets in Hugging Face and Qwix names, coverage checks, applying Qwix LoRA, PEFT tensors.

The projection names live in one table (``_names``); ``_targets`` translates PEFT targets
to Qwix module paths and checks coverage (the K = V trap); ``_apply`` applies Qwix LoRA and
counts parameters; ``_counts`` checks Qwix's count against PEFT's; ``_tables`` holds notebook 02's
other steps; ``_quant`` chooses and checks the QLoRA quantization; ``_peft`` converts LoRA
tensors between the Tunix and PEFT layouts.
"""

from cookbook.lora._apply import (  # noqa: F401
    abstract_lora_model,
    abstract_qwix_model,
    apply_lora,
    count_lora_params,
    coverage_of_model,
    dummy_inputs,
    expected_lora_params,
    kv_shared_a_params,
    lora_param_shapes,
    peft_lora_params,
    peft_trainable_params,
    tunix_weight_paths,
    without_lora_dropout,
)
from cookbook.lora._config import (  # noqa: F401
    LoraApplicationError,
    LoraConfig,
    LoraCoverageError,
    parse_targets,
)

# Notebook 02's steps, each a typed result
from cookbook.lora._counts import family_param_counts, lora_param_counts  # noqa: E402, F401, I001
from cookbook.lora._names import (  # noqa: F401
    ALL_HF_PROJECTIONS,
    HF_PARENT,
    HF_PROJECTIONS,
    MODEL_LEVEL,
    TUNIX_TO_HF,
    TUNIX_TO_HF_ALL,
    TUNIX_TO_HF_MODULES,
    hf_module_path,
)
from cookbook.lora._peft import (  # noqa: F401
    LAYOUT_PREFIX,
    LoraPair,
    check_pairs_fit_preset,
    lora_pairs,
    peft_to_tunix_lora,
    tunix_lora_to_peft,
    write_peft_adapter,
)
from cookbook.lora._quant import (  # noqa: F401
    DEFAULT_QUANT_TILE,
    QLORA_STEP,
    QUANT_TYPES,
    check_quant_tile,
    default_quant_tile,
    format_quantized_memory,
    lora_provider,
    quantized_bytes,
    quantized_memory_table,
    quantized_weights,
    working_tiles,
)
from cookbook.lora._tables import (  # noqa: E402, F401, I001
    k_equals_v_trap,
    module_path_refusal,
    plot_coverage,
    projection_table,
    targets_refusal,
    translate_targets,
)
from cookbook.lora._targets import (  # noqa: F401
    check_module_path,
    coverage_by_kind,
    coverage_matrix,
    coverage_rows,
    format_coverage,
    hf_module_names,
    hf_target_modules,
    lora_targets_by_layer,
    matched_projections,
    projections,
    qwix_module_path,
)
