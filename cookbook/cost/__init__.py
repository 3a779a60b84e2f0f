"""Stage 09: what training and serving cost on TPU against the GPU baseline."""

# Prices live in the hardware table (cookbook.core); re-exported for notebook 09.
from cookbook.core import (  # noqa: E402, F401, I001
    PLATFORMS,
    PRICES,
    PRICING_KINDS,
    UnknownPriceError,
    get_price,
    parse_price_overrides,
)
from cookbook.cost._cost import (  # noqa: F401
    PAPER_GPU,
    PAPER_TPU,
    break_even_hours,
    comparison_table,
    cost_curve,
    format_table,
    plot_cost_curve,
    predict_training,
    total_cost_usd,
)

# Notebook 09's steps, each a typed result
from cookbook.cost._compare import gpu_what_if, paper_comparison, predicted_row, resolve_prices  # noqa: E402, F401, I001
from cookbook.cost._cli import register_cli as register_cost_cli  # noqa: E402, F401, I001
