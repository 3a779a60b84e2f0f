"""Presets: Tunix and transformers configs derived from one definition must agree."""

import pytest

from cookbook import models
from cookbook.models import _loader, _presets

ALL = list(models.PRESETS)
REAL = ["gemma4_e2b", "gemma4_e4b", "gemma4_31b", "gemma4_26b_a4b"]


def _tunix_reference(name):
    from tunix.models.gemma4 import model as gemma4

    return getattr(gemma4.ModelConfig, name)()


@pytest.mark.jax_only
@pytest.mark.parametrize("name", REAL)
def test_real_presets_match_tunix_classmethods(name):
    """Our real presets give exactly Tunix's own ModelConfig.gemma4_*() architecture."""
    ours = models.get_preset(name).tunix_config()
    ref = _tunix_reference(name)
    fields = [
        "num_layers",
        "num_embed",
        "embed_dim",
        "hidden_dim",
        "num_heads",
        "head_dim",
        "num_kv_heads",
        "num_global_kv_heads",
        "global_key_size",
        "sliding_window_size",
        "attention_pattern",
        "k_eq_v_global",
        "final_logit_softcap",
        "per_layer_input_dim",
        "frac_shared_layers",
        "global_rope_proportion",
        "local_rope_proportion",
        "local_base_frequency",
        "global_base_frequency",
        "enable_moe",
        "num_experts",
        "num_experts_per_tok",
        "expert_dim",
        "moe_dense_hidden_dim",
        "override_kv_shared_ffw_hidden",
    ]
    diffs = {f: (getattr(ours, f), getattr(ref, f)) for f in fields if getattr(ours, f) != getattr(ref, f)}
    # frac_shared_layers is a float ratio; compare through the layer count it implies.
    if "frac_shared_layers" in diffs:
        a, b = diffs.pop("frac_shared_layers")
        assert round(a * ours.num_layers) == round(b * ref.num_layers)
    assert not diffs, diffs


@pytest.mark.parametrize("name", ALL)
def test_hf_and_tunix_configs_agree_field_by_field(name):
    p = models.get_preset(name)
    t = p.tunix_config()
    h = p.hf_text_config()
    assert h.num_hidden_layers == t.num_layers
    assert h.vocab_size == t.num_embed
    assert h.hidden_size == t.embed_dim
    assert h.intermediate_size == (t.moe_dense_hidden_dim or t.hidden_dim)
    assert h.num_attention_heads == t.num_heads
    assert h.head_dim == t.head_dim
    assert h.num_key_value_heads == t.num_kv_heads
    assert h.num_global_key_value_heads == t.num_global_kv_heads
    assert h.global_head_dim == t.global_key_size
    assert h.attention_k_eq_v == t.k_eq_v_global
    assert h.sliding_window == t.sliding_window_size
    assert h.final_logit_softcapping == t.final_logit_softcap
    assert h.hidden_size_per_layer_input == t.per_layer_input_dim
    assert h.num_kv_shared_layers == round(t.frac_shared_layers * t.num_layers)
    kinds = ["global" if k == "full_attention" else "sliding" for k in h.layer_types]
    tunix_kinds = [
        "global" if t.attention_pattern[i % len(t.attention_pattern)].name == "GLOBAL" else "sliding"
        for i in range(t.num_layers)
    ]
    assert kinds == tunix_kinds == list(p.layer_kinds)
    rope = h.rope_parameters
    assert rope["sliding_attention"]["rope_theta"] == t.local_base_frequency
    assert rope["full_attention"]["rope_theta"] == t.global_base_frequency
    assert rope["full_attention"]["rope_type"] == "proportional"
    assert rope["full_attention"]["partial_rotary_factor"] == t.global_rope_proportion
    if p.is_moe:
        assert h.enable_moe_block and h.num_experts == t.num_experts
        assert h.top_k_experts == t.num_experts_per_tok and h.moe_intermediate_size == t.expert_dim
    mm = p.hf_config()
    released, text_only = mm.text_config.to_dict(), h.to_dict()
    if p.hf_layout == "gemma4_unified":
        # 12B's unified text config: its own model type, bidirectional attention for vision tokens,
        # and no MoE fields (the text-only layout states them off); per-layer inputs 0 in both, as in
        # Google's file (transformers' Gemma4TextConfig would default them to 256).
        assert released.pop("model_type") == "gemma4_unified_text" and text_only.pop("model_type") == "gemma4_text"
        assert released.pop("use_bidirectional_attention") == "vision"
        assert text_only.pop("use_bidirectional_attention") is None
        absent = {k: text_only.pop(k) for k in set(text_only) - set(released)}
        assert absent == {
            "vocab_size_per_layer_input": p.vocab_size,
            "enable_moe_block": False,
            "num_experts": None,
            "top_k_experts": None,
            "moe_intermediate_size": None,
        }
    assert released == text_only
    assert mm.vision_config is None and mm.audio_config is None


@pytest.mark.parametrize("name", ALL)
def test_param_count_matches_transformers(name):
    """The analytic count equals transformers' module built on the meta device (no memory)."""
    import torch
    from transformers import Gemma4ForCausalLM

    p = models.get_preset(name)
    with torch.device("meta"):
        model = Gemma4ForCausalLM(p.hf_text_config())
    n_params = sum(t.numel() for t in model.parameters())  # tied lm_head counted once
    n_params += sum(b.numel() for n, b in model.named_buffers() if n.endswith("layer_scalar"))
    assert p.num_params() == n_params


@pytest.mark.jax_only
def test_31b_is_31b_and_tiny_keeps_its_structure():
    big, tiny = models.gemma4_31b(), _presets.tiny()
    assert 30.0e9 < big.num_params() < 32.0e9
    assert big.hf_checkpoint == "google/gemma-4-31B-it"
    # tiny keeps 31B's structure: 5:1 pattern, K = V global layers with fewer KV heads and a
    # larger key size, the soft-cap, proportional RoPE on global layers.
    for p in (big, tiny):
        assert p.attention_pattern == ("sliding",) * 5 + ("global",)
        assert p.k_eq_v_global
        assert p.effective_global_kv_heads < p.num_kv_heads
        assert p.global_head_dim == 2 * p.head_dim
        assert p.final_logit_softcap == 30.0
        assert p.global_rope_proportion == 0.25
    # Widths divide a 4 x 2 (fsdp x tp) mesh.
    for dim in (tiny.embed_dim, tiny.hidden_dim, tiny.vocab_size):
        assert dim % 4 == 0 and dim % 2 == 0
    assert tiny.effective_global_kv_heads % 2 == 0 and tiny.num_heads % 2 == 0
    assert tiny.num_params() < 3e6
    assert 80e6 < _presets.small().num_params() < 200e6


@pytest.mark.jax_only
def test_unknown_preset_error_lists_choices():
    with pytest.raises(ValueError, match="gemma4_31b"):
        models.get_preset("gemma4-31b")


@pytest.mark.jax_only
def test_twins_keep_their_real_models_structure():
    """The random twins carry the structure of the releases they stand in for, at CPU size."""
    e2b, twin = models.get_preset("gemma4_e2b"), _presets.tiny_e2b()
    assert twin.attention_pattern == e2b.attention_pattern == ("sliding",) * 4 + ("global",)
    assert not twin.k_eq_v_global and not e2b.k_eq_v_global
    assert twin.num_kv_heads == e2b.num_kv_heads == 1 and twin.global_head_dim == 2 * twin.head_dim
    assert twin.per_layer_input_dim and twin.double_wide_mlp and e2b.double_wide_mlp
    assert 0 < twin.num_kv_shared_layers < twin.num_layers
    # The last non-shared layer is global and the one before it sliding (E2B, E4B and the twin).
    for p in (twin, e2b, models.get_preset("gemma4_e4b")):
        kinds = p.layer_kinds
        assert kinds[p.first_kv_shared_layer - 1] == "global" and kinds[p.first_kv_shared_layer - 2] == "sliding"
    moe, twin = models.get_preset("gemma4_26b_a4b"), _presets.tiny_26b_a4b()
    assert twin.is_moe and twin.attention_pattern == moe.attention_pattern
    assert twin.k_eq_v_global and moe.k_eq_v_global
    assert twin.num_experts_per_tok < twin.num_experts and twin.expert_dim < twin.hidden_dim < twin.embed_dim
    assert twin.effective_global_kv_heads < twin.num_kv_heads
    for p in (_presets.tiny_e2b(), twin):
        assert p.hf_checkpoint is None and p.dtype == "float32" and p.num_params() < 5e6  # tiny_e2b: 4.4M
        for dim in (p.embed_dim, p.hidden_dim, p.vocab_size):
            assert dim % 4 == 0  # widths divide a 4 x 2 (fsdp x tp) mesh


@pytest.mark.parametrize("name", [n for n in ALL if models.get_preset(n).num_kv_shared_layers])
def test_kv_source_layers_follow_transformers(name):
    """Which layer's K/V each KV-shared layer reads: the preset's rule is transformers' own."""
    import torch
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextAttention

    p = models.get_preset(name)
    config = p.hf_text_config()
    with torch.device("meta"):
        attn = [Gemma4TextAttention(config, i) for i in range(p.num_layers)]
    # transformers: a non-shared layer stores its K/V for its kind (store_full_length_kv); a
    # shared one reads the stored K/V of its kind.
    stores = {a.layer_type: i for i, a in enumerate(attn) if a.store_full_length_kv}
    hf = tuple(stores[a.layer_type] if a.is_kv_shared_layer else i for i, a in enumerate(attn))
    assert hf == p.kv_source_layers
    assert [a.is_kv_shared_layer for a in attn] == [i >= p.first_kv_shared_layer for i in range(p.num_layers)]


@pytest.mark.jax_only
def test_tunix_shares_kv_between_the_same_layers_or_is_refused():
    """Tunix's KV-sharing pattern equals transformers' on E2B, E4B and the twin; a layout where
    they differ (the last non-shared layer sliding) is refused before anything is loaded."""
    for name in ("tiny_e2b", "gemma4_e2b", "gemma4_e4b"):
        _loader.check_kv_sharing_matches(models.get_preset(name))
    bad = _presets.tiny_e2b().with_overrides(num_kv_shared_layers=4)  # layers 6-9; layer 5 is sliding
    assert bad.kv_source_layers[6:] == (5, 5, 5, 4)
    with pytest.raises(ValueError, match=r"Tunix would give its KV-shared layers .* \[4, 4, 4, 5\]"):
        _loader.check_kv_sharing_matches(bad)
    with pytest.raises(ValueError, match="Tunix would give"):
        models.load_tunix_model("/nonexistent", bad)  # refused before the checkpoint is read
