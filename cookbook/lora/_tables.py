"""Notebook 02's tables and plots: names per projection, the K = V trap side by side, parameter counts."""

from __future__ import annotations

from typing import Any

from cookbook import models
from cookbook.lora._apply import (
    abstract_lora_model,
    abstract_qwix_model,
    count_lora_params,
    coverage_of_model,
    expected_lora_params,
    kv_shared_a_params,
    peft_lora_params,
    peft_trainable_params,
    tunix_weight_paths,
)
from cookbook.lora._config import LoraConfig
from cookbook.lora._names import HF_PROJECTIONS
from cookbook.lora._targets import coverage_by_kind, coverage_matrix, projections


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


def k_equals_v_trap(
    preset: str | models.ModelPreset, naive_module_path: str, *, rank: int, alpha: float
) -> dict[str, Any]:
    """The naive Qwix regex against the cookbook's targets on abstract models of ``preset``.

    Returns the coverage rows and per-kind summary of each, how many global (K = V) layers
    got a K adapter, and the LoRA parameter counts: what Qwix really created, not a regex
    evaluated on names.
    """
    p = models.get_preset(preset)
    naive = abstract_qwix_model(p, naive_module_path, rank=rank, alpha=alpha)
    fixed = abstract_lora_model(p, LoraConfig(rank=rank, alpha=alpha, targets=HF_PROJECTIONS))
    naive_rows, fixed_rows = coverage_of_model(naive, p), coverage_of_model(fixed, p)

    def global_k(rows):
        return sum(1 for r in rows if r["kind"] == "global" and r["k_proj"])

    return {
        "naive_rows": naive_rows,
        "fixed_rows": fixed_rows,
        "naive_by_kind": coverage_by_kind(naive_rows),
        "fixed_by_kind": coverage_by_kind(fixed_rows),
        "naive_global_k_adapted": global_k(naive_rows),
        "fixed_global_k_adapted": global_k(fixed_rows),
        "global_layers": len(p.global_layers),
        "naive_lora_params": count_lora_params(naive),
        "fixed_lora_params": count_lora_params(fixed),
    }


def plot_coverage(trap: dict[str, Any], naive_label: str, preset_name: str):
    """Layers x projections, naive regex beside the cookbook's: adapted, missing, absent."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    cmap = ListedColormap(["#dddddd", "#d62728", "#2ca02c"])  # absent, not adapted, adapted
    fig, axes = plt.subplots(1, 2, figsize=(10, 6), sharey=True)
    label = naive_label if len(naive_label) < 40 else naive_label[:37] + "..."
    for ax, rows, title in (
        (axes[0], trap["naive_rows"], f"naive: {label}"),
        (axes[1], trap["fixed_rows"], "cookbook.lora.qwix_module_path"),
    ):
        ax.imshow(coverage_matrix(rows), aspect="auto", cmap=cmap, vmin=-1, vmax=1, interpolation="none")
        ax.set_xticks(range(len(HF_PROJECTIONS)), [h.removesuffix("_proj") for h in HF_PROJECTIONS])
        ax.set_title(title, fontsize=9)
    axes[0].set_ylabel(f"{preset_name} layer (global every 6th)")
    fig.suptitle("LoRA adapters: green adapted, red missing, grey no such projection (v on K = V layers)")
    fig.tight_layout()
    return fig


def lora_param_counts(preset: str | models.ModelPreset, lora: LoraConfig) -> dict[str, Any]:
    """LoRA parameters of ``lora`` on ``preset``: Qwix and PEFT, each measured and expected."""
    p = models.get_preset(preset)
    counts = {
        "qwix_measured": count_lora_params(abstract_lora_model(p, lora)),
        "qwix_expected": expected_lora_params(p, lora),
        "peft_measured": peft_trainable_params(p, lora),
        "peft_expected": peft_lora_params(p, lora),
        "kv_shared_a": kv_shared_a_params(p, lora),
        "base_params": p.num_params(),
    }
    counts["trainable_fraction"] = counts["qwix_measured"] / counts["base_params"]
    return counts
