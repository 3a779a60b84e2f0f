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
from pathlib import Path
from typing import Any

from cookbook import data as data_lib
from cookbook.evaluate._generate import GREEDY, Generation, SamplingConfig, tunix_samples
from cookbook.evaluate._problems import Problem, rewrites, sample_task_problems
from cookbook.evaluate._score import Scores, quality_row, score_generation
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


def before_after(before: HeldOutResult, after: HeldOutResult, preset: str) -> tuple[str, list[dict[str, Any]]]:
    """The base's and the fine-tune's greedy scores on the same rows (:func:`held_out_greedy`):
    the lines that compare them, and the two rows of the quality table (``quality_row``)."""
    s = after.scores
    lines = [
        f"exact match: base {before.exact_match:.1%} -> fine-tuned {after.exact_match:.1%} on {len(after.rows)} "
        "held-out prompts",
        f"functional pass@1: base {before.pass1:.1%} -> fine-tuned {after.pass1:.1%}; outcomes {s.outcome_counts}; "
        f"simulated at {s.samples_per_s:.0f} samples/s with {s.workers} workers",
    ]
    quality = [
        quality_row(f"{preset} base", "-", "Tunix sampler", greedy=before.scores),
        quality_row(f"{preset} + LoRA", "TPU recipe (Tunix)", "Tunix sampler", greedy=after.scores),
    ]
    return "\n".join(lines), quality


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


@dataclasses.dataclass(frozen=True)
class ThinkingRun:
    """The thinking variant of a preset's recipe (:func:`thinking_variant`): trained, then scored."""

    config: Any  # the thinking recipe's TrainConfig
    run_dir: Path
    summary: dict[str, Any]  # the run's summary.json
    held_out: HeldOutResult  # greedy answers to the held-out rows, thinking on
    marked_row: str  # the first held-out row as trained: trained tokens in [[ ]]

    @property
    def thoughts_right_rate(self) -> float:
        return self.held_out.thoughts_right / len(self.held_out.rows)

    def describe(self) -> str:
        """How long it trained, its pass@1 and thoughts right, and one completion: as decoded, and as scored."""
        h, s = self.held_out, self.summary
        first = h.completions[0]
        return (
            f"{self.run_dir.name}: {s['final_step']} steps in {s['train_time_s']:.0f} s; functional pass@1 "
            f"{h.pass1:.1%} of {len(h.rows)}, the thought right in {h.thoughts_right}\n"
            f"one completion, as Tunix decodes it:\n{first.split('<turn|>')[0]}\n"
            f"what is scored:\n{data_lib.clean_completion(first)}"
        )


def thinking_variant(preset: str, tokenizer, *, num_rows: int, batch_size: int = 50) -> ThinkingRun:
    """Train the thinking variant of ``preset``'s recipe (a thought, then the module; reused from the
    cache when trained), then score its greedy answers on ``num_rows`` held-out rows with thinking on:
    only the module is simulated, and each row's thought is looked for in its completion."""
    from cookbook import train

    config = train.train_preset(preset, sample_task="thinking")
    rows = train.eval_rows(config)[:num_rows]
    run_dir = train.ensure_trained(config)
    model = train.restore_lora_model(run_dir)
    return ThinkingRun(
        config=config,
        run_dir=run_dir,
        summary=train.run_summary(run_dir),
        held_out=held_out_greedy(model, tokenizer, rows, thinking=True, batch_size=batch_size),
        marked_row=data_lib.marked_tokens(tokenizer, rows[0]),
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
