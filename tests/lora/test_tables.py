"""cookbook.lora._tables: notebook 02's steps (targets both ways, refusals, the K = V trap) as typed results."""

from __future__ import annotations

import pytest

from cookbook import lora as L

# Names and abstract models only: also runs in the TPU-host environment (scripts/run_tests.sh).
pytestmark = pytest.mark.jax_only

SEVEN = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def test_translate_targets_round_trips_the_seven_names():
    naming = L.translate_targets(L.LoraConfig(rank=4, alpha=8.0), "tiny")
    assert naming.preset == "tiny" and naming.targets == tuple(SEVEN)
    assert naming.module_path == L.qwix_module_path(SEVEN, "tiny") and "k_einsum" in naming.module_path
    assert naming.hf_targets_back == SEVEN
    assert naming.results() == {
        "preset": "tiny",
        "targets": tuple(SEVEN),
        "module_path": naming.module_path,
        "hf_targets_back": SEVEN,
    }
    assert naming.describe().splitlines()[1] == f"Qwix path    : {naming.module_path}"


def test_refusals_are_the_errors_as_text_and_empty_when_accepted():
    naive = L.module_path_refusal(".*kv_einsum", "tiny")
    assert "missing: [5]" in naive and "k_einsum" in naive  # tiny's one global layer, K = V
    assert L.module_path_refusal(L.qwix_module_path(SEVEN, "tiny"), "tiny") == ""
    experts = L.targets_refusal(("experts",), "tiny_26b_a4b")
    assert "experts" in experts and "all-linear" in experts
    assert L.targets_refusal(SEVEN, "tiny") == ""


def test_k_equals_v_trap_reads_what_qwix_created():
    trap = L.k_equals_v_trap("tiny", ".*kv_einsum", rank=64, alpha=64.0)
    assert (trap.naive_global_k_adapted, trap.fixed_global_k_adapted, trap.global_layers) == (0, 1, 1)
    # kv_einsum on tiny's 5 sliding layers: A (embed 128 x 64) and B (64 x 2 KV x 4 heads x 32).
    assert trap.naive_lora_params == 5 * 64 * (128 + 2 * 4 * 32)
    assert trap.fixed_lora_params == L.expected_lora_params("tiny", L.LoraConfig(rank=64, alpha=64.0))
    assert trap.error == L.module_path_refusal(".*kv_einsum", "tiny") != ""
    rows = {(r["regex"], r["kind"]): r for r in trap.by_kind_table()}
    assert set(rows) == {
        ("naive regex", "sliding"),
        ("naive regex", "global"),
        ("cookbook", "sliding"),
        ("cookbook", "global"),
    }
    assert rows[("naive regex", "global")]["k_proj"] == "0/1" and rows[("cookbook", "global")]["k_proj"] == "1/1"
    assert rows[("naive regex", "sliding")]["q_proj"] == "0/5" and rows[("cookbook", "sliding")]["q_proj"] == "5/5"
    recorded = trap.results()
    assert recorded["trap_preset"] == "tiny" and recorded["trap"]["error"] == trap.error
    assert not any(k.endswith("_rows") for k in recorded["trap"])
    assert recorded["trap"]["naive_by_kind"]["global"]["k_proj"] == "0/1"
    assert trap.describe().splitlines()[0] == (
        f"naive regex: K adapted on 0 of 1 global layers, {trap.naive_lora_params:,} LoRA parameters"
    )
