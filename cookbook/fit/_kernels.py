"""The work inside the splash-attention kernels, which the TPU compiler's cost model does not see.

Splash attention is a Pallas kernel (a Mosaic custom call) that declares no cost estimate,
so ``compiled.cost_analysis()`` counts none of its FLOPs and ``optimal_seconds`` none of its
time: compiled with splash, a step reports only the work outside attention. Measured here
on ``tiny`` (tests/fit/test_search.py): the compiled FLOPs of dense attention minus those of
splash equal the whole dense attention's matmul FLOPs, where splash, counted, would report
about as much attention work as dense. Left alone, every splash layout looks cheaper than
it is and a search ranks it too high.

So the planner adds the kernels' work from the mask's block structure, the way the kernel
does it: every (query block, key block) pair the mask does not fully hide is computed in
full (``block`` x ``block``), per query head, per sequence; two block matmuls forward
(scores, values), seven backward (Tunix sets the separate dq and dkv block sizes, so the
dq kernel recomputes scores and runs 3 and the dkv kernel runs 4), and the forward again
under any remat. Written by hand: the kernel has no cost model to ask.
"""

from __future__ import annotations

FORWARD_MATMULS = 2  # scores Q K^T, then P V
BACKWARD_MATMULS = 7  # dq kernel: Q K^T, dO V^T, dS K; dkv kernel: K Q^T, dO V^T, P^T dO, dS^T Q
DENSE_BACKWARD_MATMULS = 4  # XLA's dense attention keeps P: dO V^T, P^T dO, dS K, dS^T Q


def visible_blocks(seq_len: int, block: int, window: int | None) -> int:
    """(query block, key block) pairs a causal mask (``window``: sliding, keys q-window+1..q) leaves work in."""
    n = -(-seq_len // block)
    count = 0
    for i in range(n):
        q_lo = i * block
        for j in range(i + 1):  # causal: no key block after the query block
            k_hi = min((j + 1) * block, seq_len) - 1
            if window is None or k_hi >= q_lo - window + 1:
                count += 1
    return count


def attention_flops(preset, *, batch: int, seq_len: int, block: int, remat: str, splash: bool = True) -> float:
    """Attention matmul FLOPs of one train step, all chips together.

    ``splash=True``: what the splash kernels compute (visible blocks only, see the module doc);
    ``splash=False``: XLA's dense attention, every block (the compiler does count this one).
    """
    forward = FORWARD_MATMULS * (2 if remat != "none" else 1)
    matmuls = forward + (BACKWARD_MATMULS if splash else DENSE_BACKWARD_MATMULS)
    n = -(-seq_len // block)
    total = 0.0
    for kind in preset.layer_kinds:
        head_dim = preset.global_head_dim if kind == "global" else preset.head_dim
        window = preset.sliding_window if kind == "sliding" else None
        blocks = visible_blocks(seq_len, block, window) if splash else n * n
        total += blocks * 2.0 * block * block * head_dim * preset.num_heads * matmuls
    return total * batch


def splash_kernel_flops_per_chip(config) -> float:
    """The splash kernels' FLOPs per chip per step of a ``PlanConfig`` (0 with dense attention)."""
    if not config.flash_attention:
        return 0.0
    from cookbook import core, models

    preset = models.get_preset(config.model_preset)
    if config.num_layers is not None:  # a layer-slice probe (the depth is all that matters here)
        preset = preset.with_overrides(num_layers=config.num_layers)
    chips = core.get_slice(config.slice_name).num_devices  # per device (TPU7x: 2 per chip)
    return (
        attention_flops(
            preset, batch=config.batch_size, seq_len=config.seq_len, block=config.flash_block, remat=config.remat
        )
        / chips
    )
