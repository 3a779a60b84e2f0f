"""Switches on a built Tunix Gemma 4 model: rematerialisation (the one table) and flash attention.

Tunix's Gemma 4 offers three (``RematConfig``): ``none`` keeps every activation for the
backward pass; ``block`` wraps the attention block and the MLP separately in
``nnx.remat``; ``decoder`` wraps each whole decoder layer. One more is added here that
Tunix does not expose, ``decoder_dots``: per-decoder remat that *saves* the outputs of the
weight matmuls (``jax.checkpoint_policies.dots_with_no_batch_dims_saveable``, MaxText's
"minimal" policy) and recomputes attention scores and elementwise work only. Its policy
reaches Tunix's ``nnx.remat`` calls through :func:`remat_policy` while a step is traced.

Every place that names a remat choice (LoRA application, the train config, the planner and
its CLI, notebook 04) reads :data:`REMAT_CHOICES`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

from cookbook import core


@dataclasses.dataclass(frozen=True, kw_only=True)
class RematChoice:
    name: str
    tunix: str  # Tunix RematConfig member: "none" | "block" | "decoder"
    policy: str | None  # jax.checkpoint_policies attribute; None: save nothing inside
    saves: str  # what the backward pass finds stored


REMAT_CHOICES: dict[str, RematChoice] = {
    c.name: c
    for c in (
        RematChoice(name="none", tunix="none", policy=None, saves="every activation"),
        RematChoice(name="block", tunix="block", policy=None, saves="inputs of each attention block and MLP"),
        RematChoice(name="decoder", tunix="decoder", policy=None, saves="the input of each decoder layer"),
        RematChoice(
            name="decoder_dots",
            tunix="decoder",
            policy="dots_with_no_batch_dims_saveable",
            saves="decoder inputs and every weight-matmul output (attention scores recomputed)",
        ),
    )
}


def get_remat_choice(name: str) -> RematChoice:
    if name not in REMAT_CHOICES:
        raise ValueError(f"remat={name!r} is not one of {list(REMAT_CHOICES)}")
    return REMAT_CHOICES[name]


def tunix_configs(model) -> list[Any]:
    """Distinct Tunix ``ModelConfig`` objects referenced by the model's modules."""
    seen: dict[int, Any] = {}
    for _, module in model.iter_modules():
        cfg = getattr(module, "config", None)
        if cfg is not None and hasattr(cfg, "remat_config"):
            seen.setdefault(id(cfg), cfg)
    return list(seen.values())


def set_remat(model, name: str) -> None:
    """Switch a built Tunix model to remat choice ``name`` (its ``RematConfig`` part).

    The policy of ``decoder_dots`` applies while a step is traced inside
    :func:`remat_policy`.
    """
    from tunix.models.gemma4 import model as gemma4

    member = getattr(gemma4.RematConfig, get_remat_choice(name).tunix.upper())
    for cfg in tunix_configs(model):
        cfg.remat_config = member


@contextlib.contextmanager
def remat_policy(name: str) -> Iterator[None]:
    """While tracing, give Tunix's ``nnx.remat`` calls the policy of choice ``name``.

    Tunix calls ``nnx.remat(fn, graph_updates=False)`` on every forward pass, with no way
    to pass a policy; ``cookbook.core.compat.nnx_remat_with_policy`` swaps ``flax.nnx.remat``
    for a partial with the policy for the duration of the trace (a no-op for choices without one).
    """
    with core.compat.nnx_remat_with_policy(get_remat_choice(name).policy):
        yield


def set_flash_attention(model, block_size: int = 512) -> None:
    """Switch a built Tunix model to splash attention with ``block_size`` blocks.

    Only after LoRA is applied (``docs/traps.md`` trap 2: Qwix's initialising call fails with flash
    attention on); Tunix forbids the sliding-window KV cache with it. Block 512: Tunix's
    default 1024 overflows VMEM in the 31B global layers' backward kernel on v5p (trap 5 there).
    Splash attention is a TPU (Pallas) kernel: it compiles for a TPU, not for CPU.
    """
    for cfg in tunix_configs(model):
        if hasattr(cfg, "use_flash_attention"):
            cfg.use_sliding_window_kv_cache = False
            cfg.use_flash_attention = True
            cfg.flash_attention_block_size = block_size
