"""Every reach into a dependency's private API, in one place, with the versions it was checked on.

Each function here touches a name its library does not promise to keep. When a pinned
version changes (requirements.txt), rerun ``tests/core/test_compat.py``: it checks each
reach still finds what it expects, so a rename upstream fails there, by name, instead of
deep inside a training run. Nothing outside this module (and :mod:`._compat_qwix`, the Qwix
reaches it re-exports) imports a private name.

Checked against jax/jaxlib 0.10.2, flax 0.12.8, google-tunix 0.1.7, qwix 0.1.8.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

# The reaches QLoRA and the CPU LoRA gradients need, kept in their own module; checked here.
from cookbook.core._compat_qwix import (  # noqa: E402, F401
    qwix_finds_quantized_weights_when_tracing,
    qwix_lora_grads_as_is,
    qwix_lora_grads_for_cpu,
    qwix_tie_dequantization,
    tunix_einsum_accepts_quantized,
)

CHECKED_VERSIONS = {"jax": "0.10.2", "flax": "0.12.8", "google-tunix": "0.1.7", "qwix": "0.1.8"}


def tunix_loss_fn() -> Callable[..., Any]:
    """Tunix ``PeftTrainer``'s own loss (masked next-token cross-entropy on the answer).

    ``tunix.sft.peft_trainer._default_loss_fn(model, input_tokens, input_mask, positions,
    attention_mask)``: the planner, the sharding check, the remat measurement and the GPU
    parity check compile exactly what the trainer runs, not a re-implementation.
    """
    from tunix.sft import peft_trainer

    return peft_trainer._default_loss_fn


@contextlib.contextmanager
def fast_abstract_tracing() -> Iterator[None]:
    """Skip JAX's costly tracer-origin messages while building big abstract models.

    ``nnx.eval_shape`` of a 60-layer LoRA model probes tracer attributes many times and
    each probe formats an error message (``DynamicJaxprTracer._origin_msg``; O(layers^2),
    ~2 min for 31B); the message is never shown, so it is replaced by "" meanwhile.
    """
    from jax._src.interpreters import partial_eval as pe

    original = pe.DynamicJaxprTracer._origin_msg
    pe.DynamicJaxprTracer._origin_msg = lambda self: ""  # type: ignore[method-assign]
    try:
        yield
    finally:
        pe.DynamicJaxprTracer._origin_msg = original  # type: ignore[method-assign]


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


def tensorboardx_without_torch() -> bool:
    """Import tensorboardX, which Tunix's metrics logger imports, without it importing torch.

    ``tensorboardX.writer`` runs ``try: import torch`` at import time only to accept torch
    tensors in its ``add_*`` calls (``numpy_compatible``); Tunix logs JAX/numpy scalars. Where
    torch is installed (this project's ``.venv``: transformers, PEFT, vLLM) that import costs
    2-8 s in every process that imports Tunix and never uses torch (a training run, a
    notebook kernel, a planner). ``torch`` is hidden from that one import (``sys.modules``
    entry None: ``import torch`` raises ImportError), then restored: a later ``import torch``
    loads it as usual. Imports nothing when tensorboardX or torch is already loaded, or
    tensorboardX is not installed; an import that fails is undone (Tunix's own import then says
    why, where it is needed: every entry point calls this). Returns True when it imported
    tensorboardX so.

    Checked with tensorboardX 2.6.5: its import then loads only numpy, protobuf and the
    standard library, none of which caches whether torch exists.
    """
    import importlib.util
    import sys

    if "tensorboardX" in sys.modules or "torch" in sys.modules:
        return False
    if importlib.util.find_spec("tensorboardX") is None:
        return False
    sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        import tensorboardX  # noqa: F401
    except Exception:  # a broken install: left for Tunix's own import to report where it is used
        for name in [m for m in sys.modules if m == "tensorboardX" or m.startswith("tensorboardX.")]:
            del sys.modules[name]
        return False
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]
    return True


def scalar_listeners() -> list:
    """The callbacks registered with ``jax.monitoring`` for scalar events (a copy)."""
    from jax._src import monitoring

    return list(monitoring._scalar_listeners)


def drop_scalar_listeners_except(before: list) -> None:
    """Unregister every ``jax.monitoring`` scalar listener not in ``before``.

    Tunix's ``MetricsLogger.close`` relies on ``jax.monitoring.clear_event_listeners``,
    which (jax 0.10) leaves scalar listeners registered: a second run in the same process
    would otherwise keep writing to the first run's closed files.
    """
    from jax._src import monitoring

    monitoring._scalar_listeners[:] = [f for f in monitoring._scalar_listeners if any(f is b for b in before)]


def last_buffered_train_loss(trainer) -> float | None:
    """The loss of the step whose weights ``PeftTrainer`` is about to checkpoint.

    Tunix buffers a step's metrics (``_prev_buffered_train_metrics``) and writes them one
    step late; None before the first step.
    """
    last = getattr(trainer, "_prev_buffered_train_metrics", None)
    return float(last.loss) if last is not None and last.losses else None


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
                    "through; see cookbook.core.tunix_moe_routes_on_residual"
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


TQDM_METRICS_ATTRIBUTE = "_tqdm_train_metrics"  # PeftTrainer property naming the progress-bar metrics


def check() -> dict[str, bool]:
    """Whether each private name this module uses is where it expects (for the compat test)."""
    from jax._src import monitoring
    from jax._src.interpreters import partial_eval as pe
    from qwix._src.core import dot_general as qdot
    from qwix._src.core import einsum as qeinsum
    from qwix._src.core import qarray
    from qwix._src.providers import lora as qwix_lora
    from qwix._src.providers import ptq
    from qwix._src.utils import flax_util
    from tunix.models.gemma4 import model as gemma4_model
    from tunix.models.gemma4 import moe as gemma4_moe
    from tunix.models.gemma4 import params_safetensors
    from tunix.sft import peft_trainer
    from tunix.utils import sharding_utils

    block_src = inspect.getsource(gemma4_model.DecoderLayer.block)
    return {
        "qwix._src.providers.lora._compute_lora_delta(lhs, lora_a, lora_b, lhs_ca, lhs_ba, contract_shape, ...)": list(
            inspect.signature(qwix_lora._compute_lora_delta).parameters
        )[:9]
        == ["lhs", "lora_a", "lora_b", "lhs_ca", "lhs_ba", "contract_shape", "batch_shape", "remain_shape", "rank"],
        "qwix._src.utils.flax_util.find_param and get_current_module": callable(getattr(flax_util, "find_param", None))
        and callable(getattr(flax_util, "get_current_module", None)),
        "tunix.sft.peft_trainer._default_loss_fn": callable(getattr(peft_trainer, "_default_loss_fn", None)),
        "jax DynamicJaxprTracer._origin_msg": callable(getattr(pe.DynamicJaxprTracer, "_origin_msg", None)),
        "tunix gemma4 model.shard": callable(getattr(gemma4_model, "shard", None)),
        "tunix sharding_utils.shard": callable(getattr(sharding_utils, "shard", None)),
        "jax.monitoring._scalar_listeners": isinstance(getattr(monitoring, "_scalar_listeners", None), list),
        "PeftTrainer._tqdm_train_metrics": hasattr(peft_trainer.PeftTrainer, TQDM_METRICS_ATTRIBUTE),
        "qwix._src.providers.ptq.WithAux with a replaceable array": hasattr(ptq.WithAux, "replace")
        and "array" in getattr(ptq.WithAux, "__dataclass_fields__", {}),
        "tunix gemma4 Einsum has w, w_scale, dtype, einsum_str": all(
            n in open(gemma4_model.__file__).read() for n in ("self.w_scale", "self.einsum_str", "self.dtype")
        ),
        "qwix._src.core dot_general, einsum, QArray; PtqProvider._dot_general_fn / _einsum_fn": callable(
            getattr(qdot, "dot_general", None)
        )
        and callable(getattr(qeinsum, "einsum", None))
        and isinstance(getattr(qarray, "QArray", None), type)
        and all(f"self.{n}" in open(ptq.__file__).read() for n in ("_dot_general_fn", "_einsum_fn")),
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
