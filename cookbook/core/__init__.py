"""Shared foundations: the tables and checks every stage reads, in one place each."""

from cookbook.core import compat  # the reaches into libraries: compat.install() at entry points
from cookbook.core._cli_errors import OneLineParser, one_line, os_errors, user_errors
from cookbook.core._files import fill_once
from cookbook.core._hardware import (
    CHIPS,
    PAPER_TRAINING_RUNS,
    PLATFORMS,
    PRICES,
    PRICING_KINDS,
    SLICES,
    SliceSpec,
    UnknownPriceError,
    chip_of,
    cpu_slice,
    get_price,
    get_slice,
    parse_price_overrides,
    platform_of_slice,
    price_table,
)
from cookbook.core._numerics import (
    CONTROL_SEPARATION,
    REFERENCE_TORCH_THREADS,
    compare,
    float32_floor,
    merge_floors,
    summation_bound,
    torch_threads,
)
from cookbook.core._run_dir import run_dir, work_dir
from cookbook.core._runtime import (
    CPU_GLIBC_TUNABLES,
    GC_YOUNG_THRESHOLD,
    REPO_ROOT,
    RESULTS_DIR,
    cache_root,
    commit_arrays,
    compile_cache_off,
    divisible_spec,
    libtpu_first_load_quiet,
    on_tpu_host,
    prune_oldest,
    setup_runtime_env,
    to_jsonable,
    variable_spec,
)

__all__ = [
    # the process: its environment set once before JAX starts, where caches and results live
    "setup_runtime_env",
    "on_tpu_host",
    "libtpu_first_load_quiet",
    "compile_cache_off",
    "CPU_GLIBC_TUNABLES",
    "GC_YOUNG_THRESHOLD",
    "REPO_ROOT",
    "RESULTS_DIR",
    "run_dir",
    "work_dir",
    "cache_root",
    "prune_oldest",
    "fill_once",
    "commit_arrays",
    # the partition spec a variable carries, and what of it a shape can take
    "variable_spec",
    "divisible_spec",
    "to_jsonable",
    # the hardware table: chips, slices, platforms and their prices
    "CHIPS",
    "SLICES",
    "SliceSpec",
    "get_slice",
    "cpu_slice",
    "chip_of",
    "platform_of_slice",
    "PLATFORMS",
    "PRICES",
    "PRICING_KINDS",
    "UnknownPriceError",
    "get_price",
    "parse_price_overrides",
    "price_table",
    "PAPER_TRAINING_RUNS",
    # numerical checks: float32 floors measured against float64, and their controls
    "compare",
    "float32_floor",
    "merge_floors",
    "summation_bound",
    "CONTROL_SEPARATION",
    "REFERENCE_TORCH_THREADS",
    "torch_threads",
    # errors on the command line: one actionable line, not a traceback
    "OneLineParser",
    "one_line",
    "user_errors",
    "os_errors",
    # the reaches into libraries' private APIs and the patches (compat.install())
    "compat",
]
