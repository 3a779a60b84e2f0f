"""Stages 03-04: sharding after LoRA, rematerialisation, and the TPU fit check (the planner)."""

from cookbook.fit._layouts import (  # noqa: E402, F401, I001
    SAFETY_MARGIN,
    load_plan_results,
    plan_results_path,
    recommended_training,
)
from cookbook.fit._plan import (  # noqa: F401
    PlanConfig,
    PlanReport,
    count_sharding_constraints,
    format_reports,
    lower_train_step,
    plan,
    plot_reports,
    report_from_dict,
    report_row,
    tpu_devices,
)
from cookbook.fit._plan import register_cli as register_plan_cli  # noqa: E402, F401, I001
from cookbook.fit._predict import (  # noqa: E402, F401, I001
    DEFAULT_MFU,
    PlanFigures,
    load_plan_figures,
    predicted_speed,
    training_tokens_per_s,
)
from cookbook.fit._remat import (  # noqa: F401
    example_batch,
    format_table,
    lora_count_under_remat,
    measure_remat,
    plot,
)
from cookbook.fit._sharding import (  # noqa: F401
    abstract_optimizer_state,
    abstract_with_shardings,
    check_no_large_replicas,
    format_lora_specs,
    format_memory_table,
    lora_specs,
    memory_table,
    plot_memory,
    project_lora_specs,
    set_lora_specs,
    shard_train_state,
    sharding_signature,
)
from cookbook.fit._step import lora_loss, make_train_step, nnx_train_step, run_train_steps  # noqa: E402, F401, I001

# The remat table lives in the model stage; re-exported for notebook 04.
from cookbook.models import REMAT_CHOICES, get_remat_choice, remat_policy  # noqa: E402, F401, I001
