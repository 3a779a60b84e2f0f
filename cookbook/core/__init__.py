"""Shared foundations: the tables and checks every stage reads, in one place each."""

from cookbook.core import _compat as compat  # noqa: E402, F401  (compat.check() for its test)
from cookbook.core._cli_errors import (  # noqa: F401
    USER_ERRORS,
    OneLineParser,
    one_line,
    os_error_line,
    os_errors,
    user_errors,
)
from cookbook.core._compat import (  # noqa: E402, F401
    drop_scalar_listeners_except,
    fast_abstract_tracing,
    last_buffered_train_loss,
    qwix_finds_quantized_weights_when_tracing,
    qwix_lora_grads_as_is,
    qwix_lora_grads_for_cpu,
    qwix_tie_dequantization,
    scalar_listeners,
    tunix_activation_sharding,
    tunix_einsum_accepts_quantized,
    tunix_gemma4_key_mapping,
    tunix_gemma4_preprocess,
    tunix_loss_fn,
    tunix_moe_routes_on_residual,
)
from cookbook.core._files import fill_once, lock_path, sibling_lock  # noqa: F401
from cookbook.core._hardware import (  # noqa: F401
    CHIPS,
    PAPER,
    PAPER_DATE,
    PAPER_TRAINING_RUNS,
    PLATFORMS,
    PRICES,
    PRICING_KINDS,
    SLICES,
    ChipSpec,
    Platform,
    Price,
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
    Float32Floor,
    check_separated,
    compare,
    float32_floor,
    merge_floors,
    summation_bound,
)
from cookbook.core._runtime import (  # noqa: F401
    COMPILE_CACHE_MAX_BYTES,
    COMPILE_CACHE_MIN_SECONDS,
    DEFAULT_CACHE,
    REPO_ROOT,
    RESULTS_DIR,
    cache_root,
    compile_cache_dir,
    compile_cache_off,
    on_tpu_host,
    prune_compile_cache,
    setup_runtime_env,
    to_jsonable,
)
