"""Notebook 07's steps over the layouts one run is merged into, one call each, each with a typed result.

The run (given, or notebook 06's cached one) and its checkpoint described from metadata
(:func:`inspect_checkpoint`); the merged shards in the released and the text-only layout
(:func:`merged_layout`) and the PEFT adapters (:func:`peft_adapters`), all cached under the run;
the four layouts compared with the run's own Tunix + LoRA logits at once (:func:`verify_layouts`);
the refusals that keep a merge from half-writing (:func:`show_refusals`); and the 31B-width
benchmark with its extrapolation (:func:`load_merge_bench`). Written by hand: they compose this
package's merge, export and checks.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from cookbook import models
from cookbook.merge._cache import ensure_merged, ensure_peft, ensure_text_only_base
from cookbook.merge._checkpoint import LoraCheckpoint, open_lora_checkpoint
from cookbook.merge._merge import merge_lora
from cookbook.merge._verify import (
    checkpoint_table,
    extrapolate_merge,
    plot_bench,
    plot_verification,
    sample_tokens,
    shard_table,
    tunix_lora_logits,
    verify_merge,
)

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


def resolve_run_dir(run_dir: str | Path, preset: str) -> Path:
    """``run_dir`` when given; else the cached run of notebook 06's recipe for ``preset``
    (``cookbook.train.ensure_trained``: trained now if no run is cached)."""
    if run_dir:
        return Path(run_dir)
    from cookbook import train

    return train.ensure_trained(train.train_preset(preset))


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointView:
    """:func:`inspect_checkpoint`'s result: the checkpoint and one row per LoRA pair."""

    checkpoint: LoraCheckpoint
    rows: tuple[dict[str, Any], ...]  # checkpoint_table's
    shown_layers: tuple[int, ...]  # the first layer and the last global (K = V) one

    def describe(self) -> str:
        c = self.checkpoint
        return f"step {c.step}: rank {c.rank}, alpha {c.alpha}, preset {c.preset}, base {c.base_dir}"

    def shown_rows(self) -> list[dict[str, Any]]:
        """The rows of :attr:`shown_layers`: a local layer's adapters and a global layer's."""
        return [r for r in self.rows if r["layer"] in self.shown_layers]

    def results(self) -> dict[str, Any]:
        """What notebook 07 records of the checkpoint."""
        c = self.checkpoint
        return {"preset": c.preset, "rank": c.rank, "alpha": c.alpha, "step": c.step, "lora_pairs": len(c.pairs)}


def inspect_checkpoint(run_dir: str | Path) -> CheckpointView:
    """The run's latest LoRA checkpoint described from metadata alone (no tensor read, no model
    built), with its pairs' Tunix modules, shapes and the Hugging Face weights each updates."""
    ckpt = open_lora_checkpoint(run_dir)
    last_global = max(models.get_preset(ckpt.preset or "").global_layers)
    return CheckpointView(checkpoint=ckpt, rows=tuple(checkpoint_table(ckpt)), shown_layers=(0, last_global))


@dataclasses.dataclass(frozen=True, kw_only=True)
class MergedLayout:
    """:func:`merged_layout`'s result: a merged checkpoint directory and its shards."""

    path: Path
    text_only: bool  # Gemma4ForCausalLM (vLLM on CPU) rather than the released multimodal layout
    shards: tuple[dict[str, Any], ...]  # shard_table's: name, tensors, bytes
    architectures: tuple[str, ...]  # config.json's
    model_type: str

    def describe(self) -> str:
        return f"{self.path} {list(self.architectures)} {self.model_type}"

    def results(self) -> dict[str, Any]:
        """What notebook 07 records: the directory (and, of the released layout, its shards)."""
        if self.text_only:
            return {"text_only_dir": str(self.path)}
        return {
            "merged_dir": str(self.path),
            "num_shards": len(self.shards),
            "largest_shard_bytes": max(int(s["bytes"]) for s in self.shards),
        }


def merged_layout(run_dir: str | Path, *, text_only: bool = False, max_shard_gb: float = 5.0) -> MergedLayout:
    """The run's merged checkpoint (:func:`ensure_merged`: merged once, cached under the run) with
    output shards of at most ``max_shard_gb`` GiB, in the released layout or the text-only one."""
    path = ensure_merged(run_dir, text_only=text_only, max_shard_bytes=int(max_shard_gb * 2**30))
    cfg = json.loads((path / "config.json").read_text())
    return MergedLayout(
        path=path,
        text_only=text_only,
        shards=tuple(shard_table(path)),
        architectures=tuple(cfg.get("architectures") or ()),
        model_type=cfg.get("model_type", ""),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class PeftAdapters:
    """:func:`peft_adapters`' result: the run's adapter in PEFT format, for each base layout."""

    text: Path  # on the text-only base (vLLM on CPU)
    multimodal: Path  # on the released checkpoint

    def results(self) -> dict[str, Any]:
        """What notebook 07 records: both adapters' directories."""
        return {"peft_text_dir": str(self.text), "peft_multimodal_dir": str(self.multimodal)}


def peft_adapters(run_dir: str | Path) -> PeftAdapters:
    """The run's PEFT adapter in the ``text`` and ``multimodal`` layouts (:func:`ensure_peft`:
    exported once, cached under the run)."""
    return PeftAdapters(text=ensure_peft(run_dir, layout="text"), multimodal=ensure_peft(run_dir, layout="multimodal"))


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
    ``batch`` random sequences of ``length`` tokens, with the base without LoRA as the control.

    Raises:
      MergeMismatchError: a layout is off by more than the measured bound, or the control is
        not far enough from the bound to tell merged from unmerged; it names the differences.
    """
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
    check = LayoutCheck(result, length)
    if not check.ok:
        raise MergeMismatchError(
            f"a merged layout misses Tunix + LoRA's logits by more than the bound {result['bound_max_abs']:.2e}, "
            f"or the control (base without LoRA, {result['control_over_bound']:.0f} x the bound) is too close "
            f"to tell merged from unmerged: max |logit difference| {result['diffs']}"
        )
    return check


class MergeMismatchError(AssertionError):
    """A merged layout's logits differ from the run's Tunix + LoRA logits by more than the bound."""


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


# ------------------------------------------------------------------------------------------
# Refusals, and the 31B-width benchmark


@dataclasses.dataclass(frozen=True, kw_only=True)
class Refusals:
    """:func:`show_refusals`' result: what the merge said when it refused."""

    existing_target: str  # merging into a directory that exists
    wrong_rank: str  # opening the checkpoint as another rank than it has

    def describe(self) -> str:
        return f"refused: {self.existing_target}\nrefused: {self.wrong_rank}"


def show_refusals(run_dir: str | Path, merged_dir: str | Path) -> Refusals:
    """Try the two mistakes the merge must refuse before writing: merging again into the existing
    ``merged_dir`` (without ``overwrite``), and opening the run's checkpoint with twice its rank.

    Raises:
      AssertionError: a mistake was not refused (the merge would then half-write or mis-merge).
    """
    ckpt = open_lora_checkpoint(run_dir)
    try:
        merge_lora(ckpt.base_dir, ckpt, merged_dir, progress=False)
    except FileExistsError as e:
        existing = str(e)
    else:
        raise AssertionError(f"merge_lora wrote into the existing {merged_dir} without overwrite=True")
    try:
        open_lora_checkpoint(run_dir, rank=ckpt.rank * 2)
    except ValueError as e:
        wrong_rank = str(e)
    else:
        raise AssertionError(f"open_lora_checkpoint accepted rank {ckpt.rank * 2} for a rank-{ckpt.rank} checkpoint")
    return Refusals(existing_target=existing, wrong_rank=wrong_rank)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MergeBench:
    """:func:`load_merge_bench`'s result: the benchmark's measurements and their extrapolation."""

    bench: dict[str, Any]  # merge_bench.json: "runs" (one per measured layer count), "machine", ...
    extrapolated: dict[str, Any]  # extrapolate_merge's, for the full model

    @property
    def runs(self) -> list[dict[str, Any]]:
        """One row per measured layer count (the columns notebook 07 shows: :data:`BENCH_COLUMNS`)."""
        return self.bench["runs"]

    def plot(self):
        """Peak RSS and time against checkpoint size (:func:`plot_bench`)."""
        return plot_bench(self.bench, self.extrapolated)

    def describe(self) -> str:
        return f"machine: {self.bench['machine']}"

    def results(self) -> dict[str, Any]:
        """What notebook 07 records: the extrapolation to the full model."""
        return {"extrapolated_31b": self.extrapolated}


def load_merge_bench(path: str | Path, preset: str = "gemma4_31b") -> MergeBench:
    """``benchmarks/merge_bench.py``'s JSON at ``path``, extrapolated to ``preset``'s full size
    (:func:`extrapolate_merge`)."""
    bench = json.loads(Path(path).read_text())
    return MergeBench(bench=bench, extrapolated=extrapolate_merge(bench, preset))
