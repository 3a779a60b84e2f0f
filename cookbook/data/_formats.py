"""Row layouts users bring, turned into one chat form: OpenAI/TRL messages (with thinking and
tools), prompt/completion, named columns (alpaca, the paper's CodeV-R1 SFT set), ShareGPT.

Every layout becomes OpenAI/TRL ``messages`` (roles ``system``, ``user``, ``assistant``,
``tool``; an assistant may carry ``reasoning_content`` and ``tool_calls``) plus the row's
``tools``; :mod:`cookbook.data._rows` then checks the result. A ``<think>...</think>`` prefix
of an answer (DeepSeek-R1's layout, which CodeV-R1 keeps) becomes ``reasoning_content``, so
Gemma 4's template renders it in its thought channel (``<|channel>thought ... <channel|>``)
and the reasoning parser of vLLM hands it back apart from the answer. Written here: no
library converts these layouts to Gemma 4's message form with row-numbered reasons.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# data_format -> what the row must hold. "auto" picks one per row from its fields.
FORMATS: dict[str, str] = {
    "auto": "pick per row: messages, conversations, prompt+completion, prompt+response, instruction+output",
    "messages": "OpenAI/TRL chat: {'messages': [...], 'tools': [...]?}",
    "prompt-completion": "TRL prompt/completion: strings or lists of messages",
    "codev-r1": "the paper's CodeV-R1 SFT columns: system, prompt, response (<think>...</think> then the answer)",
    "alpaca": "instruction, input, output (and system) columns",
    "sharegpt": "{'conversations': [{'from': 'human'|'gpt'|'system', 'value': ...}], 'system'?: ...}",
    "columns": "named columns, mapped with columns=system=COL,prompt=COL,response=COL",
}
COLUMN_ROLES = ("system", "prompt", "response")
CODEV_R1_COLUMNS = {"system": "system", "prompt": "prompt", "response": "response"}
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "system": "system",
}
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


class FormatError(ValueError):
    """A row does not fit the layout it was read as (the message is the reason shown)."""


def parse_columns(spec: str | Mapping[str, str] | None) -> dict[str, str] | None:
    """``"system=sys,prompt=question,response=answer"`` -> ``{"system": "sys", ...}``.

    Keys are the parts of a row (``system`` optional, ``prompt`` and ``response``
    required); values are column names of the data set.
    """
    if spec is None or spec == "":
        return None
    if isinstance(spec, Mapping):
        pairs = dict(spec)
    else:
        pairs = {}
        for part in str(spec).split(","):
            key, sep, column = part.partition("=")
            if not sep or not key.strip() or not column.strip():
                raise ValueError(
                    f"--columns {spec!r}: write ROLE=COLUMN pairs, e.g. system=system,prompt=prompt,response=response"
                )
            pairs[key.strip()] = column.strip()
    unknown = sorted(set(pairs) - set(COLUMN_ROLES))
    if unknown:
        raise ValueError(f"--columns: unknown part(s) {unknown}; map {', '.join(COLUMN_ROLES)}")
    missing = [k for k in ("prompt", "response") if k not in pairs]
    if missing:
        raise ValueError(f"--columns: no column for {missing}; e.g. prompt=question,response=answer")
    return pairs


def check_format(data_format: str, columns: Mapping[str, str] | None) -> None:
    """Refuse an unknown format, or columns given for a layout that has its own."""
    if data_format not in FORMATS:
        raise ValueError(f"data format {data_format!r} is unknown; use one of {', '.join(FORMATS)}")
    if columns and data_format not in ("columns", "auto"):
        raise ValueError(f"columns are for the 'columns' format, not {data_format!r}")
    if data_format == "columns" and not columns:
        raise ValueError(
            "the 'columns' format needs a mapping, e.g. columns=system=system,prompt=prompt,response=response"
        )


def detect_format(row: Mapping[str, Any]) -> str:
    """The layout of one row from its fields (``auto``)."""
    if "messages" in row:
        return "messages"
    if "conversations" in row:
        return "sharegpt"
    if "prompt" in row and "response" in row:
        return "codev-r1"
    if "prompt" in row or "completion" in row:
        return "prompt-completion"  # which says the half that is missing
    if "instruction" in row and "output" in row:
        return "alpaca"
    raise FormatError(
        f"no known layout (fields: {sorted(row)}): expected 'messages', 'conversations', "
        "'prompt'+'completion', 'prompt'+'response' or 'instruction'+'output'; name other "
        "columns with --columns system=COL,prompt=COL,response=COL"
    )


def split_think(text: str) -> tuple[str | None, str]:
    """``"<think>thought</think>answer"`` -> ``("thought", "answer")``; no thought: ``(None, text)``.

    DeepSeek-R1 distillations sometimes drop the opening tag (their template writes it):
    a ``</think>`` with no ``<think>`` still ends the thought.
    """
    stripped = text.lstrip()
    if stripped.startswith(THINK_OPEN):
        body = stripped[len(THINK_OPEN) :]
        if THINK_CLOSE not in body:
            raise FormatError(f"the answer opens {THINK_OPEN} but never closes it with {THINK_CLOSE}")
        thought, _, answer = body.partition(THINK_CLOSE)
    elif THINK_CLOSE in stripped and THINK_OPEN not in stripped:
        thought, _, answer = stripped.partition(THINK_CLOSE)
    else:
        return None, text
    if THINK_OPEN in answer or THINK_CLOSE in answer:
        raise FormatError(f"the answer holds a second {THINK_OPEN}/{THINK_CLOSE} after its thought")
    return thought.strip() or None, answer.strip()


def _text(row: Mapping[str, Any], column: str, part: str) -> str:
    value = row.get(column)
    if not isinstance(value, str):
        got = "no such column" if column not in row else type(value).__name__
        raise FormatError(f"{part} column {column!r} must be a string ({got})")
    return value


def _columns_messages(row: Mapping[str, Any], columns: Mapping[str, str]) -> list[dict]:
    messages = []
    system_col = columns.get("system")
    if system_col and row.get(system_col) not in (None, ""):
        messages.append({"role": "system", "content": _text(row, system_col, "system")})
    messages.append({"role": "user", "content": _text(row, columns["prompt"], "prompt")})
    thought, answer = split_think(_text(row, columns["response"], "response"))
    answer_msg: dict[str, Any] = {"role": "assistant", "content": answer}
    if thought is not None:
        answer_msg["reasoning_content"] = thought
    return [*messages, answer_msg]


def _alpaca_messages(row: Mapping[str, Any]) -> list[dict]:
    prompt = _text(row, "instruction", "instruction")
    extra = row.get("input")
    if extra not in (None, ""):
        prompt = f"{prompt}\n\n{_text(row, 'input', 'input')}"
    return _columns_messages(
        {**row, "_prompt": prompt}, {"system": "system", "prompt": "_prompt", "response": "output"}
    )


def _sharegpt_messages(row: Mapping[str, Any]) -> list[dict]:
    turns = row["conversations"]
    if not isinstance(turns, list):
        raise FormatError(f"'conversations' must be a list, got {type(turns).__name__}")
    messages = []
    if isinstance(row.get("system"), str) and row["system"].strip():
        messages.append({"role": "system", "content": row["system"]})
    for i, turn in enumerate(turns):
        if not isinstance(turn, Mapping) or "from" not in turn or "value" not in turn:
            raise FormatError(f"conversations[{i}] must be an object with 'from' and 'value'")
        role = SHAREGPT_ROLES.get(str(turn["from"]).lower())
        if role is None:
            raise FormatError(
                f"conversations[{i}] is from {turn['from']!r}; ShareGPT roles are {', '.join(SHAREGPT_ROLES)}"
            )
        messages.append({"role": role, "content": turn["value"]})
    return messages


def _prompt_completion_messages(row: Mapping[str, Any]) -> list:
    prompt, completion = row.get("prompt"), row.get("completion")
    if prompt is None or completion is None:
        missing = "prompt" if prompt is None else "completion"
        raise FormatError(f"prompt/completion row without a {missing!r} field")
    if isinstance(prompt, str) and isinstance(completion, str):
        return [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]
    if isinstance(prompt, list) and isinstance(completion, list):
        return [*prompt, *completion]
    raise FormatError(
        f"'prompt' and 'completion' must both be strings or both lists of messages "
        f"(got {type(prompt).__name__} and {type(completion).__name__})"
    )


def raw_conversation(row: Any, data_format: str = "auto", columns: Mapping[str, str] | None = None) -> tuple[list, Any]:
    """A row's raw ``messages`` and ``tools`` (unchecked) in the OpenAI/TRL form."""
    if not isinstance(row, Mapping):
        raise FormatError(f"expected a JSON object, got {type(row).__name__}")
    fmt = data_format
    if fmt == "auto":
        fmt = "columns" if columns else detect_format(row)
    if fmt == "messages":
        if "messages" not in row:
            raise FormatError(f"no 'messages' field (fields: {sorted(row)})")
        messages = row["messages"]
        if not isinstance(messages, list):
            raise FormatError(f"'messages' must be a list, got {type(messages).__name__}")
    elif fmt == "prompt-completion":
        messages = _prompt_completion_messages(row)
    elif fmt == "codev-r1":
        messages = _columns_messages(row, CODEV_R1_COLUMNS)
    elif fmt == "columns":
        messages = _columns_messages(row, columns or {})
    elif fmt == "alpaca":
        messages = _alpaca_messages(row)
    elif fmt == "sharegpt":
        if "conversations" not in row:
            raise FormatError(f"no 'conversations' field (fields: {sorted(row)})")
        messages = _sharegpt_messages(row)
    else:
        raise ValueError(f"data format {fmt!r} is unknown; use one of {', '.join(FORMATS)}")
    tools = row.get("tools")
    if isinstance(tools, str):  # some sets (xLAM, glaive) store the declarations as JSON text
        try:
            tools = json.loads(tools) if tools.strip() else None
        except json.JSONDecodeError as e:
            raise FormatError(f"'tools' is a string but not JSON ({e.msg})") from None
    return messages, tools
