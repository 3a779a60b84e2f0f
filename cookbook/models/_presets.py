"""Gemma 4 model presets: the CPU-sized random models and the released checkpoints, by name.

Every size the cookbook runs at is a :class:`ModelPreset` (:mod:`cookbook.models._architecture`),
built by one function here: ``tiny`` and ``small`` (31B's dense structure), ``tiny_e2b``,
``tiny_12b`` and ``tiny_26b_a4b`` (random structural twins of E2B/E4B, 12B and 26B-A4B), and the
real checkpoints, which mirror Tunix's ``ModelConfig.gemma4_*`` classmethods where Tunix 0.1.7 has
one, and Google's released config.json everywhere (tests check both).
"""

from __future__ import annotations

import math
from typing import Any

from cookbook.models._architecture import (  # noqa: F401  (re-exported for the package's modules)
    SLIDING_4_GLOBAL_1,
    SLIDING_5_GLOBAL_1,
    AttentionKind,
    ModelPreset,
)


def tiny() -> ModelPreset:
    """CPU default: ~1M random parameters with 31B's structure.

    6 layers in 31B's 5 sliding : 1 global pattern; the global layer has K = V, its own
    KV-head count (2, fewer than the 4 sliding KV heads, as 4 < 16 on 31B) and a doubled key
    size; logit soft-cap; proportional RoPE on global layers. Widths divide a 4 x 2
    (fsdp x tp) mesh, and the 2 global KV heads cap tp at 2 exactly as 31B's 4 cap it at 4.
    """
    return ModelPreset(
        name="tiny",
        hf_checkpoint=None,
        twin_of="gemma4_31b",
        num_layers=6,
        vocab_size=1024,
        embed_dim=128,
        hidden_dim=512,
        num_heads=8,
        head_dim=32,
        num_kv_heads=4,
        num_global_kv_heads=2,
        global_head_dim=64,
        sliding_window=64,
        attention_pattern=SLIDING_5_GLOBAL_1,
        k_eq_v_global=True,
        max_position_embeddings=4096,
        dtype="float32",
        random_embed_std=0.08,
    )


def small() -> ModelPreset:
    """CPU benchmark size: ~100M random parameters, 31B's structure, 12 layers."""
    return ModelPreset(
        name="small",
        hf_checkpoint=None,
        num_layers=12,
        vocab_size=1024,
        embed_dim=768,
        hidden_dim=3072,
        num_heads=12,
        head_dim=64,
        num_kv_heads=4,
        num_global_kv_heads=2,
        global_head_dim=128,
        sliding_window=512,
        attention_pattern=SLIDING_5_GLOBAL_1,
        k_eq_v_global=True,
        max_position_embeddings=4096,
        dtype="float32",
        random_embed_std=0.05,
    )


def tiny_e2b() -> ModelPreset:
    """A random CPU-sized twin of E2B's structure (E4B's too, but for its pattern and MLP).

    10 layers in E2B's 4 sliding : 1 global pattern, K and V separate on global layers, one
    KV head (as E2B) with a doubled key size on global layers; per-layer input embeddings; the
    last 5 layers KV-shared (E2B: 20 of 35) with a 2x wide MLP (E2B's ``double_wide_mlp``).
    The last non-shared layer is global and the one before it sliding, as in E2B and E4B:
    the only layout Tunix's sharing pattern agrees with transformers' on
    (``ModelPreset.kv_source_layers``).
    """
    return ModelPreset(
        name="tiny_e2b",
        hf_checkpoint=None,
        twin_of="gemma4_e2b",
        num_layers=10,
        vocab_size=1024,
        embed_dim=128,
        hidden_dim=512,
        num_heads=8,
        head_dim=32,
        num_kv_heads=1,
        num_global_kv_heads=None,
        global_head_dim=64,
        sliding_window=64,
        attention_pattern=SLIDING_4_GLOBAL_1,
        k_eq_v_global=False,
        per_layer_input_dim=32,
        num_kv_shared_layers=5,
        double_wide_mlp=True,
        max_position_embeddings=4096,
        dtype="float32",
        random_embed_std=0.08,
    )


def tiny_26b_a4b() -> ModelPreset:
    """A random CPU-sized twin of 26B-A4B's structure: experts beside the dense MLP.

    6 layers in the 5 sliding : 1 global pattern, K = V global layer with fewer KV heads and a
    doubled key size (as 26B-A4B: 8 sliding, 2 global KV heads); 8 experts, 2 active per
    token (26B-A4B: 128, 8), expert width a quarter of the embedding and the dense MLP three
    quarters of it (26B-A4B: 704 and 2112 of 2816).
    """
    return ModelPreset(
        name="tiny_26b_a4b",
        hf_checkpoint=None,
        twin_of="gemma4_26b_a4b",
        num_layers=6,
        vocab_size=1024,
        embed_dim=128,
        hidden_dim=96,
        num_heads=8,
        head_dim=32,
        num_kv_heads=4,
        num_global_kv_heads=2,
        global_head_dim=64,
        sliding_window=64,
        attention_pattern=SLIDING_5_GLOBAL_1,
        k_eq_v_global=True,
        num_experts=8,
        num_experts_per_tok=2,
        expert_dim=32,
        max_position_embeddings=4096,
        dtype="float32",
        random_embed_std=0.08,
    )


def tiny_12b() -> ModelPreset:
    """A random CPU-sized twin of 12B's structure, in its released ``gemma4_unified`` layout.

    6 layers in the 5 sliding : 1 global pattern; K = V on the global layer with ONE KV head
    (12B: 8 sliding KV heads, 1 global, 16 query heads), so tensor parallelism is capped at 1 as
    on 12B (``cookbook.mesh.max_tp``: the global KV head cannot be split); a doubled global key
    size; no per-layer inputs, KV sharing or experts. Saved as
    ``Gemma4UnifiedForConditionalGeneration`` (``model_type: gemma4_unified``), as Google
    released 12B.
    """
    return ModelPreset(
        name="tiny_12b",
        hf_checkpoint=None,
        twin_of="gemma4_12b",
        num_layers=6,
        vocab_size=1024,
        embed_dim=128,
        hidden_dim=512,
        num_heads=8,
        head_dim=32,
        num_kv_heads=4,
        num_global_kv_heads=1,
        global_head_dim=64,
        sliding_window=64,
        attention_pattern=SLIDING_5_GLOBAL_1,
        k_eq_v_global=True,
        max_position_embeddings=4096,
        dtype="float32",
        random_embed_std=0.08,
        hf_layout="gemma4_unified",
    )


def gemma4_12b() -> ModelPreset:
    """Gemma 4 12B (dense, released 2026-06-03): the size that fits one chip.

    Released as ``Gemma4UnifiedForConditionalGeneration`` (encoder-free multimodal: no vision or
    audio tower). Its text decoder: 48 layers, 5 sliding : 1 global, K = V global layers with a
    single KV head and 512-wide keys. Tunix 0.1.7 has no ``ModelConfig.gemma4_12b``; this preset
    is checked against Google's config.json instead (``tests/fixtures/real-gemma4``).
    """
    return ModelPreset(
        name="gemma4_12b",
        hf_checkpoint="google/gemma-4-12B-it",
        num_layers=48,
        vocab_size=262_144,
        embed_dim=3840,
        hidden_dim=3840 * 4,
        num_heads=16,
        head_dim=256,
        num_kv_heads=8,
        num_global_kv_heads=1,
        global_head_dim=512,
        sliding_window=1024,
        attention_pattern=SLIDING_5_GLOBAL_1,
        k_eq_v_global=True,
        max_position_embeddings=262_144,
        hf_layout="gemma4_unified",
    )


def gemma4_31b() -> ModelPreset:
    """Gemma 4 31B (dense): the production target."""
    return ModelPreset(
        name="gemma4_31b",
        hf_checkpoint="google/gemma-4-31B-it",
        num_layers=60,
        vocab_size=262_144,
        embed_dim=5376,
        hidden_dim=5376 * 4,
        num_heads=32,
        head_dim=256,
        num_kv_heads=16,
        num_global_kv_heads=4,
        global_head_dim=512,
        sliding_window=1024,
        attention_pattern=SLIDING_5_GLOBAL_1,
        k_eq_v_global=True,
        max_position_embeddings=262_144,
    )


def gemma4_26b_a4b() -> ModelPreset:
    """Gemma 4 26B-A4B: mixture of experts (128 experts, 8 active) beside a dense MLP."""
    return ModelPreset(
        name="gemma4_26b_a4b",
        hf_checkpoint="google/gemma-4-26B-A4B-it",
        num_layers=30,
        vocab_size=262_144,
        embed_dim=2816,
        hidden_dim=2112,
        num_heads=16,
        head_dim=256,
        num_kv_heads=8,
        num_global_kv_heads=2,
        global_head_dim=512,
        sliding_window=1024,
        attention_pattern=SLIDING_5_GLOBAL_1,
        k_eq_v_global=True,
        num_experts=128,
        num_experts_per_tok=8,
        expert_dim=704,
        max_position_embeddings=262_144,
    )


def gemma4_e2b() -> ModelPreset:
    """Gemma 4 E2B: per-layer embeddings, 4 sliding : 1 global, KV sharing in the last 20."""
    return ModelPreset(
        name="gemma4_e2b",
        hf_checkpoint="google/gemma-4-E2B-it",
        num_layers=35,
        vocab_size=262_144,
        embed_dim=1536,
        hidden_dim=1536 * 4,
        num_heads=8,
        head_dim=256,
        num_kv_heads=1,
        num_global_kv_heads=None,
        global_head_dim=512,
        sliding_window=512,
        attention_pattern=SLIDING_4_GLOBAL_1,
        k_eq_v_global=False,
        per_layer_input_dim=256,
        num_kv_shared_layers=20,
        double_wide_mlp=True,
    )


def gemma4_e4b() -> ModelPreset:
    """Gemma 4 E4B: per-layer embeddings, 5 sliding : 1 global, KV sharing in the last 18."""
    return ModelPreset(
        name="gemma4_e4b",
        hf_checkpoint="google/gemma-4-E4B-it",
        num_layers=42,
        vocab_size=262_144,
        embed_dim=2560,
        hidden_dim=2560 * 4,
        num_heads=8,
        head_dim=256,
        num_kv_heads=2,
        num_global_kv_heads=None,
        global_head_dim=512,
        sliding_window=512,
        attention_pattern=SLIDING_5_GLOBAL_1,
        k_eq_v_global=False,
        per_layer_input_dim=256,
        num_kv_shared_layers=18,
    )


PRESETS = {
    f.__name__: f
    for f in (
        tiny,
        small,
        tiny_e2b,
        tiny_12b,
        tiny_26b_a4b,
        gemma4_e2b,
        gemma4_e4b,
        gemma4_12b,
        gemma4_31b,
        gemma4_26b_a4b,
    )
}


def get_preset(name: str | ModelPreset) -> ModelPreset:
    """Look a preset up by name (a ``ModelPreset`` passes through)."""
    if isinstance(name, ModelPreset):
        return name
    try:
        return PRESETS[name]()
    except KeyError:
        raise ValueError(f"Unknown model preset {name!r}. Choose one of: {', '.join(PRESETS)}.") from None


def describe(preset: ModelPreset) -> dict[str, Any]:
    """A one-row summary used by notebooks to put presets side by side."""
    return {
        "preset": preset.name,
        "layers": preset.num_layers,
        "pattern": f"{preset.attention_pattern.count('sliding')}:{preset.attention_pattern.count('global')}",
        "embed": preset.embed_dim,
        "mlp": preset.hidden_dim,
        "q heads x dim": f"{preset.num_heads} x {preset.head_dim}",
        "kv heads (sliding)": preset.num_kv_heads,
        "kv heads (global)": preset.effective_global_kv_heads,
        "global key size": preset.global_head_dim,
        "K = V global": preset.k_eq_v_global,
        "window": preset.sliding_window,
        "vocab": preset.vocab_size,
        "params": _human(preset.num_params()),
    }


def _human(n: int) -> str:
    if n < 1_000:
        return str(n)
    exp = min(int(math.log10(n) // 3), 4)
    return f"{n / 10 ** (3 * exp):.2f}{' KMBT'[exp]}"
