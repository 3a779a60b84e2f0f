"""Notebook 08 run with papermill on small parameters: the served model is the fine-tuned one."""

import pytest
from nbutil import run_notebook
from userenv import outcome_bound


@pytest.mark.slow
def test_notebook_08_serves_the_fine_tuned_model(tmp_path):
    got = run_notebook(
        "08_serving",
        tmp_path,
        NUM_EVAL_ROWS=32,
        PARITY_PROMPTS=2,
        SERVE_LORA=False,  # LoRA serving: tests/serve/test_serve.py
        PASS_K_ROWS=16,
        GPU_RECIPE_JSON="no-such-file.json",
        BENCH_PROMPTS=8,
        BENCH_INPUT_LEN=24,
        BENCH_OUTPUT_LEN=12,
        BENCH_CONCURRENCY=[1, 4],
        VLLM_BENCH_CHECK=False,
        PAPER_BURST=False,
    )
    assert got["num_eval_rows"] == 32
    # Through the server, the fine-tuned accuracy is the JAX model's, completion for completion.
    assert got["served_accuracy"] >= outcome_bound("plain", "exact_match", 32)
    assert got["served_accuracy"] == got["jax_accuracy"]
    assert got["served_jax_agreement"] >= 0.95
    assert got["greedy_parity_same_text"] == got["greedy_parity_n"] == 2
    # Functionally, as the paper scores it: greedy vLLM = JAX; n = 5 samples at T = 0.8 simulated.
    assert got["num_pass_k_problems"] == 16
    assert (
        got["functional_pass1_greedy_served"]
        == got["functional_pass1_greedy_jax"]
        >= outcome_bound("plain", "pass1", 16)
    )
    tuned, base = got["pass_at_k"], got["base_pass_at_k"]
    assert (tuned["n"], tuned["problems"], sum(tuned["outcomes"].values())) == (5, 16, 80)
    assert tuned["pass@5"] >= tuned["pass@1"] >= outcome_bound("plain", "sampled_pass1", 16) and base["pass@5"] <= 0.05
    assert (got["sampling"]["temperature"], got["sampling"]["top_p"], got["sampling"]["n"]) == (0.8, 0.95, 5)
    assert [r["generator"] for r in got["quality"]] == ["Tunix sampler", "vLLM"]  # no GPU row: not trained here
    assert got["quality"][1]["pass@5"] == tuned["pass@5"] and got["quality"][0]["pass@1"] == base["pass@1"]
    assert got["all_requests_ok"]
    labels = {(p["label"], p["concurrency"]) for p in got["bench"]}
    assert labels == {("vllm", 1), ("vllm", 4), ("transformers", 1), ("transformers", 4)}
    assert all(p["output_tokens"] == 8 * 12 for p in got["bench"])
    assert (got["tpu_tensor_parallel"], got["tpu_kv_cache_dtype"]) == (8, "fp8")
    assert got["startup_s"] > 0 and got["processes_left_after_stop"] == 0
