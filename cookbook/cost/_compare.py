"""Notebook 09's steps as typed results: the prices, the paper's table, a GPU what-if, the predicted row.

Each composes :mod:`cookbook.cost._cost`'s arithmetic (and the planner's figures,
:func:`cookbook.fit.load_plan_figures`) into one step with a ``markdown()`` or ``describe()`` to
show and a ``results()`` with what notebook 09 records of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cookbook import fit
from cookbook.core import PRICING_KINDS, parse_price_overrides
from cookbook.cost._cost import (
    PAPER_GPU,
    CostCurve,
    comparison_table,
    cost_curve,
    format_prices,
    format_table,
    predict_training,
)

# The assumed MFUs of the what-if table beside the predicted row.
SWEEP_MFUS = (0.2, 0.4, 0.6)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Prices:
    """Which price list to use and the user's overrides of it (``{"platform:pricing": usd_per_hour}``)."""

    pricing: str  # one of core.PRICING_KINDS
    overrides: dict[str, float]

    def markdown(self) -> str:
        """Every price with its date and source, the overrides applied and marked."""
        return format_prices(self.overrides)


def resolve_prices(pricing: str = "on_demand", overrides: str | Sequence[str] = "") -> Prices:
    """The price list and overrides every later step uses, read once.

    Args:
      pricing: ``on_demand``, ``spot``, ``cud_1y`` or ``cud_3y`` (only on-demand prices are
        sourced here; the others need overrides).
      overrides: ``"tpu-v5p-8=14.0,gpu-2xh100:spot=9.5"`` (a notebook parameter) or a list of such
        items (``cookbook cost --price``); empty items are skipped.
    """
    if pricing not in PRICING_KINDS:
        raise ValueError(f"pricing {pricing!r}: use one of {', '.join(PRICING_KINDS)}")
    items = overrides.split(",") if isinstance(overrides, str) else list(overrides)
    return Prices(pricing=pricing, overrides=parse_price_overrides([p for p in items if p.strip()]))


@dataclasses.dataclass(frozen=True, kw_only=True)
class PaperComparison:
    """The paper's cost table recomputed from its inputs (:func:`comparison_table`'s, unrounded)."""

    table: dict[str, Any]

    @property
    def speedup(self) -> float:
        return self.table["speedup"]

    @property
    def train_cost_ratio(self) -> float:
        return self.table["train_cost_ratio"]

    def markdown(self, predicted: PredictedRow | None = None) -> str:
        """The paper's two rows (and the cookbook's predicted one, if given) and the ratios."""
        return format_table(self.table, predicted.row if predicted is not None else None)

    def results(self) -> dict[str, Any]:
        """What notebook 09 records of the table (the demo's report reads ``paper_table``)."""
        return {
            "pricing": self.table["pricing"],
            "paper_table": self.table,
            "train_cost_ratio": self.train_cost_ratio,
            "speedup": self.speedup,
            "total_cost_ratio_at_hours": {str(h): r for h, r in self.table["total_cost_ratio"].items()},
        }


def paper_comparison(prices: Prices, serving_hours: Sequence[float] = (1, 8, 24)) -> PaperComparison:
    """:func:`comparison_table` at ``prices``, with the total-cost ratio after each of ``serving_hours``."""
    return PaperComparison(
        table=comparison_table(serving_hours=serving_hours, pricing=prices.pricing, overrides=prices.overrides)
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuWhatIf:
    """The cost curve again with the GPU serving ``serve_throughput_rel`` times the TPU's traffic per hour."""

    serve_throughput_rel: float
    curve: CostCurve

    def describe(self) -> str:
        be = self.curve.break_even_hours
        return f"GPU serving {self.serve_throughput_rel:.2f}x the TPU's throughput: break-even " + (
            "never" if be is None else f"after {be:,.0f} h ({be / 24:,.1f} days) of serving"
        )

    def results(self) -> dict[str, Any]:
        """What notebook 09 records of the what-if."""
        return {
            "what_if_gpu_serve_throughput_rel": self.serve_throughput_rel,
            "what_if_break_even_hours": self.curve.break_even_hours,
            "what_if_ratio_at_24h": self.curve.ratio_at(24),
        }


def gpu_what_if(serve_throughput_rel: float, prices: Prices, *, max_hours: float = 168.0) -> GpuWhatIf:
    """:func:`cost_curve` with the paper's GPU side serving ``serve_throughput_rel`` x the TPU's throughput.

    A GPU that serves more traffic per hour needs fewer hours for the same traffic, so a small
    edge can give a finite break-even where the paper's "equal" throughput gives none.
    """
    if serve_throughput_rel <= 0:
        raise ValueError(f"serve_throughput_rel={serve_throughput_rel}: a ratio of throughputs, above 0 (1.0: equal)")
    gpu = dataclasses.replace(PAPER_GPU, serve_throughput_rel=serve_throughput_rel)
    curve = cost_curve(gpu=gpu, max_hours=max_hours, pricing=prices.pricing, overrides=prices.overrides)
    return GpuWhatIf(serve_throughput_rel=serve_throughput_rel, curve=curve)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PredictedRow:
    """This cookbook's predicted training row (:func:`predict_training`'s) and, from a plan, an MFU sweep."""

    row: dict[str, Any]  # predict_training's: label, tokens_per_s, train_hours, train_usd, assumptions, ...
    sweep: tuple[dict[str, Any], ...]  # the same row at each of SWEEP_MFUS; empty without planner output

    def sweep_markdown(self) -> str:
        """How an assumed-MFU prediction moves with the MFU, and the MFU the paper's run implies."""
        if not self.sweep:
            return "No planner output: no MFU table (the row above is the paper's measured speed)."
        lines = ["| assumed MFU | tokens/s | hours | USD |", "| ---: | ---: | ---: | ---: |"]
        lines += [
            f"| {r['mfu_assumed']:.0%} | {r['tokens_per_s']:,.0f} | {r['train_hours']:.2f} | ${r['train_usd']:.2f} |"
            for r in self.sweep
        ]
        lines += ["", f"The paper's 763 tokens/s is an MFU of {self.row['paper_implied_mfu']:.1%} on these FLOPs."]
        return "\n".join(lines)

    def results(self) -> dict[str, Any]:
        """What notebook 09 records of the prediction."""
        return {"predicted": self.row}


def predicted_row(
    prices: Prices,
    *,
    plan_json: str | Path | None = None,
    mfu: float = fit.DEFAULT_MFU,
    real_token_fraction: float = 1.0,
    estimate: str | None = None,
) -> PredictedRow:
    """:func:`predict_training` from the planner's figures for 31B on v5p-8, and its MFU sweep.

    Args:
      plan_json: what ``cookbook plan --json`` wrote; None or "" for the committed layout search
        (:func:`cookbook.fit.load_plan_figures`). Without one the row is the paper's measured speed.
      mfu: the assumed MFU for ``estimate="mfu"`` (the sweep uses :data:`SWEEP_MFUS`).
      real_token_fraction: share of real (non-padding) tokens per packed step.
      estimate: ``"compiler"`` or ``"mfu"``; None or "" for the compiler's where the plan has it.
    """
    plan = fit.load_plan_figures(plan_json or None)
    common = {"real_token_fraction": real_token_fraction, "pricing": prices.pricing, "overrides": prices.overrides}
    row = predict_training(plan, mfu=mfu, estimate=estimate or None, **common)
    sweep = () if plan is None else tuple(predict_training(plan, mfu=m, estimate="mfu", **common) for m in SWEEP_MFUS)
    return PredictedRow(row=row, sweep=sweep)
