"""Notebook 04's calls: a grid of plans, and the committed layout searches read back as tables and
lines (``benchmarks/results/plan_search_<size>.json``), each one call that returns what a cell shows."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from cookbook.fit._layouts import load_plan_results, recommended_table
from cookbook.fit._plan import plan
from cookbook.fit._plan_config import PlanConfig, PlanReport
from cookbook.fit._plan_report import report_row
from cookbook.fit._search import SearchResult
from cookbook.fit._search_results import load_search

# The figures the extrapolation check compares (full-depth compile against 6 and 12 layers).
VALIDATION_FIELDS = ("total_bytes", "temp_bytes", "argument_bytes", "flops_per_chip", "compiler_step_s")


def _names(value: str | Sequence[str]) -> list[str]:
    return [v.strip() for v in (value.split(",") if isinstance(value, str) else value) if v.strip()]


def plan_grid(preset: str, slices: str | Sequence[str], remats: str | Sequence[str], **config: Any) -> list[PlanReport]:
    """:func:`plan` for every slice x remat choice (comma-separated names or sequences), the other
    :class:`PlanConfig` fields from ``config``; slice-major order."""
    return [
        plan(PlanConfig(model_preset=preset, slice_name=s, remat=r, **config))
        for s in _names(slices)
        for r in _names(remats)
    ]


def plan_rows(reports: Sequence[PlanReport]) -> list[dict[str, Any]]:
    """:func:`report_row` of each report, with the raw bytes, FLOPs and activation constraints."""
    return [
        report_row(r)
        | {
            "temp_bytes": r.temp_bytes,
            "flops_per_chip": r.flops_per_chip,
            "argument_bytes": r.argument_bytes,
            "activation_constraints": r.activation_constraints,
        }
        for r in reports
    ]


@dataclasses.dataclass(frozen=True)
class CommittedSearch:
    """One size's committed layout search, read back."""

    preset: str
    results: dict[str, Any]  # the JSON as committed
    searches: dict[str, SearchResult]  # per slice

    @property
    def header(self) -> str:
        r = self.results
        return (
            f"searched on {r['compiled_on']} ({r['machine']}); margin {r['margin']:.0%} of HBM; "
            f"libtpu {r['versions']['libtpu']}, jax {r['versions']['jax']}"
        )

    @property
    def validation_rows(self) -> list[dict[str, Any]]:
        """Each validated layout's relative error per :data:`VALIDATION_FIELDS`, and its fit verdicts."""
        return [
            {
                "layout": v["layout"],
                **{k: v[k]["relative_error"] for k in VALIDATION_FIELDS},
                "fits (full / extrapolated)": "{full} / {extrapolated}".format(**v["fits_with_margin"]),
            }
            for v in self.results.get("validation", [])
        ]

    @property
    def cheapest(self) -> dict[str, Any]:
        return self.results["cheapest"]

    @property
    def cheapest_line(self) -> str:
        win = self.cheapest["winner"]
        return (
            f"cheapest: {win['slice']}, {win['layout']}: ${win['usd_per_million_tokens']:.3f} per 1M trained tokens "
            f"at {win['estimated_tokens_per_s']:,.0f} tokens/s (the compiler's estimate, on-demand prices)"
        )

    def ranked_and_dropped(self) -> dict[str, dict[str, Any]]:
        return {s: {"ranked": res.ranked, "dropped": res.rejected()} for s, res in self.searches.items()}


def committed_search(preset: str = "gemma4_31b") -> CommittedSearch:
    """``preset``'s committed layout search (``cookbook.fit.load_plan_results``)."""
    results = load_plan_results(preset)
    return CommittedSearch(preset, results, {res.slice_name: res for res in load_search(results)})


def dropped_lines(presets: Sequence[str]) -> list[str]:
    """Why each layout of each size's committed search was dropped, one line each."""
    return [
        f"{size} {name}: {why[:160]}"
        for size in presets
        for dropped in load_plan_results(size)["dropped"].values()
        for name, why in dropped.items()
    ]


def validation_lines(preset: str) -> list[str]:
    """The committed search's extrapolation check for ``preset``: memory and FLOPs error per layout."""
    return [
        f"{preset} extrapolated from 6 and 12 layers vs compiled at full depth, {v['layout']}: per-chip memory "
        f"{v['total_bytes']['relative_error']:+.1%}, FLOPs {v['flops_per_chip']['relative_error']:+.4%}"
        for v in load_plan_results(preset).get("validation", [])
    ]


def recommended_row(preset: str, slice_name: str) -> dict[str, Any]:
    """The row of :func:`recommended_table` for ``slice_name``."""
    for row in recommended_table(preset):
        if row["slice"] == slice_name:
            return row
    raise KeyError(f"no committed recommendation for {preset} on {slice_name}")
