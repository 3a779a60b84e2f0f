"""A trained model's greedy answers on the sample task's held-out rows, scored: one call, one result.

The rows become verilog-eval problems (:func:`sample_task_problems`), Tunix's sampler answers
each greedily within the answer budget (plus the longest thought channel for a thinking run,
``cookbook.data.answer_budget`` / ``thought_budget``), and Icarus Verilog scores the answers;
for a thinking run, whether each row's thought appears in its completion is counted too.
Notebook 06's scores (``cookbook.train``: the base, the fine-tune, the thinking run), notebook 08's
served thinking run (``cookbook.serve``) and the thinking tests read the same :class:`HeldOutResult`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cookbook import data as data_lib
from cookbook.evaluate._generate import GREEDY, Generation, SamplingConfig, tunix_samples
from cookbook.evaluate._problems import Problem, sample_task_problems
from cookbook.evaluate._score import Scores, score_generation


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

    @property
    def exact_match(self) -> float:
        """Fraction of rows whose answer equals the reference (the thought channel not compared)."""
        return self.scores.exact_match

    @property
    def misses(self) -> int:
        """Rows whose answer is not the reference's, exactly."""
        return sum(not p.exact[0] for p in self.scores.problems)

    def describe(self, label: str) -> str:
        """One line: ``label``'s exact match, functional pass@1 and outcome counts."""
        return (
            f"{label}: exact match {self.exact_match:.1%}, functional pass@1 {self.pass1:.1%} of "
            f"{len(self.rows)}; outcomes {self.scores.outcome_counts}"
        )


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
