"""Notebook 07 with a random-LoRA run and small output shards: logits match, shards are bounded."""

import pytest
from nbutil import run_notebook

from cookbook.merge import _verify


@pytest.mark.slow
def test_nb_07_merge(tmp_path):
    run = _verify.ensure_random_lora_run("tiny", rank=8, alpha=16.0)
    res = run_notebook("07_merge", tmp_path, RUN_DIR=str(run), MAX_SHARD_GB=0.002, VERIFY_LEN=32)
    diffs, bound = res["logit_max_abs_diff"], res["parity_bound"]
    # The bound is measured in the notebook: 4x the candidates' float32-vs-float64 floor.
    assert bound == pytest.approx(4 * res["float32_floor"]) and 0 < bound < 1e-2
    assert diffs["base (no LoRA)"] >= 100 * bound and res["control_over_bound"] >= 100
    for k in ("merged", "merged, text-only", "PEFT on base", "PEFT on text-only base"):
        assert diffs[k] <= bound, diffs
    assert (res["rank"], res["alpha"], res["preset"]) == (8, 16.0, "tiny")
    assert res["num_shards"] >= 3 and res["largest_shard_bytes"] <= int(0.002 * 2**30)
    assert res["lora_pairs"] == 36  # 6 layers x (q, kv or k, o, gate, up, down)
    ex = res["extrapolated_31b"]
    assert ex["layers"] == 60 and ex["model_bytes"] > 60e9
    assert ex["merge_peak_rss_bytes"] < 4 * 2**30 < ex["tunix_peak_rss_bytes"]
