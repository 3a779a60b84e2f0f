"""``cookbook cost``: the paper's cost table from its inputs, the predicted 31B row, the curve."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cookbook import core, fit
from cookbook.core import PLATFORMS, PRICING_KINDS, UnknownPriceError, parse_price_overrides
from cookbook.cost._cost import (
    comparison_table,
    cost_curve,
    format_prices,
    format_table,
    plot_cost_curve,
    predict_training,
)


def register_cli(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cost",
        help="training + serving cost, TPU against the GPU baseline",
        description="Recompute the paper's cost table from its inputs, add the cookbook's predicted "
        "31B row from the planner, and show the cost ratio over hours of serving.",
    )
    p.add_argument(
        "--pricing",
        default="on_demand",
        choices=PRICING_KINDS,
        help="which price list to use (non on-demand prices need --price)",
    )
    p.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="PLATFORM[:PRICING]=USD",
        help=f"override a price, e.g. tpu-v5p-8=14.0 (platforms: {', '.join(PLATFORMS)})",
    )
    p.add_argument(
        "--serving-hours",
        type=float,
        nargs="+",
        default=[1, 8, 24],
        help="hours of serving to tabulate (default: 1 8 24)",
    )
    p.add_argument("--max-hours", type=float, default=168.0, help="end of the cost curve")
    p.add_argument(
        "--plan", type=Path, default=None, help="planner JSON for the predicted row (default: the committed 31B plans)"
    )
    p.add_argument("--mfu", type=float, default=fit.DEFAULT_MFU, help="assumed MFU for the predicted row")
    p.add_argument(
        "--estimate",
        choices=fit.ESTIMATES,
        default=None,
        help="what sets the predicted step time: the TPU compiler's estimate (default where the plan "
        "has one) or FLOPs at --mfu",
    )
    p.add_argument("--json", type=Path, default=None, help="also write everything as JSON here")
    p.add_argument("--plot", type=Path, default=None, help="also draw the cost curve to this PNG")
    p.set_defaults(func=_cli)


@core.user_errors("cost", UnknownPriceError, code=2)
def _cli(args: argparse.Namespace) -> int:
    negative = [h for h in [*args.serving_hours, args.max_hours] if h < 0]
    if negative:
        raise ValueError(
            f"hours of serving must not be negative (got {negative[0]:g}): "
            "pass --serving-hours and --max-hours of 0 or more"
        )
    if not 0 < args.mfu <= 1:
        raise ValueError(f"--mfu {args.mfu:g}: a fraction of peak, 0 < MFU <= 1 (e.g. 0.4)")
    if args.plan is not None and not args.plan.is_file():  # else the paper's speed would be used silently
        raise FileNotFoundError(
            f"--plan {args.plan}: no such file; pass what `cookbook plan --json` wrote, "
            "or leave --plan out for the committed 31B plans"
        )
    overrides = parse_price_overrides(args.price)
    table = comparison_table(serving_hours=args.serving_hours, pricing=args.pricing, overrides=overrides)
    curve = cost_curve(max_hours=args.max_hours, pricing=args.pricing, overrides=overrides)
    predicted = predict_training(
        fit.load_plan_figures(args.plan),
        mfu=args.mfu,
        pricing=args.pricing,
        overrides=overrides,
        estimate=args.estimate,
    )
    print(format_prices(overrides))
    print()
    print(format_table(table, predicted))
    be = curve.break_even_hours
    if be is None:
        print(f"\nBreak-even: never (the TPU path stays cheaper; the ratio tends to {curve.asymptotic_ratio:.3f}x)")
    else:
        print(f"\nBreak-even: after {be:.1f} h of serving the GPU path is cheaper")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"table": table, "predicted": predicted, "curve": curve.to_dict()}, indent=2, default=float)
        )
        print(f"wrote {args.json}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        plot_cost_curve(curve, marks=args.serving_hours).savefig(args.plot, dpi=100)
        print(f"wrote {args.plot}")
    return 0
