"""The one table of projection names: Hugging Face PEFT targets and the Tunix modules that hold them.

Hugging Face names the projections of a Gemma 4 decoder layer ``q_proj``, ``k_proj``,
``v_proj``, ``o_proj`` (under ``self_attn``) and ``gate_proj``, ``up_proj``, ``down_proj``
(under ``mlp``); Tunix holds the same weights in ``attn/q_einsum``, ``attn/kv_einsum`` (K and
V stacked), ``attn/k_einsum`` (global layers where K = V), ``attn/attn_vec_einsum`` and
``mlp/{gate,up,down}_proj``. The LoRA targets, the coverage check, the PEFT export, the merge
and the GPU recipe all read this table; the dotted forms and the LoRA-tensor pattern are
derived from it.
"""

from __future__ import annotations

import re

HF_PROJECTIONS: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ALL_LINEAR = "all-linear"
# The Hugging Face submodule of a decoder layer that holds each projection.
HF_PARENT: dict[str, str] = {
    "q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
    "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp",
}  # fmt: skip
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

# Derived: dotted Tunix module (as in checkpoints, ``layers.<i>.attn.kv_einsum``) -> the HF
# module paths under a decoder layer (``self_attn.k_proj``, ...).
TUNIX_TO_HF_MODULES: dict[str, tuple[str, ...]] = {
    tunix.replace("/", "."): tuple(f"{HF_PARENT[h]}.{h}" for h in hf) for tunix, hf in TUNIX_TO_HF.items()
}
# Derived: a LoRA tensor's path in a Tunix state, ``layers.<i>.<module>.(w|kernel)_lora_(a|b)``.
LORA_TENSOR = re.compile(
    r"layers\.(\d+)\.(" + "|".join(re.escape(m) for m in TUNIX_TO_HF_MODULES) + r")\.(?:w|kernel)_lora_([ab])"
)


def hf_module_path(projection: str) -> str:
    """``"k_proj"`` -> ``"self_attn.k_proj"``: the projection's path under a decoder layer."""
    return f"{HF_PARENT[projection]}.{projection}"
