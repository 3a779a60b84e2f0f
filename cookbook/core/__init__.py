"""Shared foundations: the tables and checks every stage reads, in one place each."""

from cookbook.core import compat  # noqa: F401  (the reaches into libraries; compat.install())
from cookbook.core._cli_errors import (  # noqa: F401
    OneLineParser,
    one_line,
    os_errors,
    user_errors,
)
from cookbook.core._files import fill_once  # noqa: F401
from cookbook.core._hardware import (  # noqa: F401
    CHIPS,
    PAPER,
    PAPER_DATE,
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
from cookbook.core._numerics import (  # noqa: F401
    CONTROL_SEPARATION,
    PARITY_FACTOR,
    REFERENCE_TORCH_THREADS,
    Float32Floor,
    check_separated,
    compare,
    float32_floor,
    merge_floors,
    summation_bound,
    torch_threads,
)
from cookbook.core._runtime import (  # noqa: F401
    CPU_GLIBC_TUNABLES,
    DEFAULT_CACHE,
    GC_YOUNG_THRESHOLD,
    LIBTPU_NO_CHIPS_NOISE,
    REPO_ROOT,
    RESULTS_DIR,
    cache_root,
    commit_arrays,
    compile_cache_dir,
    compile_cache_off,
    libtpu_first_load_quiet,
    on_tpu_host,
    prune_compile_cache,
    prune_oldest,
    setup_runtime_env,
    to_jsonable,
)
