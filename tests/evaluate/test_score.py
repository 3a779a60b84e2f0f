"""pass@k against direct enumeration; scoring a problem set; completions files; the quality table."""

import itertools
import json
import math

import pytest

from cookbook import evaluate
from cookbook.evaluate import _generate, _score


def _enumerated(n: int, c: int, k: int) -> float:
    """Fraction of all k-subsets of n samples (c of them correct) holding a correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 8))
def test_pass_at_k_equals_direct_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert _score.pass_at_k(n, c, k) == pytest.approx(_enumerated(n, c, k), abs=1e-12), (n, c, k)
            assert _score.pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


def test_pass_at_k_known_values_and_refusals():
    assert _score.pass_at_k(5, 1, 1) == pytest.approx(0.2)
    assert _score.pass_at_k(5, 1, 5) == 1.0
    assert _score.pass_at_k(5, 0, 5) == 0.0
    assert _score.pass_at_k(200, 10, 1) == pytest.approx(0.05)  # pass@1 is the pass rate
    with pytest.raises(ValueError, match="pass@5 needs at least 5 samples per problem, got n=3"):
        _score.pass_at_k(3, 1, 5)
    with pytest.raises(ValueError, match="impossible"):
        _score.pass_at_k(3, 4, 1)
    with pytest.raises(ValueError, match="k must be >= 1"):
        _score.pass_at_k(3, 1, 0)


def test_scoring_a_problem_set(adder8):
    wrong = adder8.answer.replace("a + b", "a - b")
    other = evaluate.Problem(
        name="Prob002_add8", prompt=adder8.prompt, ref=adder8.ref, test=adder8.test, module="add8"
    )  # no reference answer: no exact match
    scores = evaluate.score(
        [adder8, other],
        {"Prob001_add8": [adder8.answer, wrong, wrong, "x", wrong], "Prob002_add8": [wrong] * 5},
        ks=(1, 5),
        seeds={"Prob001_add8": [7] * 5},
    )
    assert [p.c for p in scores.problems] == [1, 0]
    assert scores.pass_at(1) == pytest.approx((0.2 + 0.0) / 2)
    assert scores.pass_at(5) == pytest.approx((1.0 + 0.0) / 2)
    assert scores.outcome_counts == {"pass": 1, "mismatch": 8, "no_module": 1}
    assert scores.exact_match is None  # one problem has no reference answer
    first = scores.per_problem()[0]
    assert (first["n"], first["c"], first["pass@1"], first["pass@5"], first["exact"]) == (5, 1, 0.2, 1.0, 1)
    assert first["outcomes"] == ["pass", "mismatch", "mismatch", "no_module", "mismatch"] and first["seeds"] == [7] * 5
    assert first["samples"][1]["completion"] == wrong and first["samples"][1]["mismatches"] > 0
    json.dumps(scores.per_problem())  # every result is JSON


def test_per_problem_file_and_outcome_agreement(adder8, tmp_path):
    wrong = adder8.answer.replace("a + b", "a - b")
    right = evaluate.score([adder8], {"Prob001_add8": [adder8.answer]})
    also_right = evaluate.score([adder8], {"Prob001_add8": [adder8.answer.replace("assign", "assign ")]})
    mismatch = evaluate.score([adder8], {"Prob001_add8": [wrong]})
    assert right.same_outcomes(also_right) and not right.same_outcomes(mismatch)
    path = mismatch.write_per_problem(tmp_path / "per_problem.jsonl")
    (line,) = path.read_text().splitlines()
    assert json.loads(line)["outcomes"] == ["mismatch"] and json.loads(line)["samples"][0]["completion"] == wrong


def test_only_the_answer_after_the_thought_is_scored(adder8, tmp_path, capsys):
    """A thinking model's completion (Gemma 4's thought channel, or R1's <think> tags): the module
    inside the thought never counts, through score() and through `cookbook eval --completions`."""
    from cookbook import harness

    wrong = adder8.answer.replace("a + b", "a - b")
    channel = "<|channel>thought\n{}\n<channel|>{}<turn|>"
    completions = [
        channel.format(adder8.answer, wrong),  # the right module, in the thought only
        channel.format(wrong, adder8.answer),  # thought wrong, answer right
        "<|channel>thought\n" + adder8.answer,  # the budget ran out while thinking
        f"<think>\n{adder8.answer}\n</think>\n\n{wrong}",
    ]
    scores = evaluate.score([adder8], {adder8.name: completions})
    assert [r.outcome for r in scores.problems[0].results] == ["mismatch", "pass", "no_module", "mismatch"]
    assert scores.problems[0].exact == [False, True, False, False]
    problems = evaluate.write_problems(tmp_path / "p", [adder8])
    path = _score.write_completions(tmp_path / "c.jsonl", {adder8.name: completions[:1]})
    code = harness.main(
        ["eval", "--problems", str(problems), "--completions", str(path), "--summary", str(tmp_path / "s.json")]
    )
    assert code == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "s.json").read_text())["pass@1"] == 0.0


def test_score_refuses_what_does_not_fit(adder8):
    with pytest.raises(ValueError, match="pass@5 needs 5 samples per problem; Prob001_add8 has 2"):
        evaluate.score([adder8], {"Prob001_add8": [adder8.answer] * 2}, ks=(1, 5))
    with pytest.raises(evaluate.CompletionsError, match="no completion for 'Prob001_add8'"):
        evaluate.score([adder8], {})
    with pytest.raises(evaluate.CompletionsError, match="'Prob009_x', which is not in the problem set"):
        evaluate.score([adder8], {"Prob001_add8": ["x"], "Prob009_x": ["y"]})
    with pytest.raises(evaluate.CompletionsError, match="2 completions for 1 problems"):
        evaluate.score_greedy([adder8], ["a", "b"])


def test_completions_file_round_trip_and_bad_rows(adder8, tmp_path):
    path = _score.write_completions(tmp_path / "c.jsonl", {"Prob001_add8": [adder8.answer, "x"]})
    assert _score.read_completions(path, [adder8]) == {"Prob001_add8": [adder8.answer, "x"]}
    good = json.dumps({"problem": "Prob001_add8", "completion": "x"})
    for lines, message in [
        ([good, "", '{"problem": "Prob001_add8", "completion"'], r"c2.jsonl:3: invalid JSON"),
        ([good, json.dumps({"problem": "Prob001_add8", "text": "x"})], r"c2.jsonl:2: want an object with string"),
        ([json.dumps({"problem": "Prob404_nope", "completion": "x"})], r"c2.jsonl:1: problem 'Prob404_nope' is not"),
        ([], "holds no completions"),
    ]:
        (tmp_path / "c2.jsonl").write_text("\n".join(lines) + "\n")
        with pytest.raises(evaluate.CompletionsError, match=message):
            _score.read_completions(tmp_path / "c2.jsonl", [adder8])
    with pytest.raises(evaluate.CompletionsError, match="does not exist"):
        _score.read_completions(tmp_path / "none.jsonl")


def test_quality_table_in_the_papers_form(adder8):
    greedy = evaluate.score_greedy([adder8], [adder8.answer])
    sampled = evaluate.score([adder8], {"Prob001_add8": [adder8.answer, "x", "x", "x", "x"]}, ks=(1, 5))
    row = evaluate.quality_row("tiny + LoRA", "TPU recipe", "vLLM", greedy=greedy, sampled=sampled)
    assert row["exact_match"] == 1.0 and row["greedy_pass@1"] == 1.0
    assert row["pass@1"] == pytest.approx(0.2) and row["pass@5"] == 1.0 and row["n"] == 5
    assert row["problems"] == "sample task, held out (1)"
    lines = evaluate.quality_table([row])
    assert lines[0].startswith("| model | recipe | generator |") and "pass@5" in lines[0]
    assert (
        "| tiny + LoRA | TPU recipe | vLLM | sample task, held out (1) | 1.000 | 1.000 | 0.200 | 1.000 | 5 |" in lines
    )
    assert any("0.641" in line and "TPU v5p-8" in line for line in lines)  # the paper's figures, for scale
    assert any("0.697" in line for line in lines)


def test_sampling_config_checks_itself():
    assert (evaluate.PAPER_SAMPLING.n, evaluate.PAPER_SAMPLING.temperature, evaluate.PAPER_SAMPLING.top_p) == (
        5,
        0.8,
        0.95,
    )
    with pytest.raises(ValueError, match="greedy decoding .* one sample per problem"):
        _generate.SamplingConfig(n=5, temperature=0.0)
    with pytest.raises(ValueError, match="n must be >= 1"):
        _generate.SamplingConfig(n=0)
    with pytest.raises(ValueError, match="top_p in"):
        _generate.SamplingConfig(top_p=0.0)


def test_committed_quality_row_is_read_where_the_benchmark_wrote_one(tmp_path):
    row = {"model": "tiny + LoRA", "recipe": "GPU recipe (TRL + PEFT)", "generator": "transformers", "pass@1": 0.75}
    (tmp_path / "with.json").write_text(json.dumps({"gpu_recipe": {}, "quality": row}))
    (tmp_path / "without.json").write_text(json.dumps({"gpu_recipe": {}}))
    assert evaluate.committed_quality_row(tmp_path / "with.json") == {**row, "source": "with.json"}
    assert evaluate.committed_quality_row(tmp_path / "without.json") is None  # trained before pass@k existed
    assert evaluate.committed_quality_row(tmp_path / "missing.json") is None
