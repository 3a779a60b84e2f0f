"""Tunix's private names: the trainer's loss, progress metrics, buffered loss and checkpoint
save; the Gemma 4 model's activation sharding, safetensors mapping, MoE router input and Einsum.

Checked against google-tunix 0.1.7 (and qwix 0.1.8 for the quantized Einsum).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any


def tunix_loss_fn() -> Callable[..., Any]:
    """Tunix ``PeftTrainer``'s own loss (masked next-token cross-entropy on the answer).

    ``tunix.sft.peft_trainer._default_loss_fn(model, input_tokens, input_mask, positions,
    attention_mask)``: the planner, the sharding check, the remat measurement and the GPU
    parity check compile exactly what the trainer runs, not a re-implementation.
    """
    from tunix.sft import peft_trainer

    return peft_trainer._default_loss_fn


@contextlib.contextmanager
def tunix_activation_sharding(mesh, enabled: bool = True) -> Iterator[None]:
    """Make Tunix's activation ``shard()`` constrain on ``mesh`` even in a CPU process.

    Tunix (``tunix.models.gemma4.model.shard``, ``tunix.utils.sharding_utils.shard``)
    skips the constraint when the process's first device is a CPU, which is always the case
    when compiling for TPU from a host without one; a TPU host applies it. Both module
    attributes are swapped for the duration, and the mesh is entered (the splash-attention
    path reads it from the context).
    """
    import jax
    from jax.sharding import NamedSharding, PartitionSpec
    from tunix.models.gemma4 import model as gemma4_model
    from tunix.utils import sharding_utils

    def shard(x, s, eager: bool = False):
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, PartitionSpec(*s)))

    saved = (gemma4_model.shard, sharding_utils.shard)
    if enabled:
        gemma4_model.shard = shard
        sharding_utils.shard = shard
    try:
        with mesh:
            yield
    finally:
        gemma4_model.shard, sharding_utils.shard = saved


def last_buffered_train_loss(trainer) -> float | None:
    """The loss of the step whose weights ``PeftTrainer`` is about to checkpoint.

    Tunix buffers a step's metrics (``_prev_buffered_train_metrics``) and writes them one
    step late; None before the first step.
    """
    last = getattr(trainer, "_prev_buffered_train_metrics", None)
    return float(last.loss) if last is not None and last.losses else None


TQDM_METRICS_ATTRIBUTE = "_tqdm_train_metrics"  # PeftTrainer property naming the progress-bar metrics


def tunix_trainer_with_progress(metrics: tuple[str, ...]) -> type:
    """Tunix's ``PeftTrainer`` whose progress bar shows ``metrics``.

    ``PeftTrainer`` (Tunix 0.1.7) takes the progress bar's metric names from its private
    property ``_tqdm_train_metrics`` (:data:`TQDM_METRICS_ATTRIBUTE`) and has no argument for
    them; the subclass overrides that property. ``check()`` looks for it.
    """
    from tunix.sft import peft_trainer

    names = list(metrics)
    return type(
        "PeftTrainerWithProgress", (peft_trainer.PeftTrainer,), {TQDM_METRICS_ATTRIBUTE: property(lambda self: names)}
    )


def tunix_guard_checkpoint_saves(trainer, before_save: Callable[[int, Any], None]) -> None:
    """Call ``before_save(step, model)`` before each checkpoint ``trainer`` writes; it may raise to
    refuse the save (then nothing is written).

    ``PeftTrainer`` (Tunix 0.1.7) saves through ``trainer.checkpoint_manager.save(step, model,
    ...)`` with no hook before it; that bound method is replaced on this trainer's manager only.
    Tunix calls it after every step and its Orbax manager decides (``should_save``, or
    ``force=True`` for the last step) whether anything is written, so ``before_save`` runs only
    where that decision is yes: run every step, a check of the weights cost ~16 ms of host time
    per step on ``tiny`` (``nnx.state`` of the model) and made the host wait for each step.
    ``tests/train/test_train.py`` checks that a non-finite step leaves no checkpoint, and that
    ``before_save`` runs once per checkpoint written.
    """
    import inspect

    manager = trainer.checkpoint_manager
    original_save = manager.save
    signature = inspect.signature(original_save)

    def save(step, model, *args, **kwargs):
        force = signature.bind(step, model, *args, **kwargs).arguments.get("force", False)
        orbax_manager = manager._checkpoint_manager  # None: Tunix was given no checkpoint directory
        if orbax_manager is not None and (force or orbax_manager.should_save(step)):
            before_save(step, model)
        return original_save(step, model, *args, **kwargs)

    manager.save = save


def tunix_rollout_keeps_stop_token(rollout) -> None:
    """Make ``rollout.generate`` (Tunix's vanilla RL rollout) keep the token that stopped each
    completion, so that RL's loss trains the model to stop.

    Tunix 0.1.7's ``Sampler`` (unpadded output, as the rollout asks for) cuts each completion at
    ``tunix.generate.utils.np_find_first_eos_idx``, *before* the stop token; the GRPO learner
    builds its completion mask from those tokens, so ``<turn|>`` is never in the loss and nothing
    reinforces ending the turn (TRL and verl keep the EOS in the mask). During this rollout's
    calls only, the end index is one past the stop token; a completion that ran out of budget is
    unchanged. ``tests/core/test_compat.py`` checks that upstream still cuts before the stop token
    and ``tests/rl/test_rl.py`` that the rewarded completions end their turn.
    """
    from tunix.generate import utils

    cut_before = utils.np_find_first_eos_idx
    original_generate = rollout.generate

    def cut_after(ids, eos_id):
        end = cut_before(ids, eos_id)
        return end + 1 if end < len(ids) else end

    def generate(*args, **kwargs):
        utils.np_find_first_eos_idx = cut_after
        try:
            return original_generate(*args, **kwargs)
        finally:
            utils.np_find_first_eos_idx = cut_before

    rollout.generate = generate


def tunix_gemma4_key_mapping(config) -> dict[str, Any]:
    """Tunix's Gemma 4 safetensors name map (HF key regex -> (Tunix path, transform)).

    ``tunix.models.gemma4.params_safetensors._get_key_and_transform_mapping`` (Tunix 0.1.7): the
    mapping ``create_model_from_safe_tensors`` uses, which ``cookbook.models.load_tunix_model``
    extends to the text-only layout.
    """
    from tunix.models.gemma4 import params_safetensors

    return params_safetensors._get_key_and_transform_mapping(config)


def tunix_gemma4_preprocess(config) -> Callable[[dict], dict]:
    """Tunix's Gemma 4 safetensors preprocessing (stacks ``k_proj``/``v_proj`` into ``kv_einsum``).

    ``tunix.models.gemma4.params_safetensors._make_preprocess_fn`` (Tunix 0.1.7).
    """
    from tunix.models.gemma4 import params_safetensors

    return params_safetensors._make_preprocess_fn(config)


# The lines of Tunix 0.1.7's DecoderLayer.block that tunix_moe_routes_on_residual relies on.
_TUNIX_MOE_CALL = ("moe_norm_ffw = self.moe_pre_ffw_norm(attn)", "moe_out = self.moe(moe_norm_ffw)")


def tunix_moe_routes_on_residual(model) -> int:
    """Make a Tunix Gemma 4 model's MoE layers route on the residual stream; idempotent.

    Tunix 0.1.7's ``MoERagged.__call__(x)`` computes the router logits from the expert input
    ``x = moe_pre_ffw_norm(residual)`` (RMS-normalised once more, times ``router_scale``), while
    transformers (``Gemma4TextDecoderLayer.forward``: ``self.router(residual)``), vLLM and
    DeepMind's reference route on the residual itself: the learned ``moe_pre_ffw_norm`` scale
    then changes which experts Tunix picks, and a random 26B-A4B twin's logits differ from
    transformers' by ~4 (of ~5). Dense layers, the experts' input and everything else agree.

    Each MoE layer's ``moe_pre_ffw_norm`` becomes a :class:`_NormPassingResidual` (same
    parameter, same output, plus the residual it normalised) and its ``moe`` a
    :class:`_ResidualRoutedMoE`, which computes the router input from that residual and then
    calls Tunix's own ``_router`` (softmax, top-k, renormalisation) and
    ``_run_ffw_and_routing`` (ragged dispatch, experts, per-expert scale, combination). The
    parameter tree is unchanged, so loading, sharding and checkpoints are unaffected. It relies
    on ``DecoderLayer.block`` passing ``self.moe_pre_ffw_norm(attn)`` straight to ``self.moe``
    (:data:`_TUNIX_MOE_CALL`; ``check()`` looks for those lines). Returns how many layers it
    changed.
    """
    norm_cls, moe_cls = _residual_routed_classes()
    changed = 0
    for layer in model.layers:
        moe = getattr(layer, "moe", None)
        if moe is None or isinstance(moe, moe_cls):
            continue
        layer.moe_pre_ffw_norm.__class__ = norm_cls
        moe.__class__ = moe_cls
        changed += 1
    return changed


@functools.cache
def _residual_routed_classes() -> tuple[type, type]:
    """The two Tunix subclasses of :func:`tunix_moe_routes_on_residual` (built on first use)."""
    import jax
    import jax.numpy as jnp
    from tunix.models.gemma4 import model as gemma4_model
    from tunix.models.gemma4 import moe as gemma4_moe

    class _NormPassingResidual(gemma4_model.RMSNorm):
        """Tunix's RMSNorm, returning ``(normed, x)``: the MoE input and the residual it came from."""

        def __call__(self, x):
            return super().__call__(x), x

    class _ResidualRoutedMoE(gemma4_moe.MoERagged):
        """Tunix's ``MoERagged`` with the router reading the residual stream (transformers' rule)."""

        def __call__(self, inputs):
            if not isinstance(inputs, tuple):
                raise TypeError(
                    "the residual-routed MoE expects (normed input, residual) from its layer's "
                    "moe_pre_ffw_norm: Tunix's DecoderLayer.block no longer passes it straight "
                    "through; see cookbook.core.compat.tunix_moe_routes_on_residual"
                )
            x, residual = inputs
            # transformers' Gemma4TextRouter: RMS-normalise (no learned scale), x scale / sqrt(D).
            var = jnp.mean(jnp.square(residual.astype(jnp.float32)), axis=-1, keepdims=True)
            router_input = residual * jax.lax.rsqrt(var + 1e-06).astype(residual.dtype)
            root_size = jax.lax.rsqrt(jnp.array(self.features, dtype=router_input.dtype))
            router_input = router_input * root_size * self.router_scale.value.astype(router_input.dtype)
            logits = jnp.einsum("gsd,de->gse", router_input, self.router_logits.value.astype(router_input.dtype))
            weights, choices = self._router(logits)
            return self._run_ffw_and_routing(x, choices, weights)

    return _NormPassingResidual, _ResidualRoutedMoE


def tunix_einsum_accepts_quantized() -> bool:
    """Let Tunix's Gemma 4 ``Einsum`` run on a Qwix-quantized weight (QLoRA); idempotent.

    Tunix 0.1.7 (and Tunix main, August 2026) casts the weight with ``jnp.astype(w,
    self.dtype)`` in ``Einsum.__call__``; for a Qwix PTQ weight (``WithAux`` around a
    ``QArray``) that raises ``TypeError: astype requires ndarray or scalar arguments``, so
    every attention projection of a quantized model fails while the MLP (``nnx.Linear``)
    works. The replacement casts the quantized weight's dequantisation scale instead
    (``QArray.astype``'s meaning) and calls the original for every plain array, so an
    unquantized model computes exactly what it did. A weight Tunix scales (``w_scale``: E2B/E4B's
    ``per_layer_model_projection``) gets the scale folded into its quantization scales. ``tests/core/test_compat.py`` checks
    that the original still fails: when Tunix fixes it upstream, that test says to drop this.
    Returns True when it installed the patch, False when it was already installed.
    """
    import jax.numpy as jnp
    from qwix._src.providers import ptq
    from tunix.models.gemma4 import model as gemma4_model

    cls = gemma4_model.Einsum
    if getattr(cls.__call__, "_cookbook_quantized_ok", False):
        return False
    original = cls.__call__

    def __call__(self, x):
        w = self.w  # Qwix PTQ puts its WithAux in the Param's place; an unquantized model keeps a Param
        if not isinstance(w, ptq.WithAux):
            return original(self, x)
        array = w.array.astype(self.dtype)
        if self.w_scale is not None:
            # Tunix multiplies the weight by w_scale before its einsum (E2B/E4B's model-level
            # per_layer_model_projection); on a quantized weight that is a multiply of its scales:
            # (q - zero_point) * scale * w_scale dequantizes to the scaled weight, and a LoRA on
            # this einsum stays unscaled, as on the unquantized model.
            array = dataclasses.replace(array, scale=array.scale * jnp.asarray(self.w_scale, array.scale.dtype))
        return jnp.einsum(self.einsum_str, jnp.astype(x, self.dtype), w.replace(array=array))

    __call__._cookbook_quantized_ok = True  # type: ignore[attr-defined]
    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    cls.__call__ = __call__
    return True


def checks() -> dict[str, bool]:
    import inspect

    from tunix.generate import sampler as sampler_lib
    from tunix.models.gemma4 import model as gemma4_model
    from tunix.models.gemma4 import moe as gemma4_moe
    from tunix.models.gemma4 import params_safetensors
    from tunix.sft import checkpoint_manager, peft_trainer
    from tunix.utils import sharding_utils

    block_src = inspect.getsource(gemma4_model.DecoderLayer.block)
    return {
        "tunix.sft.peft_trainer._default_loss_fn": callable(getattr(peft_trainer, "_default_loss_fn", None)),
        "tunix gemma4 model.shard": callable(getattr(gemma4_model, "shard", None)),
        "tunix sharding_utils.shard": callable(getattr(sharding_utils, "shard", None)),
        "PeftTrainer._tqdm_train_metrics": hasattr(peft_trainer.PeftTrainer, TQDM_METRICS_ATTRIBUTE),
        "PeftTrainer saves through self.checkpoint_manager.save(": "self.checkpoint_manager.save("
        in open(peft_trainer.__file__).read()
        and callable(getattr(checkpoint_manager.CheckpointManager, "save", None)),
        "tunix CheckpointManager.save(force=) decides through self._checkpoint_manager.should_save(step)": (
            "force" in inspect.signature(checkpoint_manager.CheckpointManager.save).parameters
            and "self._checkpoint_manager.should_save(step)"
            in inspect.getsource(checkpoint_manager.CheckpointManager.save)
        ),
        "tunix gemma4 Einsum has w, w_scale, dtype, einsum_str": all(
            n in open(gemma4_model.__file__).read() for n in ("self.w_scale", "self.einsum_str", "self.dtype")
        ),
        "tunix Sampler cuts unpadded completions at utils.np_find_first_eos_idx(": "utils.np_find_first_eos_idx("
        in inspect.getsource(sampler_lib.Sampler.__call__),
        "PeftTrainer buffers _prev_buffered_train_metrics": "_prev_buffered_train_metrics"
        in open(peft_trainer.__file__).read(),
        "tunix gemma4 params_safetensors._get_key_and_transform_mapping and _make_preprocess_fn": callable(
            getattr(params_safetensors, "_get_key_and_transform_mapping", None)
        )
        and callable(getattr(params_safetensors, "_make_preprocess_fn", None)),
        "tunix gemma4 MoERagged._router, _run_ffw_and_routing, router_scale, router_logits, features": all(
            callable(getattr(gemma4_moe.MoERagged, n, None)) for n in ("_router", "_run_ffw_and_routing")
        )
        and all(f"self.{n}" in open(gemma4_moe.__file__).read() for n in ("router_scale", "router_logits", "features")),
        "tunix gemma4 DecoderLayer.block passes moe_pre_ffw_norm(attn) straight to moe, once": all(
            block_src.count(line) == 1 for line in _TUNIX_MOE_CALL
        )
        and block_src.count("moe_pre_ffw_norm") == 1
        and block_src.count("self.moe(") == 1,
    }
