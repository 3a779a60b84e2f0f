"""PEFT target names <-> Qwix module paths, and whether a selection covers every layer.

Qwix selects modules with a regex over ``layers/3/attn/q_einsum`` style paths; PEFT with
module names. This module translates both ways and checks that a selection adapts each
projection on every layer that has it (the 31B trap: ``.*kv_einsum`` silently skips the
K = V global layers, whose K/V live in ``attn/k_einsum``). Hand-written: neither Qwix nor
Tunix maps PEFT's names.

The whole Gemma 4 family, and what each structure decides:

* E2B/E4B KV-shared layers (the trailing ``num_kv_shared_layers``) have no K/V projection of
  their own: transformers builds no ``k_proj``/``v_proj`` there (PEFT's ``k_proj`` target finds
  no module on them), Tunix never calls their ``kv_einsum`` (zero-filled, unused; Qwix creates
  no adapter on a weight that is not used). So K/V of those layers are *absent* here, like
  ``v_proj`` on K = V layers: never adapted, never reported as missed, no PEFT tensor.
* E2B/E4B per-layer-input projections (``per_layer_input_gate``, ``per_layer_projection`` per
  layer, ``per_layer_model_projection`` once) are ``nn.Linear`` in transformers, so PEFT's
  ``"all-linear"`` adapts them; the cookbook's ``"all-linear"`` does too, so both frameworks
  train the same weights. Named targets (the default seven) leave them alone, as in PEFT.
* 26B-A4B: ``"all-linear"`` is attention, the dense MLP branch and the router's ``proj`` (an
  ``nn.Linear``, which PEFT's ``"all-linear"`` adapts). The experts are NOT included, in either
  framework: transformers holds them as fused 3-D parameters (``experts.gate_up_proj``,
  ``experts.down_proj``) that PEFT reaches only through ``target_parameters``, and Tunix runs
  them with ``jax.lax.ragged_dot``, which Qwix's LoRA does not intercept. Targets naming the
  experts are refused (:func:`qwix_module_path`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from cookbook import models
from cookbook.lora._config import LoraConfig, LoraCoverageError
from cookbook.lora._names import (
    ALL_HF_PROJECTIONS,
    ALL_LINEAR,
    HF_MODULE,
    HF_PROJECTIONS,
    TUNIX_TO_HF_ALL,
)

# Names of the MoE experts' module and fused parameters in transformers.
_EXPERT_NAMES = ("experts", "experts.gate_up_proj", "experts.down_proj", "gate_up_proj")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Projection:
    """One weight LoRA can adapt, with both frameworks' names."""

    layer: int | None  # None: a model-level weight (E2B/E4B ``per_layer_model_projection``)
    kind: str  # "sliding" | "global" | "model"
    tunix_path: str  # e.g. "layers/5/attn/k_einsum", "embedder/per_layer_model_projection"
    hf_names: tuple[str, ...]  # HF projections held by this weight
    in_features: int
    out_features: int  # per HF projection


def projections(preset: str | models.ModelPreset) -> list[Projection]:
    """Every adaptable weight of ``preset``'s decoder, layer by layer (from its shapes).

    K/V of KV-shared layers are left out (no such weight in transformers, unused in Tunix); a
    MoE preset's experts are left out (see the module docstring); a model-level weight comes last.
    """
    p = models.get_preset(preset)
    d, f, n, pl = p.embed_dim, p.hidden_dim, p.num_heads, p.per_layer_input_dim
    out: list[Projection] = []

    def add(layer, kind, leaf, fan_in, fan_out):
        path = f"layers/{layer}/{leaf}" if layer is not None else leaf
        out.append(
            Projection(
                layer=layer,
                kind=kind,
                tunix_path=path,
                hf_names=TUNIX_TO_HF_ALL[leaf],
                in_features=fan_in,
                out_features=fan_out,
            )
        )

    for i, kind in enumerate(p.layer_kinds):
        hd = p.global_head_dim if kind == "global" else p.head_dim
        kv = p.effective_global_kv_heads if kind == "global" else p.num_kv_heads
        k_eq_v = kind == "global" and p.k_eq_v_global
        shared = i >= p.first_kv_shared_layer
        width = f * (2 if p.double_wide_mlp and shared else 1)
        add(i, kind, "attn/q_einsum", d, n * hd)
        if not shared:
            add(i, kind, "attn/k_einsum" if k_eq_v else "attn/kv_einsum", d, kv * hd)
        add(i, kind, "attn/attn_vec_einsum", n * hd, d)
        add(i, kind, "mlp/gate_proj", d, width)
        add(i, kind, "mlp/up_proj", d, width)
        add(i, kind, "mlp/down_proj", width, d)
        if pl:
            add(i, kind, "per_layer_input_gate", d, pl)
            add(i, kind, "per_layer_projection", pl, d)
        if p.is_moe:
            add(i, kind, "moe", d, p.num_experts)
    if pl:
        add(None, "model", "embedder/per_layer_model_projection", d, p.num_layers * pl)
    return out


def _hf_names(pr: Projection, h: str) -> tuple[str, str]:
    """The HF module name of projection ``h`` of ``pr`` in the text and the multimodal layout."""
    tail = HF_MODULE[h] if pr.layer is None else f"layers.{pr.layer}.{HF_MODULE[h]}"
    return f"model.{tail}", f"model.language_model.{tail}"


def hf_module_names(preset: str | models.ModelPreset, prefix: str = "model.") -> list[str]:
    """PEFT module names of every adaptable projection (``model.layers.3.self_attn.q_proj``)."""
    return [_hf_names(pr, h)[0].replace("model.", prefix, 1) for pr in projections(preset) for h in pr.hf_names]


def _split_leaf(path: str) -> tuple[int | None, str]:
    m = re.fullmatch(r"layers/(\d+)/(.+)", path)
    return (int(m.group(1)), m.group(2)) if m else (None, path)


def _columns(preset: models.ModelPreset) -> list[str]:
    """The HF projections ``preset`` has somewhere, in table order."""
    present = {h for pr in projections(preset) for h in pr.hf_names}
    return [h for h in ALL_HF_PROJECTIONS if h in present]


def _refuse_experts(targets: Sequence[str] | str, preset: models.ModelPreset) -> None:
    """LoRA on the MoE experts: one clear refusal, naming what is missing and what to use."""
    if not preset.is_moe:
        return
    layers = range(preset.num_layers)
    expert_modules = [f"{pre}layers.{i}.experts" for i in layers for pre in ("model.", "model.language_model.")]
    if isinstance(targets, str):
        if targets == ALL_LINEAR:
            return
        try:
            rx = re.compile(targets)
        except re.error:
            return  # reported by _hf_selected
        hit = any(
            rx.fullmatch(n) or rx.fullmatch(n + ".gate_up_proj") or rx.fullmatch(n + ".down_proj")
            for n in expert_modules
        )
    else:
        hit = any(
            t in _EXPERT_NAMES or t.endswith((".experts", ".experts.gate_up_proj", ".experts.down_proj"))
            for t in targets
        )
    if hit:
        raise LoraCoverageError(
            f"LoRA targets {targets!r} name the MoE experts of preset {preset.name!r}, which cookbook.lora does "
            "not adapt: transformers holds them as fused 3-D parameters (experts.gate_up_proj, "
            "experts.down_proj) that PEFT reaches only through target_parameters, and Tunix runs them with "
            "jax.lax.ragged_dot, which Qwix's LoRA does not intercept (qwix 0.1.8 LoraProvider: dot_general, "
            "einsum, conv only). Adapt attention, the dense MLP beside the experts ('gate_proj', 'up_proj', "
            "'down_proj') and the router ('router.proj'): targets='all-linear' does all of that."
        )


def _hf_selected(targets: Sequence[str] | str, preset: models.ModelPreset) -> set[tuple[int | None, str]]:
    """(layer, hf projection) pairs that PEFT would adapt for ``targets`` (layer None: model level)."""
    _refuse_experts(targets, preset)
    prs = projections(preset)
    named = [(pr.layer, h, _hf_names(pr, h)) for pr in prs for h in pr.hf_names]

    if isinstance(targets, str):
        if targets == ALL_LINEAR:
            return {(i, h) for i, h, _ in named}
        try:
            rx = re.compile(targets)
        except re.error as e:
            raise ValueError(f"LoRA target regex {targets!r} does not compile: {e}") from e
        return {(i, h) for i, h, names in named if any(rx.fullmatch(n) for n in names)}

    def hits(t: str, names: tuple[str, ...]) -> bool:
        return any(n == t or n.endswith("." + t) for n in names)

    unknown = [t for t in targets if not any(hits(t, names) for _, _, names in named)]
    if unknown:
        raise LoraCoverageError(
            f"LoRA targets {unknown} match no projection of preset {preset.name!r}. Use names from "
            f"{_columns(preset)}, 'all-linear', or a regex string over names such as "
            f"'model.layers.0.self_attn.q_proj'."
        )
    return {(i, h) for i, h, names in named if any(hits(t, names) for t in targets)}


def _coverage_check(
    selected_hf: set[tuple[int | None, str]], preset: models.ModelPreset, what: str, allow_partial: bool
) -> None:
    if not selected_hf:
        raise LoraCoverageError(
            f"{what} matches no projection of preset {preset.name!r}: LoRA would train nothing. "
            f"Adaptable modules look like 'layers/0/attn/q_einsum' (Tunix) or "
            f"'model.layers.0.self_attn.q_proj' (PEFT)."
        )
    if allow_partial:
        return
    exists: dict[str, set[int | None]] = {}
    for pr in projections(preset):
        for h in pr.hf_names:
            exists.setdefault(h, set()).add(pr.layer)
    problems = []
    for h, layers in exists.items():
        got = {i for i, hh in selected_hf if hh == h}
        if got and got != layers:
            missing = sorted(layers - got)
            msg = f"{h} is adapted on {len(got)} of {len(layers)} layers (missing: {missing})"
            if h in ("k_proj", "v_proj") and set(missing) <= set(preset.global_layers) and preset.k_eq_v_global:
                msg += (
                    ": the missing layers are the global layers, where K = V and Tunix holds the "
                    "single K/V projection in attn.k_einsum, not attn.kv_einsum; a regex such as "
                    "'.*kv_einsum' skips them. Match '.*(kv_einsum|k_einsum)', or build the "
                    "path with cookbook.lora.qwix_module_path(('k_proj', 'v_proj'), preset)"
                )
            problems.append(msg)
    if problems:
        raise LoraCoverageError(
            f"{what} covers only some layers of preset {preset.name!r}: "
            + "; ".join(problems)
            + ". Pass allow_partial=True if that is intended."
        )


def _compact_regex(paths: set[str], preset: models.ModelPreset) -> str:
    """A readable regex that fully matches exactly ``paths`` among the preset's weights."""
    where: dict[str, set[int | None]] = {}
    for pr in projections(preset):
        where.setdefault(_split_leaf(pr.tunix_path)[1], set()).add(pr.layer)
    chosen: dict[str, set[int | None]] = {}
    for path in paths:
        i, leaf = _split_leaf(path)
        chosen.setdefault(leaf, set()).add(i)
    by_layers: dict[str, list[str]] = {}
    roots = []
    for leaf in TUNIX_TO_HF_ALL:  # canonical order
        if leaf not in chosen:
            continue
        if chosen[leaf] == {None}:  # a model-level weight: its own path
            roots.append(re.escape(leaf))
            continue
        layers = chosen[leaf]
        # Tunix keeps (unused) K/V modules on KV-shared layers: name the layers rather than rely on
        # Qwix creating no adapter on a weight Tunix never calls.
        every = layers == where[leaf] and not (leaf.startswith("attn/k") and preset.num_kv_shared_layers)
        pat = r"\d+" if every else "(?:" + "|".join(map(str, sorted(layers))) + ")"
        by_layers.setdefault(pat, []).append(leaf)
    groups = []
    for pat, leaves in by_layers.items():
        parents: dict[str, list[str]] = {}
        for leaf in leaves:
            parent, _, name = leaf.rpartition("/")
            parents.setdefault(parent, []).append(name)
        alts = []
        for parent, ns in parents.items():
            names = f"(?:{'|'.join(ns)})" if len(ns) > 1 else ns[0]
            alts.append(f"{parent}/{names}" if parent else names)
        groups.append(f"layers/{pat}/" + (alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"))
    groups += roots
    return groups[0] if len(groups) == 1 else "|".join(f"(?:{g})" for g in groups)


def qwix_module_path(
    targets: Sequence[str] | str | LoraConfig,
    preset: str | models.ModelPreset,
    *,
    allow_partial: bool = False,
) -> str:
    """The Qwix ``module_path`` regex that adapts what PEFT's ``target_modules`` would.

    ``k_proj`` maps to ``attn/kv_einsum`` on sliding layers and ``attn/k_einsum`` on K = V
    global layers. ``k_proj`` and ``v_proj`` share one Tunix weight on sliding layers, so
    they must be targeted together.

    Raises:
      LoraCoverageError: the targets match nothing, name k_proj without v_proj (or the
        reverse), or adapt a projection on only some layers (unless ``allow_partial``).
    """
    p = models.get_preset(preset)
    if isinstance(targets, LoraConfig):
        targets = targets.targets
    selected = _hf_selected(targets, p)
    _coverage_check(selected, p, f"LoRA targets {targets!r}", allow_partial)
    paths: set[str] = set()
    for pr in projections(p):
        hit = [h for h in pr.hf_names if (pr.layer, h) in selected]
        if not hit:
            continue
        if len(hit) != len(pr.hf_names):
            raise LoraCoverageError(
                f"LoRA targets {targets!r} adapt {hit[0]} but not "
                f"{[h for h in pr.hf_names if h not in hit][0]} on layer {pr.layer}; Tunix holds "
                f"both in one weight ({pr.tunix_path}), so Qwix cannot adapt one alone. Target "
                "k_proj and v_proj together (or neither)."
            )
        paths.add(pr.tunix_path)
    regex = _compact_regex(paths, p)
    matched = {pr.tunix_path for pr in projections(p) if re.fullmatch(regex, pr.tunix_path)}
    assert matched == paths, (regex, sorted(matched ^ paths))
    return regex


def matched_projections(module_path: str, preset: str | models.ModelPreset) -> list[Projection]:
    """The weights a Qwix ``module_path`` regex selects (Qwix fully matches it)."""
    try:
        rx = re.compile(module_path)
    except re.error as e:
        raise ValueError(f"Qwix module_path {module_path!r} does not compile: {e}") from e
    return [pr for pr in projections(preset) if rx.fullmatch(pr.tunix_path)]


def check_module_path(module_path: str, preset: str | models.ModelPreset, *, allow_partial: bool = False) -> None:
    """Raise :class:`LoraCoverageError` if ``module_path`` adapts nothing or only some layers."""
    p = models.get_preset(preset)
    selected = {(pr.layer, h) for pr in matched_projections(module_path, p) for h in pr.hf_names}
    _coverage_check(selected, p, f"Qwix module_path {module_path!r}", allow_partial)


def hf_target_modules(module_path: str, preset: str | models.ModelPreset, *, allow_partial: bool = False) -> list[str]:
    """PEFT ``target_modules`` that adapt what the Qwix ``module_path`` adapts.

    A projection adapted on every layer that has it is named alone (``"q_proj"``,
    ``"router.proj"``, ``"per_layer_model_projection"``); with ``allow_partial`` one adapted on
    some layers is named per layer (``"layers.5.self_attn.k_proj"``, a suffix PEFT matches).
    """
    p = models.get_preset(preset)
    check_module_path(module_path, p, allow_partial=allow_partial)
    selected = {(pr.layer, h) for pr in matched_projections(module_path, p) for h in pr.hf_names}
    exists: dict[str, set[int | None]] = {}
    for pr in projections(p):
        for h in pr.hf_names:
            exists.setdefault(h, set()).add(pr.layer)
    out: list[str] = []
    for h in _columns(p):
        got = {i for i, hh in selected if hh == h}
        if not got:
            continue
        if got == exists[h]:
            out.append(h)
        else:
            out.extend(f"layers.{i}.{HF_MODULE[h]}" for i in sorted(got))
    return out


def coverage_rows(module_path: str, preset: str | models.ModelPreset) -> list[dict[str, Any]]:
    """One row per layer: which HF projections the regex adapts (None: no such projection).

    ``v_proj`` is None on K = V global layers (HF has no ``v_proj`` there; V is computed by
    ``k_proj``, so adapting ``k_proj`` changes V too), and ``k_proj``/``v_proj`` are None on
    KV-shared layers (E2B/E4B). A preset with a model-level weight gets a last row, layer
    ``"model"``.
    """
    p = models.get_preset(preset)
    chosen = {pr.tunix_path for pr in matched_projections(module_path, p)}
    return coverage_rows_for_paths(p, chosen)


def coverage_rows_for_paths(p: models.ModelPreset, adapted_paths: set[str]) -> list[dict[str, Any]]:
    """One row per layer: for each HF projection, adapted (True/False) or absent (None)."""
    columns = _columns(p)
    rows: dict[int | None, dict[str, Any]] = {}
    for pr in projections(p):
        row = rows.setdefault(
            pr.layer,
            {
                "layer": "model" if pr.layer is None else pr.layer,
                "kind": pr.kind,
                **dict.fromkeys(columns),
                "tunix": [],
            },
        )
        for h in pr.hf_names:
            row[h] = pr.tunix_path in adapted_paths
        if pr.tunix_path in adapted_paths:
            row["tunix"].append(_split_leaf(pr.tunix_path)[1])
    return [rows[i] for i in sorted(i for i in rows if i is not None)] + ([rows[None]] if None in rows else [])


def _row_columns(rows: list[dict[str, Any]]) -> list[str]:
    return [k for k in rows[0] if k not in ("layer", "kind", "tunix")] if rows else list(HF_PROJECTIONS)


def lora_targets_by_layer(preset: str | models.ModelPreset, lora: LoraConfig) -> list[dict[str, Any]]:
    """Coverage rows (see :func:`coverage_rows`) for ``lora.targets`` on ``preset``."""
    return coverage_rows(qwix_module_path(lora.targets, preset), preset)


def coverage_by_kind(rows: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Per layer type, ``"adapted/present"`` for each projection, e.g. ``{"global": {"k_proj": "10/10"}}``."""
    out: dict[str, dict[str, str]] = {}
    for kind in sorted({r["kind"] for r in rows}, reverse=True):
        kr = [r for r in rows if r["kind"] == kind]
        out[kind] = {}
        for h in _row_columns(rows):
            present = [r[h] for r in kr if r[h] is not None]
            out[kind][h] = f"{sum(present)}/{len(present)}" if present else "absent"
    return out


# Five-letter column labels of the projections beyond the seven (whose label is the word before "_").
_LABELS = {
    "per_layer_input_gate": "plgat",
    "per_layer_projection": "plprj",
    "per_layer_model_projection": "plmod",
    "router.proj": "routr",
}


def format_coverage(rows: list[dict[str, Any]]) -> str:
    """A plain-text table of coverage rows (``x`` adapted, ``.`` not, ``-`` absent)."""
    columns = _row_columns(rows)
    head = f"{'layer':>5} {'kind':<8} " + " ".join(f"{_LABELS.get(h, h.split('_')[0]):>5}" for h in columns) + "  tunix"
    lines = [head]
    for r in rows:
        cells = " ".join(f"{('-' if r[h] is None else 'x' if r[h] else '.'):>5}" for h in columns)
        lines.append(f"{r['layer']:>5} {r['kind']:<8} {cells}  {','.join(r['tunix'])}")
    return "\n".join(lines)


def coverage_matrix(rows: list[dict[str, Any]]):
    """Layers x projections array for a plot: 1 adapted, 0 not adapted, -1 no such projection."""
    import numpy as np

    return np.array([[-1 if r[h] is None else int(r[h]) for h in _row_columns(rows)] for r in rows], dtype=int)
