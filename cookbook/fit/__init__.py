"""Stages 03-04: sharding after LoRA, rematerialisation, and the TPU fit check (the planner).

Notebook 03 calls its sections (``_sections``: typed results over the sharding functions),
notebook 04 the remat measurement and the planner; ``cookbook plan`` is the planner's command line.
"""

from cookbook.fit._layouts import (  # noqa: F401
    DEFAULT_MFU,
    LAYOUT_KEYS,
    load_plan_results,
    plan_results_path,
    recommended_table,
    recommended_training,
)
from cookbook.fit._plan import (  # noqa: F401
    chip_figures,
    compiler_reason,
    count_sharding_constraints,
    lower_train_step,
    plan,
    plan_cache_path,
    plan_optimizer,
    preset_for,
    tpu_devices,
)
from cookbook.fit._plan_cli import register_cli as register_plan_cli  # noqa: F401
from cookbook.fit._plan_config import PlanConfig, PlanReport, report_from_dict  # noqa: F401
from cookbook.fit._plan_report import (  # noqa: F401
    format_reports,
    format_rows,
    format_runtimes,
    plot_reports,
    plot_runtimes,
    plot_search,
    report_row,
)
from cookbook.fit._predict import (  # noqa: F401
    ESTIMATES,
    PlanFigures,
    load_plan_figures,
    paper_speed_in_context,
    predicted_speed,
    training_tokens_per_s,
)
from cookbook.fit._remat import (  # noqa: F401
    format_remat_table,
    lora_count_under_remat,
    measure_remat,
    plot,
)
from cookbook.fit._runtimes import (  # noqa: F401
    RUNTIME_SLICES,
    SIZES_BY_PARAMS,
    largest_fitting,
    load_runtimes,
    paper_mfu,
    runtime_answers,
    runtimes_table,
    size_advice,
)
from cookbook.fit._search import (  # noqa: F401
    SINGLE_HOST_SLICES,
    SearchResult,
    SearchSpace,
    candidates,
    compile_all,
    plan_probed,
    search,
)
from cookbook.fit._search_results import (  # noqa: F401
    cheapest,
    family_table,
    load_search,
    merge_searches,
    recommended_from,
    results_dict,
    validate_extrapolation,
)
from cookbook.fit._sections import (  # noqa: F401
    check_layout_kept,
    fix_shardings,
    jit_built_optimizer,
    load_sharded_base,
    lora_on_mesh,
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
)
from cookbook.fit._step import nnx_train_step  # noqa: F401
from cookbook.fit._views import (  # noqa: F401
    VALIDATION_FIELDS,
    committed_search,
    dropped_lines,
    plan_grid,
    plan_rows,
    recommended_row,
    validation_lines,
)

# The remat choices live in the model stage; re-exported beside the remat measurement.
from cookbook.models import get_remat_choice, remat_policy  # noqa: F401, I001
