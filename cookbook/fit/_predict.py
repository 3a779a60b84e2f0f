"""Predicted training speed from the planner's compiled FLOPs, labelled as a prediction.

What the TPU compiler says one step costs (``cookbook plan``; committed results under
``benchmarks/results/``) divided by the chips' bf16 peak at an assumed MFU. Read by the
cost stage's predicted row and by the data stage's headroom check (is the host pipeline
faster than the chips consume tokens?). An assumption, not a measurement, until someone
runs it on a TPU.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cookbook import core
from cookbook.fit._layouts import DEFAULT_MFU, plan_results_path, recommended_training
from cookbook.fit._plan_config import LEGACY_NAMES, report_from_dict


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanFigures:
    """What the planner's deviceless compile says about one train step on a slice."""

    preset: str
    platform: str
    tflop_per_chip_per_step: float
    tokens_per_step: int
    peak_hbm_gib_per_chip: float | None = None
    source: str
    # The TPU compiler's own estimate of the step (cost_analysis() "optimal_seconds", never
    # below the FLOP floor); None where the record predates it.
    compiler_step_s: float | None = None


def _is_plan_record(d: Any) -> bool:
    return isinstance(d, dict) and ("flops_per_chip" in d or "tflop_per_chip_per_step" in d or "config" in d)


def _plan_entries(data: Any) -> list[dict[str, Any]]:
    """The plan records in a planner JSON: one record, a list or dict of them, or those under a key."""
    if _is_plan_record(data):
        return [data]
    values = data if isinstance(data, list) else list(data.values()) if isinstance(data, dict) else []
    records = [v for v in values if _is_plan_record(v)]
    if records:
        return records
    for value in values:
        if isinstance(value, list | dict):
            entries = _plan_entries(value)
            if entries:
                return entries
    return []


def _entry_config(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A record's config fields (and its own), in ``PlanConfig``'s names (legacy names read)."""
    merged = {**entry, **(entry.get("config") or {})}
    return {LEGACY_NAMES.get(k, k): v for k, v in merged.items()}


def load_plan_figures(
    path: str | Path | None = None,
    *,
    preset: str = "gemma4_31b",
    slice_name: str = "v5p-8",
    prefer: Mapping[str, Any] | None = None,
) -> PlanFigures | None:
    """The planner's compiled figures for ``preset`` on ``slice_name``, or None if absent.

    Reads what ``cookbook plan --json`` / ``benchmarks/plan_search.py`` write (``PlanReport``
    records: ``flops_per_chip``, ``tokens_per_step``, ``config``). When the file holds
    several configurations, takes the one the planner recommends for training
    (``prefer``, default ``cookbook.fit.recommended_training(preset)``), else the
    compiling one with the fewest FLOPs per token.
    """
    path = Path(path) if path else plan_results_path(preset)
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    # benchmarks/plan_search.py names its pick per slice: {"recommended": {slice: {"from": name}},
    # "results": {name: record}}.
    picked = ((data.get("recommended") or {}).get(slice_name) or {}).get("from") if isinstance(data, dict) else None
    if picked and picked in (data.get("results") or {}) and prefer is None:
        candidates = [data["results"][picked]]
    else:
        candidates = _plan_entries(data)
    entries = [
        e
        for e in candidates
        if e.get("compiles", True)
        and not e.get("crashed")
        and not _entry_config(e).get("num_layers")  # reduced-depth experiments are not 31B
        and _entry_config(e).get("model_preset", preset) == preset
        and str(_entry_config(e).get("slice_name", _entry_config(e).get("slice", slice_name))).removeprefix("tpu-")
        == slice_name
    ]
    if not entries:
        raise ValueError(
            f"{path}: no compiled plan for {preset} on {slice_name}; "
            f"run `cookbook plan --preset {preset} --slice {slice_name} --json {path}`"
        )
    want: Mapping[str, Any] = {LEGACY_NAMES.get(k, k): v for k, v in (prefer or {}).items()}
    if prefer is None:
        try:
            want = recommended_training(preset, slice_name)
        except ValueError:  # no recommendation for this slice: the cheapest compiled plan
            want = {}
    keys = ("batch_size", "seq_len", "remat", "flash_attention", "flash_block")

    def score(e: Mapping[str, Any]) -> tuple[int, float]:
        c = _entry_config(e)
        matches = sum(1 for k in keys if k in want and c.get(k) == want[k])
        return (-matches, float(e.get("flops_per_token") or 0.0))

    entry = min(entries, key=score)
    c = _entry_config(entry)
    if "flops_per_chip" in entry:
        tflop = float(entry["flops_per_chip"]) / 1e12
    elif "tflop_per_chip_per_step" in entry:
        tflop = float(entry["tflop_per_chip_per_step"])
    else:
        raise ValueError(f"{path}: plan record has no flops_per_chip; keys: {', '.join(sorted(entry))}")
    tokens = entry.get("tokens_per_step") or int(c["batch_size"]) * int(c["seq_len"])
    # The splash kernels' FLOPs, which the compiler does not count (cookbook.fit._kernels), and
    # the compiler's own step estimate with them (None where the record predates optimal_seconds).
    compiler_step = None
    if "config" in entry and "compiles" in entry:
        report = report_from_dict(dict(entry))
        tflop += report.kernel_flops_per_chip / 1e12
        compiler_step = report.estimated_step_s if report.has_compiler_estimate and report.peak_flops else None
    total = entry.get("total_bytes")
    layout = ", ".join(f"{k} {c[k]}" for k in keys if k in c)
    return PlanFigures(
        preset=preset,
        platform=f"tpu-{slice_name}",
        tflop_per_chip_per_step=tflop,
        tokens_per_step=int(tokens),
        peak_hbm_gib_per_chip=float(total) / 2**30 if total else None,
        source=f"cookbook plan (deviceless compile; {layout}), {path.name}",
        compiler_step_s=compiler_step,
    )


ESTIMATES = ("compiler", "mfu")  # what sets a predicted step time


def predicted_speed(
    plan: PlanFigures,
    *,
    mfu: float = DEFAULT_MFU,
    real_token_fraction: float = 1.0,
    paper_tokens_per_s: float | None = None,
    estimate: str = "mfu",
) -> dict[str, Any]:
    """Tokens/s for ``plan``, with the step time from ``estimate``:

    - ``"mfu"``: TFLOP per chip per step / (chip peak x ``mfu``), an assumed utilisation;
    - ``"compiler"``: the TPU compiler's own estimate of the step (``plan.compiler_step_s``).

    tokens/s = tokens per step x ``real_token_fraction`` (packing efficiency) / step time.
    With ``paper_tokens_per_s``, also the MFU that measured speed would mean for this step.
    """
    if not 0 < mfu <= 1 or not 0 < real_token_fraction <= 1:
        raise ValueError(f"mfu={mfu} and real_token_fraction={real_token_fraction} must lie in (0, 1]")
    if estimate not in ESTIMATES:
        raise ValueError(f"estimate={estimate!r}: one of {', '.join(ESTIMATES)}")
    chip = core.PLATFORMS[plan.platform]
    peak = chip.peak_bf16_tflops_per_chip
    if estimate == "compiler":
        if not plan.compiler_step_s:
            raise ValueError(
                f"{plan.source} has no compiler estimate (compiled before the planner read "
                "optimal_seconds, or libtpu's deviceless cost model answered a negative one, "
                "as it does for 31B on v5e and v6e): use estimate='mfu'"
            )
        step_s = plan.compiler_step_s
        how = (
            f"step {step_s:.3g} s: the TPU compiler's estimate (cost_analysis optimal_seconds plus the splash "
            f"kernels' FLOPs at peak, never below the FLOP floor; {plan.tflop_per_chip_per_step / (step_s * peak):.0%}"
            " of bf16 peak), not a measurement"
        )
    else:
        step_s = plan.tflop_per_chip_per_step / (peak * mfu)
        how = f"MFU {mfu:.0%} of {peak:.0f} TFLOP/s bf16 peak per chip (assumed)"
    implied = (
        None
        if paper_tokens_per_s is None
        else (paper_tokens_per_s * plan.tflop_per_chip_per_step / (plan.tokens_per_step * peak))
    )
    return {
        "tokens_per_s": plan.tokens_per_step * real_token_fraction / step_s,
        "step_s": step_s,
        "platform": plan.platform,
        "basis": plan.source,
        "paper_implied_mfu": implied,
        "estimate": estimate,
        "assumptions": [
            f"{plan.tflop_per_chip_per_step:.1f} TFLOP per chip per step of {plan.tokens_per_step} tokens "
            f"(compiled for {plan.platform}, no TPU used: {plan.source})",
            how,
            f"{real_token_fraction:.0%} of each step's tokens are real (packing efficiency)",
        ],
    }


def training_tokens_per_s(preset: str = "gemma4_31b", slice_name: str = "v5p-8") -> dict[str, Any]:
    """Tokens/s the training chips consume: the planner's prediction when its output is on
    disk, else the paper's measured 763 tokens/s."""
    try:
        plan = load_plan_figures(preset=preset, slice_name=slice_name)
    except (ValueError, FileNotFoundError):
        plan = None
    if plan is None:
        return {
            "tokens_per_s": core.PAPER_TRAINING_RUNS["tpu-v5p-8"]["train_tokens_per_s"],
            "basis": "paper's measured tokens/s (planner output not found)",
        }
    speed = predicted_speed(plan)
    return {"tokens_per_s": float(speed["tokens_per_s"]), "basis": str(speed["basis"])}


def paper_speed_in_context(preset: str = "gemma4_31b", slice_name: str = "v5p-8") -> dict[str, Any]:
    """The paper's measured training speed against the compiled step of the recommended layout.

    GFLOP per trained token of the recommended layout (compiled, from the committed plans),
    the chips' compute floor (tokens/s at 100% of bf16 peak), the paper's measured tokens/s
    and the MFU that speed would mean on this layout's FLOPs. The paper's own layout did more
    FLOPs per token (per-decoder remat, dense attention), so its true MFU was higher still.
    """
    plan = load_plan_figures(preset=preset, slice_name=slice_name)
    if plan is None:
        raise FileNotFoundError(f"no committed plans for {preset} on {slice_name}")
    chip = core.PLATFORMS[plan.platform]
    chips = chip.chips
    paper = core.PAPER_TRAINING_RUNS[plan.platform]["train_tokens_per_s"]
    floor = predicted_speed(plan, mfu=1.0, paper_tokens_per_s=paper)
    return {
        "layout": plan.source,
        "gflop_per_token": plan.tflop_per_chip_per_step * 1e3 * chips / plan.tokens_per_step,
        "floor_tokens_per_s": floor["tokens_per_s"],
        "paper_tokens_per_s": paper,
        "paper_mfu_on_this_layout": floor["paper_implied_mfu"],
    }
