"""Stage 02: LoRA targets in Hugging Face and Qwix names, coverage checks, applying Qwix LoRA, PEFT tensors.

The projection names live in one table (``_names``); ``_targets`` translates PEFT targets
to Qwix module paths and checks coverage (the K = V trap); ``_apply`` applies Qwix LoRA and
counts parameters; ``_counts`` checks Qwix's count against PEFT's; ``_tables`` holds notebook 02's
other steps; ``_quant`` chooses and checks the QLoRA quantization; ``_peft`` converts LoRA
tensors between the Tunix and PEFT layouts.
"""

from cookbook.lora._apply import (
    abstract_lora_model,
    apply_lora,
    count_lora_params,
    dummy_inputs,
    expected_lora_params,
)
from cookbook.lora._config import LoraApplicationError, LoraConfig, LoraCoverageError, parse_targets
from cookbook.lora._counts import family_param_counts, lora_param_counts
from cookbook.lora._names import (
    ALL_HF_PROJECTIONS,
    HF_PARENT,
    HF_PROJECTIONS,
    MODEL_LEVEL,
    TUNIX_TO_HF,
    TUNIX_TO_HF_ALL,
    TUNIX_TO_HF_MODULES,
    hf_module_path,
)
from cookbook.lora._peft import (
    LAYOUT_PREFIX,
    LoraPair,
    check_pairs_fit_preset,
    lora_pairs,
    peft_to_tunix_lora,
    tunix_lora_to_peft,
    write_peft_adapter,
)
from cookbook.lora._quant import (
    DEFAULT_QUANT_TILE,
    QLORA_STEP,
    QUANT_TYPES,
    check_quant_tile,
    default_quant_tile,
    format_quantized_memory,
    lora_provider,
    quantized_memory_table,
)
from cookbook.lora._tables import (
    k_equals_v_trap,
    module_path_refusal,
    plot_coverage,
    projection_table,
    targets_refusal,
    translate_targets,
)
from cookbook.lora._targets import hf_target_modules, qwix_module_path

__all__ = [
    # the config
    "LoraConfig",
    "parse_targets",
    # notebook 02's steps, each a typed result
    "projection_table",
    "translate_targets",
    "targets_refusal",
    "module_path_refusal",
    "k_equals_v_trap",
    "plot_coverage",
    "lora_param_counts",
    "family_param_counts",
    # the projection names: Hugging Face (PEFT) against Tunix (Qwix)
    "HF_PROJECTIONS",
    "ALL_HF_PROJECTIONS",
    "HF_PARENT",
    "MODEL_LEVEL",
    "TUNIX_TO_HF",
    "TUNIX_TO_HF_ALL",
    "TUNIX_TO_HF_MODULES",
    "hf_module_path",
    "hf_target_modules",
    "qwix_module_path",
    # applying Qwix LoRA to a model and counting what it adds
    "apply_lora",
    "abstract_lora_model",
    "dummy_inputs",
    "count_lora_params",
    "expected_lora_params",
    # QLoRA: the quantization and its memory
    "QUANT_TYPES",
    "QLORA_STEP",
    "DEFAULT_QUANT_TILE",
    "default_quant_tile",
    "check_quant_tile",
    "lora_provider",
    "quantized_memory_table",
    "format_quantized_memory",
    # LoRA tensors between the Tunix and PEFT layouts
    "LAYOUT_PREFIX",
    "LoraPair",
    "lora_pairs",
    "check_pairs_fit_preset",
    "tunix_lora_to_peft",
    "peft_to_tunix_lora",
    "write_peft_adapter",
    # errors: targets that adapt nothing or only some layers (the K = V trap), a LoRA count not
    # the expected one
    "LoraCoverageError",
    "LoraApplicationError",
]
