"""PEFT target names <-> Qwix module paths, and whether a selection covers every layer.

Qwix selects modules with a regex over ``layers/3/attn/q_einsum`` style paths; PEFT with
module names. This module translates both ways and checks that a selection adapts each
projection on every layer that has it (the 31B trap: ``.*kv_einsum`` silently skips the
K = V global layers, whose K/V live in ``attn/k_einsum``). Hand-written: neither Qwix nor
Tunix maps PEFT's names.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from cookbook import models
from cookbook.lora._config import LoraConfig, LoraCoverageError
from cookbook.lora._names import ALL_LINEAR, HF_PARENT, HF_PROJECTIONS, TUNIX_TO_HF


@dataclasses.dataclass(frozen=True, kw_only=True)
class Projection:
    """One weight LoRA can adapt, with both frameworks' names."""

    layer: int
    kind: str  # "sliding" | "global"
    tunix_path: str  # e.g. "layers/5/attn/k_einsum"
    hf_names: tuple[str, ...]  # HF projections held by this weight
    in_features: int
    out_features: int  # per HF projection


def _check_supported(preset: models.ModelPreset) -> None:
    extra = [what for what, has in (("MoE experts", preset.is_moe), ("per-layer inputs", preset.per_layer_input_dim),
                                    ("KV-shared layers", preset.num_kv_shared_layers)) if has]
    if extra:
        raise ValueError(
            f"cookbook.lora supports dense Gemma 4 decoders (tiny, small, gemma4_31b); preset "
            f"{preset.name!r} has {' and '.join(extra)}, whose LoRA targets are not mapped yet. Its base "
            "loads into Tunix (cookbook.models.load_tunix_model); fine-tune a dense preset meanwhile."
        )


def projections(preset: str | models.ModelPreset) -> list[Projection]:
    """Every adaptable weight of ``preset``'s decoder, layer by layer (from its shapes)."""
    p = models.get_preset(preset)
    _check_supported(p)
    d, f, n = p.embed_dim, p.hidden_dim, p.num_heads
    out: list[Projection] = []
    for i, kind in enumerate(p.layer_kinds):
        hd = p.global_head_dim if kind == "global" else p.head_dim
        kv = p.effective_global_kv_heads if kind == "global" else p.num_kv_heads
        k_eq_v = kind == "global" and p.k_eq_v_global
        rows = [
            ("attn/q_einsum", d, n * hd),
            ("attn/k_einsum" if k_eq_v else "attn/kv_einsum", d, kv * hd),
            ("attn/attn_vec_einsum", n * hd, d),
            ("mlp/gate_proj", d, f),
            ("mlp/up_proj", d, f),
            ("mlp/down_proj", f, d),
        ]
        for leaf, fan_in, fan_out in rows:
            out.append(
                Projection(
                    layer=i,
                    kind=kind,
                    tunix_path=f"layers/{i}/{leaf}",
                    hf_names=TUNIX_TO_HF[leaf],
                    in_features=fan_in,
                    out_features=fan_out,
                )
            )
    return out


def hf_module_names(preset: str | models.ModelPreset, prefix: str = "model.") -> list[str]:
    """PEFT module names of every adaptable projection (``model.layers.3.self_attn.q_proj``)."""
    return [
        f"{prefix}layers.{pr.layer}.{HF_PARENT[h]}.{h}"
        for pr in projections(preset)
        for h in pr.hf_names
    ]


def _split_leaf(path: str) -> tuple[int, str]:
    m = re.fullmatch(r"layers/(\d+)/(.+)", path)
    assert m, path
    return int(m.group(1)), m.group(2)


def _hf_selected(targets: Sequence[str] | str, preset: models.ModelPreset) -> set[tuple[int, str]]:
    """(layer, hf projection) pairs that PEFT would adapt for ``targets``."""
    pairs = [(pr.layer, h) for pr in projections(preset) for h in pr.hf_names]

    def names(layer: int, h: str) -> tuple[str, str]:
        tail = f"layers.{layer}.{HF_PARENT[h]}.{h}"
        return f"model.{tail}", f"model.language_model.{tail}"

    if isinstance(targets, str):
        if targets == ALL_LINEAR:
            return set(pairs)
        try:
            rx = re.compile(targets)
        except re.error as e:
            raise ValueError(f"LoRA target regex {targets!r} does not compile: {e}") from e
        return {(i, h) for i, h in pairs if any(rx.fullmatch(n) for n in names(i, h))}
    unknown = [
        t
        for t in targets
        if not any(n == t or n.endswith("." + t) for i, h in pairs for n in names(i, h))
    ]
    if unknown:
        raise LoraCoverageError(
            f"LoRA targets {unknown} match no projection of preset {preset.name!r}. Use names from "
            f"{list(HF_PROJECTIONS)}, 'all-linear', or a regex string over names such as "
            f"'model.layers.0.self_attn.q_proj'."
        )
    return {
        (i, h)
        for i, h in pairs
        if any(n == t or n.endswith("." + t) for t in targets for n in names(i, h))
    }


def _coverage_check(
    selected_hf: set[tuple[int, str]], preset: models.ModelPreset, what: str, allow_partial: bool
) -> None:
    if not selected_hf:
        raise LoraCoverageError(
            f"{what} matches no projection of preset {preset.name!r}: LoRA would train nothing. "
            f"Adaptable modules look like 'layers/0/attn/q_einsum' (Tunix) or "
            f"'model.layers.0.self_attn.q_proj' (PEFT)."
        )
    if allow_partial:
        return
    exists: dict[str, set[int]] = {}
    for pr in projections(preset):
        for h in pr.hf_names:
            exists.setdefault(h, set()).add(pr.layer)
    problems = []
    for h, layers in exists.items():
        got = {i for i, hh in selected_hf if hh == h}
        if got and got != layers:
            missing = sorted(layers - got)
            msg = f"{h} is adapted on {len(got)} of {len(layers)} layers (missing: {missing})"
            if (
                h in ("k_proj", "v_proj")
                and set(missing) <= set(preset.global_layers)
                and preset.k_eq_v_global
            ):
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
    where: dict[str, set[int]] = {}
    for pr in projections(preset):
        where.setdefault(_split_leaf(pr.tunix_path)[1], set()).add(pr.layer)
    chosen: dict[str, set[int]] = {}
    for path in paths:
        i, leaf = _split_leaf(path)
        chosen.setdefault(leaf, set()).add(i)
    by_layers: dict[str, list[str]] = {}
    for leaf in TUNIX_TO_HF:  # canonical order
        if leaf not in chosen:
            continue
        layers = chosen[leaf]
        pat = r"\d+" if layers == where[leaf] else "(?:" + "|".join(map(str, sorted(layers))) + ")"
        by_layers.setdefault(pat, []).append(leaf)
    groups = []
    for pat, leaves in by_layers.items():
        parents: dict[str, list[str]] = {}
        for leaf in leaves:
            parent, name = leaf.split("/")
            parents.setdefault(parent, []).append(name)
        alts = [
            f"{p}/(?:{'|'.join(ns)})" if len(ns) > 1 else f"{p}/{ns[0]}"
            for p, ns in parents.items()
        ]
        groups.append(
            f"layers/{pat}/" + (alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")")
        )
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


def check_module_path(
    module_path: str, preset: str | models.ModelPreset, *, allow_partial: bool = False
) -> None:
    """Raise :class:`LoraCoverageError` if ``module_path`` adapts nothing or only some layers."""
    p = models.get_preset(preset)
    selected = {(pr.layer, h) for pr in matched_projections(module_path, p) for h in pr.hf_names}
    _coverage_check(selected, p, f"Qwix module_path {module_path!r}", allow_partial)


def hf_target_modules(
    module_path: str, preset: str | models.ModelPreset, *, allow_partial: bool = False
) -> list[str]:
    """PEFT ``target_modules`` that adapt what the Qwix ``module_path`` adapts.

    A projection adapted on every layer is named alone (``"q_proj"``); with
    ``allow_partial`` one adapted on some layers is named per layer
    (``"layers.5.self_attn.k_proj"``, a suffix PEFT matches).
    """
    p = models.get_preset(preset)
    check_module_path(module_path, p, allow_partial=allow_partial)
    selected = {(pr.layer, h) for pr in matched_projections(module_path, p) for h in pr.hf_names}
    exists: dict[str, set[int]] = {}
    for pr in projections(p):
        for h in pr.hf_names:
            exists.setdefault(h, set()).add(pr.layer)
    out: list[str] = []
    for h in HF_PROJECTIONS:
        got = {i for i, hh in selected if hh == h}
        if not got:
            continue
        if got == exists[h]:
            out.append(h)
        else:
            out.extend(f"layers.{i}.{HF_PARENT[h]}.{h}" for i in sorted(got))
    return out


def coverage_rows(module_path: str, preset: str | models.ModelPreset) -> list[dict[str, Any]]:
    """One row per layer: which HF projections the regex adapts (None: no such projection).

    ``v_proj`` is None on K = V global layers (HF has no ``v_proj`` there; V is computed by
    ``k_proj``, so adapting ``k_proj`` changes V too).
    """
    p = models.get_preset(preset)
    chosen = {pr.tunix_path for pr in matched_projections(module_path, p)}
    return coverage_rows_for_paths(p, chosen)


def coverage_rows_for_paths(p: models.ModelPreset, adapted_paths: set[str]) -> list[dict[str, Any]]:
    """One row per layer: for each HF projection, adapted (True/False) or absent (None)."""
    rows: dict[int, dict[str, Any]] = {}
    for pr in projections(p):
        row = rows.setdefault(
            pr.layer,
            {"layer": pr.layer, "kind": pr.kind, **dict.fromkeys(HF_PROJECTIONS), "tunix": []},
        )
        for h in pr.hf_names:
            row[h] = pr.tunix_path in adapted_paths
        if pr.tunix_path in adapted_paths:
            row["tunix"].append(_split_leaf(pr.tunix_path)[1])
    return [rows[i] for i in sorted(rows)]


def lora_targets_by_layer(
    preset: str | models.ModelPreset, lora: LoraConfig
) -> list[dict[str, Any]]:
    """Coverage rows (see :func:`coverage_rows`) for ``lora.targets`` on ``preset``."""
    return coverage_rows(qwix_module_path(lora.targets, preset), preset)


def coverage_by_kind(rows: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Per layer type, ``"adapted/present"`` for each projection, e.g. ``{"global": {"k_proj": "10/10"}}``."""
    out: dict[str, dict[str, str]] = {}
    for kind in sorted({r["kind"] for r in rows}, reverse=True):
        kr = [r for r in rows if r["kind"] == kind]
        out[kind] = {}
        for h in HF_PROJECTIONS:
            present = [r[h] for r in kr if r[h] is not None]
            out[kind][h] = f"{sum(present)}/{len(present)}" if present else "absent"
    return out


def format_coverage(rows: list[dict[str, Any]]) -> str:
    """A plain-text table of coverage rows (``x`` adapted, ``.`` not, ``-`` absent)."""
    head = (
        f"{'layer':>5} {'kind':<8} "
        + " ".join(f"{h.split('_')[0]:>5}" for h in HF_PROJECTIONS)
        + "  tunix"
    )
    lines = [head]
    for r in rows:
        cells = " ".join(
            f"{('-' if r[h] is None else 'x' if r[h] else '.'):>5}" for h in HF_PROJECTIONS
        )
        lines.append(f"{r['layer']:>5} {r['kind']:<8} {cells}  {','.join(r['tunix'])}")
    return "\n".join(lines)


def coverage_matrix(rows: list[dict[str, Any]]):
    """Layers x projections array for a plot: 1 adapted, 0 not adapted, -1 no such projection."""
    import numpy as np

    return np.array(
        [[-1 if r[h] is None else int(r[h]) for h in HF_PROJECTIONS] for r in rows], dtype=int
    )
