"""Notebook 05's sections, one call each: the sample task, reading and bad rows, formats and the
too-long policy, each with a typed result that says what it found and what the notebook records.

Written by hand: these compose the pipeline's own functions (``_sample_task``, ``_tokenize``,
``_cli``) into the demonstrations the notebook shows; no library has them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from cookbook.data._cli import format_view, inspect, marked_tokens
from cookbook.data._config import DataConfig
from cookbook.data._examples import format_example_checks, format_examples
from cookbook.data._rows import DataError, DataReport
from cookbook.data._sample_task import generate_rows, module_names, write_jsonl, write_messy_jsonl
from cookbook.data._tokenize import Example, prepare_examples, tokenize_chat

# ------------------------------------------------------------------------------------
# The sample task, and the loss mask of one row


@dataclasses.dataclass(frozen=True, kw_only=True)
class SampleTask:
    """The sample task's rows for one run: training rows (also written as JSONL) and evaluation
    rows whose module names never occur in training."""

    train_rows: list[dict]
    eval_rows: list[dict]
    train_path: Path  # the training rows as JSONL, what ``cookbook train --data`` reads
    held_out_names: tuple[str, ...]  # the evaluation split's module names, sorted

    def describe(self) -> str:
        """The first training row's prompt and answer, then the split sizes and some held-out names."""
        first = self.train_rows[0]["messages"]
        return (
            f"{first[0]['content']}\n{first[1]['content']}\n"
            f"{len(self.train_rows)} train rows, {len(self.eval_rows)} eval rows; "
            f"held-out names: {list(self.held_out_names[:6])} ..."
        )

    def results(self) -> dict[str, Any]:
        """What notebook 05 records of the task."""
        return {
            "num_train_rows": len(self.train_rows),
            "num_eval_rows": len(self.eval_rows),
            "num_held_out_names": len(self.held_out_names),
            "train_path": self.train_path,
        }


def sample_task(out_dir: str | Path, *, num_train: int, num_eval: int, seed: int = 0) -> SampleTask:
    """``num_train`` training and ``num_eval`` held-out rows of the sample task (:func:`generate_rows`),
    the training rows written to ``out_dir/train.jsonl``."""
    train_rows = generate_rows("train", n=num_train, seed=seed)
    eval_rows = generate_rows("eval", n=num_eval, seed=seed)
    return SampleTask(
        train_rows=train_rows,
        eval_rows=eval_rows,
        train_path=write_jsonl(train_rows, Path(out_dir) / "train.jsonl"),
        held_out_names=tuple(sorted(set(module_names("eval")))),
    )


def describe_loss_mask(tokenizer, row: dict) -> str:
    """``row`` as the trainer tokenises it, each run of trained tokens between ``[[`` and ``]]``
    (:func:`marked_tokens`), then how many tokens it has and how many the loss covers."""
    ids, loss_mask = tokenize_chat(tokenizer, row)
    return f"{marked_tokens(tokenizer, row)}\n{len(ids)} tokens, {int(loss_mask.sum())} trained on"


# ------------------------------------------------------------------------------------
# Reading: the same rows from every source, and what goes wrong with messy data


@dataclasses.dataclass(frozen=True, kw_only=True)
class SourceMatch:
    """One source's examples against the reference examples (the JSONL's)."""

    source: str  # "Parquet" or "datasets.Dataset"
    num_examples: int
    same_tokens: bool  # every example's token ids equal the reference's first ones


@dataclasses.dataclass(frozen=True, kw_only=True)
class SourceComparison:
    """:func:`compare_sources`' result."""

    matches: tuple[SourceMatch, ...]

    @property
    def all_same(self) -> bool:
        return all(m.same_tokens for m in self.matches)

    def describe(self) -> str:
        return "\n".join(
            f"{m.source}: {m.num_examples} rows, same tokens as the JSONL's first rows: {m.same_tokens}"
            for m in self.matches
        )


def compare_sources(
    rows: list[dict], reference: list[Example], tokenizer, config: DataConfig, *, out_dir: str | Path
) -> SourceComparison:
    """Read ``rows`` from a Parquet file (written to ``out_dir/train.parquet``) and from a
    ``datasets.Dataset``, and check each gives the token ids of ``reference`` (the same rows
    read from JSONL): every source the pipeline takes must train on the same tokens."""
    import datasets

    ds = datasets.Dataset.from_list(rows)
    parquet_path = Path(out_dir) / "train.parquet"
    ds.to_parquet(str(parquet_path))
    matches = []
    for name, source in (("Parquet", parquet_path), ("datasets.Dataset", ds)):
        examples, _ = prepare_examples(source, tokenizer, config)
        same = all(np.array_equal(a.token_ids, b.token_ids) for a, b in zip(examples, reference, strict=False))
        matches.append(SourceMatch(source=name, num_examples=len(examples), same_tokens=same))
    return SourceComparison(matches=tuple(matches))


@dataclasses.dataclass(frozen=True, kw_only=True)
class MessyRowsCheck:
    """:func:`check_messy_rows`' result: what the pipeline made of a file with one broken row of each kind."""

    refusal: str | None  # the DataError at the configured max_bad_fraction; None: it trained
    lenient_fraction: float  # the looser max_bad_fraction it then read the file with
    report: DataReport  # at ``lenient_fraction``
    expected_rows: tuple[int, ...]  # the broken rows' numbers, as written

    @property
    def all_found(self) -> bool:
        """Every broken row, and nothing else, was reported."""
        return {p.row for p in self.report.problems} == set(self.expected_rows)

    def describe(self) -> str:
        lines = [f"refused: {self.refusal}"] if self.refusal is not None else []
        lines.append(
            f"at max_bad_fraction={self.lenient_fraction:.0%} it trains on the rest; "
            f"every bad row found: {self.all_found}"
        )
        return "\n".join(lines)

    def results(self) -> dict[str, Any]:
        """What notebook 05 records of the messy file."""
        return {
            "messy_rows": self.report.num_rows,
            "messy_dropped": self.report.num_dropped,
            "messy_all_reasons_found": self.all_found,
            "messy_refused_at_default": self.refusal is not None,
        }


def check_messy_rows(
    good_rows: list[dict],
    tokenizer,
    config: DataConfig,
    *,
    out_dir: str | Path,
    seq_len: int = 64,
    lenient_fraction: float = 0.10,
) -> MessyRowsCheck:
    """Write ``good_rows`` with one broken row of every kind (:func:`write_messy_jsonl`) to
    ``out_dir/messy.jsonl``, read it at ``config.max_bad_fraction`` (too many bad rows: training
    must refuse, with the reasons), then at ``lenient_fraction`` (it trains on the rest).

    ``seq_len`` is the one the file's over-long row is written to exceed."""
    path = Path(out_dir) / "messy.jsonl"
    expected = write_messy_jsonl(path, good_rows)
    strict = dataclasses.replace(config, seq_len=seq_len)
    try:
        prepare_examples(path, tokenizer, strict)
        refusal = None
    except DataError as err:
        refusal = str(err)
    _, report = prepare_examples(path, tokenizer, dataclasses.replace(strict, max_bad_fraction=lenient_fraction))
    return MessyRowsCheck(
        refusal=refusal, lenient_fraction=lenient_fraction, report=report, expected_rows=tuple(sorted(expected))
    )


# ------------------------------------------------------------------------------------
# Gemma 4's formats, and the too-long policy on R1-length thoughts


@dataclasses.dataclass(frozen=True, kw_only=True)
class FormatsView:
    """:func:`inspect_formats`' result: :func:`inspect`'s view of the rows, and on the built-in
    format examples what each must show (None on a user's own file)."""

    view: dict[str, Any]
    checks: dict[str, bool] | None

    def describe(self) -> str:
        text = format_view(self.view)
        if self.checks is None:
            return text
        return text + "\n\n" + " | ".join(f"{k.replace('_', ' ')}: {v}" for k, v in self.checks.items())

    def results(self) -> dict[str, Any]:
        """What notebook 05 records: the checks on the built-in examples; nothing for a user's file."""
        if self.checks is None:
            return {}
        return {"format_rows_shown": len(self.view["rows"]), **self.checks}


def inspect_formats(
    tokenizer,
    config: DataConfig,
    *,
    out_dir: str | Path,
    data_path: str | Path = "",
    data_format: str = "auto",
    columns: str | dict[str, str] | None = None,
    show: int = 3,
) -> FormatsView:
    """:func:`inspect` ``data_path`` (in ``data_format``, with ``columns``), or, when it is empty,
    the built-in rows of every layout (:func:`format_examples`, written to
    ``out_dir/formats.jsonl``) with :func:`format_example_checks` on what they must show."""
    cfg = dataclasses.replace(config, data_format=data_format, columns=columns or None, max_bad_fraction=1.0)
    if data_path:
        return FormatsView(view=inspect(data_path, tokenizer, cfg, show=show), checks=None)
    path = write_jsonl(format_examples(), Path(out_dir) / "formats.jsonl")
    view = inspect(path, tokenizer, cfg, show=show)
    return FormatsView(view=view, checks=format_example_checks(view))


@dataclasses.dataclass(frozen=True, kw_only=True)
class TooLongPolicies:
    """:func:`compare_too_long_policies`' result: rows kept and the report under each policy."""

    num_rows: int
    kept: dict[str, int]  # policy -> examples kept
    reports: dict[str, DataReport]  # policy -> its report

    @property
    def report(self) -> DataReport:
        """The ``truncate`` policy's report (its lengths are every policy's)."""
        return self.reports["truncate"]

    def describe(self) -> str:
        return "\n".join(
            f"too_long={p}: {self.kept[p]} of {self.num_rows} rows kept; {r.length_line()}"
            for p, r in self.reports.items()
        )

    def results(self) -> dict[str, Any]:
        """What notebook 05 records: the length distribution and what truncation did."""
        pct = self.report.length_percentiles()
        return {
            "long_rows_p50": pct[50],
            "long_rows_max": pct[100],
            "long_rows_over": self.report.num_over,
            "long_rows_truncated": self.report.num_truncated,
        }


def compare_too_long_policies(rows: list[dict], tokenizer, config: DataConfig) -> TooLongPolicies:
    """``rows`` prepared at ``config.seq_len`` with ``too_long="drop"`` and ``"truncate"``, never
    refusing (``max_bad_fraction=1``): what each policy keeps of a long-tailed data set."""
    kept, reports = {}, {}
    for policy in ("drop", "truncate"):
        cfg = dataclasses.replace(config, too_long=policy, max_bad_fraction=1.0)
        examples, reports[policy] = prepare_examples(rows, tokenizer, cfg)
        kept[policy] = len(examples)
    return TooLongPolicies(num_rows=len(rows), kept=kept, reports=reports)
