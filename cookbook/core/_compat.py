"""Every reach into a dependency's private API, in one place, with the versions it was checked on.

Each function here touches a name its library does not promise to keep. When a pinned
version changes (requirements.txt), rerun ``tests/core/test_compat.py``: it checks each
reach still finds what it expects, so a rename upstream fails there, by name, instead of
deep inside a training run. Nothing outside this module imports a private name.

Checked against jax/jaxlib 0.10.2, flax 0.12.8, google-tunix 0.1.7, qwix 0.1.8.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

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


def qwix_finds_quantized_weights_when_tracing() -> bool:
    """Let Qwix's QLoRA find an ``nnx.Linear``'s quantized kernel while tracing; idempotent.

    ``qwix._src.utils.flax_util.find_param`` (Qwix 0.1.8) walks a tracer up its parents
    (approach 1) and then compares the *walked* tracer's shape with the candidates'
    (approach 2). Under ``nnx.eval_shape`` / ``nnx.jit`` the weight Qwix's PTQ has just
    replaced by a ``WithAux`` is no longer on that chain, so the walk ends on another
    shape and ``LoraProvider.dot_general`` creates no adapter: an abstract QLoRA model
    (the planner's, a multi-process run's) silently loses every MLP adapter, while
    einsum projections and concrete models keep theirs. The wrapper repeats approach 2
    with the array it was given, among the current module's quantized weights only.
    ``tests/core/test_compat.py`` checks that the original still misses it.
    Returns True when it installed the wrapper, False when it was already installed.
    """
    import jax
    from flax import nnx
    from qwix._src.utils import flax_util

    if getattr(flax_util.find_param, "_cookbook_shape_retry", False):
        return False
    original = flax_util.find_param

    def find_param(x, ptq_array_type=None):
        name = original(x, ptq_array_type)
        if name is not None or ptq_array_type is None or not isinstance(x, jax.core.Tracer):
            return name
        module = flax_util.get_current_module()
        if not isinstance(module, nnx.Module):
            return None
        same = [n for n, node in vars(module).items() if isinstance(node, ptq_array_type) and node.shape == x.shape]
        return same[0] if len(same) == 1 else None

    find_param._cookbook_shape_retry = True  # type: ignore[attr-defined]
    find_param.__wrapped__ = original  # type: ignore[attr-defined]
    flax_util.find_param = find_param
    return True


def qwix_tie_dequantization(provider) -> Any:
    """``provider`` (a ``qwix.LoraProvider``) with each quantized matmul's weight tied to its
    activation: ``jax.lax.optimization_barrier((x, w))`` before Qwix's own ``dot_general`` /
    ``einsum`` whenever ``w`` is a ``QArray`` (``cookbook.lora.lora_provider`` says why).

    Qwix 0.1.8's ``PtqProvider`` calls ``self._dot_general_fn`` / ``self._einsum_fn`` (set from
    constructor arguments ``LoraProvider`` does not pass on), and its QArray and core functions
    live under ``qwix._src.core``. ``tests/lora/test_quant.py`` fails if Qwix stops calling them.
    """
    import jax
    from qwix._src.core import dot_general as qdot
    from qwix._src.core import einsum as qeinsum
    from qwix._src.core import qarray

    def tie(x, w):
        if isinstance(w, qarray.QArray) and not isinstance(x, qarray.QArray):
            x, w = jax.lax.optimization_barrier((x, w))
        return x, w

    def dot_general(lhs, rhs, dimension_numbers, **kwargs):
        lhs, rhs = tie(lhs, rhs)
        return qdot.dot_general(lhs, rhs, dimension_numbers, **kwargs)

    def einsum(einsum_str, lhs, rhs, **kwargs):
        lhs, rhs = tie(lhs, rhs)
        return qeinsum.einsum(einsum_str, lhs, rhs, _qwix_dot_general=qdot.dot_general, **kwargs)

    provider._dot_general_fn = dot_general
    provider._einsum_fn = einsum
    return provider


_LORA_GRADS_AS_QWIX = [0]  # depth of open qwix_lora_grads_as_is(True) blocks


def qwix_lora_grads_for_cpu() -> bool:
    """On CPU, the LoRA weight gradients of Qwix's ``dot_general`` path in XLA CPU's own layout; idempotent.

    Qwix 0.1.8 computes an ``nnx.Linear``'s LoRA (the MLP's gate, up and down projections) as
    ``dot(dot(x, A), B)`` in ``qwix._src.providers.lora._compute_lora_delta``. From JAX's transpose
    rule, XLA CPU (jaxlib 0.10.2) gets dB and dA as dots whose large operand (the activation
    gradient, the activation: tokens x ffn) it transposes in a loop fusion that recomputes the
    GELU and gate product in transposed order: 44% of the tiny train step's CPU time. The
    replacement (a ``custom_vjp``, same math) takes that operand as the right-hand side in its
    own layout (dA as the transpose of dot(dA-gradient, x)): the tiny step 0.37 -> 0.22 s. Only
    while tracing for CPU and outside :func:`qwix_lora_grads_as_is`; a TPU host, and the
    planner's deviceless TPU compiles, trace Qwix's own code. Other shapes (batch axes, several
    contracting axes) go to the original. ``tests/core/test_compat.py`` checks the gradients
    and the compiled step. Returns True when it installed the patch, False when already installed.
    """
    import jax
    from qwix._src.providers import lora as qwix_lora

    if getattr(qwix_lora._compute_lora_delta, "_cookbook_cpu_grads", False):
        return False
    original = qwix_lora._compute_lora_delta

    def dot(x, y, contract, precision):  # contract x's axes `contract` with y's leading axes
        return jax.lax.dot_general(x, y, ((contract, tuple(range(len(contract)))), ((), ())), precision=precision)

    def fwd(x, a, b, precision):
        xa = dot(x, a, (x.ndim - 1,), precision)
        return dot(xa, b, (x.ndim - 1,), precision), (x, a, b, xa)

    @functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
    def delta(x, a, b, precision):
        return fwd(x, a, b, precision)[0]

    def bwd(precision, res, g):
        x, a, b, xa = res
        lead = tuple(range(x.ndim - 1))
        g_xa = jax.lax.dot_general(g, b, (((g.ndim - 1,), (1,)), ((), ())), precision=precision)
        d_b = jax.lax.dot_general(xa, g, ((lead, lead), ((), ())), precision=precision)
        d_a = jax.lax.dot_general(g_xa, x, ((lead, lead), ((), ())), precision=precision).T
        d_x = jax.lax.dot_general(g_xa, a, (((g.ndim - 1,), (1,)), ((), ())), precision=precision)
        return d_x.astype(x.dtype), d_a.astype(a.dtype), d_b.astype(b.dtype)

    delta.defvjp(fwd, bwd)

    def _compute_lora_delta(
        lhs, lora_a, lora_b, lhs_ca, lhs_ba, contract_shape, batch_shape, remain_shape, rank, precision=None
    ):
        simple = (
            not batch_shape
            and len(contract_shape) == 1
            and len(remain_shape) == 1
            and tuple(lhs_ca) == (lhs.ndim - 1,)
            and lora_a.ndim == 2
            and lora_b.ndim == 2
        )
        if simple and not _LORA_GRADS_AS_QWIX[0] and jax.default_backend() == "cpu":
            return delta(lhs, lora_a, lora_b, precision)
        return original(
            lhs, lora_a, lora_b, lhs_ca, lhs_ba, contract_shape, batch_shape, remain_shape, rank, precision=precision
        )

    _compute_lora_delta._cookbook_cpu_grads = True  # type: ignore[attr-defined]
    _compute_lora_delta.__wrapped__ = original  # type: ignore[attr-defined]
    qwix_lora._compute_lora_delta = _compute_lora_delta
    return True


@contextlib.contextmanager
def qwix_lora_grads_as_is(enabled: bool = True) -> Iterator[None]:
    """Trace Qwix's own LoRA gradients inside the block (``enabled``): for a program compiled for
    another platform from a CPU process (the planner's TPU compiles), which must be the program
    a TPU host runs (:func:`qwix_lora_grads_for_cpu`)."""
    _LORA_GRADS_AS_QWIX[0] += bool(enabled)
    try:
        yield
    finally:
        _LORA_GRADS_AS_QWIX[0] -= bool(enabled)


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
