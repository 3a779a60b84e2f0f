"""One Gemma 4 text decoder's architecture (:class:`ModelPreset`), and both frameworks' configs from it.

The Tunix ``ModelConfig`` and the Hugging Face ``Gemma4TextConfig`` / ``Gemma4Config`` are both
derived from one :class:`ModelPreset`, so the two frameworks cannot drift apart: a test compares
them field by field. The presets themselves (``tiny``, ``gemma4_31b``, ...) are in
:mod:`cookbook.models._presets`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

AttentionKind = Literal["sliding", "global"]
# The checkpoint layout a size is released in (config.json's ``model_type``): ``gemma4``
# (``Gemma4ForConditionalGeneration``: E2B, E4B, 26B-A4B, 31B, with vision and audio towers) or
# ``gemma4_unified`` (``Gemma4UnifiedForConditionalGeneration``: 12B, encoder-free, transformers
# >= 5.10). Both keep the text decoder under ``model.language_model.`` with the same tensor names;
# the unified text config (``gemma4_unified_text``) has no per-layer-input or MoE fields.
HfLayout = Literal["gemma4", "gemma4_unified"]
HF_ARCHITECTURES: dict[str, str] = {
    "gemma4": "Gemma4ForConditionalGeneration",
    "gemma4_unified": "Gemma4UnifiedForConditionalGeneration",
}

SLIDING_5_GLOBAL_1: tuple[AttentionKind, ...] = ("sliding",) * 5 + ("global",)
SLIDING_4_GLOBAL_1: tuple[AttentionKind, ...] = ("sliding",) * 4 + ("global",)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelPreset:
    """The architecture of one Gemma 4 text decoder, independent of framework.

    Names follow the Hugging Face config where one exists; comments give Tunix's name.
    """

    name: str
    hf_checkpoint: str | None  # Hub id of the released weights; None for random presets.
    # Random CPU presets: the released size whose structure this one reproduces (it trains with
    # the CPU recipe, ``cookbook.train.train_preset``); None otherwise.
    twin_of: str | None = None
    num_layers: int
    vocab_size: int  # Tunix: num_embed
    embed_dim: int  # HF: hidden_size
    hidden_dim: int  # HF: intermediate_size (dense MLP width)
    num_heads: int
    head_dim: int
    num_kv_heads: int  # KV heads on sliding-window layers
    num_global_kv_heads: int | None  # KV heads on global layers (None: same as sliding)
    global_head_dim: int  # Tunix: global_key_size
    sliding_window: int
    attention_pattern: tuple[AttentionKind, ...]  # repeated over the layers
    k_eq_v_global: bool  # global layers use one projection for K and V (HF attention_k_eq_v)
    final_logit_softcap: float = 30.0
    local_rope_theta: float = 10_000.0
    global_rope_theta: float = 1_000_000.0
    global_rope_proportion: float = 0.25  # proportional RoPE on global layers
    per_layer_input_dim: int = 0  # E2B/E4B per-layer embeddings (HF hidden_size_per_layer_input)
    num_kv_shared_layers: int = 0  # trailing layers that reuse earlier KV caches (E2B/E4B)
    double_wide_mlp: bool = False  # KV-shared layers use a 2x wide MLP (E2B)
    num_experts: int | None = None  # MoE (26B-A4B)
    num_experts_per_tok: int | None = None
    expert_dim: int | None = None
    max_position_embeddings: int = 131_072
    rms_norm_eps: float = 1e-6
    dtype: str = "bfloat16"  # storage dtype of the checkpoint
    # Standard deviation for randomly initialised presets' embeddings. transformers'
    # default (0.02) makes the tied output logits nearly flat for a tiny random model.
    random_embed_std: float = 0.02
    hf_layout: HfLayout = "gemma4"  # the released checkpoint's layout (HF_ARCHITECTURES)

    # ----------------------------------------------------------------------------------
    # Derived facts
    @property
    def layer_kinds(self) -> tuple[AttentionKind, ...]:
        """Attention kind of every layer, in order."""
        p = self.attention_pattern
        return tuple(p[i % len(p)] for i in range(self.num_layers))

    @property
    def global_layers(self) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.layer_kinds) if k == "global")

    @property
    def sliding_layers(self) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.layer_kinds) if k == "sliding")

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None

    @property
    def effective_global_kv_heads(self) -> int:
        return self.num_global_kv_heads or self.num_kv_heads

    @property
    def first_kv_shared_layer(self) -> int:
        """Index of the first KV-shared layer (``num_layers`` when none is shared)."""
        return self.num_layers - self.num_kv_shared_layers

    @property
    def kv_source_layers(self) -> tuple[int, ...]:
        """For every layer, the layer whose keys and values it attends over.

        Itself, except on the trailing KV-shared layers (E2B/E4B), which reuse the K/V of the
        last non-shared layer of their own attention kind: transformers'
        ``Gemma4TextAttention.store_full_length_kv`` rule. Tunix derives its own pattern
        differently; ``cookbook.models.load_tunix_model`` refuses a preset where they differ.
        """
        first = self.first_kv_shared_layer
        kinds = self.layer_kinds
        last_of = {kind: i for i, kind in enumerate(kinds[:first])}
        return tuple(i if i < first else last_of.get(kinds[i], -1) for i in range(self.num_layers))

    def num_params(self) -> int:
        """Parameter count of the text decoder (tied embedding counted once).

        Computed from the shapes alone, so it is instant for 31B. A test checks it
        against transformers' module on the meta device.
        """
        d, n, h = self.embed_dim, self.num_heads, self.head_dim
        total = self.vocab_size * d + d  # embedding + final norm
        if self.per_layer_input_dim:
            p = self.per_layer_input_dim * self.num_layers
            total += self.vocab_size * p + d * p + self.per_layer_input_dim
        first_shared = self.first_kv_shared_layer
        for i, kind in enumerate(self.layer_kinds):
            if kind == "global":
                hd, kv = self.global_head_dim, self.effective_global_kv_heads
                has_v = not self.k_eq_v_global
            else:
                hd, kv, has_v = h, self.num_kv_heads, True
            attn = d * n * hd + n * hd * d + hd  # q, o, q_norm
            if i < first_shared:  # KV-shared layers reuse an earlier layer's K/V: no k/v/k_norm
                attn += d * kv * hd * (2 if has_v else 1) + hd
            width = self.hidden_dim * (2 if self.double_wide_mlp and i >= first_shared else 1)
            mlp = 3 * d * width
            norms = 4 * d + 1  # four RMSNorms + layer_scalar
            if self.is_moe:
                assert self.num_experts and self.expert_dim
                mlp += self.num_experts * 3 * d * self.expert_dim + d * self.num_experts
                mlp += d + self.num_experts  # router scale and per-expert scale
                norms += 3 * d  # extra pre/post norms of the MoE branch
            if self.per_layer_input_dim:
                mlp += 2 * d * self.per_layer_input_dim + d
            total += attn + mlp + norms
        return total

    def with_overrides(self, **changes: Any) -> ModelPreset:
        """A copy with some fields changed (e.g. ``dtype="float32"`` for parity tests)."""
        return dataclasses.replace(self, **changes)

    # ----------------------------------------------------------------------------------
    # Tunix
    def tunix_config(self, *, remat: str = "none", param_dtype: str | None = None):
        """Tunix ``ModelConfig`` for this preset.

        Args:
          remat: ``"none"``, ``"block"`` or ``"decoder"`` (Tunix ``RematConfig``). Apply
            LoRA with ``"none"`` and switch afterwards: see ``cookbook.lora.apply_lora``.
          param_dtype: dtype of parameters and compute; defaults to the preset's dtype.
        """
        import jax.numpy as jnp
        from tunix.models.gemma4 import model as gemma4

        dtype = jnp.dtype(param_dtype or self.dtype)
        kinds = {"sliding": gemma4.AttentionType.LOCAL_SLIDING, "global": gemma4.AttentionType.GLOBAL}
        remats = {
            "none": gemma4.RematConfig.NONE,
            "block": gemma4.RematConfig.BLOCK,
            "decoder": gemma4.RematConfig.DECODER,
        }
        if remat not in remats:
            raise ValueError(f"remat={remat!r} is not one of {sorted(remats)}")
        extra: dict[str, Any] = {}
        if self.double_wide_mlp:
            extra["override_kv_shared_ffw_hidden"] = 2 * self.hidden_dim
        if self.is_moe:
            extra.update(
                enable_moe=True,
                num_experts=self.num_experts,
                num_experts_per_tok=self.num_experts_per_tok,
                expert_dim=self.expert_dim,
                moe_dense_hidden_dim=self.hidden_dim,
            )
        return gemma4.ModelConfig(
            num_layers=self.num_layers,
            num_embed=self.vocab_size,
            embed_dim=self.embed_dim,
            hidden_dim=self.hidden_dim,
            num_heads=self.num_heads,
            head_dim=self.head_dim,
            num_kv_heads=self.num_kv_heads,
            num_global_kv_heads=self.num_global_kv_heads,
            global_key_size=self.global_head_dim,
            sliding_window_size=self.sliding_window,
            attention_pattern=tuple(kinds[k] for k in self.attention_pattern),
            k_eq_v_global=self.k_eq_v_global,
            final_logit_softcap=self.final_logit_softcap,
            local_base_frequency=int(self.local_rope_theta),
            global_base_frequency=int(self.global_rope_theta),
            global_rope_proportion=self.global_rope_proportion,
            local_rope_proportion=1.0,
            per_layer_input_dim=self.per_layer_input_dim,
            frac_shared_layers=self.num_kv_shared_layers / self.num_layers,
            remat_config=remats[remat],
            param_dtype=dtype,
            dtype=dtype,
            **extra,
        )

    # ----------------------------------------------------------------------------------
    # transformers
    def hf_text_config(self):
        """transformers ``Gemma4TextConfig`` (the text decoder, ``Gemma4ForCausalLM``).

        The text-only layout of every size, the unified 12B's included: its decoder is the same
        modules under the same names (``Gemma4UnifiedTextDecoderLayer`` runs Gemma 4's layer).
        """
        from transformers import Gemma4TextConfig

        kwargs: dict[str, Any] = {
            "hidden_size_per_layer_input": self.per_layer_input_dim,
            "vocab_size_per_layer_input": self.vocab_size,
        }
        if self.is_moe:
            kwargs.update(
                enable_moe_block=True,
                num_experts=self.num_experts,
                top_k_experts=self.num_experts_per_tok,
                moe_intermediate_size=self.expert_dim,
            )
        return Gemma4TextConfig(**self._hf_text_kwargs(), **kwargs)

    def _hf_text_kwargs(self) -> dict[str, Any]:
        """The text config's fields that both layouts (``gemma4_text``, ``gemma4_unified_text``) have."""
        return dict(
            vocab_size=self.vocab_size,
            hidden_size=self.embed_dim,
            intermediate_size=self.hidden_dim,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads,
            num_global_key_value_heads=self.num_global_kv_heads,
            head_dim=self.head_dim,
            global_head_dim=self.global_head_dim,
            attention_k_eq_v=self.k_eq_v_global,
            sliding_window=self.sliding_window,
            layer_types=["full_attention" if k == "global" else "sliding_attention" for k in self.layer_kinds],
            final_logit_softcapping=self.final_logit_softcap,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": self.local_rope_theta},
                "full_attention": {
                    "rope_type": "proportional",
                    "partial_rotary_factor": self.global_rope_proportion,
                    "rope_theta": self.global_rope_theta,
                },
            },
            num_kv_shared_layers=self.num_kv_shared_layers,
            use_double_wide_mlp=self.double_wide_mlp,
            max_position_embeddings=self.max_position_embeddings,
            rms_norm_eps=self.rms_norm_eps,
            initializer_range=self.random_embed_std,
            tie_word_embeddings=True,
            dtype=self.dtype,
            pad_token_id=0,
            eos_token_id=1,
            bos_token_id=2,
        )

    @property
    def hf_architecture(self) -> str:
        """The released checkpoint's transformers class (config.json's ``architectures``)."""
        return HF_ARCHITECTURES[self.hf_layout]

    def hf_config(self):
        """transformers ``Gemma4Config`` or ``Gemma4UnifiedConfig``: the released layout, text only.

        Released Gemma 4 checkpoints are ``Gemma4ForConditionalGeneration`` (12B:
        ``Gemma4UnifiedForConditionalGeneration``) with keys under ``model.language_model.``;
        random presets are saved the same way so every loading path is the one real checkpoints
        take. Vision and audio towers (12B: its vision and audio embedders) are left out
        (``None``): the cookbook fine-tunes text only.
        """
        if self.hf_layout == "gemma4_unified":
            from transformers import Gemma4UnifiedConfig, Gemma4UnifiedTextConfig

            if self.per_layer_input_dim or self.is_moe or self.num_kv_shared_layers:
                raise ValueError(
                    f"preset {self.name!r}: the gemma4_unified layout has no per-layer inputs, MoE or KV "
                    "sharing (transformers' Gemma4UnifiedTextConfig); use hf_layout='gemma4'"
                )
            text = Gemma4UnifiedTextConfig(**self._hf_text_kwargs(), hidden_size_per_layer_input=0)
            config_cls = Gemma4UnifiedConfig
        else:
            from transformers import Gemma4Config

            text, config_cls = self.hf_text_config(), Gemma4Config
        return config_cls(
            text_config=text,
            vision_config=None,
            audio_config=None,
            tie_word_embeddings=True,
            initializer_range=self.random_embed_std,
            dtype=self.dtype,
            **_special_token_ids(self),
        )


def _special_token_ids(preset: ModelPreset) -> dict[str, int]:
    """Multimodal marker token ids: the released ones, or ones inside a small vocabulary."""
    if preset.vocab_size >= 262_144:
        return {}
    from cookbook.models import _tokenizer as tokenizer

    ids = tokenizer.SPECIAL_TOKEN_IDS
    return {
        "boi_token_id": ids["<|image>"],
        "eoi_token_id": ids["<image|>"],
        "image_token_id": ids["<|image|>"],
        "video_token_id": ids["<|video|>"],
        "boa_token_id": ids["<|audio>"],
        "eoa_token_index": ids["<audio|>"],
        "audio_token_id": ids["<|audio|>"],
    }
