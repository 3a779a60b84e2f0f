"""The real presets against Google's released config.json files (tests/fixtures/real-gemma4).

Every field that decides the text decoder's architecture or its checkpoint layout is compared,
value for value, between the preset's transformers config and the released file; the random twin
of 12B is checked to be written in the same released layout.
"""

import json
from pathlib import Path

import pytest

from cookbook import models
from cookbook.models import _loader

RELEASES = Path(__file__).resolve().parent.parent / "fixtures" / "real-gemma4"
RELEASED = {"gemma4_e2b": "gemma-4-E2B-it", "gemma4_e4b": "gemma-4-E4B-it", "gemma4_12b": "gemma-4-12B"}
# What decides the text decoder and how its tensors are laid out: layer kinds, KV heads, head
# dims, the window, K = V, per-layer inputs, KV sharing, the double-wide MLP, MoE, RoPE, the
# soft-cap, positions, and the widths.
TEXT_FIELDS = (
    "model_type",
    "layer_types",
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "num_global_key_value_heads",
    "head_dim",
    "global_head_dim",
    "sliding_window",
    "attention_k_eq_v",
    "hidden_size_per_layer_input",
    "num_kv_shared_layers",
    "use_double_wide_mlp",
    "enable_moe_block",
    "num_experts",
    "top_k_experts",
    "moe_intermediate_size",
    "rope_parameters",
    "final_logit_softcapping",
    "max_position_embeddings",
    "vocab_size",
    "tie_word_embeddings",
    "rms_norm_eps",
    "hidden_activation",
    "use_bidirectional_attention",
)
# transformers 5.12's unified text config (12B) has no MoE fields and writes none; Google's file
# (written by 5.10.0.dev0) states them as off. The class builds no expert modules at all.
UNIFIED_HAS_NO = {"enable_moe_block": False, "num_experts": None, "top_k_experts": None, "moe_intermediate_size": None}
# Fields the E2B/E4B files (written by transformers 5.5.0.dev0) name by their older name.
OLDER_NAME = {"moe_intermediate_size": "expert_intermediate_size"}


def _released(name):
    return json.loads((RELEASES / RELEASED[name] / "config.json").read_text())


@pytest.mark.parametrize("name", list(RELEASED))
def test_real_preset_equals_the_released_config_field_by_field(name):
    p = models.get_preset(name)
    released = _released(name)
    ours = p.hf_config().to_dict()
    assert released["model_type"] == p.hf_layout and released["architectures"] == [p.hf_architecture]
    implied = UNIFIED_HAS_NO if ours["text_config"]["model_type"] == "gemma4_unified_text" else {}
    diffs = {}
    for field in TEXT_FIELDS:
        text = released["text_config"]
        want = text[field] if field in text else text[OLDER_NAME[field]]
        got = ours["text_config"].get(field, implied.get(field, "<missing>"))
        if got != want:
            diffs[field] = (got, want)
    assert not diffs, diffs
    assert ours["tie_word_embeddings"] is released["tie_word_embeddings"] is True
    # Tunix's config from the same preset: the same layer kinds and head counts.
    assert len(p.layer_kinds) == len(released["text_config"]["layer_types"])
    assert [k == "global" for k in p.layer_kinds] == [
        t == "full_attention" for t in released["text_config"]["layer_types"]
    ]


def test_12b_is_12b_and_its_twin_keeps_its_structure():
    big, twin = models.get_preset("gemma4_12b"), models.get_preset("tiny_12b")
    assert 11.5e9 < big.num_params() < 12.5e9  # "about 12B parameters"
    assert big.hf_checkpoint == "google/gemma-4-12B-it" and twin.twin_of == "gemma4_12b"
    for p in (big, twin):
        assert p.hf_layout == "gemma4_unified"
        assert p.attention_pattern == ("sliding",) * 5 + ("global",)
        assert p.k_eq_v_global and p.effective_global_kv_heads == 1 < p.num_kv_heads
        assert p.num_heads == 2 * p.num_kv_heads and p.global_head_dim == 2 * p.head_dim
        assert not (p.per_layer_input_dim or p.num_kv_shared_layers or p.is_moe or p.double_wide_mlp)
    # One global KV head: the head cannot be split, so 12B and its twin train without tp.
    from cookbook import mesh

    assert mesh.max_tp(big) == mesh.max_tp(twin) == (1, "global KV heads")
    assert twin.hf_checkpoint is None and twin.dtype == "float32" and twin.num_params() < 3e6


def test_12b_twin_base_is_written_in_the_released_unified_layout(tiny_12b_base):
    released = _released("gemma4_12b")
    ours = json.loads((tiny_12b_base / "config.json").read_text())
    assert ours["architectures"] == released["architectures"] == ["Gemma4UnifiedForConditionalGeneration"]
    assert ours["model_type"] == released["model_type"] == "gemma4_unified"
    assert ours["text_config"]["model_type"] == released["text_config"]["model_type"] == "gemma4_unified_text"
    # The released text config's keys, but for the vision / audio tower settings a text-only
    # twin leaves out and the fields transformers 5.12 no longer writes for this layout.
    missing = set(released["text_config"]) - set(ours["text_config"])
    assert missing <= set(UNIFIED_HAS_NO) | {"vocab_size_per_layer_input"}, missing
    keys = models.read_checkpoint_index(tiny_12b_base)
    assert set(keys) == set(_loader.expected_hf_shapes(models.get_preset("tiny_12b")))
    assert not any(".v_proj." in k for k in keys if ".layers.5." in k)  # the K = V global layer
