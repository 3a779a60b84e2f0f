"""The training layout the planner recommends per preset and slice: one table, read by everyone.

``benchmarks/plan_search.py`` runs the layout search (``cookbook.fit.search``: candidate
layouts compiled for a TPU slice with no TPU, ranked by the compiler's estimated step time
per trained token among those under :data:`SAFETY_MARGIN` of HBM) on each single-host slice
and writes ``benchmarks/results/plan_search_<size>.json`` with its pick per slice (the
best layout with an unquantized base). That file is the one home of the recommendation:
``cookbook.train.train_preset`` builds its TPU recipes from it (so ``cookbook train
--preset gemma4_31b`` runs the layout that was fit-checked), notebook 04 and ``cookbook
plan --recommended`` show it, and the cost stage prices it. ``plan_31b.json`` keeps the
full-depth compiles the search's extrapolation is checked against.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cookbook import core

SAFETY_MARGIN = 0.80  # a plan "fits with margin" when the per-chip total is under 80% of HBM
# Assumed model-FLOPs utilisation for a predicted speed: a guess, not a measurement, and
# labelled so wherever it is used.
DEFAULT_MFU = 0.40
# Which committed planner file holds each real preset's compiles.
PLAN_RESULTS = {
    "gemma4_31b": "plan_search_31b.json",
    "gemma4_26b_a4b": "plan_search_26b_a4b.json",
    "gemma4_e4b": "plan_search_e4b.json",
    "gemma4_e2b": "plan_search_e2b.json",
}
# Full-depth compiles of a few layouts (benchmarks/plan_31b.py): what the search is checked against.
FULL_DEPTH_RESULTS = {"gemma4_31b": "plan_31b.json"}
# The slice a preset trains on by default: the paper's training slice for 31B; for the other
# sizes, the priced slice whose recommended (bf16) layout is cheapest per trained token in their
# committed search (``recommended_training``).
DEFAULT_TRAINING_SLICE = {"gemma4_31b": "v5p-8"}
# A recommended layout in the training config's field names (``cookbook.train.TrainConfig``;
# batch_size and seq_len are its ``data`` fields); committed files may use the planner's
# first names (fsdp, tp, batch, flash, block).
LAYOUT_KEYS = ("mesh_fsdp", "mesh_tp", "batch_size", "seq_len", "remat", "flash_attention", "flash_block")
_LEGACY_LAYOUT = {
    "fsdp": "mesh_fsdp",
    "tp": "mesh_tp",
    "batch": "batch_size",
    "flash": "flash_attention",
    "block": "flash_block",
}


def plan_results_path(preset_name: str) -> Path:
    """``benchmarks/results/plan_<size>.json`` of a real preset (ValueError if there is none)."""
    if preset_name not in PLAN_RESULTS:
        raise ValueError(
            f"no committed planner results for preset {preset_name!r} (have: "
            f"{', '.join(PLAN_RESULTS)}); compile its layouts with `cookbook plan --preset "
            f"{preset_name} --slice SLICE` first"
        )
    return core.RESULTS_DIR / PLAN_RESULTS[preset_name]


def load_plan_results(preset_name: str = "gemma4_31b") -> dict[str, Any]:
    """The committed planner results of ``preset_name`` (no big compile in CI)."""
    path = plan_results_path(preset_name)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: it is committed with the repository; "
            "run from a checkout, or regenerate it with benchmarks/plan_search.py"
        )
    return json.loads(path.read_text())


def load_full_depth_results(preset_name: str = "gemma4_31b") -> dict[str, Any]:
    """The committed full-depth compiles of ``preset_name`` (what the search's extrapolation is checked on)."""
    if preset_name not in FULL_DEPTH_RESULTS:
        raise ValueError(f"no committed full-depth compiles for preset {preset_name!r}")
    return json.loads((core.RESULTS_DIR / FULL_DEPTH_RESULTS[preset_name]).read_text())


def recommended_training(preset_name: str, slice_name: str | None = None) -> dict[str, Any]:
    """The layout the planner recommends for training ``preset_name`` on ``slice_name``.

    Keys: ``slice``, :data:`LAYOUT_KEYS` (``batch_size`` is global, per micro-step), and
    what the pick was based on (``from``: the compiled report's name, ``hbm_fraction``).
    ``slice_name=None``: the preset's default training slice (:data:`DEFAULT_TRAINING_SLICE`).
    """
    if slice_name is not None and slice_name not in _searched_slices(preset_name):
        return _from_runtimes(preset_name, slice_name)
    data = load_plan_results(preset_name)
    recommended = data.get("recommended") or {}
    if not recommended:
        raise ValueError(
            f"no layout of {preset_name} that fits has been compiled yet ({plan_results_path(preset_name).name} "
            f"recommends none): compile its layout search with `benchmarks/plan_search.py --preset "
            f"{preset_name}` (or check one layout with `cookbook plan --preset {preset_name} --slice SLICE`)"
        )
    slice_name = slice_name or DEFAULT_TRAINING_SLICE.get(preset_name) or cheapest_recommended(recommended)
    if slice_name not in recommended:
        row = _runtime_row(preset_name, slice_name)
        if row is not None and row["fits"]:  # the search could not compile it here; the runtimes table did
            return _from_runtimes(preset_name, slice_name)
        raise ValueError(
            f"the committed plans for {preset_name} recommend no layout for slice {slice_name!r} "
            f"(they cover: {', '.join(recommended) or 'none'})"
        )
    rec = {_LEGACY_LAYOUT.get(k, k): v for k, v in recommended[slice_name].items()}
    missing = [k for k in LAYOUT_KEYS if k not in rec]
    if missing:
        raise ValueError(f"{plan_results_path(preset_name)}: the {slice_name} recommendation lacks {missing}")
    report = (data.get("results") or {}).get(rec.get("from"), {})
    return {
        "slice": slice_name,
        **{k: rec[k] for k in LAYOUT_KEYS},
        "quantize": None,  # the search recommends a bf16 base
        "from": rec.get("from"),
        "hbm_fraction": rec.get("hbm_fraction"),
        "gib_per_chip": report["total_bytes"] / 2**30 if "total_bytes" in report else None,
    }


def _searched_slices(preset_name: str) -> set[str]:
    """The slices the layout search covered for ``preset_name`` (none for a size it never ran on)."""
    if preset_name not in PLAN_RESULTS:
        return set()
    return set(load_plan_results(preset_name).get("spaces") or {})


def _runtime_row(preset_name: str, slice_name: str) -> dict[str, Any] | None:
    from cookbook.fit._runtimes import runtime_cell

    return runtime_cell(preset_name, slice_name)


def _from_runtimes(preset_name: str, slice_name: str) -> dict[str, Any]:
    """A slice the layout search did not cover (one chip, Ironwood, 12B), or covered and could not
    compile here (E2B's 8-chip slices): the runtimes table's cell."""
    from cookbook.fit._runtimes import RUNTIMES_FILE

    core.get_slice(slice_name)  # ValueError naming the known slices
    row = _runtime_row(preset_name, slice_name)
    if row is None or row["fits"] is None:
        raise ValueError(
            f"no compiled layout of {preset_name} for slice {slice_name!r} yet (not in the layout search nor in "
            f"{RUNTIMES_FILE}): compile it with `benchmarks/runtimes.py --cells {preset_name}/{slice_name}` "
            f"(or check one layout with `cookbook plan --preset {preset_name} --slice {slice_name}`)"
        )
    if not row["fits"]:
        need = (
            f"its smallest compiled layout ({row.get('quantize') or 'bf16'} base) needs {row['gib_per_chip']:.1f} GiB "
            f"per device of {row['hbm_gib_per_device']:.2f} usable (80% margin)"
            if "gib_per_chip" in row
            else f"its lowered step's arguments alone need {min(row['argument_floor_gib'].values()):.1f} GiB per "
            f"device of {row['hbm_gib_per_device']:.2f}, on every base"
            if "argument_floor_gib" in row
            else f"the TPU compiler ran out of its {row['hbm_gib_per_device']:.2f} GiB of HBM on every layout tried"
        )
        raise ValueError(
            f"{preset_name} does not train with LoRA on {slice_name} ({RUNTIMES_FILE}): {need}; use a smaller "
            "size or a bigger slice"
        )
    return {
        "slice": slice_name,
        **{k: row[k] for k in LAYOUT_KEYS},
        "quantize": row["quantize"],
        "from": f"{RUNTIMES_FILE}: {row['layout']}",
        "hbm_fraction": row["hbm_fraction"],
        "gib_per_chip": row["gib_per_chip"],
    }


def cheapest_recommended(recommended: dict[str, dict[str, Any]]) -> str | None:
    """The priced slice whose recommendation costs least per trained token (fewer chips on a tie)."""
    priced = [s for s, r in recommended.items() if r.get("usd_per_million_tokens") is not None]
    return min(
        priced,
        key=lambda s: (round(recommended[s]["usd_per_million_tokens"], 6), core.get_slice(s).num_chips, s),
        default=None,
    )


def recommended_table(preset_name: str = "gemma4_31b") -> list[dict[str, Any]]:
    """Every slice's recommendation for ``preset_name``, with what it was picked on (for notebook 04)."""
    data = load_plan_results(preset_name)
    rows = []
    for slice_name, rec in (data.get("recommended") or {}).items():
        layout = recommended_training(preset_name, slice_name)
        rows.append(
            {
                **layout,
                **{
                    k: rec.get(k)
                    for k in (
                        "flops_per_token",
                        "floor_step_s",
                        "floor_tokens_per_s",
                        "estimated_step_s",
                        "estimated_tokens_per_s",
                        "estimate_bound",
                        "usd_per_million_tokens",
                    )
                },
            }
        )
    return rows
