"""Notebook 06's evaluation sections, one call each: the base model before training, the fine-tune
after it on the same prompts, what each metric says of hand-made answers, and the thinking variant;
each returns a typed result that says what it measured and what the notebook records.

Written by hand: these compose ``cookbook.evaluate``'s greedy answers scored by the simulator
(``held_out_greedy``) with this package's runs into the comparisons the notebook shows; no library
has them. They live in the training stage, which comes after ``cookbook.evaluate``, because each
one builds, trains or restores a run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from cookbook import data as data_lib
from cookbook import evaluate
from cookbook.train._config import train_preset
from cookbook.train._runs import build_lora_model, eval_rows, resolve_base_dir, restore_lora_model, run_summary
from cookbook.train._trainer import ensure_trained

# ------------------------------------------------------------------------------------
# Before and after training, on the same held-out prompts


@dataclasses.dataclass(frozen=True, kw_only=True)
class BaseScores:
    """:func:`score_base_model`'s result: the base model's greedy answers to the held-out rows, with
    the tokenizer and rows the fine-tune is scored on after training."""

    preset: str
    tokenizer: Any = dataclasses.field(repr=False)
    held_out: evaluate.HeldOutResult  # its ``sampler`` is reused after training

    @property
    def rows(self) -> list[dict]:
        return self.held_out.rows

    def describe(self) -> str:
        """Exact match, pass@1 and outcomes of the base, and the start of one of its completions."""
        first = self.held_out.completions[0]
        return f"{self.held_out.describe('base model')}\na base completion: {first[:120]!r}"

    def results(self) -> dict[str, Any]:
        h = self.held_out
        return {
            "base_accuracy": h.exact_match,
            "base_functional_pass1": h.pass1,
            "base_outcomes": h.scores.outcome_counts,
            "num_eval_rows": len(h.rows),
        }


def score_base_model(config, *, num_rows: int, batch_size: int = 50) -> BaseScores:
    """The first ``num_rows`` held-out rows of ``config`` (a :class:`~cookbook.train.TrainConfig`) answered
    greedily by its freshly adapted model (LoRA ``B`` = 0: the base model), each a verilog-eval
    problem scored by the simulator; the tokenizer is the base checkpoint's."""
    base_dir = resolve_base_dir(config)
    tokenizer = data_lib.load_tokenizer(base_dir=base_dir)
    rows = eval_rows(config)[:num_rows]
    model = build_lora_model(config, base_dir)
    held_out = evaluate.held_out_greedy(model, tokenizer, rows, batch_size=batch_size)
    return BaseScores(preset=config.model_preset, tokenizer=tokenizer, held_out=held_out)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FineTunedScores:
    """:func:`score_fine_tuned`'s result: the fine-tune's greedy answers beside the base's."""

    base: BaseScores
    held_out: evaluate.HeldOutResult
    comparison: str  # before_after's lines
    quality: list[dict[str, Any]]  # the quality table's two rows: base, then base + LoRA
    show: int  # completions shown

    def describe(self) -> str:
        """The comparison, the first ``show`` completions (and one miss), the quality table."""
        return "\n".join(
            [
                self.comparison,
                data_lib.show_completions(self.held_out.rows, self.held_out.completions, self.show),
                *evaluate.quality_table(self.quality, paper=False),
            ]
        )

    def results(self) -> dict[str, Any]:
        h = self.held_out
        return {
            "finetuned_accuracy": h.exact_match,
            "num_wrong": h.misses,
            "finetuned_functional_pass1": h.pass1,
            "finetuned_outcomes": h.scores.outcome_counts,
            "scorer_samples_per_s": h.scores.samples_per_s,
            "quality": self.quality,
        }


def score_fine_tuned(base: BaseScores, run_dir: str | Path, *, batch_size: int = 50, show: int = 3) -> FineTunedScores:
    """The latest checkpoint of ``run_dir`` (a ``cookbook train`` run) restored onto the base and
    asked ``base``'s prompts, with ``base``'s sampler (its weights swapped, not compiled again)."""
    model = restore_lora_model(Path(run_dir))
    after = evaluate.held_out_greedy(
        model, base.tokenizer, base.rows, batch_size=batch_size, sampler=base.held_out.sampler
    )
    comparison, quality = before_after(base.held_out, after, base.preset)
    return FineTunedScores(base=base, held_out=after, comparison=comparison, quality=quality, show=show)


# ------------------------------------------------------------------------------------
# What each metric says of hand-made answers


@dataclasses.dataclass(frozen=True, kw_only=True)
class MetricExamples:
    """:func:`metric_examples`' verdicts, one per hand-made answer (:func:`judge_rewrites`)."""

    judged: list[dict[str, Any]]

    def describe(self) -> str:
        return format_judged(self.judged)

    def results(self) -> dict[str, Any]:
        return {"metric_examples": [{k: j[k] for k in ("answer", "exact_match", "outcome")} for j in self.judged]}


def metric_examples(scores: BaseScores) -> MetricExamples:
    """Exact match and the simulator on the first held-out problem of ``scores``: its reference,
    the same circuit written differently, and broken answers."""
    return MetricExamples(judged=judge_rewrites(scores.held_out.problems[0], scores.rows[0]))


# ------------------------------------------------------------------------------------
# The thinking variant


@dataclasses.dataclass(frozen=True, kw_only=True)
class ThinkingScores:
    """:func:`score_thinking_variant`'s result: the thinking run scored (None where not asked for)."""

    run: ThinkingRun | None

    def describe(self) -> str:
        if self.run is None:
            return "the thinking variant is not trained (THINKING = False)"
        return (
            f"a held-out row as the recipe trains it, trained tokens in [[ ]]:\n{self.run.marked_row}\n\n"
            f"{self.run.describe()}"
        )

    def results(self) -> dict[str, Any]:
        if self.run is None:
            return {}
        r = self.run
        return {
            "thinking_pass1": r.held_out.pass1,
            "thinking_thoughts_right": r.thoughts_right_rate,
            "thinking_steps": r.summary["final_step"],
            "thinking_seq_len": r.config.data.seq_len,
        }


def score_thinking_variant(
    preset: str, tokenizer, *, num_rows: int, batch_size: int = 50, enabled: bool = True
) -> ThinkingScores:
    """``preset``'s thinking recipe trained (or reused from the cache) and scored on ``num_rows``
    held-out rows with thinking on (:func:`thinking_variant`); with ``enabled=False`` nothing is
    trained or recorded."""
    if not enabled:
        return ThinkingScores(run=None)
    return ThinkingScores(run=thinking_variant(preset, tokenizer, num_rows=num_rows, batch_size=batch_size))


# ------------------------------------------------------------------------------------
# The pieces: the comparison, the hand-made answers judged, the thinking run


def before_after(
    before: evaluate.HeldOutResult, after: evaluate.HeldOutResult, preset: str
) -> tuple[str, list[dict[str, Any]]]:
    """The base's and the fine-tune's greedy scores on the same rows (``evaluate.held_out_greedy``):
    the lines that compare them, and the two rows of the quality table (``quality_row``)."""
    s = after.scores
    lines = [
        f"exact match: base {before.exact_match:.1%} -> fine-tuned {after.exact_match:.1%} on {len(after.rows)} "
        "held-out prompts",
        f"functional pass@1: base {before.pass1:.1%} -> fine-tuned {after.pass1:.1%}; outcomes {s.outcome_counts}; "
        f"simulated at {s.samples_per_s:.0f} samples/s with {s.workers} workers",
    ]
    quality = [
        evaluate.quality_row(f"{preset} base", "-", "Tunix sampler", greedy=before.scores),
        evaluate.quality_row(f"{preset} + LoRA", "TPU recipe (Tunix)", "Tunix sampler", greedy=after.scores),
    ]
    return "\n".join(lines), quality


def judge_rewrites(problem: evaluate.Problem, row: dict) -> list[dict[str, Any]]:
    """What each metric says of ``evaluate.rewrites``' hand-made answers to ``problem`` (its ``row``):
    ``{"answer", "exact_match", "outcome", "detail", ...}`` per answer (notebook 06)."""
    return [
        {"answer": label, "exact_match": data_lib.exact_match(c, row), **evaluate.simulate(problem, c).as_dict()}
        for label, c in evaluate.rewrites(problem).items()
    ]


def format_judged(judged: list[dict[str, Any]]) -> str:
    """:func:`judge_rewrites`' verdicts, one line per answer."""
    return "\n".join(
        f"{j['answer']:48} exact match {j['exact_match']!s:5}  simulator: {j['outcome']:13} {j['detail'][:60]}"
        for j in judged
    )


@dataclasses.dataclass(frozen=True)
class ThinkingRun:
    """The thinking variant of a preset's recipe (:func:`thinking_variant`): trained, then scored."""

    config: Any  # the thinking recipe's TrainConfig
    run_dir: Path
    summary: dict[str, Any]  # the run's summary.json
    held_out: evaluate.HeldOutResult  # greedy answers to the held-out rows, thinking on
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
    config = train_preset(preset, sample_task="thinking")
    rows = eval_rows(config)[:num_rows]
    run_dir = ensure_trained(config)
    model = restore_lora_model(run_dir)
    return ThinkingRun(
        config=config,
        run_dir=run_dir,
        summary=run_summary(run_dir),
        held_out=evaluate.held_out_greedy(model, tokenizer, rows, thinking=True, batch_size=batch_size),
        marked_row=data_lib.marked_tokens(tokenizer, rows[0]),
    )
