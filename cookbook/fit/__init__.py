"""Stages 03-04: sharding after LoRA, rematerialisation, and the TPU fit check (the planner).

Notebook 03 calls its sections (``_sections``: typed results over the sharding functions of
``_sharding``), notebook 04 the remat measurement (``_remat``), the planner and its committed
searches read back (``_views``). The planner compiles the real LoRA train step (``_step``) for a
TPU slice with no TPU (``_plan``, configured by ``_plan_config``); ``_search`` compiles every
candidate layout (a deep one at shallow probe depths, ``_probes``) and ``_search_results`` says what
a search concludes; ``_layouts`` holds the
recommended layout per preset and slice, ``_runtimes`` the committed table of which size fits
which runtime, ``_predict`` the training speed predicted from compiled FLOPs; ``_plan_report``
shows reports as tables and plots; ``cookbook plan`` is the planner's command line (``_plan_cli``).
"""

from cookbook.fit._layouts import (
    DEFAULT_MFU,
    load_plan_results,
    plan_results_path,
    recommended_table,
    recommended_training,
)
from cookbook.fit._plan import (
    chip_figures,
    compiler_reason,
    lower_train_step,
    plan,
    plan_optimizer,
)
from cookbook.fit._plan_cli import register_cli as register_plan_cli
from cookbook.fit._plan_config import PlanConfig, report_from_dict
from cookbook.fit._plan_report import (
    format_reports,
    format_rows,
    format_runtimes,
    plot_reports,
    plot_runtimes,
    plot_search,
)
from cookbook.fit._predict import (
    ESTIMATES,
    PlanFigures,
    load_plan_figures,
    paper_speed_in_context,
    predicted_speed,
    training_tokens_per_s,
)
from cookbook.fit._probes import plan_probed
from cookbook.fit._remat import (
    format_remat_table,
    lora_count_under_remat,
    measure_remat,
    plot,
)
from cookbook.fit._runtimes import (
    RUNTIME_SLICES,
    SIZES_BY_PARAMS,
    runtime_answers,
    runtimes_table,
    size_advice,
)
from cookbook.fit._search import (
    SearchSpace,
    candidates,
    compile_all,
    search,
)
from cookbook.fit._search_results import (
    family_table,
    load_search,
    merge_searches,
    results_dict,
    validate_extrapolation,
)
from cookbook.fit._sections import (
    check_layout_kept,
    fix_shardings,
    jit_built_optimizer,
    load_sharded_base,
    lora_on_mesh,
)
from cookbook.fit._sharding import (
    check_no_large_replicas,
    format_lora_specs,
    format_memory_table,
    plot_memory,
    shard_train_state,
)
from cookbook.fit._step import nnx_train_step
from cookbook.fit._views import (
    VALIDATION_FIELDS,
    committed_search,
    dropped_lines,
    plan_grid,
    plan_rows,
    recommended_row,
    validation_lines,
)

__all__ = [
    # notebook 03's steps, each a typed result
    "load_sharded_base",
    "lora_on_mesh",
    "jit_built_optimizer",
    "fix_shardings",
    "check_layout_kept",
    # LoRA parameters and optimizer state sharded like the weights they adapt, and their memory
    "shard_train_state",
    "check_no_large_replicas",
    "format_lora_specs",
    "format_memory_table",
    "plot_memory",
    "nnx_train_step",
    # notebook 04's remat measurement and the LoRA-inside-remat trap
    "measure_remat",
    "format_remat_table",
    "lora_count_under_remat",
    "plot",
    # notebook 04's plans and the committed searches read back, each what a cell shows
    "plan_grid",
    "plan_rows",
    "committed_search",
    "dropped_lines",
    "recommended_row",
    "validation_lines",
    "VALIDATION_FIELDS",
    # the planner: the real LoRA step compiled for a TPU slice with no TPU and no weights
    "PlanConfig",
    "plan",
    "plan_probed",
    "lower_train_step",
    "plan_optimizer",
    "chip_figures",
    "compiler_reason",
    "report_from_dict",
    "format_reports",
    "format_rows",
    "plot_reports",
    # the layout search: every candidate compiled and ranked, and what it concludes
    "SearchSpace",
    "candidates",
    "compile_all",
    "search",
    "load_search",
    "merge_searches",
    "results_dict",
    "validate_extrapolation",
    "family_table",
    "plot_search",
    # the recommended training layout per preset and slice (what cookbook train runs)
    "recommended_training",
    "recommended_table",
    "load_plan_results",
    "plan_results_path",
    "DEFAULT_MFU",
    # which size trains on which TPU runtime: the committed table
    "RUNTIME_SLICES",
    "SIZES_BY_PARAMS",
    "runtimes_table",
    "runtime_answers",
    "size_advice",
    "format_runtimes",
    "plot_runtimes",
    # training speed predicted from the compiled FLOPs, labelled as a prediction
    "ESTIMATES",
    "PlanFigures",
    "load_plan_figures",
    "predicted_speed",
    "training_tokens_per_s",
    "paper_speed_in_context",
    # the command line (cookbook plan)
    "register_plan_cli",
]
