"""cookbook.serve._check: the typed proof that the server serves the fine-tune, and what it records."""

from cookbook.serve import _check


def test_fine_tuned_proof_records_both_accuracies_and_their_agreement():
    rows = [{"prompt": "p0", "answer": "a"}, {"prompt": "p1", "answer": "b"}]
    proof = _check.FineTunedProof(
        rows=rows,
        served={"accuracy": 0.5, "completions": ["a", "x"]},
        jax={"accuracy": 0.5, "completions": ["a", "y"]},
        agreement=0.5,
    )
    assert proof.results() == {
        "served_accuracy": 0.5,
        "jax_accuracy": 0.5,
        "served_jax_agreement": 0.5,
        "num_eval_rows": 2,
    }
    assert proof.served_completions == ["a", "x"] and proof.jax_completions == ["a", "y"]


def test_greedy_parity_is_compare_greedy_typed():
    served = [{"text": "a", "token_ids": [1]}, {"text": "b", "token_ids": [2]}]
    reference = [{"text": "a", "token_ids": [1]}, {"text": "c", "token_ids": [3]}]
    parity = _check.GreedyParity(**_check.compare_greedy(served, reference))
    assert (parity.n, parity.same_text, parity.same_token_ids, parity.all_equal) == (2, 1, 1, False)
    assert parity.first_difference == {"served": "b", "reference": "c"}
    assert parity.results() == {"greedy_parity_same_text": 1, "greedy_parity_n": 2}
    assert "1 of 2 prompts" in parity.describe() and "first difference" in parity.describe()
