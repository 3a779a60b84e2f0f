"""Qwix's private names: QLoRA's quantized weights when tracing, a dequantization tied to its
activation, and the CPU formulation of the LoRA gradients.

Checked against qwix 0.1.8 (and jax 0.10.2, flax 0.12.8).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any


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


def checks() -> dict[str, bool]:
    import inspect

    from qwix._src.core import dot_general as qdot
    from qwix._src.core import einsum as qeinsum
    from qwix._src.core import qarray
    from qwix._src.providers import lora as qwix_lora
    from qwix._src.providers import ptq
    from qwix._src.utils import flax_util

    return {
        "qwix._src.providers.lora._compute_lora_delta(lhs, lora_a, lora_b, lhs_ca, lhs_ba, contract_shape, ...)": list(
            inspect.signature(qwix_lora._compute_lora_delta).parameters
        )[:9]
        == ["lhs", "lora_a", "lora_b", "lhs_ca", "lhs_ba", "contract_shape", "batch_shape", "remain_shape", "rank"],
        "qwix._src.utils.flax_util.find_param and get_current_module": callable(getattr(flax_util, "find_param", None))
        and callable(getattr(flax_util, "get_current_module", None)),
        "qwix._src.providers.ptq.WithAux with a replaceable array": hasattr(ptq.WithAux, "replace")
        and "array" in getattr(ptq.WithAux, "__dataclass_fields__", {}),
        "qwix._src.core dot_general, einsum, QArray; PtqProvider._dot_general_fn / _einsum_fn": callable(
            getattr(qdot, "dot_general", None)
        )
        and callable(getattr(qeinsum, "einsum", None))
        and isinstance(getattr(qarray, "QArray", None), type)
        and all(f"self.{n}" in open(ptq.__file__).read() for n in ("_dot_general_fn", "_einsum_fn")),
    }
