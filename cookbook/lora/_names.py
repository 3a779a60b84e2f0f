"""The one table of projection names: Hugging Face PEFT targets and the Tunix modules that hold them.

Hugging Face names the projections of a Gemma 4 decoder layer ``q_proj``, ``k_proj``,
``v_proj``, ``o_proj`` (under ``self_attn``) and ``gate_proj``, ``up_proj``, ``down_proj``
(under ``mlp``); Tunix holds the same weights in ``attn/q_einsum``, ``attn/kv_einsum`` (K and
V stacked), ``attn/k_einsum`` (global layers where K = V), ``attn/attn_vec_einsum`` and
``mlp/{gate,up,down}_proj``. E2B/E4B add the per-layer-input projections (two per layer and
one for the whole model, under Tunix's ``embedder``); 26B-A4B adds the MoE router
(``router.proj``; Tunix ``moe``'s ``router_logits``). The LoRA targets, the coverage check,
the PEFT export, the merge and the GPU recipe all read :data:`LORA_MODULES`; every other
name here is derived from it.
"""

from __future__ import annotations

import re

ALL_LINEAR = "all-linear"

# One row per weight LoRA can adapt:
#   (Tunix module path under its scope, its LoRA'd attribute, scope, HF module paths it holds).
# Scope "layer": Tunix ``layers/<i>/``, HF ``<prefix>layers.<i>.``; "model": Tunix root, HF ``<prefix>``.
# An HF projection's name (the PEFT target, and the key everywhere in this package) is its module
# path without the ``self_attn.``/``mlp.`` parent: ``q_proj``, ``per_layer_input_gate``, ``router.proj``.
LORA_MODULES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("attn/q_einsum", "w", "layer", ("self_attn.q_proj",)),
    ("attn/kv_einsum", "w", "layer", ("self_attn.k_proj", "self_attn.v_proj")),
    ("attn/k_einsum", "w", "layer", ("self_attn.k_proj",)),  # K = V global layers: V uses the same weight
    ("attn/attn_vec_einsum", "w", "layer", ("self_attn.o_proj",)),
    ("mlp/gate_proj", "kernel", "layer", ("mlp.gate_proj",)),  # 26B-A4B: the dense branch beside the experts
    ("mlp/up_proj", "kernel", "layer", ("mlp.up_proj",)),
    ("mlp/down_proj", "kernel", "layer", ("mlp.down_proj",)),
    # E2B/E4B per-layer inputs. PEFT's "all-linear" adapts all three (they are nn.Linear and not
    # the output layer: peft/tuners/tuners_utils.py _maybe_include_all_linear_layers), so the
    # cookbook's does too.
    ("per_layer_input_gate", "w", "layer", ("per_layer_input_gate",)),
    ("per_layer_projection", "w", "layer", ("per_layer_projection",)),
    ("embedder/per_layer_model_projection", "w", "model", ("per_layer_model_projection",)),
    # 26B-A4B router: an nn.Linear in transformers, so PEFT's "all-linear" adapts it; Tunix's MoE
    # computes it with one jnp.einsum that Qwix intercepts. The experts are in no row: see _targets.
    ("moe", "router_logits", "layer", ("router.proj",)),
)

_PARENTS = ("self_attn.", "mlp.")


def _key(hf_module: str) -> str:
    for parent in _PARENTS:
        if hf_module.startswith(parent):
            return hf_module[len(parent) :]
    return hf_module


# Derived: HF projection name -> its module path under a decoder layer (or the text model).
HF_MODULE: dict[str, str] = {_key(m): m for _, _, _, hf in LORA_MODULES for m in hf}
# Derived: every HF projection name, table order.
ALL_HF_PROJECTIONS: tuple[str, ...] = tuple(HF_MODULE)
# Derived: HF projections that live at the model level (once, not per layer).
MODEL_LEVEL: frozenset[str] = frozenset(_key(m) for _, _, scope, hf in LORA_MODULES if scope == "model" for m in hf)
# Derived: the seven attention and dense-MLP projections every Gemma 4 decoder layer has (the
# paper's recipe, the default targets) and their parent submodule.
HF_PARENT: dict[str, str] = {
    _key(m): m.split(".")[0] for _, _, _, hf in LORA_MODULES for m in hf if m.startswith(_PARENTS)
}
HF_PROJECTIONS: tuple[str, ...] = tuple(HF_PARENT)
# Derived: Tunix module (under layers/<i>/) -> the HF projections whose weights it holds; the
# attention and dense-MLP rows (every preset's decoder layer has these).
TUNIX_TO_HF: dict[str, tuple[str, ...]] = {
    tunix: tuple(_key(m) for m in hf) for tunix, _, _, hf in LORA_MODULES if all(m.startswith(_PARENTS) for m in hf)
}
# Derived: every Tunix module of the table -> HF projection names.
TUNIX_TO_HF_ALL: dict[str, tuple[str, ...]] = {tunix: tuple(_key(m) for m in hf) for tunix, _, _, hf in LORA_MODULES}
# Derived: dotted Tunix module (as in checkpoints, ``layers.<i>.attn.kv_einsum``, or
# ``embedder.per_layer_model_projection``) -> the HF module paths (``self_attn.k_proj``, ...).
TUNIX_TO_HF_MODULES: dict[str, tuple[str, ...]] = {tunix.replace("/", "."): hf for tunix, _, _, hf in LORA_MODULES}
# Derived: dotted Tunix module -> the attribute Qwix names its LoRA after (``w_lora_a``, ...).
TUNIX_LORA_ATTR: dict[str, str] = {tunix.replace("/", "."): attr for tunix, attr, _, _ in LORA_MODULES}
_LAYER_MODULES = [t.replace("/", ".") for t, _, scope, _ in LORA_MODULES if scope == "layer"]
_ROOT_MODULES = [t.replace("/", ".") for t, _, scope, _ in LORA_MODULES if scope == "model"]
_ATTRS = sorted(set(TUNIX_LORA_ATTR.values()))
# Derived: a LoRA tensor's path in a Tunix state, ``layers.<i>.<module>.<attr>_lora_(a|b)`` or
# ``<model-level module>.<attr>_lora_(a|b)`` (groups ``layer``, ``module``, ``root``, ``ab``).
LORA_TENSOR = re.compile(
    r"(?:layers\.(?P<layer>\d+)\.(?P<module>" + "|".join(map(re.escape, _LAYER_MODULES)) + r")"
    r"|(?P<root>" + "|".join(map(re.escape, _ROOT_MODULES)) + r"))"
    r"\.(?:" + "|".join(_ATTRS) + r")_lora_(?P<ab>[ab])"
)
# Tunix multiplies this module's weight by embed_dim ** -0.5 (``Einsum(w_scale=...)``, so Qwix's
# LoRA update is not scaled), while transformers scales the Linear's *output* (and PEFT's update
# with it): the PEFT ``lora_B`` is the Tunix one divided by that scale.
OUTPUT_SCALED_BY_EMBED_RSQRT: frozenset[str] = frozenset({"embedder.per_layer_model_projection"})


def hf_module_path(projection: str) -> str:
    """``"k_proj"`` -> ``"self_attn.k_proj"``: the projection's path under a decoder layer
    (under the text model for a model-level one such as ``per_layer_model_projection``)."""
    return HF_MODULE[projection]
