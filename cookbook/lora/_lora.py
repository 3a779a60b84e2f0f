"""LoRA on Tunix Gemma 4 with Qwix: PEFT target names <-> Qwix module paths, coverage, counts.

Hugging Face PEFT names the projections of a Gemma 4 decoder layer ``q_proj``, ``k_proj``,
``v_proj``, ``o_proj``, ``gate_proj``, ``up_proj``, ``down_proj``; Tunix names the modules
that hold the same weights ``attn/q_einsum``, ``attn/kv_einsum`` (K and V stacked),
``attn/k_einsum`` (global layers where K = V), ``attn/attn_vec_einsum`` and
``mlp/{gate,up,down}_proj``; Qwix selects modules with a regex over ``layers/3/attn/q_einsum``
style paths. This module translates both ways, checks that a selection covers every layer
(the 31B trap: ``.*kv_einsum`` silently skips the K = V global layers), applies LoRA with
Qwix with remat switched off while the adapters are created (a remat-wrapped call creates
none), and checks the number of LoRA parameters every time.

Qwix applies LoRA; what is hand-written here is only the name mapping and the checks,
which neither Qwix nor Tunix provides.

Parameter counts differ from PEFT's in one place, by design of Tunix's weights: Tunix
stores K and V of a sliding layer in one ``kv_einsum`` weight, so Qwix gives K and V one
shared LoRA ``A`` (``embed x rank``) where PEFT has two. :func:`expected_lora_params` is the
Qwix count, :func:`peft_lora_params` the PEFT count; they differ by exactly
``embed_dim * rank`` per adapted ``kv_einsum`` (:func:`kv_shared_a_params`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
from collections.abc import Sequence
from typing import Any

from cookbook import core, models

HF_PROJECTIONS: tuple[str, ...] = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)
ALL_LINEAR = "all-linear"

# Tunix module (under layers/<i>/) -> the HF projections whose weights it holds.
TUNIX_TO_HF: dict[str, tuple[str, ...]] = {
    "attn/q_einsum": ("q_proj",),
    "attn/kv_einsum": ("k_proj", "v_proj"),
    "attn/k_einsum": ("k_proj",),  # K = V global layers: V is computed with the same weight
    "attn/attn_vec_einsum": ("o_proj",),
    "mlp/gate_proj": ("gate_proj",),
    "mlp/up_proj": ("up_proj",),
    "mlp/down_proj": ("down_proj",),
}
_HF_PARENT = {
    "q_proj": "self_attn",
    "k_proj": "self_attn",
    "v_proj": "self_attn",
    "o_proj": "self_attn",
    "gate_proj": "mlp",
    "up_proj": "mlp",
    "down_proj": "mlp",
}


class LoraCoverageError(ValueError):
    """A LoRA target selection matches nothing, or only some of the layers."""


class LoraApplicationError(RuntimeError):
    """Qwix created a different number of LoRA parameters than the targets imply."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoraConfig:
    """What to adapt and how.

    ``targets`` takes what PEFT's ``target_modules`` takes: a tuple of projection names
    (``"q_proj"``, ... ``"down_proj"``, or suffixes such as ``"layers.5.self_attn.k_proj"``),
    the string ``"all-linear"``, or a regex string fully matched against module names
    such as ``model.layers.3.self_attn.q_proj``.
    """

    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    targets: tuple[str, ...] | str = HF_PROJECTIONS

    def __post_init__(self) -> None:
        if not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"LoraConfig.rank={self.rank!r}: use a positive integer (e.g. 16)")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoraConfig.dropout={self.dropout!r}: use a value in [0, 1)")
        if isinstance(self.targets, list):
            object.__setattr__(self, "targets", tuple(self.targets))
        if not self.targets:
            raise ValueError("LoraConfig.targets is empty: name projections or use 'all-linear'")

    @property
    def scale(self) -> float:
        """The factor LoRA's update is multiplied by (``alpha / rank``, as PEFT and Qwix)."""
        return self.alpha / self.rank


def parse_targets(text: str) -> tuple[str, ...] | str:
    """Targets from one string (a notebook parameter or a CLI flag), as PEFT reads them.

    ``"all-linear"`` stays; text with regex characters (``*\\()[]|^$+?``) is a regex;
    anything else is a comma-separated list of names: ``"q_proj,v_proj"``.
    """
    text = text.strip()
    if text == ALL_LINEAR or re.search(r"[*\\()\[\]|^$+?]", text):
        return text
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    if not names:
        raise ValueError("no LoRA targets given: name projections, 'all-linear', or a regex")
    return names


# --------------------------------------------------------------------------------------
# The adaptable weights of a preset


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
    if preset.is_moe or preset.per_layer_input_dim or preset.num_kv_shared_layers:
        raise ValueError(
            f"cookbook.lora supports dense Gemma 4 decoders (tiny, small, gemma4_31b); preset "
            f"{preset.name!r} has MoE experts or per-layer inputs / shared KV layers, whose "
            "extra projections are not mapped yet."
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
        f"{prefix}layers.{pr.layer}.{_HF_PARENT[h]}.{h}"
        for pr in projections(preset)
        for h in pr.hf_names
    ]


def _split_leaf(path: str) -> tuple[int, str]:
    m = re.fullmatch(r"layers/(\d+)/(.+)", path)
    assert m, path
    return int(m.group(1)), m.group(2)


# --------------------------------------------------------------------------------------
# HF PEFT targets -> Qwix module_path


def _hf_selected(targets: Sequence[str] | str, preset: models.ModelPreset) -> set[tuple[int, str]]:
    """(layer, hf projection) pairs that PEFT would adapt for ``targets``."""
    pairs = [(pr.layer, h) for pr in projections(preset) for h in pr.hf_names]

    def names(layer: int, h: str) -> tuple[str, str]:
        tail = f"layers.{layer}.{_HF_PARENT[h]}.{h}"
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


# --------------------------------------------------------------------------------------
# Qwix module_path -> HF PEFT targets, and coverage tables


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
            out.extend(f"layers.{i}.{_HF_PARENT[h]}.{h}" for i in sorted(got))
    return out


def coverage_rows(module_path: str, preset: str | models.ModelPreset) -> list[dict[str, Any]]:
    """One row per layer: which HF projections the regex adapts (None: no such projection).

    ``v_proj`` is None on K = V global layers (HF has no ``v_proj`` there; V is computed by
    ``k_proj``, so adapting ``k_proj`` changes V too).
    """
    p = models.get_preset(preset)
    chosen = {pr.tunix_path for pr in matched_projections(module_path, p)}
    return _coverage_rows_for(p, chosen)



def _coverage_rows_for(p: models.ModelPreset, adapted_paths: set[str]) -> list[dict[str, Any]]:
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


def coverage_of_model(model, preset: str | models.ModelPreset) -> list[dict[str, Any]]:
    """Coverage rows read from the LoRA parameters a (possibly abstract) model really has.

    Unlike :func:`coverage_rows`, which evaluates a regex on the preset's layer list, this
    looks at what Qwix created, so it shows exactly what training would update.
    """
    p = models.get_preset(preset)
    adapted = {re.sub(r"/(w|kernel)_lora_[ab]$", "", k) for k in lora_param_shapes(model)}
    return _coverage_rows_for(p, adapted)


def coverage_matrix(rows: list[dict[str, Any]]):
    """Layers x projections array for a plot: 1 adapted, 0 not adapted, -1 no such projection."""
    import numpy as np

    return np.array(
        [[-1 if r[h] is None else int(r[h]) for h in HF_PROJECTIONS] for r in rows], dtype=int
    )


# --------------------------------------------------------------------------------------
# Parameter counts


def _selected_tunix(
    preset: models.ModelPreset, lora: LoraConfig, allow_partial: bool
) -> list[Projection]:
    return matched_projections(
        qwix_module_path(lora.targets, preset, allow_partial=allow_partial), preset
    )


def expected_lora_params(
    preset: str | models.ModelPreset, lora: LoraConfig, *, allow_partial: bool = False
) -> int:
    """LoRA parameters Qwix creates on the Tunix model for ``lora`` (A and B of each weight).

    ``kv_einsum`` (K and V stacked) gets one ``A`` of ``embed x rank`` and a ``B`` of
    ``rank x 2 x kv_heads x head_dim``; every other weight ``rank * (in + out)``.
    """
    p = models.get_preset(preset)
    r = lora.rank
    total = 0
    for pr in _selected_tunix(p, lora, allow_partial):
        total += r * (pr.in_features + len(pr.hf_names) * pr.out_features)
    return total


def peft_lora_params(
    preset: str | models.ModelPreset, lora: LoraConfig, *, allow_partial: bool = False
) -> int:
    """LoRA parameters PEFT creates on the transformers model for the same targets and rank."""
    p = models.get_preset(preset)
    r = lora.rank
    total = 0
    for pr in _selected_tunix(p, lora, allow_partial):
        total += len(pr.hf_names) * r * (pr.in_features + pr.out_features)
    return total


def kv_shared_a_params(
    preset: str | models.ModelPreset, lora: LoraConfig, *, allow_partial: bool = False
) -> int:
    """``peft_lora_params - expected_lora_params``: the second ``A`` PEFT has on each stacked K/V."""
    p = models.get_preset(preset)
    return sum(
        (len(pr.hf_names) - 1) * lora.rank * pr.in_features
        for pr in _selected_tunix(p, lora, allow_partial)
    )


def _shape(var) -> tuple[int, ...]:
    value = var.get_value() if hasattr(var, "get_value") else var
    return tuple(value.shape)


def count_lora_params(model) -> int:
    """Number of LoRA parameters (``nnx.LoRAParam``) in a model; works on abstract models too."""
    import math

    from flax import nnx

    total = 0
    for _, v in nnx.state(model, nnx.LoRAParam).flat_state():
        total += math.prod(_shape(v))
    return total


def lora_param_shapes(model) -> dict[str, tuple[int, ...]]:
    """``"layers/5/attn/k_einsum/w_lora_a" -> shape`` for every LoRA parameter."""
    from flax import nnx

    return {
        "/".join(map(str, k)): _shape(v) for k, v in nnx.state(model, nnx.LoRAParam).flat_state()
    }


# --------------------------------------------------------------------------------------
# Applying LoRA


def _own_config(model) -> None:
    """Give ``model`` its own copy of the Tunix config (Qwix's clone shares the base's)."""
    for cfg in models.tunix_configs(model):
        mine = dataclasses.replace(cfg)
        for _, module in model.iter_modules():
            if getattr(module, "config", None) is cfg:
                module.config = mine


def dummy_inputs(mesh=None, *, seq_len: int = 2) -> dict[str, Any]:
    """Inputs for Qwix's initialising call: batch = the mesh's fsdp size, sharded on it."""
    import jax
    import jax.numpy as jnp

    batch = int(mesh.shape["fsdp"]) if mesh is not None and "fsdp" in mesh.shape else 1
    tokens = jnp.ones((batch, seq_len), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(seq_len, dtype=jnp.int32), (batch, seq_len))
    mask = jnp.broadcast_to(
        jnp.tril(jnp.ones((seq_len, seq_len), jnp.bool_)), (batch, seq_len, seq_len)
    )
    if mesh is not None:
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        tokens, positions = (
            jax.device_put(x, NamedSharding(mesh, P("fsdp", None))) for x in (tokens, positions)
        )
        mask = jax.device_put(mask, NamedSharding(mesh, P("fsdp", None, None)))
    return {"tokens": tokens, "positions": positions, "cache": None, "attention_mask": mask}


def apply_lora(
    model,
    lora: LoraConfig,
    *,
    preset: str | models.ModelPreset,
    mesh=None,
    seed: int = 0,
    remat: str = "none",
    allow_partial: bool = False,
):
    """Qwix LoRA on a Tunix Gemma 4 model; returns the LoRA model (the input is not changed).

    Qwix creates adapters lazily during one call of the model. A remat-wrapped call
    (``RematConfig.BLOCK``/``DECODER``) drops them silently, so the call runs with remat
    off and ``remat`` is set afterwards on the model's (shared, mutable) config. The
    number of LoRA parameters is then checked against :func:`expected_lora_params`.
    The LoRA model gets its own copy of the config, so the base model keeps its remat.

    Also works inside ``nnx.eval_shape`` (abstract models, no weights).

    Args:
      model: a Tunix ``Gemma4`` (e.g. from ``cookbook.models.load_tunix_model``).
      lora: rank, alpha, dropout and targets (PEFT names). With ``dropout > 0`` Qwix
        applies dropout on every call, evaluation included, using the model's rngs:
        evaluate and sample through :func:`without_lora_dropout`.
      preset: the model's preset (names the layers for the target translation).
      mesh: the mesh the model is sharded on; the initialising call's inputs are
        sharded on its ``fsdp`` axis and the call runs inside it.
      seed: seeds LoRA ``A`` (Qwix: he_uniform; ``B`` starts at zero) and dropout.
      remat: remat policy for training, set after the adapters exist.
      allow_partial: allow targets that adapt a projection on only some layers.

    Raises:
      LoraCoverageError: the targets match nothing / only some layers.
      LoraApplicationError: the LoRA parameter count is not the expected one.
    """
    import qwix
    from flax import nnx

    p = models.get_preset(preset)
    module_path = qwix_module_path(lora.targets, p, allow_partial=allow_partial)
    if count_lora_params(model):
        raise LoraApplicationError(
            f"the model already has {count_lora_params(model)} LoRA parameters; apply LoRA to the base model"
        )
    previous = [cfg.remat_config for cfg in models.tunix_configs(model)]
    models.set_remat(model, "none")
    provider = qwix.LoraProvider(
        module_path=module_path,
        rank=lora.rank,
        alpha=float(lora.alpha),
        dropout=float(lora.dropout),
    )
    try:
        with mesh if mesh is not None else contextlib.nullcontext():
            lora_model = qwix.apply_lora_to_model(
                model, provider, rngs=nnx.Rngs(seed), **dummy_inputs(mesh)
            )
    finally:
        for cfg, old in zip(models.tunix_configs(model), previous, strict=False):
            cfg.remat_config = old
    _own_config(lora_model)
    models.set_remat(lora_model, remat)
    if lora.dropout > 0:
        lora_model.set_attributes(qwix_rngs=nnx.Rngs(dropout=seed + 1), raise_if_not_found=False)
    got, want = (
        count_lora_params(lora_model),
        expected_lora_params(p, lora, allow_partial=allow_partial),
    )
    if got != want:
        raise LoraApplicationError(
            f"Qwix created {got:,} LoRA parameters; targets {lora.targets!r} at rank {lora.rank} on preset "
            f"{p.name!r} need {want:,}. "
            + (
                "None were created: was LoRA applied inside a remat-wrapped or jitted call? "
                if got == 0
                else "Is the model built from another preset? "
            )
            + f"Qwix module_path was {module_path!r}."
        )
    return lora_model


def without_lora_dropout(
    lora_model,
    lora: LoraConfig,
    *,
    preset: str | models.ModelPreset,
    allow_partial: bool = False,
):
    """A view of a LoRA model for evaluation and sampling: same weights, no LoRA dropout.

    Qwix applies LoRA dropout on every call (there is no train/eval switch), so a model
    from :func:`apply_lora` with ``dropout > 0`` gives noisy logits and samples. This
    re-wraps it with a dropout-free Qwix provider; the arrays are shared, not copied (so
    it costs no memory). After more training steps refresh it with
    ``nnx.update(view, nnx.state(lora_model, nnx.LoRAParam))``.
    """
    import qwix
    from flax import nnx

    p = models.get_preset(preset)
    provider = qwix.LoraProvider(
        module_path=qwix_module_path(lora.targets, p, allow_partial=allow_partial),
        rank=lora.rank,
        alpha=float(lora.alpha),
        dropout=0.0,
    )
    view = qwix.apply_lora_to_model(lora_model, provider, rngs=nnx.Rngs(0), skip_nnx_init=True)
    got = count_lora_params(view)
    if got != count_lora_params(lora_model) or got == 0:
        raise LoraApplicationError(
            f"the dropout-free view has {got:,} LoRA parameters; expected the model's"
        )
    return view


# --------------------------------------------------------------------------------------
# Abstract (weightless) models: 31B on a laptop


def abstract_model(preset: str | models.ModelPreset, *, param_dtype: str | None = None):
    """The Tunix model of ``preset`` with ``jax.ShapeDtypeStruct`` leaves: no memory, instant."""
    from flax import nnx
    from tunix.models.gemma4 import model as gemma4

    p = models.get_preset(preset)
    cfg = p.tunix_config(param_dtype=param_dtype)
    with core.fast_abstract_tracing():
        return nnx.eval_shape(lambda: gemma4.Gemma4(cfg, rngs=nnx.Rngs(0)))


def abstract_lora_model(
    preset: str | models.ModelPreset,
    lora: LoraConfig,
    *,
    remat: str = "none",
    param_dtype: str | None = None,
    allow_partial: bool = False,
):
    """The Tunix model of ``preset`` with LoRA applied, all abstract (shapes only)."""
    from flax import nnx
    from tunix.models.gemma4 import model as gemma4

    p = models.get_preset(preset)
    cfg = p.tunix_config(param_dtype=param_dtype)

    def build():
        base = gemma4.Gemma4(cfg, rngs=nnx.Rngs(0))
        return apply_lora(base, lora, preset=p, remat=remat, allow_partial=allow_partial)

    with core.fast_abstract_tracing():
        return nnx.eval_shape(build)


def abstract_qwix_model(
    preset: str | models.ModelPreset, module_path: str, *, rank: int = 16, alpha: float = 32.0
):
    """Qwix LoRA with a raw ``module_path`` on the abstract model, with no checks at all.

    This is what a hand-written Qwix call does (e.g. the common ``".*kv_einsum"``); use
    :func:`coverage_of_model` on the result to see which projections got adapters.
    """
    import qwix
    from flax import nnx
    from tunix.models.gemma4 import model as gemma4

    p = models.get_preset(preset)
    cfg = p.tunix_config()
    provider = qwix.LoraProvider(module_path=module_path, rank=rank, alpha=alpha)

    def build():
        base = gemma4.Gemma4(cfg, rngs=nnx.Rngs(0))
        return qwix.apply_lora_to_model(base, provider, rngs=nnx.Rngs(0), **dummy_inputs())

    with core.fast_abstract_tracing():
        return nnx.eval_shape(build)


def peft_trainable_params(preset: str | models.ModelPreset, lora: LoraConfig) -> int:
    """What PEFT's ``get_nb_trainable_parameters`` reports for ``lora`` on ``preset``.

    Builds transformers' ``Gemma4ForCausalLM`` on the meta device (no memory, no
    weights), so it works for 31B on a laptop; the targets are passed to PEFT as given.
    """
    import peft
    import torch
    import transformers

    p = models.get_preset(preset)
    with torch.device("meta"):
        model = transformers.Gemma4ForCausalLM(p.hf_text_config())
    targets = list(lora.targets) if isinstance(lora.targets, tuple) else lora.targets
    cfg = peft.LoraConfig(
        r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets
    )
    trainable, _ = peft.get_peft_model(model, cfg).get_nb_trainable_parameters()
    return int(trainable)


@functools.lru_cache(maxsize=8)
def tunix_weight_paths(preset: str | models.ModelPreset) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(path, weight shape) of every Einsum/Linear under ``layers/`` of the abstract model.

    Used to check :func:`projections` (computed from the preset) against Tunix itself.
    """
    from flax import nnx

    model = abstract_model(preset)
    out = []
    for path, module in model.iter_modules():
        spath = "/".join(map(str, path))
        if not spath.startswith("layers/"):
            continue
        for attr in ("w", "kernel"):
            var = getattr(module, attr, None)
            if isinstance(var, nnx.Param):
                out.append((spath, tuple(var.value.shape)))
    return tuple(out)
