"""Presets: Tunix and transformers configs derived from one definition must agree."""

import pytest

from cookbook import models

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
        "num_layers", "num_embed", "embed_dim", "hidden_dim", "num_heads", "head_dim",
        "num_kv_heads", "num_global_kv_heads", "global_key_size", "sliding_window_size",
        "attention_pattern", "k_eq_v_global", "final_logit_softcap", "per_layer_input_dim",
        "frac_shared_layers", "global_rope_proportion", "local_rope_proportion",
        "local_base_frequency", "global_base_frequency", "enable_moe", "num_experts",
        "num_experts_per_tok", "expert_dim", "moe_dense_hidden_dim",
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
    assert mm.text_config.to_dict() == h.to_dict()
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
    big, tiny = models.gemma4_31b(), models.tiny()
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
    assert 80e6 < models.small().num_params() < 200e6


@pytest.mark.jax_only
def test_unknown_preset_error_lists_choices():
    with pytest.raises(ValueError, match="gemma4_31b"):
        models.get_preset("gemma4-31b")
