"""Tunix/Qwix LoRA <-> Hugging Face names: the mapping the merge uses, and PEFT adapters.

A Qwix LoRA pair on a Tunix Gemma 4 weight is ``(A, B)`` with the weight's einsum layout
(``q_einsum``: A ``(D, r)``, B ``(r, N, H)``; ``attn_vec_einsum``: A ``(N, H, r)``,
B ``(r, D)``; ``kv_einsum``: one A shared by K and V, B ``(r, 2, K, H)``; ``k_einsum`` on
K = V global layers: B ``(r, K, H)``; MLP ``kernel_lora_a`` ``(in, r)``, ``kernel_lora_b``
``(r, out)``). Flattening A to ``(in, r)`` and B to ``(r, out)`` in row-major order gives
exactly transformers' index order (output index ``n * H + h``), so every pair becomes
PEFT's ``lora_A = A.T`` ``(r, in)`` and ``lora_B = B.T`` ``(out, r)``, and the merged
update of the ``(out, in)`` Hugging Face weight is ``lora_B @ lora_A * alpha / rank``.

Written by hand because neither Tunix (no Gemma 4 LoRA export) nor PEFT knows the Tunix
layout. One trap is handled here, not left to the user: on K = V global layers
transformers computes V from ``k_proj``, so a ``k_proj`` LoRA changes V too; vLLM fills
V's slot with the K weight but takes V's LoRA only from a ``v_proj`` entry. The adapter
therefore also carries ``v_proj`` keys that copy ``k_proj``'s LoRA on those layers
(``vllm_kv_copy=True``); PEFT ignores them (the layer has no ``v_proj`` module).

The rest of the family: E2B/E4B per-layer-input projections (``per_layer_input_gate``,
``per_layer_projection``: A ``(in, r)``, B ``(r, out)`` like the MLP; the model-level
``embedder.per_layer_model_projection``: B ``(r, layers, per_layer_dim)``, transformers'
output index ``layer * per_layer_dim + p``) and the 26B-A4B router (``moe.router_logits``,
A ``(D, r)``, B ``(r, experts)``). ``per_layer_model_projection`` is the one weight whose
PEFT B is not a plain transpose: Tunix scales the *weight* by ``embed_dim ** -0.5``
(Qwix's update is not scaled) while transformers scales the Linear's *output*, PEFT's
update included, so the PEFT ``lora_B`` is the Tunix B times ``embed_dim ** 0.5`` (computed
in float64; the round trip is exact up to one rounding of that tensor). KV-shared layers
carry no K/V LoRA (there is no such weight to adapt): a pair there is refused.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from cookbook import models
from cookbook.lora._names import (
    LORA_TENSOR,
    OUTPUT_SCALED_BY_EMBED_RSQRT,
    TUNIX_LORA_ATTR,
    TUNIX_TO_HF_MODULES,
)

# Key prefixes of the text decoder in the two layouts (PEFT adds "base_model.model.").
LAYOUT_PREFIX = {"text": "model.", "multimodal": "model.language_model."}


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoraPair:
    """One Tunix LoRA pair and the Hugging Face weight(s) it updates."""

    layer: int | None  # None: a model-level weight (``embedder.per_layer_model_projection``)
    module: str  # Tunix name under the layer, e.g. "attn.kv_einsum" (model level: its full path)
    a: Any  # Tunix layout: a numpy array, or Orbax metadata (shape, dtype) before reading
    b: Any

    @property
    def rank(self) -> int:
        return int(self.b.shape[0])

    @property
    def where(self) -> str:
        """``layers.3.attn.q_einsum`` (``embedder.per_layer_model_projection`` at the model level)."""
        return self.module if self.layer is None else f"layers.{self.layer}.{self.module}"

    def peft_factors(self) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
        """Yield ``(hf_module, lora_A (r, in), lora_B (out, r))`` per Hugging Face module."""
        r = self.rank
        if self.a.shape[-1] != r:
            raise ValueError(
                f"{self.where}: lora_a {self.a.shape} and lora_b "
                f"{self.b.shape} disagree on the rank; the checkpoint is inconsistent"
            )
        lora_a = self.a.reshape(-1, r).T
        if self.module == "attn.kv_einsum":
            if self.b.ndim != 4 or self.b.shape[1] != 2:
                raise ValueError(f"layers.{self.layer}.attn.kv_einsum: lora_b {self.b.shape} is not (r, 2, K, H)")
            for i, hf in enumerate(TUNIX_TO_HF_MODULES[self.module]):
                yield hf, lora_a, self.b[:, i].reshape(r, -1).T
        elif self.module in OUTPUT_SCALED_BY_EMBED_RSQRT:  # see the module docstring
            b = self.b.reshape(r, -1).T
            yield TUNIX_TO_HF_MODULES[self.module][0], lora_a, _scaled(b, np.sqrt(self.a.shape[0]))
        else:
            yield TUNIX_TO_HF_MODULES[self.module][0], lora_a, self.b.reshape(r, -1).T


def _scaled(x: np.ndarray, factor: float) -> np.ndarray:
    """``x * factor`` computed in float64, in ``x``'s dtype."""
    return (np.asarray(x, np.float64) * factor).astype(x.dtype)


def _flatten(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if hasattr(tree, "to_pure_dict"):  # an nnx.State
        tree = tree.to_pure_dict()
    if isinstance(tree, Mapping):
        for k, v in tree.items():
            yield from _flatten(v, f"{prefix}{k}.")
    elif isinstance(tree, list | tuple):
        for k, v in enumerate(tree):
            yield from _flatten(v, f"{prefix}{k}.")
    else:
        yield prefix[:-1], getattr(tree, "value", tree)


def lora_pairs(lora_state: Any) -> list[LoraPair]:
    """Collect the LoRA pairs of a Tunix LoRA state.

    Accepts ``nnx.state(model, nnx.LoRAParam)``, its ``to_pure_dict()``, or the tree an
    Orbax restore of Tunix's ``model_params`` item returns (leaves under ``.value``).
    Raises on a LoRA tensor this cookbook does not know how to map, instead of dropping it.
    """
    if isinstance(lora_state, list | tuple) and all(isinstance(p, LoraPair) for p in lora_state):
        return list(lora_state)
    found: dict[tuple[int, str], dict[str, np.ndarray]] = {}
    for path, leaf in _flatten(lora_state):
        path = path.removesuffix(".value")
        m = LORA_TENSOR.fullmatch(path)
        if m is None:
            if "lora" in path:
                raise ValueError(
                    f"LoRA tensor {path!r} has no Hugging Face mapping here (mapped: "
                    f"{sorted(TUNIX_TO_HF_MODULES)}; never the MoE experts)"
                )
            continue
        # Orbax metadata leaves (shape and dtype only) are kept as they are.
        leaf = leaf if hasattr(leaf, "shape") and not hasattr(leaf, "__array__") else np.asarray(leaf)
        key = (-1, m["root"]) if m["root"] else (int(m["layer"]), m["module"])
        found.setdefault(key, {})[m["ab"]] = leaf
    pairs = []
    for (layer, module), ab in sorted(found.items()):
        where = module if layer < 0 else f"layers.{layer}.{module}"
        if set(ab) != {"a", "b"}:
            raise ValueError(f"{where}: only lora_{''.join(ab)} found; a LoRA needs both a and b")
        pairs.append(LoraPair(layer=None if layer < 0 else layer, module=module, a=ab["a"], b=ab["b"]))
    if not pairs:
        raise ValueError("No LoRA tensors found: is this a LoRA-only checkpoint (save_only_lora_params=True)?")
    return pairs


def _rank_of(lora_config: Any) -> int | None:
    if lora_config is None:
        return None
    if isinstance(lora_config, Mapping):
        return lora_config.get("rank", lora_config.get("r"))
    return getattr(lora_config, "rank", None)


def check_pairs_fit_preset(pairs: list[LoraPair], preset: models.ModelPreset, rank: int | None = None) -> None:
    """Raise naming the first pair whose layer, module or shape does not fit ``preset``."""
    from cookbook.lora._targets import projections

    p = preset
    kinds = p.layer_kinds
    weights = {
        (pr.layer, pr.tunix_path.split("/", 2)[-1] if pr.layer is not None else pr.tunix_path): pr
        for pr in projections(p)
    }
    for pair in pairs:
        where = f"LoRA {pair.where}"
        if pair.layer is not None and pair.layer >= p.num_layers:
            raise ValueError(f"{where}: preset {p.name!r} has only {p.num_layers} layers; wrong preset?")
        if rank is not None and pair.rank != rank:
            raise ValueError(f"{where} has rank {pair.rank}, the recipe says rank {rank}; wrong checkpoint?")
        is_global = pair.layer is not None and kinds[pair.layer] == "global"
        kv_eq = is_global and p.k_eq_v_global
        if pair.module == "attn.k_einsum" and not kv_eq:
            raise ValueError(f"{where}: k_einsum exists only on K = V global layers of this preset; wrong preset?")
        if pair.module == "attn.kv_einsum" and kv_eq:
            raise ValueError(f"{where}: layer {pair.layer} is a K = V global layer (k_einsum); wrong preset?")
        pr = weights.get((pair.layer, pair.module.replace(".", "/")))
        if pr is None:
            if pair.module in ("attn.kv_einsum", "attn.k_einsum") and pair.layer is not None:
                raise ValueError(
                    f"{where}: layer {pair.layer} of preset {p.name!r} is KV-shared (it reuses layer "
                    f"{p.kv_source_layers[pair.layer]}'s K/V and has none of its own), so LoRA there "
                    "trains nothing; wrong preset?"
                )
            raise ValueError(f"{where}: preset {p.name!r} has no such weight; wrong preset?")
        hd = p.global_head_dim if is_global else p.head_dim
        kv = p.effective_global_kv_heads if is_global else p.num_kv_heads
        d, r = p.embed_dim, pair.rank
        want = {
            "attn.q_einsum": ((d, r), (r, p.num_heads, hd)),
            "attn.kv_einsum": ((d, r), (r, 2, kv, hd)),
            "attn.k_einsum": ((d, r), (r, kv, hd)),
            "attn.attn_vec_einsum": ((p.num_heads, hd, r), (r, d)),
            "embedder.per_layer_model_projection": ((d, r), (r, p.num_layers, p.per_layer_input_dim)),
        }.get(pair.module, ((pr.in_features, r), (r, pr.out_features)))  # MLP (double-wide on E2B's shared
        got = (tuple(pair.a.shape), tuple(pair.b.shape))  # layers), per-layer inputs, router
        if got != want:
            raise ValueError(
                f"{where}: lora_a/lora_b shapes {got[0]}/{got[1]} do not fit preset {p.name!r} "
                f"(needs {want[0]}/{want[1]}); was it trained on another preset?"
            )


def tunix_lora_to_peft(
    lora_state: Any,
    preset: str | models.ModelPreset,
    lora_config: Any = None,
    *,
    layout: str = "text",
    vllm_kv_copy: bool = True,
    dtype: Any = None,
) -> dict[str, np.ndarray]:
    """PEFT-format tensors (``adapter_model.safetensors`` contents) from a Tunix LoRA state.

    Args:
      lora_state: ``nnx.state(model, nnx.LoRAParam)``, a pure dict of it, or the restored
        Orbax ``model_params`` tree.
      preset: the architecture, to check shapes and layer kinds.
      lora_config: anything with a ``rank`` (attribute or key); checked if given.
      layout: ``"text"`` (``Gemma4ForCausalLM``, keys ``model.layers.*``: vLLM on CPU)
        or ``"multimodal"`` (the released ``Gemma4ForConditionalGeneration``).
      vllm_kv_copy: also write ``v_proj`` = ``k_proj`` LoRA on K = V layers (see module doc).
      dtype: cast the tensors (default: keep the checkpoint's dtype).

    Returns:
      ``{"base_model.model.<prefix>layers.<i>.<module>.lora_{A,B}.weight": array}``.
    """
    p = models.get_preset(preset)
    pairs = lora_pairs(lora_state)
    check_pairs_fit_preset(pairs, p, _rank_of(lora_config))
    prefix = "base_model.model." + LAYOUT_PREFIX[layout]
    out: dict[str, np.ndarray] = {}
    for pair in pairs:
        for hf, lora_a, lora_b in pair.peft_factors():
            names = [hf]
            if vllm_kv_copy and pair.module == "attn.k_einsum":
                names.append("self_attn.v_proj")
            for name in names:
                key = f"{prefix}{name}" if pair.layer is None else f"{prefix}layers.{pair.layer}.{name}"
                out[f"{key}.lora_A.weight"] = np.ascontiguousarray(lora_a if dtype is None else lora_a.astype(dtype))
                out[f"{key}.lora_B.weight"] = np.ascontiguousarray(lora_b if dtype is None else lora_b.astype(dtype))
    return out


_HF_TO_TUNIX = {hf: tunix for tunix, hfs in TUNIX_TO_HF_MODULES.items() for hf in hfs if tunix != "attn.k_einsum"}
_LAYER_KEY = re.compile(
    r"(?:.*\.)?layers\.(\d+)\.("
    + "|".join(re.escape(hf) for hf, tunix in _HF_TO_TUNIX.items() if not tunix.startswith("embedder."))
    + r")\.lora_([AB])\.weight"
)
_ROOT_KEY = re.compile(
    r"(?:.*\.)?("
    + "|".join(re.escape(hf) for hf, tunix in _HF_TO_TUNIX.items() if tunix.startswith("embedder."))
    + r")\.lora_([AB])\.weight"
)


def peft_to_tunix_lora(peft_tensors: Mapping[str, np.ndarray], preset: str | models.ModelPreset) -> dict:
    """The inverse: a pure-dict Tunix LoRA state (``layers -> i -> ... -> w_lora_a``).

    The result can be given to ``nnx.update(model, nnx.State(...))`` after matching the
    model's LoRA structure. On ``kv_einsum`` layers K and V must share ``lora_A`` (Tunix
    has one A for both); a PEFT adapter trained with separate A's cannot be represented.
    """
    p = models.get_preset(preset)
    kinds = p.layer_kinds
    by_module: dict[tuple[int, str], dict[str, np.ndarray]] = {}
    for key, value in peft_tensors.items():
        m = _LAYER_KEY.fullmatch(key)
        if m is not None:
            by_module.setdefault((int(m.group(1)), m.group(2)), {})[m.group(3)] = np.asarray(value)
            continue
        m = _ROOT_KEY.fullmatch(key)
        if m is None or ".layers." in key:
            raise ValueError(f"{key!r} is not a Gemma 4 LoRA key this cookbook maps ({sorted(_HF_TO_TUNIX)})")
        by_module.setdefault((-1, m.group(1)), {})[m.group(2)] = np.asarray(value)
    state: dict = {"layers": {}}
    for (layer, hf), ab in sorted(by_module.items()):
        if hf == "self_attn.v_proj":
            continue  # folded in with k_proj below (or the vLLM copy on K = V layers)
        is_global = layer >= 0 and kinds[layer] == "global"
        kv_eq = is_global and p.k_eq_v_global
        hd = p.global_head_dim if is_global else p.head_dim
        kv = p.effective_global_kv_heads if is_global else p.num_kv_heads
        lora_a, lora_b = ab["A"], ab["B"]
        r = lora_a.shape[0]
        a, b = lora_a.T, lora_b.T
        module = "attn.k_einsum" if hf == "self_attn.k_proj" and kv_eq else _HF_TO_TUNIX[hf]
        if module == "attn.kv_einsum":
            v = by_module.get((layer, "self_attn.v_proj"))
            if v is None or not np.array_equal(v["A"], lora_a):
                raise ValueError(f"layer {layer}: k_proj and v_proj need one shared lora_A for Tunix's kv_einsum")
            b = np.stack([b.reshape(r, kv, hd), v["B"].T.reshape(r, kv, hd)], axis=1)
        elif module == "attn.k_einsum":
            b = b.reshape(r, kv, hd)
        elif module == "attn.q_einsum":
            b = b.reshape(r, p.num_heads, hd)
        elif module == "attn.attn_vec_einsum":
            a = a.reshape(p.num_heads, hd, r)
        elif module in OUTPUT_SCALED_BY_EMBED_RSQRT:  # see the module docstring
            b = _scaled(b, 1 / np.sqrt(p.embed_dim)).reshape(r, p.num_layers, p.per_layer_input_dim)
        node = state if layer < 0 else state["layers"].setdefault(layer, {})
        for part in module.split("."):
            node = node.setdefault(part, {})
        attr = TUNIX_LORA_ATTR[module]
        node.update({f"{attr}_lora_a": a, f"{attr}_lora_b": b})
    return state


def adapter_config(
    *, rank: int, alpha: float, dropout: float, modules: list[str], layout: str, base_model: str | None
) -> dict[str, Any]:
    """``adapter_config.json`` for PEFT and vLLM (``--enable-lora``)."""
    # HF module paths under a decoder layer (``self_attn.q_proj``, ``per_layer_input_gate``,
    # ``router.proj``) and at the model level (``per_layer_model_projection``).
    in_layer = sorted({m.split(".", m.split(".").index("layers") + 2)[-1] for m in modules if ".layers." in m})
    at_root = sorted({m.rsplit(".", 1)[-1] for m in modules if ".layers." not in m})
    # Text layout: PEFT's suffix names (``q_proj``, ``router.proj``). The released multimodal model
    # also has q_proj/... in its vision and audio towers: restrict PEFT to the text decoder there
    # with a regex (PEFT full-matches a string).
    targets: list[str] | str = sorted(
        {m.removeprefix("self_attn.").removeprefix("mlp.") for m in in_layer} | set(at_root)
    )
    if layout == "multimodal":
        alts = [r"layers\.\d+\.(" + "|".join(re.escape(m) for m in in_layer) + ")"] if in_layer else []
        alts += [re.escape(m) for m in at_root]
        targets = r".*language_model\.(?:" + "|".join(alts) + ")"
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": rank,
        "lora_alpha": alpha,
        "lora_dropout": dropout,
        "target_modules": targets,
        "bias": "none",
        "fan_in_fan_out": False,
        "init_lora_weights": True,
        "use_rslora": False,
        "use_dora": False,
        "modules_to_save": None,
    }


def write_peft_adapter(
    out_dir: str | Path,
    tensors: Mapping[str, np.ndarray],
    *,
    rank: int,
    alpha: float,
    dropout: float = 0.0,
    layout: str = "text",
    base_model: str | None = None,
) -> Path:
    """Write ``adapter_config.json`` + ``adapter_model.safetensors`` into ``out_dir``."""
    from safetensors.numpy import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    modules = sorted({k.split(".lora_")[0] for k in tensors})
    cfg = adapter_config(rank=rank, alpha=alpha, dropout=dropout, modules=modules, layout=layout, base_model=base_model)
    save_file(dict(tensors), str(out_dir / "adapter_model.safetensors"), metadata={"format": "pt"})
    (out_dir / "adapter_config.json").write_text(json.dumps(cfg, indent=2))
    return out_dir
