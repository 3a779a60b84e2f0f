"""JAX's private names: the tracer's origin message (abstract models), the monitoring listener list.

Checked against jax/jaxlib 0.10.2.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


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


def checks() -> dict[str, bool]:
    from jax._src import monitoring
    from jax._src.interpreters import partial_eval as pe

    return {
        "jax DynamicJaxprTracer._origin_msg": callable(getattr(pe.DynamicJaxprTracer, "_origin_msg", None)),
        "jax.monitoring._scalar_listeners": isinstance(getattr(monitoring, "_scalar_listeners", None), list),
    }
