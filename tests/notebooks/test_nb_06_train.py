"""Notebook 06 run by papermill with other parameters; asserts on what it recorded."""

import pytest
from nbutil import run_notebook
from userenv import outcome_bound


@pytest.mark.slow
def test_nb06_fine_tuning_lifts_exact_match_from_zero(tmp_path):
    # Fewer eval prompts and another Sampler batch size than the committed defaults; the
    # training config is the tiny recipe's, so the run the demo and the suite share
    # (tests/userenv.py) is reused when present.
    # MULTIHOST_PROCESSES=0: the two-process run is tests/train/test_multihost.py's (and the demo's).
    res = run_notebook(
        "06_train", tmp_path, NUM_EVAL_ROWS=100, EVAL_BATCH_SIZE=25, SHOW_EXAMPLES=1, MULTIHOST_PROCESSES=0
    )
    assert res["num_eval_rows"] == 100
    assert res["base_accuracy"] <= 0.05
    assert res["finetuned_accuracy"] >= outcome_bound("plain", "exact_match", 100)
    assert res["num_wrong"] == round((1 - res["finetuned_accuracy"]) * 100)
    assert res["final_train_loss"] < res["first_train_loss"] / 10
    assert res["final_eval_loss"] < 0.5
    assert res["rerun_resumed_from"] == res["max_steps"]
    assert res["tokens_per_s"] > 0
    # Functional pass@1 (Icarus Verilog) beside exact match: an exact copy of the reference
    # always simulates correctly, so functional is at least exact match; the base writes no module.
    assert res["base_functional_pass1"] <= 0.05 and res["base_outcomes"].get("pass", 0) <= 5
    assert res["finetuned_functional_pass1"] >= res["finetuned_accuracy"]
    assert sum(res["finetuned_outcomes"].values()) == 100 and res["scorer_samples_per_s"] > 0
    assert [(e["exact_match"], e["outcome"]) for e in res["metric_examples"]] == [
        (True, "pass"),
        (False, "pass"),
        (False, "mismatch"),
        (False, "compile_error"),
        (False, "compile_error"),
    ]
    # Section 11: the thinking variant (the demo's and tests/evaluate's run, shared through the cache)
    # thinks its spec's sentence, then writes the module; only the module is scored.
    assert res["thinking_seq_len"] == 200 and res["thinking_steps"] == 300  # the thinking recipe's schedule
    assert res["thinking_pass1"] >= outcome_bound("thinking", "pass1", 100)
    assert res["thinking_thoughts_right"] >= outcome_bound("thinking", "thoughts_right", 100)
    base_row, tuned_row = res["quality"]
    assert (
        tuned_row["greedy_pass@1"] == res["finetuned_functional_pass1"] and tuned_row["recipe"] == "TPU recipe (Tunix)"
    )
    assert base_row["exact_match"] == res["base_accuracy"]
