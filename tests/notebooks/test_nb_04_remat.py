"""Notebook 04 with three remat choices on a smaller step; TPU plans and 31B table read back."""

import pytest
from nbutil import run_notebook


@pytest.mark.slow
def test_notebook_04_remat_and_plans(tmp_path):
    from cookbook import fit
    from cookbook.fit import _search

    r = run_notebook("04_remat", tmp_path, REMAT_CHOICES="none,block,decoder", BATCH=4, SEQ_LEN=64, STEPS=2)
    trap = r["lora_trap"]
    assert trap["qwix_on_remat_model"] == 0 and trap["cookbook_apply_lora"] == trap["expected"] > 0

    m = r["measured"]
    assert set(m) == {"none", "block", "decoder"}
    losses = [x["loss"] for x in m.values()]
    assert max(losses) - min(losses) <= 1e-5 * max(losses)  # float32 rounding only (see test_remat)
    assert m["decoder"]["flops"] > m["none"]["flops"] and m["block"]["flops"] > m["none"]["flops"]

    plans = {(p["slice"], p["remat"]): p for p in r["plans"]}
    assert set(plans) == {("v5p-8", "none"), ("v5p-8", "decoder"), ("v6e-8", "none"), ("v6e-8", "decoder")}
    for slice_name in ("v5p-8", "v6e-8"):
        none, dec = plans[(slice_name, "none")], plans[(slice_name, "decoder")]
        assert none["result"] == dec["result"] == "fits"
        assert dec["temp_bytes"] < none["temp_bytes"] and dec["flops_per_chip"] > none["flops_per_chip"]
        assert dec["activation_constraints"] > 0

    assert r["recommended_31b"] == fit.recommended_training("gemma4_31b")
    assert r["recommended_31b_hbm_fraction"] <= 0.8
    # the compute floor must lie above what the paper measured on v5p-8 (763 tokens/s)
    assert r["recommended_31b_floor_tokens_per_s"] > 763
    # The committed 31B search, as the notebook read it: v5p-8's best is what training runs.
    assert r["search_31b"]["v5p-8"]["ranked"][0] == fit.load_plan_results("gemma4_31b")["recommended"]["v5p-8"]["from"]
    assert all("does not" in why for why in r["search_31b"]["v5p-8"]["dropped"].values())
    assert r["cheapest_31b"]["slice"] in _search.SINGLE_HOST_SLICES and r["cheapest_31b"]["usd_per_million_tokens"] > 0
    assert r["extrapolation_check"] and all(
        abs(v["flops_per_chip"]["relative_error"]) < 1e-4  # measured <= 7e-6
        for v in r["extrapolation_check"]
    )
    # Section 5: every released size on every single-host slice, read from the committed searches.
    family = r["family_table"]
    assert family == fit.family_table()
    assert {(row["preset"], row["slice"]) for row in family} == {
        (p, s) for p in ("gemma4_31b", "gemma4_26b_a4b", "gemma4_e4b", "gemma4_e2b") for s in _search.SINGLE_HOST_SLICES
    }
    assert all(row["fits"] or row["what would fit"] for row in family)
    # Section 6: sizes x the runtimes users have, read from benchmarks/results/runtimes.json.
    assert r["runtimes"] == fit.runtimes_table()
    assert len(r["runtimes"]) == len(fit.SIZES_BY_PARAMS) * len(fit.RUNTIME_SLICES)
    assert r["runtime_answers"] == fit.runtime_answers() and len(r["runtime_answers"]) == 4
