"""The one LoRA train step: what Tunix's ``PeftTrainer`` runs, for everything that compiles or times it.

Forward pass, Tunix's own masked cross-entropy (``core.compat.tunix_loss_fn``), gradients for the
LoRA parameters only, an optax update. The planner (deviceless TPU compile), the remat
measurement, the sharding check and the GPU parity test all call this module, so what they
measure is the step the trainer runs (and :func:`make_rl_step`, the RL actor's update with Tunix's
own policy loss, for the planner's RL compiles). Two calling conventions over one definition:
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


def rl_algo_config(objective: str, group: int):
    """Tunix's algorithm config of an RL actor step: ``"dapo"`` (CodeV-R1's: clip 0.2 / 0.28, no KL,
    token-mean loss) or ``"grpo"`` (KL to the reference, beta 0.04), ``group`` samples per prompt.
    The overlong penalty is off, as in ``cookbook rl`` (docs/traps.md trap 81)."""
    from tunix.rl.grpo import dapo_learner, grpo_learner

    if objective == "dapo":
        algo = dapo_learner.DAPOConfig(num_generations=group, overlong_buffer=None)
    elif objective == "grpo":
        algo = grpo_learner.GRPOConfig(num_generations=group, loss_agg_mode="token-mean")
    else:
        raise ValueError(f"objective {objective!r} is not an RL algorithm; choose dapo or grpo")
    algo.temperature = 1.0  # set by Tunix's learner from the rollout config; CodeV-R1 samples at 1.0
    return algo


def make_rl_step(graphdef, tx, algo, *, pad_id: int = 0, eos_id: int = 1):
    """``step(lora_state, rest, opt_state, example) -> (lora_state, opt_state, loss)``, pure: the
    RL actor's update as Tunix's ``GRPOLearner``/``DAPOLearner`` runs it, with Tunix's own policy
    loss (``tunix.rl`` registry's ``grpo``: per-token log-probs of the completions, the clipped
    importance ratio against the rollout's log-probs, the KL term where ``algo.beta``), gradients
    for the LoRA parameters only, and the optax update. ``example`` is a
    ``tunix.rl.common.TrainExample``."""
    import jax
    import optax
    from flax import nnx
    from tunix.rl import function_registry

    policy_loss = function_registry.get_policy_loss_fn(algo.policy_loss_fn)

    def rl_step(lora_state, rest, opt_state, example):
        def loss(lora):
            return policy_loss(
                nnx.merge(graphdef, lora, rest), example, algo_config=algo, pad_id=pad_id, eos_id=eos_id
            )[0]

        value, grads = jax.value_and_grad(loss)(lora_state)
        updates, opt_state = tx.update(grads, opt_state, lora_state)
        return optax.apply_updates(lora_state, updates), opt_state, value

    return rl_step


def run_train_steps(model, optimizer, batch: dict[str, Any], steps: int) -> list[float]:
    """``steps`` steps of :func:`nnx_train_step` on one batch; the losses."""
    step = nnx_train_step()
    return [float(step(model, optimizer, batch)[0]) for _ in range(steps)]
