"""Shared by the evaluation tests: hand-made problems and the tiny runs' greedy answers (the
simulator's fixture, ``iverilog``, is tests/conftest.py's)."""

import pytest

from cookbook import data, evaluate
from cookbook.evaluate import _held_out


@pytest.fixture(scope="session")
def adder8(iverilog) -> evaluate.Problem:
    """``add8``: y = a + b on 8 bits, with the sample task's generated testbench."""
    answer = "module add8(input [7:0] a, b, output [7:0] y);\n  assign y = a + b;\nendmodule"
    return evaluate.Problem(
        name="Prob001_add8",
        prompt="Write a Verilog module named add8 that adds two 8-bit inputs.",
        ref=answer.replace("module add8(", "module RefModule("),
        module="add8",
        answer=answer,
        test=evaluate.two_input_testbench("add8", 8),
    )


@pytest.fixture(scope="session")
def tiny_greedy(iverilog):
    """The suite's cached tiny training run, its held-out problems, and Tunix's greedy samples of
    the fine-tuned and the base model on 48 of them, scored (shared by the generator tests)."""
    import types

    import userenv

    from cookbook import train

    run_dir = userenv.tiny_run()  # notebook 06's run, shared with the demo
    config = train.config_of_run(run_dir)
    base_dir = train.resolve_base_dir(config)
    tokenizer = data.load_tokenizer(base_dir=base_dir)
    rows = train.eval_rows(config)[:48]
    problems = evaluate.sample_task_problems(rows)
    sampling = evaluate.greedy_sampling(tokenizer, rows)
    tuned, sampler = evaluate.tunix_samples(
        train.restore_lora_model(run_dir), tokenizer, problems, sampling, batch_size=48
    )
    base, _ = evaluate.tunix_samples(
        train.build_lora_model(config, base_dir), tokenizer, problems, sampling, batch_size=48, sampler=sampler
    )
    return types.SimpleNamespace(
        run_dir=run_dir,
        problems=problems,
        tokenizer=tokenizer,
        sampling=sampling,
        generation=tuned,
        tuned=evaluate.score_generation(problems, tuned),
        base=evaluate.score_generation(problems, base),
    )


@pytest.fixture(scope="session")
def tiny_thinking(iverilog):
    """The tiny recipe's thinking run (`cookbook train --sample-task thinking`: a thought in Gemma 4's
    thought channel before each module), 48 of its held-out rows as problems, and Tunix's greedy
    samples with thinking on, scored (shared by the thinking tests)."""
    import types

    import userenv

    from cookbook import train

    run_dir = userenv.tiny_run("thinking")  # notebook 06's thinking run, shared with the demo
    config = train.config_of_run(run_dir)
    tokenizer = data.load_tokenizer(base_dir=train.resolve_base_dir(config))
    rows = train.eval_rows(config)[:48]
    problems = evaluate.sample_task_problems(rows)
    # The answer's budget plus the longest thought channel the rows hold.
    channel = data.thought_budget(tokenizer, rows)
    assert (
        channel
        == max(
            len(
                tokenizer(f"<|channel>thought\n{data.thought_of(r)}\n<channel|>", add_special_tokens=False)["input_ids"]
            )
            for r in rows
        )
        > 0
    )
    model = train.restore_lora_model(run_dir)
    held_out = _held_out.held_out_greedy(model, tokenizer, rows, thinking=True, batch_size=48)
    assert held_out.sampling.max_tokens == data.answer_budget(tokenizer, problems) + channel
    assert [p.name for p in held_out.problems] == [p.name for p in problems]
    return types.SimpleNamespace(
        run_dir=run_dir,
        rows=rows,
        problems=problems,
        tokenizer=tokenizer,
        model=model,
        sampling=held_out.sampling,
        generation=held_out.generation,
        sampler=held_out.sampler,
        scores=held_out.scores,
        held_out=held_out,
    )
