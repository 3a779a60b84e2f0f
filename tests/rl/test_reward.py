"""The RL reward: the simulator's verdict on the answer only, and the format term."""

import shutil

import pytest

from cookbook import evaluate, rl
from cookbook.evaluate import _simulate
from cookbook.rl import _reward

GOOD = "module add8(input [7:0] a, b, output [7:0] y);\n  assign y = a + b;\nendmodule"
WRONG = GOOD.replace("a + b", "a - b")


@pytest.fixture(scope="module")
def add8():
    if not (shutil.which("iverilog") and shutil.which("vvp")):
        pytest.fail(_simulate.INSTALL_HINT)  # CI installs it: a missing simulator is a failure
    return evaluate.Problem(
        name="Prob001_add8",
        prompt="Write a Verilog module named add8 that adds two 8-bit inputs.",
        ref=GOOD.replace("module add8(", "module RefModule("),
        module="add8",
        test=evaluate.two_input_testbench("add8", 8),
    )


def thought(text: str) -> str:
    return f"<|channel>thought\n{text}\n<channel|>"


def test_functional_term_scores_the_answer_and_never_the_thought(add8):
    reward = rl.VerilogReward([add8], rl.RewardConfig(thinking=True))
    completions = [
        thought("y is a plus b") + GOOD + "<turn|>",  # right, well formed
        thought("y is a minus b") + WRONG + "<turn|>",  # wrong answer, well formed
        thought(GOOD) + WRONG + "<turn|>",  # the right module only inside the thought
        GOOD + "<turn|>",  # right, but no thought channel: functional yes, format no
        thought("y is a plus b") + GOOD + "\n  always always",  # ran on past the module
        thought("never closed ") + GOOD + "<turn|>",  # fine: the channel closes...
        "<|channel>thought\nstill thinking " + GOOD,  # ...this one never does: no answer at all
    ]
    completions[5] = completions[5].replace("<channel|>", "")  # an unclosed thought swallows the answer
    got = reward(prompts=["p"] * len(completions), completions=completions, problem=[add8.name] * len(completions))
    assert reward.last.passed == [True, False, False, True, True, False, False]
    assert reward.last.formatted == [True, True, True, False, False, False, False]
    assert got == pytest.approx([1.1, 0.1, 0.1, 1.0, 1.0, 0.0, 0.0])
    assert reward.last.outcomes[1] == "mismatch" and reward.last.outcomes[5] == "no_module"


def test_plain_runs_need_no_thought_and_refuse_one(add8):
    reward = rl.VerilogReward([add8], rl.RewardConfig(format=0.5))
    got = reward(
        prompts=["p", "p", "p"],
        completions=[GOOD + "<turn|>", thought("x") + GOOD + "<turn|>", GOOD + "\n" + GOOD + "<turn|>"],
        problem=[add8.name] * 3,
    )
    assert _reward.well_formed("```verilog\n" + GOOD + "\n```") and not _reward.well_formed("```verilog\n" + GOOD[:-9])
    # A stray thought in a plain run is malformed but its answer passes; two modules are malformed
    # and do not compile (the module is defined twice).
    assert reward.last.passed == [True, True, False] and got == [1.5, 1.0, 0.0]
    assert reward.last.outcomes[2] == "compile_error"


def test_duplicates_in_a_group_are_simulated_once(add8, monkeypatch):
    calls = []
    real = evaluate.simulate_many

    def counting(jobs, *args, **kwargs):
        calls.append(len(jobs))
        return real(jobs, *args, **kwargs)

    monkeypatch.setattr(evaluate, "simulate_many", counting)
    reward = rl.VerilogReward([add8])
    group = [GOOD + "<turn|>"] * 6 + [WRONG + "<turn|>"] * 2 + ["no module here<turn|>"]
    got = reward(prompts=["p"] * 9, completions=group, problem=[add8.name] * 9)
    assert calls == [2] and got == pytest.approx([1.1] * 6 + [0.1] * 2 + [0.0])


def test_bad_input_names_the_problem(add8):
    reward = rl.VerilogReward([add8])
    with pytest.raises(KeyError, match="Prob999"):
        reward(prompts=["p"], completions=[GOOD], problem=["Prob999_x"])
    with pytest.raises(ValueError, match="unique"):
        rl.VerilogReward([add8, add8])
    with pytest.raises(ValueError, match="functional > 0"):
        rl.RewardConfig(functional=0.0)
