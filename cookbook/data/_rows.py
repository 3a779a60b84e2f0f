"""Reading and checking rows: JSONL, Parquet, ``datasets`` or dicts, in any layout of ``_formats``.

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

from cookbook.data._formats import FormatError, raw_conversation, split_think

ANSWER_ROLES = ("assistant", "model")
KNOWN_ROLES = ("system", "developer", "user", *ANSWER_ROLES, "tool")
# Gemma 4's control tokens: text holding one would be read as turn structure, not text.
CONTROL_TOKENS = (
    "<|turn>",
    "<turn|>",
    "<|channel>",
    "<channel|>",
    "<|tool_call>",
    "<tool_call|>",
    "<|tool_response>",
    "<tool_response|>",
    "<|tool>",
    "<tool|>",
    "<|think|>",
)


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
    lengths: tuple[int, ...] = ()  # tokens of every row that rendered, before drop/truncate
    seq_len: int | None = None
    too_long: str = "drop"

    @property
    def num_over(self) -> int:
        """Rendered rows longer than ``seq_len`` (dropped or truncated, per ``too_long``)."""
        return sum(n > self.seq_len for n in self.lengths) if self.seq_len else 0

    def length_percentiles(self, qs: Sequence[int] = (50, 90, 99, 100)) -> dict[int, int]:
        """Token lengths of the rendered rows at the percentiles ``qs`` (nearest rank)."""
        if not self.lengths:
            return {}
        ordered = sorted(self.lengths)
        return {q: ordered[max(0, -(-q * len(ordered) // 100) - 1)] for q in qs}

    def length_line(self) -> str:
        """One line: the length distribution and what the too-long policy did."""
        if not self.lengths:
            return "lengths: no row rendered"
        pct = self.length_percentiles()
        dist = ", ".join(f"p{q} {n}" if q < 100 else f"max {n}" for q, n in pct.items())
        over = self.num_over
        what = "dropped" if self.too_long == "drop" else "truncated (or dropped if no answer token is left)"
        tail = (
            (
                f"{over} of {len(self.lengths)} rows ({over / len(self.lengths):.1%}) are over "
                f"seq_len={self.seq_len}: {what}"
            )
            if over
            else f"none over seq_len={self.seq_len}"
        )
        return f"lengths (tokens): {dist}; {tail}"

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
            f"{self.num_loss_tokens} trained on",
            self.length_line(),
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


@dataclasses.dataclass(frozen=True)
class Conversation:
    """A checked row in the OpenAI/TRL chat form Gemma 4's template renders.

    ``messages``: roles ``system``, ``user``, ``assistant`` (with optional
    ``reasoning_content`` and ``tool_calls``, arguments as objects) and ``tool`` (with
    ``tool_call_id``/``name``); ``tools``: the row's function declarations, or ``None``.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None

    @property
    def thinking(self) -> bool:
        """Whether an assistant turn carries a thought (rendered with ``enable_thinking``)."""
        return any(m.get("reasoning_content") for m in self.messages)

    def template_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``apply_chat_template`` besides the messages."""
        return {"tools": self.tools, "enable_thinking": self.thinking}


def to_conversation(
    row: Any, data_format: str = "auto", columns: dict[str, str] | None = None, *, require_answer: bool = True
) -> Conversation:
    """Read one row in any layout of :data:`cookbook.data.FORMATS` and check it.

    Raises :class:`RowError` with the reason when the row cannot be trained on: an unknown
    role, a malformed tool call, a tool response that answers no call, text holding one of
    Gemma 4's control tokens, a row that does not end with an assistant answer (unless
    ``require_answer=False``: a prompt, checked the same way otherwise).
    """
    if isinstance(row, Conversation):
        return row
    try:
        raw, tools = raw_conversation(row, data_format, columns)
    except FormatError as e:
        raise RowError(str(e)) from None
    if not raw:
        raise RowError("'messages' is empty")
    tools = _check_tools(tools)
    declared = {t["function"]["name"] for t in tools} if tools else None
    out: list[dict[str, Any]] = []
    open_calls: list[dict] | None = None  # the calls of the assistant turn tool turns answer
    answered = 0
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise RowError(f"message {i} must be an object, got {type(m).__name__}")
        role = m.get("role")
        if not isinstance(role, str):
            raise RowError(f"message {i} has no string 'role' (got {role!r})")
        if role not in KNOWN_ROLES:
            raise RowError(f"message {i} has unknown role {role!r}; use one of {KNOWN_ROLES}")
        role = "assistant" if role == "model" else "system" if role == "developer" else role
        if role == "tool":
            if open_calls is None:
                raise RowError(
                    f"message {i} (tool) answers no tool call: it must follow an assistant turn with 'tool_calls'"
                )
            out.append(_check_tool_response(i, m, open_calls, answered))
            answered += 1
            continue
        msg = _check_turn(i, role, m, declared)
        open_calls, answered = msg.get("tool_calls"), 0
        out.append(msg)
    last = out[-1]
    if not require_answer:  # a prompt to send (the turns so far), not a row to train on
        return Conversation(out, tools)
    if last["role"] != "assistant":
        raise RowError(f"last message is {last['role']!r}; the row must end with an assistant answer")
    if not (last["content"].strip() or last.get("tool_calls")):
        raise RowError("empty answer (the last assistant turn has no content and no tool call)")
    if not any(m["role"] == "user" for m in out):
        raise RowError("no user message")
    return Conversation(out, tools)


def to_messages(row: Any, data_format: str = "auto", columns: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The checked ``messages`` of one row (:func:`to_conversation` without the tools)."""
    return to_conversation(row, data_format, columns).messages


def _check_text(i: int, role: str, what: str, text: str) -> None:
    if "\ufffd" in text or any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        raise RowError(f"message {i} ({role}) {what} holds undecodable (non-UTF-8) text")
    for token in CONTROL_TOKENS:
        if token in text:
            raise RowError(
                f"message {i} ({role}) {what} holds Gemma 4's control token {token!r}, "
                "which would break the turn structure; remove or escape it"
            )


def _check_turn(i: int, role: str, m: dict, declared: set[str] | None) -> dict[str, Any]:
    content = m.get("content")
    if content is None and role == "assistant" and m.get("tool_calls"):
        content = ""
    if not isinstance(content, str):
        raise RowError(f"message {i} ({role}) 'content' must be a string, got {type(content).__name__}")
    msg: dict[str, Any] = {"role": role, "content": content}
    thought = m.get("reasoning_content", m.get("reasoning"))
    if role == "assistant" and thought is None:
        try:
            thought, content = split_think(content)
        except FormatError as e:
            raise RowError(f"message {i} (assistant): {e}") from None
        msg["content"] = content if thought is not None else msg["content"]
    if thought is not None:
        if role != "assistant":
            raise RowError(f"message {i} ({role}) has a thought; only assistant turns think")
        if not isinstance(thought, str):
            raise RowError(f"message {i} (assistant) 'reasoning_content' must be a string")
        _check_text(i, role, "thought", thought)
        if thought.strip():
            msg["reasoning_content"] = thought
    _check_text(i, role, "content", msg["content"])
    if m.get("tool_calls") is not None:
        if role != "assistant":
            raise RowError(f"message {i} ({role}) has 'tool_calls'; only assistant turns call tools")
        msg["tool_calls"] = [_check_call(i, j, c, declared) for j, c in enumerate(_as_list(i, m["tool_calls"]))]
    return msg


def _as_list(i: int, calls: Any) -> list:
    if not isinstance(calls, list) or not calls:
        raise RowError(f"message {i} (assistant) 'tool_calls' must be a non-empty list")
    return calls


def _check_call(i: int, j: int, call: Any, declared: set[str] | None) -> dict[str, Any]:
    where = f"message {i} (assistant) tool call {j}"
    if not isinstance(call, dict):
        raise RowError(f"{where} must be an object, got {type(call).__name__}")
    function = call.get("function", call)  # flat {"name", "arguments"} as some sets write it
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name.strip():
        raise RowError(
            f"{where} has no function name (expected {{'function': {{'name': ..., 'arguments': {{...}}}}}}}})"
        )
    if declared is not None and name not in declared:
        raise RowError(f"{where} calls {name!r}, which the row's tools do not declare ({', '.join(sorted(declared))})")
    args = function.get("arguments")
    if isinstance(args, str):  # OpenAI writes arguments as JSON text; the template needs an object
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise RowError(f"{where} ({name}) arguments are not valid JSON ({e.msg})") from None
    if args is not None and not isinstance(args, dict):
        raise RowError(f"{where} ({name}) arguments must be a JSON object, got {type(args).__name__}")
    _check_text(i, "assistant", f"tool call {j}", json.dumps(args, ensure_ascii=False))
    out: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": args or {}}}
    if call.get("id") is not None:
        out["id"] = str(call["id"])
    return out


def _check_tool_response(i: int, m: dict, calls: list[dict], answered: int) -> dict[str, Any]:
    if answered >= len(calls):
        raise RowError(
            f"message {i} (tool) answers no tool call: the assistant turn made "
            f"{len(calls)} call(s), and this is response {answered + 1}"
        )
    content = m.get("content")
    if not isinstance(content, str | dict | list):
        raise RowError(f"message {i} (tool) 'content' must be a string or a JSON value, got {type(content).__name__}")
    if not isinstance(content, str):  # the released template iterates a dict's keys: send JSON text
        content = json.dumps(content, ensure_ascii=False)
    _check_text(i, "tool", "content", content)
    msg: dict[str, Any] = {"role": "tool", "content": content}
    call_id, name = m.get("tool_call_id"), m.get("name")
    ids = [c.get("id") for c in calls]
    if call_id is not None:
        if str(call_id) not in ids:
            raise RowError(
                f"message {i} (tool) answers tool_call_id {call_id!r}, which no call "
                f"of the assistant turn has (ids: {ids})"
            )
        msg["tool_call_id"] = str(call_id)
        name = next(c["function"]["name"] for c in calls if c.get("id") == str(call_id))
    elif name is not None and name not in {c["function"]["name"] for c in calls}:
        raise RowError(f"message {i} (tool) answers {name!r}, which the assistant turn did not call")
    msg["name"] = name if name is not None else calls[answered]["function"]["name"]
    return msg


def _check_tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list):
        raise RowError(f"'tools' must be a list of function declarations, got {type(tools).__name__}")
    out = []
    for k, tool in enumerate(tools):
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise RowError(
                f"tools[{k}] is not a function declaration ({{'type': 'function', "
                "'function': {'name': ..., 'description': ..., 'parameters': {...}}})"
            )
        out.append({"type": "function", "function": function})
    return out
