"""Notebook 02's steps: names per projection, PEFT targets to Qwix and back, refusals, the K = V trap side by side."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from cookbook import models
from cookbook.lora._apply import (
    abstract_lora_model,
    abstract_qwix_model,
    count_lora_params,
    coverage_of_model,
    tunix_weight_paths,
)
from cookbook.lora._config import LoraConfig, LoraCoverageError
from cookbook.lora._names import HF_PROJECTIONS
from cookbook.lora._targets import (
    check_module_path,
    coverage_by_kind,
    coverage_matrix,
    hf_target_modules,
    projections,
    qwix_module_path,
)


def projection_table(preset: str | models.ModelPreset, layers: set[int] | None = None) -> list[dict[str, Any]]:
    """PEFT name, Tunix path and shapes of every projection on ``layers`` (default: the first
    sliding and the first global layer)."""
    p = models.get_preset(preset)
    shapes = dict(tunix_weight_paths(p.name))
    if layers is None:
        layers = {p.sliding_layers[0], p.global_layers[0]} if p.global_layers else {0}
    return [
        {
            "layer": pr.layer,
            "kind": pr.kind,
            "PEFT": " + ".join(pr.hf_names),
            "Tunix (Qwix path)": pr.tunix_path,
            "Tunix weight shape": shapes[pr.tunix_path],
            "in": pr.in_features,
            "out per PEFT module": pr.out_features,
        }
        for pr in projections(p)
        if pr.layer in layers
    ]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TargetTranslation:
    """PEFT targets, the Qwix ``module_path`` that adapts the same weights, and the PEFT targets it reads back as."""

    preset: str
    targets: tuple[str, ...] | str  # as PEFT's target_modules takes them
    module_path: str  # qwix_module_path's regex
    hf_targets_back: list[str]  # hf_target_modules of that regex: a round trip

    def describe(self) -> str:
        return (
            f"PEFT targets : {self.targets}\nQwix path    : {self.module_path}\nback to PEFT : {self.hf_targets_back}"
        )

    def results(self) -> dict[str, Any]:
        """What notebook 02 records of the translation."""
        return {
            "preset": self.preset,
            "targets": self.targets,
            "module_path": self.module_path,
            "hf_targets_back": self.hf_targets_back,
        }


def translate_targets(lora: LoraConfig, preset: str | models.ModelPreset) -> TargetTranslation:
    """``lora``'s targets as a Qwix ``module_path`` on ``preset`` (:func:`qwix_module_path`), and back.

    The reverse (:func:`hf_target_modules`) is what an adapter exported from Tunix names as its
    ``target_modules``; that it gives the targets again checks the translation both ways.
    """
    p = models.get_preset(preset)
    module_path = qwix_module_path(lora, p)
    return TargetTranslation(
        preset=p.name, targets=lora.targets, module_path=module_path, hf_targets_back=hf_target_modules(module_path, p)
    )


def module_path_refusal(module_path: str, preset: str | models.ModelPreset) -> str:
    """Why :func:`check_module_path` refuses the Qwix regex ``module_path`` on ``preset``; "" if it covers.

    For showing the refusal (a regex that leaves some layers' K/V without LoRA) as text.
    """
    try:
        check_module_path(module_path, preset)
    except LoraCoverageError as err:
        return str(err)
    return ""


def targets_refusal(targets: Sequence[str] | str, preset: str | models.ModelPreset) -> str:
    """Why :func:`qwix_module_path` refuses PEFT ``targets`` on ``preset``; "" if it takes them.

    For showing a refusal as text, e.g. targets that name the experts of 26B-A4B, which Qwix's
    LoRA cannot reach.
    """
    try:
        qwix_module_path(targets, preset)
    except (LoraCoverageError, ValueError) as err:
        return str(err)
    return ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class KEqualsVTrap:
    """A naive Qwix regex against the cookbook's translation of the seven PEFT names, on one preset.

    What Qwix really created on the abstract model after applying each, not a regex evaluated on
    names: per-layer coverage rows, their per-kind summary (``"adapted/present"``), how many
    global (K = V) layers got a K adapter, and the LoRA parameter counts.
    """

    preset: str
    module_path: str  # the naive regex
    error: str  # module_path_refusal of the naive regex ("" if the cookbook accepts it)
    naive_rows: list[dict[str, Any]]
    fixed_rows: list[dict[str, Any]]
    naive_by_kind: dict[str, dict[str, str]]
    fixed_by_kind: dict[str, dict[str, str]]
    naive_global_k_adapted: int
    fixed_global_k_adapted: int
    global_layers: int
    naive_lora_params: int
    fixed_lora_params: int

    def summary(self) -> dict[str, Any]:
        """Everything but the error and the per-layer rows: what notebook 02 records beside the error."""
        skip = {"preset", "module_path", "error", "naive_rows", "fixed_rows"}
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in skip}

    def by_kind_table(self) -> list[dict[str, str]]:
        """One row per regex and layer kind: ``"adapted/present"`` for each projection."""
        return [
            {"regex": label, "kind": kind, **cells}
            for label, by_kind in (("naive regex", self.naive_by_kind), ("cookbook", self.fixed_by_kind))
            for kind, cells in by_kind.items()
        ]

    def describe(self) -> str:
        return "\n".join(
            f"{label}: K adapted on {k} of {self.global_layers} global layers, {params:,} LoRA parameters"
            for label, k, params in (
                ("naive regex", self.naive_global_k_adapted, self.naive_lora_params),
                ("cookbook   ", self.fixed_global_k_adapted, self.fixed_lora_params),
            )
        )

    def results(self) -> dict[str, Any]:
        """What notebook 02 records of the trap."""
        return {"trap_preset": self.preset, "trap": {"error": self.error, **self.summary()}}


def k_equals_v_trap(
    preset: str | models.ModelPreset, naive_module_path: str, *, rank: int, alpha: float
) -> KEqualsVTrap:
    """The naive Qwix regex against the cookbook's targets on abstract models of ``preset`` (no weights)."""
    p = models.get_preset(preset)
    naive = abstract_qwix_model(p, naive_module_path, rank=rank, alpha=alpha)
    fixed = abstract_lora_model(p, LoraConfig(rank=rank, alpha=alpha, targets=HF_PROJECTIONS))
    naive_rows, fixed_rows = coverage_of_model(naive, p), coverage_of_model(fixed, p)

    def global_k(rows):
        return sum(1 for r in rows if r["kind"] == "global" and r["k_proj"])

    return KEqualsVTrap(
        preset=preset if isinstance(preset, str) else p.name,
        module_path=naive_module_path,
        error=module_path_refusal(naive_module_path, p),
        naive_rows=naive_rows,
        fixed_rows=fixed_rows,
        naive_by_kind=coverage_by_kind(naive_rows),
        fixed_by_kind=coverage_by_kind(fixed_rows),
        naive_global_k_adapted=global_k(naive_rows),
        fixed_global_k_adapted=global_k(fixed_rows),
        global_layers=len(p.global_layers),
        naive_lora_params=count_lora_params(naive),
        fixed_lora_params=count_lora_params(fixed),
    )


def plot_coverage(trap: KEqualsVTrap):
    """Layers x projections, naive regex beside the cookbook's: adapted, missing, absent."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    cmap = ListedColormap(["#dddddd", "#d62728", "#2ca02c"])  # absent, not adapted, adapted
    fig, axes = plt.subplots(1, 2, figsize=(10, 6), sharey=True)
    label = trap.module_path if len(trap.module_path) < 40 else trap.module_path[:37] + "..."
    for ax, rows, title in (
        (axes[0], trap.naive_rows, f"naive: {label}"),
        (axes[1], trap.fixed_rows, "cookbook.lora.qwix_module_path"),
    ):
        ax.imshow(coverage_matrix(rows), aspect="auto", cmap=cmap, vmin=-1, vmax=1, interpolation="none")
        ax.set_xticks(range(len(HF_PROJECTIONS)), [h.removesuffix("_proj") for h in HF_PROJECTIONS])
        ax.set_title(title, fontsize=9)
    axes[0].set_ylabel(f"{trap.preset} layer (global every 6th)")
    fig.suptitle("LoRA adapters: green adapted, red missing, grey no such projection (v on K = V layers)")
    fig.tight_layout()
    return fig
