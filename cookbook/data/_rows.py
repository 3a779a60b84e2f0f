"""Reading and checking rows: JSONL, Parquet, ``datasets`` or dicts, in chat or prompt/completion form.

Every row is checked before training starts: a bad row is dropped (or, when asked, an
over-long one truncated) and reported with its row number and reason; if too many rows
are bad, :class:`DataError` stops the run and says why. Written here: validation with
row-numbered reasons (no library gives them).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

ANSWER_ROLES = ("assistant", "model")


KNOWN_ROLES = ("system", "user", *ANSWER_ROLES)


class DataError(ValueError):
    """The data set cannot be trained on as configured (too many bad rows, empty, ...)."""


@dataclasses.dataclass(frozen=True)
class RowProblem:
    """A row that was dropped or changed: its 1-based row (line) number and why."""

    row: int
    reason: str
    action: Literal["dropped", "truncated"] = "dropped"

    def __str__(self) -> str:
        return f"row {self.row}: {self.reason} ({self.action})"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataReport:
    """What validation and tokenisation found."""

    num_rows: int
    num_kept: int
    problems: tuple[RowProblem, ...]
    num_tokens: int  # tokens of the kept examples
    num_loss_tokens: int  # answer tokens (the ones trained on)

    @property
    def num_dropped(self) -> int:
        return sum(p.action == "dropped" for p in self.problems)

    @property
    def num_truncated(self) -> int:
        return sum(p.action == "truncated" for p in self.problems)

    @property
    def bad_fraction(self) -> float:
        return self.num_dropped / self.num_rows if self.num_rows else 1.0

    def summary(self, max_listed: int = 10) -> str:
        lines = [
            f"{self.num_rows} rows: {self.num_kept} kept, {self.num_dropped} dropped, "
            f"{self.num_truncated} truncated; {self.num_tokens} tokens, "
            f"{self.num_loss_tokens} trained on"
        ]
        lines += [f"  {p}" for p in self.problems[:max_listed]]
        if len(self.problems) > max_listed:
            lines.append(f"  ... and {len(self.problems) - max_listed} more")
        return "\n".join(lines)


class RowError(ValueError):
    """Why one row cannot be used (the message is the reason shown to the user)."""


def read_rows(source: Any) -> tuple[list[Any], list[RowProblem]]:
    """Read raw rows from a JSONL/JSON/Parquet path, a ``datasets`` object or a list.

    Returns the rows that could be parsed (``None`` in place of unparseable ones, so row
    numbers stay aligned with the source) and the problems found while parsing: lines
    that are not UTF-8 or not valid JSON are reported with their line number here.
    """
    if isinstance(source, str | Path):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"data file {path} does not exist")
        suffix = path.suffix.lower()
        if suffix in (".jsonl", ".json", ".ndjson"):
            return _read_jsonl(path)
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist(), []
        raise ValueError(f"{path}: unknown data format {suffix!r}; use .jsonl or .parquet")
    if hasattr(source, "features") and hasattr(source, "__getitem__"):  # datasets.Dataset
        return [dict(r) for r in source], []
    if isinstance(source, Sequence) and not isinstance(source, bytes | str):
        return list(source), []
    raise TypeError(
        f"cannot read rows from a {type(source).__name__}; pass a .jsonl/.parquet path, "
        "a datasets.Dataset or a list of dicts"
    )


def _read_jsonl(path: Path) -> tuple[list[Any], list[RowProblem]]:
    rows: list[Any] = []
    problems: list[RowProblem] = []
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                problems.append(RowProblem(number, f"not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})"))
                rows.append(None)
                continue
            if not line.strip():
                problems.append(RowProblem(number, "empty line"))
                rows.append(None)
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                problems.append(RowProblem(number, f"invalid JSON ({e.msg} at column {e.colno})"))
                rows.append(None)
    return rows, problems


def to_messages(row: Any) -> list[dict[str, str]]:
    """Normalise one row to a validated chat ``messages`` list.

    Accepts ``{"messages": [...]}`` and ``{"prompt": ..., "completion": ...}`` (strings,
    or TRL's conversational lists of messages). Raises :class:`RowError` with the reason
    when the row cannot be trained on.
    """
    if not isinstance(row, dict):
        raise RowError(f"expected a JSON object, got {type(row).__name__}")
    if "messages" in row:
        messages = row["messages"]
        if not isinstance(messages, list):
            raise RowError(f"'messages' must be a list, got {type(messages).__name__}")
    elif "prompt" in row or "completion" in row:
        messages = _prompt_completion_messages(row)
    else:
        raise RowError(f"no 'messages' and no 'prompt'/'completion' field (fields: {sorted(row)})")
    if not messages:
        raise RowError("'messages' is empty")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise RowError(f"message {i} must be an object, got {type(m).__name__}")
        role, content = m.get("role"), m.get("content")
        if not isinstance(role, str):
            raise RowError(f"message {i} has no string 'role' (got {role!r})")
        if role not in KNOWN_ROLES:
            raise RowError(f"message {i} has unknown role {role!r}; use one of {KNOWN_ROLES}")
        if not isinstance(content, str):
            raise RowError(f"message {i} ({role}) 'content' must be a string, got {type(content).__name__}")
        if "\ufffd" in content or any(0xD800 <= ord(c) <= 0xDFFF for c in content):
            raise RowError(f"message {i} ({role}) holds undecodable (non-UTF-8) text")
        out.append({"role": role, "content": content})
    if out[-1]["role"] not in ANSWER_ROLES:
        raise RowError(f"last message is {out[-1]['role']!r}; the row must end with an assistant answer")
    if not all(m["content"].strip() for m in out if m["role"] in ANSWER_ROLES):
        raise RowError("empty answer (assistant content is blank)")
    if not any(m["role"] == "user" for m in out):
        raise RowError("no user message")
    return out


def _prompt_completion_messages(row: dict) -> list:
    prompt, completion = row.get("prompt"), row.get("completion")
    if prompt is None or completion is None:
        missing = "prompt" if prompt is None else "completion"
        raise RowError(f"prompt/completion row without a {missing!r} field")
    if isinstance(prompt, str) and isinstance(completion, str):
        return [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]
    if isinstance(prompt, list) and isinstance(completion, list):
        return [*prompt, *completion]
    raise RowError(
        f"'prompt' and 'completion' must both be strings or both lists of messages "
        f"(got {type(prompt).__name__} and {type(completion).__name__})"
    )
