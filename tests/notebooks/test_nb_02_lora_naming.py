"""Notebook 02 through papermill: 31B counts against PEFT (meta device), the trap on tiny."""

from nbutil import run_notebook


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
