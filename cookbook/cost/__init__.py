"""Stage 09: what training and serving cost on TPU against the GPU baseline."""

# Prices and platforms live in the hardware table: cookbook.core (core.PRICES, core.get_price).
from cookbook.cost._cli import register_cli as register_cost_cli
from cookbook.cost._compare import gpu_what_if, paper_comparison, predicted_row, resolve_prices
from cookbook.cost._cost import cost_curve, format_table, plot_cost_curve

__all__ = [
    # notebook 09's steps, each a typed result
    "resolve_prices",
    "paper_comparison",
    "predicted_row",
    "gpu_what_if",
    # the cost over serving time, its plot and the report's table
    "cost_curve",
    "plot_cost_curve",
    "format_table",
    # the command line (cookbook cost)
    "register_cost_cli",
]
