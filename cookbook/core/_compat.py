"""Every reach into a dependency's private API, in one place, with the versions it was checked on.

Each function here touches a name its library does not promise to keep. When a pinned
version changes (requirements.txt), rerun ``tests/core/test_compat.py``: it checks each
reach still finds what it expects, so a rename upstream fails there, by name, instead of
deep inside a training run. Nothing outside this module imports a private name.

Checked against jax/jaxlib 0.10.2, flax 0.12.8, google-tunix 0.1.7, qwix 0.1.8.
"""

from __future__ import annotations

import contextlib
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


TQDM_METRICS_ATTRIBUTE = "_tqdm_train_metrics"  # PeftTrainer property naming the progress-bar metrics


def check() -> dict[str, bool]:
    """Whether each private name this module uses is where it expects (for the compat test)."""
    from jax._src import monitoring
    from jax._src.interpreters import partial_eval as pe
    from tunix.models.gemma4 import model as gemma4_model
    from tunix.sft import peft_trainer
    from tunix.utils import sharding_utils

    return {
        "tunix.sft.peft_trainer._default_loss_fn": callable(getattr(peft_trainer, "_default_loss_fn", None)),
        "jax DynamicJaxprTracer._origin_msg": callable(getattr(pe.DynamicJaxprTracer, "_origin_msg", None)),
        "tunix gemma4 model.shard": callable(getattr(gemma4_model, "shard", None)),
        "tunix sharding_utils.shard": callable(getattr(sharding_utils, "shard", None)),
        "jax.monitoring._scalar_listeners": isinstance(getattr(monitoring, "_scalar_listeners", None), list),
        "PeftTrainer._tqdm_train_metrics": hasattr(peft_trainer.PeftTrainer, TQDM_METRICS_ATTRIBUTE),
        "PeftTrainer buffers _prev_buffered_train_metrics":
            "_prev_buffered_train_metrics" in open(peft_trainer.__file__).read(),
    }
