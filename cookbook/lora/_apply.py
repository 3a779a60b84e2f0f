"""Applying Qwix LoRA to a Tunix Gemma 4 model, checked, and counting its parameters.

LoRA goes on with remat switched off while the adapters are created (a remat-wrapped call
creates none, silently: ``docs/traps.md`` trap 1), and the number of LoRA parameters is checked
every time. Qwix applies LoRA; what is hand-written here is only the checks.

Parameter counts differ from PEFT's in one place, by design of Tunix's weights: Tunix
stores K and V of a (non-K = V) layer in one ``kv_einsum`` weight, so Qwix gives K and V one
shared LoRA ``A`` (``embed x rank``) where PEFT has two. Everywhere else, the whole family
included (E2B/E4B per-layer inputs, no K/V on KV-shared layers; 26B-A4B's router, never its
experts), the two frameworks adapt the same weights with the same number of parameters. :func:`expected_lora_params` is the
Qwix count, :func:`peft_lora_params` the PEFT count; they differ by exactly
``embed_dim * rank`` per adapted ``kv_einsum`` (:func:`kv_shared_a_params`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
from typing import Any

from cookbook import core, models
from cookbook.lora._config import LoraApplicationError, LoraConfig
from cookbook.lora._quant import DEFAULT_QUANT_TILE, check_quant_tile, lora_provider, lora_rules
from cookbook.lora._targets import (
    Projection,
    coverage_rows_for_paths,
    matched_projections,
    qwix_module_path,
)

# --------------------------------------------------------------------------------------
# Parameter counts


def _selected_tunix(preset: models.ModelPreset, lora: LoraConfig, allow_partial: bool) -> list[Projection]:
    return matched_projections(qwix_module_path(lora.targets, preset, allow_partial=allow_partial), preset)


def expected_lora_params(preset: str | models.ModelPreset, lora: LoraConfig, *, allow_partial: bool = False) -> int:
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


def peft_lora_params(preset: str | models.ModelPreset, lora: LoraConfig, *, allow_partial: bool = False) -> int:
    """LoRA parameters PEFT creates on the transformers model for the same targets and rank."""
    p = models.get_preset(preset)
    r = lora.rank
    total = 0
    for pr in _selected_tunix(p, lora, allow_partial):
        total += len(pr.hf_names) * r * (pr.in_features + pr.out_features)
    return total


def kv_shared_a_params(preset: str | models.ModelPreset, lora: LoraConfig, *, allow_partial: bool = False) -> int:
    """``peft_lora_params - expected_lora_params``: the second ``A`` PEFT has on each stacked K/V."""
    p = models.get_preset(preset)
    return sum((len(pr.hf_names) - 1) * lora.rank * pr.in_features for pr in _selected_tunix(p, lora, allow_partial))


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

    return {"/".join(map(str, k)): _shape(v) for k, v in nnx.state(model, nnx.LoRAParam).flat_state()}


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
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((seq_len, seq_len), jnp.bool_)), (batch, seq_len, seq_len))
    if mesh is not None:
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        tokens, positions = (jax.device_put(x, NamedSharding(mesh, P("fsdp", None))) for x in (tokens, positions))
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
    quantize: str | None = None,
    quant_tile: int | None = DEFAULT_QUANT_TILE,
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
      quantize: QLoRA: store the frozen base's decoder projections quantized (``nf4``,
        ``int8``, ``fp8``; ``cookbook.lora.QUANT_TYPES``); the adapters keep the model's
        dtype. None: LoRA on the base as it is.
      quant_tile: Qwix's tile along each quantized weight's last contracting axis
        (checked by :func:`check_quant_tile` before anything is built).

    Raises:
      LoraCoverageError: the targets match nothing / only some layers.
      LoraApplicationError: the LoRA parameter count is not the expected one.
      RuntimeError: the library patches are not installed (call ``cookbook.core.setup_runtime_env()``).
    """
    import jax
    import qwix
    from flax import nnx

    p = models.get_preset(preset)
    module_path = qwix_module_path(lora.targets, p, allow_partial=allow_partial)
    if count_lora_params(model):
        raise LoraApplicationError(
            f"the model already has {count_lora_params(model)} LoRA parameters; apply LoRA to the base model"
        )
    check_quant_tile(p, quantize, quant_tile)
    core.compat.require_installed("cookbook.lora.apply_lora")  # QLoRA's patches, the CPU LoRA gradients
    previous = [cfg.remat_config for cfg in models.tunix_configs(model)]
    models.set_remat(model, "none")
    provider = lora_provider(lora_rules(lora, module_path, p, quantize=quantize, tile=quant_tile), quantize=quantize)
    try:
        with mesh if mesh is not None else contextlib.nullcontext():
            if jax.process_count() == 1 and quantize is None and not p.is_moe:
                lora_model = qwix.apply_lora_to_model(model, provider, rngs=nnx.Rngs(seed), **dummy_inputs(mesh))
            else:
                lora_model = _apply_lora_jitted(model, provider, seed, mesh)
    finally:
        for cfg, old in zip(models.tunix_configs(model), previous, strict=False):
            cfg.remat_config = old
    _own_config(lora_model)
    if mesh is None:
        _commit_lora_to_base_device(lora_model)
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


def _commit_lora_to_base_device(lora_model) -> None:
    """Commit the adapters Qwix created eagerly on one device to the base's device.

    Qwix's eager call creates them uncommitted while the base's arrays are committed; Tunix's
    first train and eval steps were then compiled for them and every later step again for the
    committed adapters a step returns (``core.commit_arrays``). On a mesh they are sharded after
    LoRA, and a jitted call's outputs are committed already.
    """
    from flax import nnx

    base = next((v for _, v in nnx.state(lora_model, nnx.Param).flat_state() if not isinstance(v, nnx.LoRAParam)), None)
    sharding = getattr(base.get_value() if base is not None else None, "sharding", None)
    if sharding is not None:  # None: an abstract model (nnx.eval_shape), nothing to place
        nnx.update(lora_model, core.commit_arrays(nnx.state(lora_model, nnx.LoRAParam), sharding))


def _apply_lora_jitted(model, provider, seed: int, mesh):
    """Qwix's initialising call under ``nnx.jit``: for a model sharded over several processes,
    for a quantized base, and for a MoE model.

    Eagerly, Tunix's attention unpacks K and V from one array, which JAX allows only for
    arrays this process holds whole; traced, it is an ordinary slice. Eagerly, Qwix also
    quantizes op by op: an nf4 tiny model took 20 s to build that way against 3.7 s jitted,
    with the same logits. Eagerly, a MoE layer's ``jax.lax.ragged_dot`` (the experts) runs through
    a jitted decomposition whose ``dot_general`` Qwix intercepts when the router's module is
    targeted, and Qwix then tries to create an expert adapter inside that inner trace
    (``TraceContextError``); traced, ``ragged_dot`` is one primitive Qwix never sees. The adapters Qwix
    creates inside the call come out of the jit with the same values as the eager call's
    (the same RNG keys, checked in the tests).
    """
    import qwix
    from flax import nnx

    lora_model = qwix.apply_lora_to_model(model, provider, rngs=nnx.Rngs(seed), skip_nnx_init=True)
    lora_model.set_attributes(qwix_rngs=nnx.Rngs(seed), disable_quant_stats_update=True, raise_if_not_found=False)
    inputs = dummy_inputs(mesh)

    @nnx.jit
    def first_call(m, tokens, positions, attention_mask):
        m(tokens, positions, None, attention_mask)
        if mesh is not None:
            _place_quantized(m, mesh)

    first_call(lora_model, inputs["tokens"], inputs["positions"], inputs["attention_mask"])
    lora_model.set_attributes(disable_quant_stats_update=False, qwix_rngs=None, raise_if_not_found=False)
    return lora_model


def _place_quantized(model, mesh) -> None:
    """Inside the initialising jit: put the arrays Qwix quantized on their weight's spec.

    Qwix creates each quantized weight (``.../w/array/qvalue`` and its ``scale``) inside the call,
    and the jit's outputs carry no sharding of their own: XLA returned them replicated, so on an
    fsdp = 8 mesh every device held the whole quantized base (31B int8: 31 GB on each 16 GB v5e
    chip, while the planner, which places them by their specs, said 8.3 GiB). Constrained here,
    they leave the jit sharded as the bf16 weight was, and never exist whole on a device. A scale
    axis the mesh does not divide (tiles, not the weight's axis) is replicated
    (``core.divisible_spec``).
    """
    import jax
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec

    state = nnx.state(model, nnx.Param)
    for path, var in state.flat_state():
        if len(path) >= 2 and path[-2] == "array" and path[-1] in ("qvalue", "scale"):
            value = var.get_value()
            spec = core.divisible_spec(core.variable_spec(var), value.shape, mesh)
            var.set_value(jax.lax.with_sharding_constraint(value, NamedSharding(mesh, PartitionSpec(*spec))))
    nnx.update(model, state)


def without_lora_dropout(
    lora_model,
    lora: LoraConfig,
    *,
    preset: str | models.ModelPreset,
    allow_partial: bool = False,
    quantize: str | None = None,
    quant_tile: int | None = DEFAULT_QUANT_TILE,
):
    """A view of a LoRA model for evaluation and sampling: same weights, no LoRA dropout.

    Qwix applies LoRA dropout on every call (there is no train/eval switch), so a model
    from :func:`apply_lora` with ``dropout > 0`` gives noisy logits and samples. This
    re-wraps it with a dropout-free Qwix provider; the arrays are shared, not copied (so
    it costs no memory). After more training steps refresh it with
    ``nnx.update(view, nnx.state(lora_model, nnx.LoRAParam))``. A QLoRA model needs the
    ``quantize`` and ``quant_tile`` it was built with.
    """
    import qwix
    from flax import nnx

    p = models.get_preset(preset)
    module_path = qwix_module_path(lora.targets, p, allow_partial=allow_partial)
    provider = lora_provider(
        lora_rules(lora, module_path, p, quantize=quantize, tile=quant_tile, dropout=0.0), quantize=quantize
    )
    view = qwix.apply_lora_to_model(lora_model, provider, rngs=nnx.Rngs(0), skip_nnx_init=True)
    got = count_lora_params(view)
    if got != count_lora_params(lora_model) or got == 0:
        raise LoraApplicationError(f"the dropout-free view has {got:,} LoRA parameters; expected the model's")
    return view


# --------------------------------------------------------------------------------------
# Abstract (weightless) models: 31B on a laptop


def abstract_lora_model(
    preset: str | models.ModelPreset,
    lora: LoraConfig,
    *,
    remat: str = "none",
    param_dtype: str | None = None,
    allow_partial: bool = False,
    quantize: str | None = None,
    quant_tile: int | None = DEFAULT_QUANT_TILE,
):
    """The Tunix model of ``preset`` with LoRA applied, all abstract (shapes only); QLoRA with ``quantize``."""
    from flax import nnx
    from tunix.models.gemma4 import model as gemma4

    p = models.get_preset(preset)
    cfg = p.tunix_config(param_dtype=param_dtype)

    def build():
        base = gemma4.Gemma4(cfg, rngs=nnx.Rngs(0))
        return apply_lora(
            base, lora, preset=p, remat=remat, allow_partial=allow_partial, quantize=quantize, quant_tile=quant_tile
        )

    with core.compat.fast_abstract_tracing():
        return nnx.eval_shape(build)


def abstract_qwix_model(preset: str | models.ModelPreset, module_path: str, *, rank: int = 16, alpha: float = 32.0):
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

    with core.compat.fast_abstract_tracing():
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
    cfg = peft.LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets)
    trainable, _ = peft.get_peft_model(model, cfg).get_nb_trainable_parameters()
    return int(trainable)


@functools.lru_cache(maxsize=8)
def tunix_weight_paths(preset: str | models.ModelPreset) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(path, weight shape) of every Einsum/Linear under ``layers/`` and ``embedder/`` of the
    abstract model, and of each MoE router (``layers/<i>/moe``: its ``router_logits``).

    Used to check :func:`projections` (computed from the preset) against Tunix itself. KV-shared
    layers' K/V modules are listed: Tunix has them (unused), the projections do not.
    """
    from flax import nnx

    model = models.abstract_model(preset)
    out = []
    for path, module in model.iter_modules():
        spath = "/".join(map(str, path))
        if not spath.startswith(("layers/", "embedder/")):
            continue
        for attr in ("w", "kernel", "router_logits"):
            var = getattr(module, attr, None)
            if isinstance(var, nnx.Param):
                out.append((spath, tuple(var.value.shape)))
    return tuple(out)


def coverage_of_model(model, preset: str | models.ModelPreset) -> list[dict[str, Any]]:
    """Coverage rows read from the LoRA parameters a (possibly abstract) model really has.

    Unlike :func:`coverage_rows`, which evaluates a regex on the preset's layer list, this
    looks at what Qwix created, so it shows exactly what training would update.
    """
    p = models.get_preset(preset)
    adapted = {re.sub(r"/\w+_lora_[ab]$", "", k) for k in lora_param_shapes(model)}
    return coverage_rows_for_paths(p, adapted)
