"""What a layout search concludes, and its committed form: the recommended training layout per
slice, the cheapest slice, and the check of the probe extrapolation (``cookbook.fit.search``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from cookbook.fit._layouts import LAYOUT_KEYS
from cookbook.fit._plan_config import PlanReport, report_from_dict
from cookbook.fit._search import VALIDATED, SearchResult, SearchSpace, layout_name


def recommended_from(result: SearchResult) -> dict[str, Any] | None:
    """The training layout a search recommends (the best with an unquantized base: QLoRA changes
    the model, so it is a choice the user makes), in the training config's field names."""
    name = result.best(base_only=True)
    if name is None:
        return None
    r = result.reports[name]
    c = r.plan_config
    layout = {"mesh_fsdp": r.fsdp, "mesh_tp": r.tp, **{k: getattr(c, k) for k in LAYOUT_KEYS[2:]}}
    return {
        **layout,
        "from": name,
        "hbm_fraction": r.total_bytes / r.hbm_bytes,
        "flops_per_token": r.flops_per_token,
        "floor_step_s": r.flop_floor_s,
        "floor_tokens_per_s": r.tokens_per_step / r.flop_floor_s,
        "estimated_step_s": r.estimated_step_s,
        "estimated_tokens_per_s": r.estimated_tokens_per_s,
        "estimate_bound": r.estimate_bound,
        "usd_per_million_tokens": r.usd_per_million_tokens(),
    }


def cheapest(
    results: Sequence[SearchResult], *, pricing: str = "on_demand", overrides: dict[str, float] | None = None
) -> dict[str, Any]:
    """The slice and layout with the lowest estimated cost per 1M trained tokens that fits with margin.

    Per slice, its best layout (any base) and cost; a slice whose price is unknown is listed
    with the break-even price below which it would win. ``None`` winner: nothing priced fits.
    """
    from cookbook import core

    rows = []
    for res in results:
        name = res.best()
        if name is None:
            rows.append(
                {
                    "slice": res.slice_name,
                    "layout": None,
                    "why": "no layout fits with margin" if res.reports else "not compiled yet",
                }
            )
            continue
        r = res.reports[name]
        cost = r.usd_per_million_tokens(pricing, overrides)
        at_floor = cost * r.flop_floor_s / r.estimated_step_s if cost is not None else None
        rows.append(
            {
                "slice": res.slice_name,
                "layout": name,
                "estimated_tokens_per_s": r.estimated_tokens_per_s,
                "usd_per_million_tokens": cost,
                "estimate_bound": r.estimate_bound,
                "usd_per_million_tokens_at_floor": at_floor,
                "gib_per_chip": r.total_bytes / 2**30,
            }
        )
    priced = [x for x in rows if x.get("usd_per_million_tokens") is not None]
    winner = min(priced, key=lambda x: x["usd_per_million_tokens"]) if priced else None
    # Where the compiler gives no estimate (libtpu's deviceless cost model answers a negative
    # optimal_seconds for every 31B layout on v5e and v6e), the floor alone sets the figure:
    # 100% of peak there against the compiler's lower figure on v5p. The same comparison at
    # every slice's floor says whether the winner depends on that.
    at_floor = min(priced, key=lambda x: x["usd_per_million_tokens_at_floor"]) if priced else None
    for x in rows:
        if x.get("layout") and x.get("usd_per_million_tokens") is None and winner:
            x["break_even_usd_per_hour"] = winner["usd_per_million_tokens"] * x["estimated_tokens_per_s"] * 3600 / 1e6
            x["why"] = (
                f"price unknown here: it would be cheapest below ${x['break_even_usd_per_hour']:.2f}/h "
                f"(give it: --price tpu-{x['slice']}:{pricing}=USD_PER_HOUR)"
            )
    return {
        "pricing": pricing,
        "winner": winner,
        "winner_at_flop_floor": at_floor and at_floor["slice"],
        "slices": rows,
        "price_source": {x["slice"]: _price_source(core, x["slice"], pricing, overrides) for x in rows},
    }


def _price_source(core, slice_name: str, pricing: str, overrides) -> str:
    try:
        p = core.get_price(core.platform_of_slice(slice_name), pricing, overrides)
    except core.UnknownPriceError:
        return "unknown"
    return f"${p.usd_per_hour:.2f}/h ({p.source}, as of {p.as_of})"


def results_dict(
    results: Sequence[SearchResult],
    *,
    machine: str,
    validation: list[dict[str, Any]] | None = None,
    pricing: str = "on_demand",
    overrides: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The committed form of a search over slices (``benchmarks/results/plan_search_<size>.json``).

    Shaped like ``benchmarks/plan_31b.py``'s file (``results`` by name, ``recommended`` per
    slice), so that everything reading the recommended layout reads this one; plus the
    ranking and what was dropped per slice, the cheapest slice, and the extrapolation check.
    """
    import datetime
    import os

    from cookbook import lora as lora_lib
    from cookbook.fit._plan import compiler_versions

    preset = {r.preset for r in results}
    if len(preset) != 1:
        raise ValueError(f"one preset per results file, got {sorted(preset)}")
    out: dict[str, Any] = {
        "preset": preset.pop(),
        "compiled_on": datetime.date.today().isoformat(),
        "machine": machine,
        "load_average_at_write": os.getloadavg()[0],
        "versions": compiler_versions(),
        # What the cookbook changes in a QLoRA step's program (its quantized rows are stale without it).
        "qlora_step": lora_lib.QLORA_STEP,
        "margin": results[0].margin,
        "basis": "compiler's estimate (cost_analysis optimal_seconds, "
        "never below the FLOP floor); per-chip memory and FLOPs from the TPU compiler, no TPU run",
        "results": {},
        "ranked": {},
        "dropped": {},
        "spaces": {},
        "recommended": {},
    }
    for res in results:
        out["results"].update({n: r.to_dict() for n, r in res.reports.items()})
        out["ranked"][res.slice_name] = res.ranked
        out["dropped"][res.slice_name] = res.rejected()
        out["spaces"][res.slice_name] = [s.to_dict() for s in res.spaces]
        rec = recommended_from(res)
        if rec:
            out["recommended"][res.slice_name] = rec
    out["cheapest"] = cheapest(results, pricing=pricing, overrides=overrides)
    if validation is not None:
        out["validation"] = validation
    return out


def load_search(data: dict[str, Any]) -> list[SearchResult]:
    """The :class:`SearchResult` per slice of a :func:`results_dict` (as committed)."""
    reports = {n: report_from_dict(r) for n, r in data["results"].items()}
    out = []
    for slice_name, spaces in data["spaces"].items():
        mine = {n: r for n, r in reports.items() if r.plan_config.slice_name == slice_name}
        out.append(
            SearchResult(
                preset=data["preset"],
                slice_name=slice_name,
                spaces=tuple(SearchSpace.from_dict(s) for s in spaces),
                reports=mine,
                margin=data["margin"],
            )
        )
    return out


def merge_searches(a: SearchResult, b: SearchResult) -> SearchResult:
    """Two searches of one slice (two spaces) as one ranking."""
    if (a.preset, a.slice_name) != (b.preset, b.slice_name):
        raise ValueError("merge searches of one preset and slice")
    return dataclasses.replace(a, spaces=a.spaces + b.spaces, reports={**a.reports, **b.reports})


def validate_extrapolation(full: PlanReport, extrapolated: PlanReport) -> dict[str, Any]:
    """How far the probe extrapolation lands from a full-depth compile of the same layout."""
    out: dict[str, Any] = {
        "layout": layout_name(full.plan_config, full.fsdp, full.tp),
        "config": full.config,
        "fits_with_margin": {"full": full.fits_with_margin, "extrapolated": extrapolated.fits_with_margin},
    }
    for k in VALIDATED:
        f, e = getattr(full, k), getattr(extrapolated, k)
        out[k] = {"full": f, "extrapolated": e, "relative_error": (e - f) / f if f else None}
    return out


def family_table(presets: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One row per released size and single-host slice, from the committed searches (no compile).

    Per row: whether a bf16 layout fits with margin, the recommended (training) layout and its
    per-chip HBM, FLOPs per token, the compiler's estimate and the CPU time its compiles took
    (wall seconds; a probe-extrapolated layout: both probes); where nothing fits in bf16, what would (a
    QLoRA base that fitted in the same search, remat where none was searched, the slices with
    more HBM per chip where it fits).
    """
    from cookbook import core
    from cookbook.fit._layouts import PLAN_RESULTS, load_plan_results

    rows = []
    for preset in presets or tuple(PLAN_RESULTS):
        data = load_plan_results(preset)
        searches = {r.slice_name: r for r in load_search(data)}
        why = data.get("not_compiled_why") or {}  # what the host that searched could not compile
        hbm = {s: core.get_slice(s).num_devices * core.get_slice(s).chip.device_hbm_bytes for s in searches}
        for s in sorted(searches, key=lambda s: (hbm[s], s)):
            res = searches[s]
            name = res.best(base_only=True)
            compiled = any(r.compiles for r in res.reports.values())
            # fits: None where no layout compiled for the slice (a search stopped for CPU time).
            row: dict[str, Any] = {
                "preset": preset,
                "slice": s,
                "fits": (name is not None) if compiled else None,
                "layouts compiled": sum(r.compiles for r in res.reports.values()),
                "search compile s": round(sum(r.compile_s for r in res.reports.values())),
            }
            if name is not None:
                r = res.reports[name]
                row.update(
                    {
                        "layout": name.split("/", 1)[1],
                        "GiB/chip": round(r.total_bytes / 2**30, 1),
                        "HBM %": round(100 * r.total_bytes / r.hbm_bytes),
                        "GFLOP/token": round(r.step_flops_per_chip * r.chips / r.tokens_per_step / 1e9),
                        "est. tokens/s": round(r.estimated_tokens_per_s),
                        "compile s": round(r.compile_s),
                        "depth": "extrapolated" if r.extrapolated_from else "full",
                    }
                )
            row["what would fit"] = (
                ""
                if name is not None
                else _what_would_fit(res, searches, hbm)
                if compiled
                else "; ".join(
                    [
                        f"not compiled yet{f' ({why[s]})' if s in why else ''}: "
                        f"benchmarks/plan_search.py --preset {preset} --slices {s}",
                        *_refused(res),
                    ]
                )
            )
            rows.append(row)
    return rows


def _refused(res: SearchResult) -> list[str]:
    return [f"{n.split('/', 1)[1]} {r.error.split(':')[0]}" for n, r in res.reports.items() if not r.compiles]


def _what_would_fit(res: SearchResult, searches: dict[str, SearchResult], hbm: dict[str, float]) -> str:
    """For a slice where no bf16 layout fits: the QLoRA layout that did, remat, the slices that fit."""
    compiled = [r for r in res.reports.values() if r.compiles]
    smallest = min(compiled, key=lambda r: r.total_bytes, default=None)
    out = []
    if smallest is not None:
        out.append(
            f"bf16 needs {min((r.total_bytes for r in compiled if not r.plan_config.quantize), default=0) / 2**30:.1f} "
            f"GiB/chip of {smallest.hbm_bytes / 2**30:.1f}"
        )
    if (q := res.best()) is not None:
        r = res.reports[q]
        out.append(f"QLoRA {r.plan_config.quantize}: {r.total_bytes / 2**30:.1f} GiB/chip ({q.split('/', 1)[1]})")
    for r in res.reports.values():  # a QLoRA layout refused (26B-A4B's experts): why, in its first sentence
        if r.plan_config.quantize and not r.compiles and "refused before compiling: " in (r.error or ""):
            out.append(r.error.split("refused before compiling: ", 1)[1].split(". ", 1)[0])
    if not any(r.plan_config.remat != "none" for r in res.reports.values()):
        out.append("remat (not searched here)")
    elsewhere = [s for s in searches if s != res.slice_name and searches[s].best(base_only=True)]
    if elsewhere:
        out.append("bf16 fits on " + ", ".join(sorted(elsewhere, key=lambda s: (hbm[s], s))))
    return "; ".join(out)
