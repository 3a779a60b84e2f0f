"""Load a Hugging Face Gemma 4 checkpoint into Tunix's Gemma 4 model, sharded on a mesh.

Tunix's own safetensors loader does the tensor mapping (``q_proj`` -> ``q_einsum``,
``k_proj``/``v_proj`` -> ``kv_einsum``, K = V global layers -> ``k_einsum``, ...). This
module adds what it lacks: it accepts the text-only ``Gemma4ForCausalLM`` layout
(``model.layers.*``) besides the released multimodal one, checks before loading that the
checkpoint matches the preset (so a mismatch is an error naming the tensor, not a shape
assertion deep inside JAX), and returns a model whose every weight is checked loaded.

Two Gemma 4 variants need more than the mapping. E2B/E4B: transformers saves no K/V
projections on the KV-shared layers, where Tunix has unused ones; they are filled with zeros
(:func:`unused_kv_params`), after checking that both frameworks share KV between the same
layers. 26B-A4B: Tunix's MoE routes on another input than transformers; the model is built
with the router reading the residual stream (:func:`cookbook.core.compat.tunix_moe_routes_on_residual`).
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
                raise ValueError(
                    f"{index}: shard name {shard!r} points outside the checkpoint directory; an index "
                    "may only name files beside it: restore the checkpoint's own index (download "
                    "it again, or rebuild it with `cookbook base`)"
                )
            if not (ckpt_dir / shard).is_file():
                raise FileNotFoundError(
                    f"{index} names {shard!r}, which is missing from {ckpt_dir}: copy the "
                    "whole checkpoint directory (every shard the index names)"
                )
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
    """The text decoder's tensor shapes as transformers names them, from the preset alone.

    Follows the preset's structure: no ``v_proj`` on K = V global layers; no ``k_proj``,
    ``v_proj`` or ``k_norm`` on KV-shared layers (E2B/E4B: transformers neither builds nor saves
    them) and a 2x wide MLP there with ``double_wide_mlp``; per-layer input tensors; the MoE
    router, experts and their norms beside the dense MLP (26B-A4B).
    """
    p = preset
    d, pl = p.embed_dim, p.per_layer_input_dim
    shapes = {f"{prefix}embed_tokens.weight": (p.vocab_size, d), f"{prefix}norm.weight": (d,)}
    if pl:
        shapes[f"{prefix}embed_tokens_per_layer.weight"] = (p.vocab_size, p.num_layers * pl)
        shapes[f"{prefix}per_layer_model_projection.weight"] = (p.num_layers * pl, d)
        shapes[f"{prefix}per_layer_projection_norm.weight"] = (pl,)
    for i, kind in enumerate(p.layer_kinds):
        hd = p.global_head_dim if kind == "global" else p.head_dim
        kv = p.effective_global_kv_heads if kind == "global" else p.num_kv_heads
        layer = f"{prefix}layers.{i}."
        shapes[layer + "self_attn.q_proj.weight"] = (p.num_heads * hd, d)
        shapes[layer + "self_attn.q_norm.weight"] = (hd,)
        if i < p.first_kv_shared_layer:
            shapes[layer + "self_attn.k_proj.weight"] = (kv * hd, d)
            shapes[layer + "self_attn.k_norm.weight"] = (hd,)
            if not (kind == "global" and p.k_eq_v_global):
                shapes[layer + "self_attn.v_proj.weight"] = (kv * hd, d)
        shapes[layer + "self_attn.o_proj.weight"] = (d, p.num_heads * hd)
        width = p.hidden_dim * (2 if p.double_wide_mlp and i >= p.first_kv_shared_layer else 1)
        shapes[layer + "mlp.gate_proj.weight"] = (width, d)
        shapes[layer + "mlp.up_proj.weight"] = (width, d)
        shapes[layer + "mlp.down_proj.weight"] = (d, width)
        norms = [
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ]
        if p.is_moe:
            assert p.num_experts and p.expert_dim
            e, f = p.num_experts, p.expert_dim
            norms += ["post_feedforward_layernorm_1", "pre_feedforward_layernorm_2", "post_feedforward_layernorm_2"]
            shapes[layer + "router.proj.weight"] = (e, d)
            shapes[layer + "router.scale"] = (d,)
            shapes[layer + "router.per_expert_scale"] = (e,)
            shapes[layer + "experts.gate_up_proj"] = (e, 2 * f, d)
            shapes[layer + "experts.down_proj"] = (e, d, f)
        if pl:
            norms.append("post_per_layer_input_norm")
            shapes[layer + "per_layer_input_gate.weight"] = (pl, d)
            shapes[layer + "per_layer_projection.weight"] = (d, pl)
        shapes.update({f"{layer}{n}.weight": (d,) for n in norms})
        shapes[layer + "layer_scalar"] = (1,)
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


def check_heads_divide(preset: models.ModelPreset, tp: int) -> None:
    """Refuse a tp that does not divide a head dimension Tunix shards on tp, before anything is loaded.

    Tunix 0.1.7 shards the query heads (``q_einsum``: N on tp) and, on K = V global layers, the KV
    heads of ``k_einsum`` (K on tp); ``kv_einsum`` keeps its KV heads whole (measured: the E2B
    twin's one KV head loads on a 4 x 2 mesh). JAX would otherwise fail deep inside the sharded
    load ("should evenly divide"): 12B's K = V global layers have one KV head, so it takes no tp.
    The mesh stage's ``cookbook.mesh.validate_mesh`` checks every dimension (conservatively: it
    also counts ``kv_einsum``'s heads) and lists the meshes that fit.
    """
    p = preset
    heads = {"query heads": p.num_heads}
    if p.global_layers and p.k_eq_v_global:
        heads["global KV heads"] = p.effective_global_kv_heads
    bad = [f"{name} = {n}" for name, n in heads.items() if n % tp]
    if bad:
        raise ValueError(
            f"mesh tp={tp} does not divide {', '.join(bad)} of preset {p.name!r} (Tunix shards them on "
            "tp): use a tp that divides them (cookbook.mesh.valid_meshes lists the meshes that fit)"
        )


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

    from cookbook import core

    p = models.get_preset(preset)
    if dtype is not None:
        p = p.with_overrides(dtype=dtype)
    check_kv_sharing_matches(p)
    check_checkpoint_matches(ckpt_dir, p)
    if mesh is not None:
        check_heads_divide(p, mesh.shape.get("tp", 1))
    config = p.tunix_config(remat=remat)
    model = safetensors_loader.load_and_create_model(
        file_dir=str(ckpt_dir),
        model_class=_build_gemma4,
        config=config,
        key_mapping=_key_mapping,
        mesh=mesh,
        preprocess_fn=_fill_unused_kv(p, core.compat.tunix_gemma4_preprocess(config)),
        dtype=jnp.dtype(p.dtype),
    )
    return model


def _key_mapping(cfg) -> dict:
    """Tunix's Gemma 4 name map, also matching the text-only layout's ``model.layers...``
    (Tunix matches ``(model.language_model.)?layers...``)."""
    from cookbook import core

    return {
        k.replace(r"(?:model\.language_model\.)?", r"(?:model\.language_model\.|model\.)?"): v
        for k, v in core.compat.tunix_gemma4_key_mapping(cfg).items()
    }


def map_checkpoint_shapes(
    shapes: dict[str, tuple[int, ...]], preset: str | models.ModelPreset
) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """What :func:`load_tunix_model` would make of a checkpoint with these tensor shapes, from
    its header alone (no weights: a released manifest, or a checkpoint before downloading it).

    Each tensor goes through Tunix's name map and transforms (permute, reshape) and the
    preprocessing :func:`load_tunix_model` runs (K/V stacking, zeros for the KV-shared layers'
    unused K/V), on zero-stride arrays: only the stacked K/V, a layer's worth each, take memory.

    Returns:
      ``(params, skipped)``: the Tunix parameter (state-dict name) -> shape it would be given,
      and the checkpoint tensors no parameter takes (the vision and audio towers).
    """
    import numpy as np
    from tunix.models import safetensors_loader

    from cookbook import core

    p = models.get_preset(preset)
    config = p.tunix_config()
    key_map = _key_mapping(config)
    state: dict = {}
    skipped: list[str] = []
    for name, shape in shapes.items():
        try:
            key, transform = safetensors_loader.torch_key_to_jax_key(key_map, name)
        except ValueError:
            skipped.append(name)
            continue
        value = np.broadcast_to(np.zeros((), np.float32), tuple(shape))
        if transform is not None:
            permute, reshape = transform
            if permute:
                value = value.transpose(permute)
            if reshape:
                value = value.reshape(reshape)
        state[key] = value
    params = _fill_unused_kv(p, core.compat.tunix_gemma4_preprocess(config))(state)
    # Some map entries name an nnx.Param's ".value"; Tunix's loader tries the name with and without it.
    return {k.removesuffix(".value"): tuple(v.shape) for k, v in params.items()}, skipped


def tunix_param_shapes(preset: str | models.ModelPreset) -> dict[str, tuple[int, ...]]:
    """Every parameter of the preset's Tunix model (state-dict name, as Tunix's loader names it)
    and its shape, from the abstract model (no memory)."""
    from flax import nnx
    from tunix.models import safetensors_loader

    flat = nnx.state(abstract_model(preset), nnx.Param).flat_state()
    return {safetensors_loader.path_to_key(path): tuple(v.value.shape) for path, v in flat}


def _build_gemma4(config, *, rngs):
    """Tunix's Gemma 4, with MoE layers routing on the residual stream as transformers does.

    Tunix 0.1.7 routes on the expert input instead (:func:`cookbook.core.compat.tunix_moe_routes_on_residual`
    says why and how); dense presets are built exactly as Tunix builds them.
    """
    from tunix.models.gemma4 import model as gemma4

    from cookbook import core

    model = gemma4.Gemma4(config, rngs=rngs)
    if config.enable_moe:
        core.compat.tunix_moe_routes_on_residual(model)
    return model


def check_kv_sharing_matches(preset: models.ModelPreset) -> None:
    """Refuse a preset whose KV-shared layers Tunix would feed from other layers than transformers.

    transformers gives a KV-shared layer the K/V of the last non-shared layer of its own kind
    (:attr:`ModelPreset.kv_source_layers`); Tunix 0.1.7 (``create_kv_cache_sharing_patterns``)
    takes the last non-shared layer for global layers and the one before it for sliding ones.
    They agree when the last non-shared layer is global and the one before it sliding, as in
    E2B and E4B; otherwise the two frameworks would compute different models.
    """
    if not preset.num_kv_shared_layers:
        return
    from tunix.models.gemma4 import model as gemma4

    cfg = preset.tunix_config()
    kinds = [cfg.attention_pattern[i % len(cfg.attention_pattern)] for i in range(cfg.num_layers)]
    tunix = tuple(
        gemma4.create_kv_cache_sharing_patterns(
            num_layers=cfg.num_layers,
            frac_shared_layers=cfg.frac_shared_layers,
            share_global=True,
            share_local=True,
            attention_types=tuple(kinds),
        )
    )
    if tunix != preset.kv_source_layers:
        raise ValueError(
            f"preset {preset.name!r}: Tunix would give its KV-shared layers the keys and values of layers "
            f"{list(tunix[preset.first_kv_shared_layer :])}, transformers those of "
            f"{list(preset.kv_source_layers[preset.first_kv_shared_layer :])}. Choose num_kv_shared_layers so "
            "that the last non-shared layer is global and the one before it sliding (as E2B and E4B do)."
        )


def unused_kv_params(preset: models.ModelPreset) -> dict[str, tuple[int, ...]]:
    """Tunix parameters (state-dict names) that exist on KV-shared layers but are never used.

    Tunix 0.1.7 builds every layer's ``kv_einsum`` (``k_einsum`` on K = V global layers) and
    ``_key_norm``, but a KV-shared layer attends over its source layer's keys and values and never
    calls its own. transformers neither builds nor saves them.
    """
    p = preset
    out = {}
    for i in range(p.first_kv_shared_layer, p.num_layers):
        kind = p.layer_kinds[i]
        hd = p.global_head_dim if kind == "global" else p.head_dim
        kv = p.effective_global_kv_heads if kind == "global" else p.num_kv_heads
        if kind == "global" and p.k_eq_v_global:
            out[f"layers.{i}.attn.k_einsum.w"] = (kv, p.embed_dim, hd)
        else:
            out[f"layers.{i}.attn.kv_einsum.w"] = (2, kv, p.embed_dim, hd)
        out[f"layers.{i}.attn._key_norm.scale"] = (hd,)
    return out


def _fill_unused_kv(preset: models.ModelPreset, preprocess):
    """Tunix's preprocessing, then zeros for the KV-shared layers' unused K/V parameters.

    Tunix's loader wants a value for every parameter of its model (a missing one ends in a
    pytree structure error). These are never read (:func:`unused_kv_params`); zeros rather
    than a copy of the source layer's weights, so that any use of them would show at once.
    """
    import numpy as np

    unused = unused_kv_params(preset)

    def fill(tensors: dict) -> dict:
        out = preprocess(tensors)
        for name, shape in unused.items():
            out.setdefault(name, np.zeros(shape, np.float32))  # cast to the model's dtype by Tunix
        return out

    return fill


def abstract_model(preset: str | models.ModelPreset, *, param_dtype: str | None = None):
    """The Tunix model of ``preset`` with ``jax.ShapeDtypeStruct`` leaves: no memory, instant."""
    from flax import nnx

    from cookbook import core

    p = models.get_preset(preset)
    cfg = p.tunix_config(param_dtype=param_dtype)
    with core.compat.fast_abstract_tracing():
        return nnx.eval_shape(lambda: _build_gemma4(cfg, rngs=nnx.Rngs(0)))
