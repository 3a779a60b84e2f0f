"""A trained model's greedy answers on the sample task's held-out rows, scored: one call, one result.

The rows become verilog-eval problems (:func:`sample_task_problems`), Tunix's sampler answers
each greedily within the answer budget (plus the longest thought channel for a thinking run,
``cookbook.data.answer_budget`` / ``thought_budget``), and Icarus Verilog scores the answers;
for a thinking run, whether each row's thought appears in its completion is counted too.
Notebook 06 (section 11) and the thinking tests read the same :class:`HeldOutResult`; notebook 06
shows what each metric says of hand-made answers with :func:`judge_rewrites`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cookbook import data as data_lib
from cookbook.evaluate._generate import GREEDY, Generation, SamplingConfig, tunix_samples
from cookbook.evaluate._problems import Problem, rewrites, sample_task_problems
from cookbook.evaluate._score import Scores, score_generation
from cookbook.evaluate._simulate import simulate


def greedy_sampling(tokenizer, rows: list[dict], *, thinking: bool = False) -> SamplingConfig:
    """Greedy decoding with the rows' answer budget, plus their longest thought channel when
    ``thinking``: what every generator is given for the sample task's held-out rows."""
    answers = data_lib.answer_budget(tokenizer, sample_task_problems(rows))  # the problems' answers, stripped
    return GREEDY.replace(max_tokens=answers + (data_lib.thought_budget(tokenizer, rows) if thinking else 0))


@dataclasses.dataclass(frozen=True)
class HeldOutResult:
    """What :func:`held_out_greedy` measured."""

    rows: list[dict]
    problems: list[Problem]
    sampling: SamplingConfig
    generation: Generation
    scores: Scores
    thinking: bool
    sampler: Any = dataclasses.field(repr=False, compare=False)  # Tunix's, to reuse its compiled functions

    @property
    def completions(self) -> list[str]:
        """Each problem's completion, as Tunix decodes it (thought markers kept), in row order."""
        return [self.generation.completions[p.name][0] for p in self.problems]

    @property
    def pass1(self) -> float:
        return self.scores.pass_at(1)

    @property
    def thoughts_right(self) -> int:
        """Rows whose thought appears verbatim in the completion (0 for a plain run)."""
        if not self.thinking:
            return 0
        return sum(data_lib.thought_of(r) in c for r, c in zip(self.rows, self.completions, strict=True))


def held_out_greedy(model, tokenizer, rows: list[dict], *, thinking: bool = False, batch_size: int = 50, sampler=None):
    """Greedy answers of ``model`` (Tunix, LoRA applied) to ``rows`` (held-out sample-task rows),
    prompted with thinking on when ``thinking``, scored by the simulator."""
    problems = sample_task_problems(rows)
    sampling = greedy_sampling(tokenizer, rows, thinking=thinking)
    generation, sampler = tunix_samples(
        model, tokenizer, problems, sampling, batch_size=batch_size, thinking=thinking, sampler=sampler
    )
    return HeldOutResult(
        rows=list(rows),
        problems=problems,
        sampling=sampling,
        generation=generation,
        scores=score_generation(problems, generation),
        thinking=thinking,
        sampler=sampler,
    )


def judge_rewrites(problem: Problem, row: dict) -> list[dict[str, Any]]:
    """What each metric says of :func:`rewrites`' hand-made answers to ``problem`` (its ``row``):
    ``{"answer", "exact_match", "outcome", "detail", ...}`` per answer (notebook 06)."""
    return [
        {"answer": label, "exact_match": data_lib.exact_match(c, row), **simulate(problem, c).as_dict()}
        for label, c in rewrites(problem).items()
    ]


def format_judged(judged: list[dict[str, Any]]) -> str:
    """:func:`judge_rewrites`' verdicts, one line per answer."""
    return "\n".join(
        f"{j['answer']:48} exact match {j['exact_match']!s:5}  simulator: {j['outcome']:13} {j['detail'][:60]}"
        for j in judged
    )
