"""cookbook.train._scores: notebook 06's scores of its runs (the base before training, the
fine-tune after, what each metric says of hand-made answers, the thinking variant), each checked
against what it must have measured and what it records."""

from pathlib import Path

import pytest

from cookbook import data, evaluate, train
from cookbook.evaluate._generate import GREEDY, Generation
from cookbook.train import _scores


def _held_out_result(rows, completions, *, thinking=False):
    """A HeldOutResult of hand-made greedy ``completions`` (one per row), scored by the simulator."""
    problems = evaluate.sample_task_problems(rows)
    generation = Generation(
        completions={p.name: [c] for p, c in zip(problems, completions, strict=True)},
        seeds={p.name: [None] for p in problems},
        sampling=GREEDY,
        generator="tunix",
        seconds=0.0,
        thinking=thinking,
    )
    return evaluate.HeldOutResult(
        rows=rows,
        problems=problems,
        sampling=GREEDY,
        generation=generation,
        scores=evaluate.score_generation(problems, generation),
        thinking=thinking,
        sampler=None,
    )


@pytest.fixture(scope="module")
def rows():
    return data.generate_rows("eval", n=4, seed=0)


@pytest.fixture(scope="module")
def base(iverilog, rows):
    """The base model as it answers: no module at all."""
    return _scores.BaseScores(preset="tiny", tokenizer=None, held_out=_held_out_result(rows, ["<pad> y y y"] * 4))


def test_base_scores_record_zero_and_show_a_completion(base):
    assert base.results() == {
        "base_accuracy": 0.0,
        "base_functional_pass1": 0.0,
        "base_outcomes": {"no_module": 4},
        "num_eval_rows": 4,
    }
    first, second = base.describe().split("\n")
    assert first.startswith("base model: exact match 0.0%, functional pass@1 0.0% of 4")
    assert second == "a base completion: '<pad> y y y'"


def test_fine_tuned_scores_count_the_miss_the_simulator_finds(base, rows):
    # Three reference answers and one with the wrong operator: exact match and the simulator both fail it.
    problems = evaluate.sample_task_problems(rows)
    wrong = evaluate.rewrites(problems[3])["wrong operator"]
    after = _held_out_result(rows, [data.answer_of(r) for r in rows[:3]] + [wrong])
    comparison, quality = _scores.before_after(base.held_out, after, "tiny")
    tuned = _scores.FineTunedScores(base=base, held_out=after, comparison=comparison, quality=quality, show=2)
    r = tuned.results()
    assert r["finetuned_accuracy"] == 0.75 and r["num_wrong"] == 1 and r["finetuned_functional_pass1"] == 0.75
    assert r["finetuned_outcomes"] == {"pass": 3, "mismatch": 1} and r["scorer_samples_per_s"] > 0
    base_row, tuned_row = r["quality"]
    assert (base_row["model"], base_row["exact_match"], base_row["greedy_pass@1"]) == ("tiny base", 0.0, 0.0)
    assert (tuned_row["recipe"], tuned_row["greedy_pass@1"]) == ("TPU recipe (Tunix)", 0.75)
    shown = tuned.describe()
    assert shown.startswith("exact match: base 0.0% -> fine-tuned 75.0% on 4 held-out prompts\n")
    assert shown.count("[OK ]") == 2 and "[BAD]" not in shown  # the first two rows, both right
    assert f"one miss: {data.prompt_of(rows[3])}" in shown  # the miss, beyond the rows shown
    assert "| tiny + LoRA |" in shown and "the paper" not in shown  # the quality table, without the paper's rows


def test_metric_examples_exact_match_is_strict_the_simulator_is_not(base):
    examples = train.metric_examples(base)
    recorded = examples.results()["metric_examples"]
    assert [(e["exact_match"], e["outcome"]) for e in recorded] == [
        (True, "pass"),
        (False, "pass"),
        (False, "mismatch"),
        (False, "compile_error"),
        (False, "compile_error"),
    ]
    assert [e["answer"] for e in recorded] == list(evaluate.rewrites(base.held_out.problems[0]))
    assert len(examples.describe().splitlines()) == 5 and "simulator: mismatch" in examples.describe()


def test_thinking_variant_is_not_trained_when_disabled(monkeypatch):
    monkeypatch.setattr(_scores, "thinking_variant", lambda *a, **k: pytest.fail("trained while disabled"))
    off = train.score_thinking_variant("tiny", None, num_rows=4, enabled=False)
    assert off.results() == {} and "not trained" in off.describe()


def test_thinking_variant_records_pass1_thoughts_and_the_recipes_schedule(iverilog, monkeypatch):
    config = train.train_preset("tiny", sample_task="thinking")
    rows = data.generate_rows("eval", n=2, seed=0, thinking=True)
    # Row 0 thinks its thought and writes the module; row 1 writes the module without the thought.
    answers = [f"<|channel>thought\n{data.thought_of(rows[0])}\n<channel|>{data.answer_of(rows[0])}"]
    answers.append(data.answer_of(rows[1]))
    held_out = _held_out_result(rows, answers, thinking=True)
    asked = {}

    def fake_variant(preset, tokenizer, *, num_rows, batch_size):
        asked.update(preset=preset, num_rows=num_rows, batch_size=batch_size)
        return _scores.ThinkingRun(
            config=config,
            run_dir=Path("runs/tiny-thinking"),
            summary={"final_step": 300, "train_time_s": 12.0},
            held_out=held_out,
            marked_row="[[a marked row]]",
        )

    monkeypatch.setattr(_scores, "thinking_variant", fake_variant)
    got = train.score_thinking_variant("tiny", None, num_rows=2, batch_size=7)
    assert asked == {"preset": "tiny", "num_rows": 2, "batch_size": 7}
    assert got.results() == {
        "thinking_pass1": 1.0,  # both modules simulate correctly
        "thinking_thoughts_right": 0.5,  # one thought of two
        "thinking_steps": 300,
        "thinking_seq_len": config.data.seq_len,
    }
    assert config.data.seq_len == 200  # the thinking recipe packs 200-token rows
    assert got.describe().startswith(
        "a held-out row as the recipe trains it, trained tokens in [[ ]]:\n[[a marked row]]\n\n"
    )


@pytest.mark.slow
def test_base_then_fine_tuned_on_the_shared_run(iverilog):
    """The two calls on notebook 06's cached run: the base scores nothing, the fine-tune what its
    run's measured spread allows, with the base's sampler reused."""
    import userenv

    run_dir = userenv.tiny_run()
    config = train.config_of_run(run_dir)
    before = train.score_base_model(config, num_rows=4, batch_size=4)
    assert [r["messages"] for r in before.rows] == [r["messages"] for r in train.eval_rows(config)[:4]]
    assert before.results()["base_accuracy"] == 0.0
    after = train.score_fine_tuned(before, run_dir, batch_size=4, show=1)
    assert after.held_out.sampler is before.held_out.sampler  # weights swapped, not compiled again
    r = after.results()
    assert r["finetuned_accuracy"] >= userenv.outcome_bound("plain", "exact_match", 4)
    right = sum(data.exact_match(c, row) for c, row in zip(after.held_out.completions, before.rows, strict=True))
    assert r["num_wrong"] == 4 - right and r["finetuned_functional_pass1"] >= r["finetuned_accuracy"]
