"""The RL reward: the simulator's verdict on the final answer, plus a small format term.

CodeV-R1's recipe rewards 1 when the answer is in the expected format and a testbench run with
Icarus Verilog shows it equal to the golden RTL, else 0. Here the two parts are separate terms
so a run's curves show which one moves:

* **functional** (weight ``RewardConfig.functional``, 1.0): the problem's testbench passes on
  the module extracted from the completion's *answer* (``cookbook.evaluate.simulate``, which
  drops every thought channel first: a module written inside a thought never scores);
* **format** (weight ``RewardConfig.format``, 0.1): the answer is one module and ends at its
  ``endmodule`` (or the fence closing it), and, for a thinking run, the answer follows one
  closed thought channel (``<|channel>thought ... <channel|>``). Tunix's sampler cuts the stop
  token from the text, so a completion that ran out of budget shows as an answer that does not
  end at its module (or never reaches ``endmodule``).

Simulations run in the scorer's sandbox (``SimConfig``: timeouts, output and memory limits, no
network) in a thread pool (``evaluate.simulate_many``), one per CPU by default. Identical
(problem, answer) pairs in a group are simulated once: a group of 16 samples of a converged
policy is mostly duplicates.

Tunix calls a reward function as ``fn(prompts=..., completions=..., **batch_fields)`` with one
entry per completion; :class:`VerilogReward` reads the problem of each completion from the
batch's ``problem`` field (a name), so the prompt text is never parsed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from cookbook import data as data_lib
from cookbook import evaluate

_THOUGHT_OPEN, _THOUGHT_CLOSE = "<|channel>", "<channel|>"
_TURN_ENDS = ("<turn|>", "<eos>")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RewardConfig:
    """Weights of the reward's two terms and how the simulations are confined."""

    functional: float = 1.0
    format: float = 0.1
    thinking: bool = False  # the answer must follow one closed thought channel
    workers: int | None = None  # simulations in parallel (None: one per CPU)
    sim: evaluate.SimConfig = dataclasses.field(default_factory=evaluate.SimConfig)

    def __post_init__(self):
        if self.functional <= 0 or self.format < 0:
            raise ValueError(
                f"reward weights must be functional > 0 and format >= 0, got {self.functional} and {self.format}"
            )


def well_formed(completion: str, *, thinking: bool = False) -> bool:
    """Whether ``completion`` has the answer's expected form (the format term)."""
    body = completion
    for end in _TURN_ENDS:
        body = body.split(end, 1)[0]
    if thinking:
        head, opened, rest = body.partition(_THOUGHT_OPEN)
        thought, closed, answer = rest.partition(_THOUGHT_CLOSE)
        if head.strip() or not opened or not closed or not thought.strip() or _THOUGHT_OPEN in answer:
            return False
    elif _THOUGHT_OPEN in body:
        return False
    answer = data_lib.clean_completion(completion)
    if answer.count("endmodule") != 1 or evaluate.extract_module(completion) is None:
        return False
    return answer.rsplit("endmodule", 1)[1].strip() in ("", "```")


@dataclasses.dataclass(frozen=True)
class Verdicts:
    """One reward call's outcome per completion (what the curves plot)."""

    rewards: list[float]
    passed: list[bool]
    formatted: list[bool]
    outcomes: list[str]


class VerilogReward:
    """A Tunix reward function over the cookbook's problems; ``last`` holds the last call's verdicts."""

    __name__ = "verilog_reward"  # Tunix names each reward term in its metrics by its function's name

    def __init__(self, problems: Sequence[evaluate.Problem], config: RewardConfig | None = None):
        self.problems = {p.name: p for p in problems}
        if len(self.problems) != len(problems):
            raise ValueError("problem names must be unique: the reward finds each completion's problem by name")
        self.config = config or RewardConfig()
        self.last: Verdicts | None = None

    def verdicts(self, names: Sequence[str], completions: Sequence[str]) -> Verdicts:
        if len(names) != len(completions):
            raise ValueError(f"{len(completions)} completions for {len(names)} problem names")
        missing = sorted(set(names) - set(self.problems))
        if missing:
            raise KeyError(f"no problem named {missing[:3]} among the reward's {len(self.problems)} problems")
        cfg = self.config
        answers = [evaluate.extract_module(c) or "" for c in completions]
        unique = sorted({(n, a) for n, a in zip(names, answers, strict=True) if a})
        results = evaluate.simulate_many(
            [(self.problems[n], a) for n, a in unique], cfg.sim, workers=cfg.workers
        )  # fmt: skip
        verdict = dict(zip(unique, results, strict=True))
        passed = [bool(a) and verdict[(n, a)].passed for n, a in zip(names, answers, strict=True)]
        outcomes = [verdict[(n, a)].outcome if a else "no_module" for n, a in zip(names, answers, strict=True)]
        formatted = [well_formed(c, thinking=cfg.thinking) for c in completions]
        rewards = [cfg.functional * p + cfg.format * f for p, f in zip(passed, formatted, strict=True)]
        return Verdicts(rewards=rewards, passed=passed, formatted=formatted, outcomes=outcomes)

    def __call__(self, prompts: Sequence[str], completions: Sequence[str], problem: Sequence[str], **_: Any):
        self.last = self.verdicts(list(problem), list(completions))
        return self.last.rewards


@dataclasses.dataclass(frozen=True)
class JudgedReward:
    """The reward of one hand-made answer (notebook 10)."""

    label: str
    reward: float
    passed: bool
    formatted: bool
    outcome: str


def judge_rewards(problem: evaluate.Problem, config: RewardConfig | None = None) -> list[JudgedReward]:
    """The reward of hand-made answers to a sample-task ``problem``: ``evaluate.rewrites``' (the
    reference, a rewrite, a wrong operator, a syntax error, another name), the reference only
    inside a thought, and the reference with text run on past its ``endmodule``."""
    answers = dict(evaluate.rewrites(problem))
    wrong = answers["wrong operator"]
    answers["the reference only inside a thought"] = (
        f"{_THOUGHT_OPEN}thought\n{problem.answer}\n{_THOUGHT_CLOSE}{wrong}"
    )
    answers["the reference, then run-on text"] = f"{problem.answer}\nalways always module"
    reward = VerilogReward([problem], config)
    v = reward.verdicts([problem.name] * len(answers), list(answers.values()))
    return [
        JudgedReward(label=label, reward=r, passed=p, formatted=f, outcome=o)
        for label, r, p, f, o in zip(answers, v.rewards, v.passed, v.formatted, v.outcomes, strict=True)
    ]


def format_judged_rewards(judged: list[JudgedReward]) -> str:
    """:func:`judge_rewards` as a Markdown table."""
    lines = ["| answer | simulator | format | reward |", "| --- | --- | --- | ---: |"]
    lines += [f"| {j.label} | {j.outcome} | {'yes' if j.formatted else 'no'} | {j.reward:.2f} |" for j in judged]
    return "\n".join(lines)
