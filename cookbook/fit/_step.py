"""The one LoRA train step: what Tunix's ``PeftTrainer`` runs, for everything that compiles or times it.

Forward pass, Tunix's own masked cross-entropy (``core.compat.tunix_loss_fn``), gradients for the
LoRA parameters only, an optax update. The planner (deviceless TPU compile), the remat
measurement, the sharding check and the GPU parity test all call this module, so what they
measure is the step the trainer runs. Two calling conventions over one definition:
:func:`make_train_step` is pure in the states (``jax.jit(...).lower`` on abstract,
sharded states: the planner, the remat table); :func:`nnx_train_step` updates an nnx model
and ``nnx.Optimizer`` in place, as ``PeftTrainer`` does (the sharding check, GPU parity).
"""

from __future__ import annotations

from typing import Any

from cookbook import core


def lora_loss(model, batch: dict[str, Any]):
    """Tunix's training loss of ``model`` on ``batch`` (``input_tokens``, ``input_mask``,
    ``positions``, ``attention_mask``)."""
    return core.compat.tunix_loss_fn()(model, **batch)


def lora_value_and_grad(model, batch: dict[str, Any]):
    """(loss, LoRA gradients) of ``model`` on ``batch``."""
    from flax import nnx

    return nnx.value_and_grad(lora_loss, argnums=nnx.DiffState(0, nnx.LoRAParam))(model, batch)


def make_train_step(graphdef, tx):
    """``step(lora_state, rest, opt_state, batch) -> (lora_state, opt_state, loss)``, pure.

    ``graphdef, lora_state, rest = nnx.split(model, nnx.LoRAParam, ...)``; ``tx`` an optax
    transformation whose state is ``tx.init(lora_state)``.
    """
    import jax
    import optax
    from flax import nnx

    def train_step(lora_state, rest, opt_state, batch):
        loss, grads = jax.value_and_grad(lambda lora: lora_loss(nnx.merge(graphdef, lora, rest), batch))(lora_state)
        updates, opt_state = tx.update(grads, opt_state, lora_state)
        return optax.apply_updates(lora_state, updates), opt_state, loss

    return train_step


def nnx_train_step():
    """An ``nnx.jit`` step ``(model, optimizer, batch) -> (loss, grads)`` that updates both.

    ``optimizer`` is ``nnx.Optimizer(model, tx, wrt=nnx.LoRAParam)``, as in ``PeftTrainer``;
    a jitted step returns its state with the shardings it was given.
    """
    from flax import nnx

    @nnx.jit
    def step(model, optimizer, batch):
        loss, grads = lora_value_and_grad(model, batch)
        optimizer.update(model, grads)
        return loss, grads

    return step


def run_train_steps(model, optimizer, batch: dict[str, Any], steps: int) -> list[float]:
    """``steps`` steps of :func:`nnx_train_step` on one batch; the losses."""
    step = nnx_train_step()
    return [float(step(model, optimizer, batch)[0]) for _ in range(steps)]
