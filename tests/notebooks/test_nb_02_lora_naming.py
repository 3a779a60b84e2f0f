"""Notebook 02 through papermill: 31B counts against PEFT (meta device), the trap on tiny."""

import pytest
from nbutil import run_notebook


@pytest.mark.slow  # over ~30 s in the profile (tests/profile.json): make test only
def test_lora_naming_counts_31b_like_peft_and_catches_the_trap_on_tiny(tmp_path):
    results = run_notebook(
        "02_lora_naming",
        tmp_path,
        MODEL_PRESET="gemma4_31b",
        TARGETS="all-linear",
        LORA_RANK=64,  # the paper's rank and alpha
        LORA_ALPHA=64.0,
        TRAP_PRESET="tiny",
        NAIVE_MODULE_PATH=".*kv_einsum",
        FAMILY_PRESETS="tiny_e2b,tiny_26b_a4b,gemma4_e2b",
    )
    assert results["hf_targets_back"] == [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ]
    assert "k_einsum" in results["module_path"]
    c = results["counts"]
    # PEFT's count, measured by PEFT on transformers' 31B on the meta device
    assert c["peft_measured"] == c["peft_expected"] == 489_717_760
    assert c["qwix_measured"] == c["qwix_expected"] == 472_514_560
    assert c["peft_measured"] - c["qwix_measured"] == c["kv_shared_a"] == 50 * 5376 * 64
    assert 0.014 < c["trainable_fraction"] < 0.017

    trap = results["trap"]
    assert results["trap_preset"] == "tiny"
    assert "missing: [5]" in trap["error"] and "k_einsum" in trap["error"]
    assert (trap["naive_global_k_adapted"], trap["fixed_global_k_adapted"]) == (0, 1)
    assert trap["naive_by_kind"]["global"]["k_proj"] == "0/1"
    assert trap["fixed_by_kind"]["global"]["k_proj"] == "1/1"
    assert trap["naive_by_kind"]["sliding"]["q_proj"] == "0/5"  # only kv_einsum was named
    assert trap["naive_lora_params"] == 5 * 64 * (128 + 2 * 4 * 32)

    # Section 5, the family at the same rank with all-linear: the notebook asserts Qwix = its
    # expected count and PEFT = its own; here, that all-linear reaches what the seven names do not
    # (E2B's per-layer-input projections, 26B-A4B's router), and that expert targets are refused.
    from cookbook import lora

    seven = lora.LoraConfig(rank=64, alpha=64.0)
    family = results["family"]
    assert results["family_targets"] == "all-linear" and set(family) == {"tiny_e2b", "tiny_26b_a4b", "gemma4_e2b"}
    for name, counts in family.items():
        assert counts["qwix_measured"] > lora.expected_lora_params(name, seven), name
        assert counts["peft_measured"] - counts["qwix_measured"] == counts["kv_shared_a"]
    assert "experts" in results["experts_refusal"] and "all-linear" in results["experts_refusal"]
