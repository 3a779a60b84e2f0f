"""What each remat choice costs on this machine, and the LoRA-inside-remat trap, measured.

The choices themselves (``none``, ``block``, ``decoder``, ``decoder_dots``) are the model
stage's table (``cookbook.models.REMAT_CHOICES``). Switching remat after LoRA is applied is
the only safe order (``docs/traps.md`` trap 1: Qwix creates adapters lazily and a remat-wrapped
initialising call drops them);
``cookbook.lora.apply_lora`` enforces it and checks the LoRA count. :func:`measure_remat`
compiles the same train step ``cookbook.fit`` uses once per choice on the local devices
and reports compiled memory (``memory_analysis()``) and measured step time.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from cookbook import core, models
from cookbook.fit import _step as step_lib


@dataclasses.dataclass(frozen=True, kw_only=True)
class RematMeasurement:
    remat: str
    temp_bytes: int
    argument_bytes: int
    flops: float
    step_s: float  # median of the timed steps (local devices)
    compile_s: float
    loss: float  # first-step loss: identical for every choice (remat never changes the math)


def example_batch(batch: int, seq_len: int, vocab: int, *, mesh=None, seed: int = 0) -> dict[str, Any]:
    """A random training batch in Tunix's loss-function form; sharded on ``fsdp`` given a mesh."""
    import jax
    import jax.numpy as jnp
    from tunix.sft.utils import make_causal_attn_mask

    tokens = jax.random.randint(jax.random.key(seed), (batch, seq_len), 3, vocab, dtype=jnp.int32)
    mask = jnp.ones((batch, seq_len), jnp.bool_)
    positions = jnp.broadcast_to(jnp.arange(seq_len, dtype=jnp.int32), (batch, seq_len))
    out = {
        "input_tokens": tokens,
        "input_mask": mask,
        "positions": positions,
        "attention_mask": make_causal_attn_mask(mask),
    }
    if mesh is not None:
        from jax.sharding import NamedSharding, PartitionSpec

        out = {k: jax.device_put(v, NamedSharding(mesh, PartitionSpec("fsdp"))) for k, v in out.items()}
    return out


def measure_remat(
    model,
    *,
    choices: tuple[str, ...] = tuple(models.REMAT_CHOICES),
    batch: int = 8,
    seq_len: int = 128,
    steps: int = 3,
    learning_rate: float = 1e-3,
) -> list[RematMeasurement]:
    """Compile and time the LoRA train step of ``model`` under each remat choice.

    ``model`` is a LoRA model (``cookbook.lora.apply_lora``) on the local devices. Each
    choice compiles the step ``cookbook.fit`` compiles for TPUs (Tunix's loss, LoRA-only
    gradients, AdamW), reads ``memory_analysis()`` and times ``steps`` steps after a
    warm-up. The model's remat setting is restored afterwards.
    """
    import jax
    import numpy as np
    import optax
    from flax import nnx

    previous = [cfg.remat_config for cfg in models.tunix_configs(model)]
    data = example_batch(batch, seq_len, model.config.num_embed)
    tx = optax.adamw(learning_rate)
    out = []
    try:
        for name in choices:
            models.set_remat(model, name)
            graphdef, lora_state, rest = nnx.split(model, nnx.LoRAParam, ...)
            opt_state = tx.init(lora_state)
            step = jax.jit(step_lib.make_train_step(graphdef, tx))
            t0 = time.perf_counter()
            with models.remat_policy(name), core.compile_cache_off():  # its compile time is reported
                compiled = step.lower(lora_state, rest, opt_state, data).compile()
            compile_s = time.perf_counter() - t0
            mem = compiled.memory_analysis()
            cost = compiled.cost_analysis()
            cost = cost[0] if isinstance(cost, list | tuple) else cost
            state, opt, loss = compiled(lora_state, rest, opt_state, data)  # warm-up
            first_loss = float(loss)
            times = []
            for _ in range(steps):
                t0 = time.perf_counter()
                state, opt, loss = compiled(state, rest, opt, data)
                jax.block_until_ready(loss)
                times.append(time.perf_counter() - t0)
            out.append(
                RematMeasurement(
                    remat=name,
                    temp_bytes=int(mem.temp_size_in_bytes),
                    argument_bytes=int(mem.argument_size_in_bytes),
                    flops=float(cost.get("flops", 0.0)),
                    step_s=float(np.median(times)),
                    compile_s=compile_s,
                    loss=first_loss,
                )
            )
    finally:
        for cfg, old in zip(models.tunix_configs(model), previous, strict=False):
            cfg.remat_config = old
    return out


def format_remat_table(rows: list[RematMeasurement]) -> str:
    lines = [f"{'remat':<13} {'temp MiB':>9} {'args MiB':>9} {'GFLOP':>8} {'step ms':>8}  saves"]
    for r in rows:
        lines.append(
            f"{r.remat:<13} {r.temp_bytes / 2**20:>9.2f} {r.argument_bytes / 2**20:>9.2f} "
            f"{r.flops / 1e9:>8.3f} {1e3 * r.step_s:>8.1f}  {models.REMAT_CHOICES[r.remat].saves}"
        )
    return "\n".join(lines)


def plot(rows: list[RematMeasurement], title: str = "remat on this machine"):
    """Bar charts: compiled temp memory and step time per choice."""
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.2))
    names = [r.remat for r in rows]
    a.bar(names, [r.temp_bytes / 2**20 for r in rows], color="tab:blue")
    a.set_ylabel("compiled temp memory (MiB)")
    b.bar(names, [1e3 * r.step_s for r in rows], color="tab:orange")
    b.set_ylabel("step time (ms)")
    for ax in (a, b):
        ax.tick_params(axis="x", rotation=20)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def lora_count_under_remat(model, lora_cfg, *, preset, remat: str = "decoder") -> dict[str, int]:
    """Trap 1, shown: LoRA counts when Qwix runs on a remat model directly vs via the cookbook.

    ``model`` is a base (no LoRA) Tunix model; it is not changed. Returns
    ``{"expected", "qwix_on_remat_model", "cookbook_apply_lora"}``: the middle one is 0
    while Qwix creates adapters inside ``nnx.remat`` and drops them.
    """
    import qwix
    from flax import nnx

    from cookbook import lora

    previous = [cfg.remat_config for cfg in models.tunix_configs(model)]
    models.set_remat(model, remat)
    try:
        provider = qwix.LoraProvider(
            module_path=lora.qwix_module_path(lora_cfg.targets, preset), rank=lora_cfg.rank, alpha=float(lora_cfg.alpha)
        )
        naive = qwix.apply_lora_to_model(model, provider, rngs=nnx.Rngs(0), **lora.dummy_inputs())
        naive_count = lora.count_lora_params(naive)
        safe = lora.apply_lora(model, lora_cfg, preset=preset, remat=remat)
    finally:
        for cfg, old in zip(models.tunix_configs(model), previous, strict=False):
            cfg.remat_config = old
    return {
        "expected": lora.expected_lora_params(preset, lora_cfg),
        "qwix_on_remat_model": naive_count,
        "cookbook_apply_lora": lora.count_lora_params(safe),
    }
