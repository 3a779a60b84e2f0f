"""Load a Hugging Face Gemma 4 checkpoint into Tunix's Gemma 4 model, sharded on a mesh.

Tunix's own safetensors loader does the tensor mapping (``q_proj`` -> ``q_einsum``,
``k_proj``/``v_proj`` -> ``kv_einsum``, K = V global layers -> ``k_einsum``, ...). This
module adds what it lacks: it accepts the text-only ``Gemma4ForCausalLM`` layout
(``model.layers.*``) besides the released multimodal one, checks before loading that the
checkpoint matches the preset (so a mismatch is an error naming the tensor, not a shape
assertion deep inside JAX), and returns a model whose every weight is checked loaded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from cookbook.models import _presets as models


def read_checkpoint_index(ckpt_dir: str | Path) -> dict[str, str]:
    """Map tensor name -> shard file for a safetensors checkpoint (sharded or single file).

    Shard names must be plain file names inside ``ckpt_dir``; anything else is refused.
    """
    ckpt_dir = Path(ckpt_dir)
    index = ckpt_dir / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        for shard in set(weight_map.values()):
            if Path(shard).name != shard or shard in {".", ".."}:
                raise ValueError(f"{index}: shard name {shard!r} points outside the checkpoint directory; an index "
                                 "may only name files beside it: restore the checkpoint's own index (download "
                                 "it again, or rebuild it with `cookbook base`)")
            if not (ckpt_dir / shard).is_file():
                raise FileNotFoundError(f"{index} names {shard!r}, which is missing from {ckpt_dir}: copy the "
                                        "whole checkpoint directory (every shard the index names)")
        return dict(weight_map)
    single = ckpt_dir / "model.safetensors"
    if single.is_file():
        from safetensors import safe_open

        with safe_open(str(single), framework="numpy") as f:
            return {k: single.name for k in f.keys()}
    raise FileNotFoundError(
        f"No safetensors checkpoint in {ckpt_dir}: expected model.safetensors.index.json or "
        "model.safetensors. Build one with `cookbook base`."
    )


def checkpoint_shapes(ckpt_dir: str | Path) -> dict[str, tuple[int, ...]]:
    """Shapes of every tensor in the checkpoint, read from headers only (no data)."""
    from safetensors import safe_open

    ckpt_dir = Path(ckpt_dir)
    shapes: dict[str, tuple[int, ...]] = {}
    for shard in sorted(set(read_checkpoint_index(ckpt_dir).values())):
        with safe_open(str(ckpt_dir / shard), framework="numpy") as f:
            for k in f.keys():
                shapes[k] = tuple(f.get_slice(k).get_shape())
    return shapes


def text_prefix(keys) -> str:
    """``model.language_model.`` (released multimodal layout) or ``model.`` (text-only)."""
    keys = list(keys)
    if any(k.startswith("model.language_model.") for k in keys):
        return "model.language_model."
    if any(k.startswith("model.layers.") for k in keys):
        return "model."
    raise ValueError("Checkpoint has neither model.language_model.* nor model.layers.* keys: not a Gemma 4 checkpoint")


def expected_hf_shapes(preset: models.ModelPreset, prefix: str = "model.language_model.") -> dict[str, tuple[int, ...]]:
    """The text decoder's tensor shapes as transformers names them, from the preset alone."""
    p = preset
    d = p.embed_dim
    shapes = {f"{prefix}embed_tokens.weight": (p.vocab_size, d), f"{prefix}norm.weight": (d,)}
    for i, kind in enumerate(p.layer_kinds):
        hd = p.global_head_dim if kind == "global" else p.head_dim
        kv = p.effective_global_kv_heads if kind == "global" else p.num_kv_heads
        layer = f"{prefix}layers.{i}."
        shapes[layer + "self_attn.q_proj.weight"] = (p.num_heads * hd, d)
        shapes[layer + "self_attn.k_proj.weight"] = (kv * hd, d)
        if not (kind == "global" and p.k_eq_v_global):
            shapes[layer + "self_attn.v_proj.weight"] = (kv * hd, d)
        shapes[layer + "self_attn.o_proj.weight"] = (d, p.num_heads * hd)
        if not p.is_moe and not p.per_layer_input_dim and not p.num_kv_shared_layers:
            shapes[layer + "mlp.gate_proj.weight"] = (p.hidden_dim, d)
            shapes[layer + "mlp.up_proj.weight"] = (p.hidden_dim, d)
            shapes[layer + "mlp.down_proj.weight"] = (d, p.hidden_dim)
    return shapes


def check_checkpoint_matches(ckpt_dir: str | Path, preset: models.ModelPreset) -> str:
    """Raise a ValueError naming the first tensor whose presence or shape is wrong.

    Returns the key prefix of the text decoder in this checkpoint.
    """
    shapes = checkpoint_shapes(ckpt_dir)
    prefix = text_prefix(shapes)
    for name, want in expected_hf_shapes(preset, prefix).items():
        got = shapes.get(name)
        if got is None:
            raise ValueError(
                f"{ckpt_dir} does not fit preset {preset.name!r}: tensor {name} is missing. "
                "Is this checkpoint from another preset?"
            )
        if got != want:
            raise ValueError(
                f"{ckpt_dir} does not fit preset {preset.name!r}: {name} has shape {got}, "
                f"the preset needs {want}. Pick the preset the checkpoint was made with."
            )
    layers = {int(m.group(1)) for k in shapes if (m := re.match(re.escape(prefix) + r"layers\.(\d+)\.", k))}
    if layers and max(layers) + 1 != preset.num_layers:
        raise ValueError(
            f"{ckpt_dir} has {max(layers) + 1} decoder layers; preset {preset.name!r} has {preset.num_layers}."
        )
    return prefix


def load_tunix_model(
    ckpt_dir: str | Path,
    preset: str | models.ModelPreset,
    *,
    mesh=None,
    dtype: str | None = None,
    remat: str = "none",
):
    """Load ``ckpt_dir`` into a Tunix ``Gemma4`` model, sharded on ``mesh``.

    Args:
      ckpt_dir: Hugging Face checkpoint directory (released multimodal layout or text-only).
      preset: the architecture; checked against the checkpoint before anything is loaded.
      mesh: a ``jax.sharding.Mesh`` with axes ``("fsdp", "tp")``; parameters land with
        the shardings Tunix's ``ShardingConfig`` annotates. ``None``: one device.
      dtype: parameter dtype (default: the preset's).
      remat: Tunix remat policy. Apply LoRA to a model loaded with ``"none"``
        (``cookbook.lora.apply_lora`` enforces it).
    """
    import jax.numpy as jnp
    from tunix.models import safetensors_loader
    from tunix.models.gemma4 import model as gemma4
    from tunix.models.gemma4 import params_safetensors

    p = models.get_preset(preset)
    if dtype is not None:
        p = p.with_overrides(dtype=dtype)
    check_checkpoint_matches(ckpt_dir, p)
    config = p.tunix_config(remat=remat)

    def key_mapping(cfg):
        # Tunix matches "(model.language_model.)?layers..."; also accept the text-only
        # layout's "model.layers...".
        return {
            k.replace(r"(?:model\.language_model\.)?", r"(?:model\.language_model\.|model\.)?"): v
            for k, v in params_safetensors._get_key_and_transform_mapping(cfg).items()
        }

    model = safetensors_loader.load_and_create_model(
        file_dir=str(ckpt_dir),
        model_class=gemma4.Gemma4,
        config=config,
        key_mapping=key_mapping,
        mesh=mesh,
        preprocess_fn=params_safetensors._make_preprocess_fn(config),
        dtype=jnp.dtype(p.dtype),
    )
    return model


def abstract_model(preset: str | models.ModelPreset, *, param_dtype: str | None = None):
    """The Tunix model of ``preset`` with ``jax.ShapeDtypeStruct`` leaves: no memory, instant."""
    from flax import nnx
    from tunix.models.gemma4 import model as gemma4

    p = models.get_preset(preset)
    cfg = p.tunix_config(param_dtype=param_dtype)
    from cookbook import core

    with core.fast_abstract_tracing():
        return nnx.eval_shape(lambda: gemma4.Gemma4(cfg, rngs=nnx.Rngs(0)))
