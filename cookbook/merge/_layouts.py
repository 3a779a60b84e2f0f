"""Notebook 07's checks and summaries over the layouts one run is merged into, one call each.

The four layouts (merged multimodal shards, merged text-only shards, a PEFT adapter on the base
and one on the text-only base) are compared with the run's own Tunix + LoRA logits at once
(:func:`verify_layouts`); the 31B-width benchmark's extrapolation is summarised for a table.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from cookbook.merge._cache import ensure_text_only_base
from cookbook.merge._checkpoint import open_lora_checkpoint
from cookbook.merge._verify import plot_verification, sample_tokens, tunix_lora_logits, verify_merge

# merge_bench.json's per-run columns, in the order notebook 07 shows them.
BENCH_COLUMNS = (
    "layers",
    "base_bytes",
    "copy_seconds",
    "merge_seconds",
    "merge_over_copy",
    "merge_cpu_seconds",
    "merge_peak_rss_bytes",
    "largest_output_shard_bytes",
    "tunix_seconds",
    "tunix_peak_rss_bytes",
)


@dataclasses.dataclass(frozen=True)
class LayoutCheck:
    """:func:`verify_layouts`' result: each layout's logits against the run's Tunix + LoRA logits."""

    result: dict[str, Any]  # verify_merge's: floor, bound, diffs, per-layout checks, control, ok
    length: int  # tokens per sequence compared

    @property
    def ok(self) -> bool:
        """Every layout within the bound (the control, the base without LoRA, is not one of them)."""
        return self.result["ok"]

    def describe(self) -> str:
        r = self.result
        return (
            f"bound {r['bound_max_abs']:.2e} = 4 x float32 floor {r['floor']['floor_max_abs']:.2e}; "
            f"control (base without LoRA) {r['control_over_bound']:.0f} x the bound"
        )

    def table(self) -> list[dict[str, Any]]:
        """One row per layout and the control: its max |logit difference|, the bound, and whether it is within."""
        cols = ("max_abs_diff", "bound_max_abs", "max_over_bound", "ok")
        return [{"layout": k, **{c: v[c] for c in cols}} for k, v in self.result["checks"].items()]

    def plot(self, ax=None):
        return plot_verification(self.result, ax=ax)

    def results(self) -> dict[str, Any]:
        """What notebook 07 records."""
        r = self.result
        return {
            "logit_max_abs_diff": r["diffs"],
            "parity_bound": r["bound_max_abs"],
            "float32_floor": r["floor"]["floor_max_abs"],
            "control_over_bound": r["control_over_bound"],
            "verify_len": self.length,
        }


def verify_layouts(
    run_dir: str | Path,
    *,
    merged: str | Path,
    text_only: str | Path,
    peft_text: str | Path,
    peft_multimodal: str | Path,
    batch: int = 2,
    length: int = 48,
) -> LayoutCheck:
    """:func:`verify_merge` of every layout of ``run_dir`` against its Tunix + LoRA logits on
    ``batch`` random sequences of ``length`` tokens, with the base without LoRA as the control."""
    ckpt = open_lora_checkpoint(run_dir)
    base_dir = Path(ckpt.base_dir)
    tokens = sample_tokens(ckpt.preset, batch=batch, length=length)
    result = verify_merge(
        tunix_lora_logits(base_dir, run_dir, tokens),
        {
            "merged": (merged, None),
            "merged, text-only": (text_only, None),
            "PEFT on base": (base_dir, peft_multimodal),
            "PEFT on text-only base": (ensure_text_only_base(base_dir, ckpt.preset), peft_text),
        },
        control=(base_dir, None),
        tokens=tokens,
    )
    return LayoutCheck(result, length)


def adapter_summary(peft_dir: str | Path) -> dict[str, Any]:
    """A PEFT adapter's rank, alpha and target modules (its ``adapter_config.json``)."""
    cfg = json.loads((Path(peft_dir) / "adapter_config.json").read_text())
    return {k: cfg[k] for k in ("r", "lora_alpha", "target_modules")}


def extrapolation_summary(extrap: dict[str, Any]) -> dict[str, float]:
    """:func:`extrapolate_merge`'s figures in GB, GiB and minutes (NaN where not measured)."""
    nan = float("nan")
    return {
        "model GB": extrap["model_bytes"] / 1e9,
        "merge minutes (extrapolated)": extrap["merge_seconds"] / 60,
        "plain copy minutes (extrapolated)": extrap["copy_seconds"] / 60,
        "merge CPU minutes (extrapolated)": extrap.get("merge_cpu_seconds", nan) / 60,
        "merge peak RSS GiB": extrap["merge_peak_rss_bytes"] / 2**30,
        "Tunix saver peak RSS GiB (extrapolated)": extrap.get("tunix_peak_rss_bytes", nan) / 2**30,
    }
