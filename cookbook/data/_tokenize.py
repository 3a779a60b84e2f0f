"""Chat rows to tokens with the tokenizer's own Gemma 4 chat template, loss on what the model writes.

Each row is rendered with the template vLLM uses when serving (training and serving see the
same tokens): its tools declared, ``enable_thinking`` on when it carries a thought. The loss
mask covers the model's turns (thought, answer, tool calls, closing ``<turn|>``) and nothing
the user, the system or a tool wrote, found from the rendered text's turn markers and the
tokenizer's character offsets (written here: no library derives these masks from Gemma 4's
template, which has no generation markers; TRL's ``assistant_only_loss`` sums to zero on it).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from cookbook import models
from cookbook.data import _cache
from cookbook.data._config import DataConfig
from cookbook.data._rows import (
    Conversation,
    DataError,
    DataReport,
    RowError,
    RowProblem,
    read_rows,
    to_conversation,
)

MODEL_TURN = "<|turn>model\n"
TURN_END = "<turn|>"
TOOL_RESPONSE_START, TOOL_RESPONSE_END = "<|tool_response>", "<tool_response|>"


@dataclasses.dataclass(frozen=True)
class Example:
    """One tokenised conversation: token ids and the loss mask (1 on answer tokens)."""

    token_ids: np.ndarray  # int32 [n]
    loss_mask: np.ndarray  # int32 [n]
    row: int  # 1-based row number in the source


def render(
    tokenizer, conversation: Conversation, add_generation_prompt: bool = False, messages: list[dict] | None = None
) -> str:
    """The text Gemma 4's chat template (the tokenizer's) makes of a conversation, as vLLM
    renders it: its tools declared, ``enable_thinking`` on when a turn carries a thought.
    ``messages`` renders a part of the conversation with the whole one's settings."""
    if not getattr(tokenizer, "chat_template", None):
        raise DataError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template; load the "
            "checkpoint's tokenizer (cookbook.data.load_tokenizer), which carries Gemma 4's"
        )
    try:
        return tokenizer.apply_chat_template(
            conversation.messages if messages is None else messages,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **conversation.template_kwargs(),
        )
    except Exception as e:  # jinja raises from inside the template (e.g. raise_exception)
        raise RowError(f"the chat template rejected the row: {e}") from e


# Gemma 4's chat-template revisions, by the SHA-256 of their text: the five TRL 1.16.0 ships
# (trl/chat_templates/gemma4*.jinja, copies of the revisions Google published with the
# checkpoints). The first four render no thought at all; the fifth (2026-07-09) is the one the
# cookbook ships (cookbook.models.CHAT_TEMPLATE_FILE).
TEMPLATE_REVISIONS = {
    "33204f1acb5bd0002713e16a593847f24ceeafe711ed88bda2a352dc996a3373": "Gemma 4 revision 1 (TRL gemma4.jinja)",
    "55572b8d3c8342044e25874c73fe5234b661fa0a57a57f6ef75b58e03d7d959a": "Gemma 4 revision 2 (TRL gemma4_v2.jinja)",
    "781d10940fbc44be40064b5d43a056fc486c84ceaa55538226368b57314132bf": "Gemma 4 revision 3 (TRL gemma4_v3.jinja)",
    "2f1b4d75d067bae3fe44e676721c7f077d243bc007156cb9c2f8b5836613d082": "Gemma 4 revision 4 (TRL gemma4_v4.jinja)",
    "0a2c8073c878ab1da004bee933a998606537bbb62016310352c7285c3f01c5b5": (
        "Gemma 4 revision 5, published 2026-07-09 (TRL gemma4_v5.jinja; the cookbook's)"
    ),
}


def template_revision(tokenizer) -> str:
    """Which chat-template revision ``tokenizer`` carries: a known one by name, else its hash."""
    import hashlib

    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str):
        return "no single chat template"
    digest = hashlib.sha256(template.encode()).hexdigest()
    return TEMPLATE_REVISIONS.get(digest, f"an unlisted revision (sha256 {digest[:12]})")


def _string_leaves(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _string_leaves(v)]
    if isinstance(value, list):
        return [s for v in value for s in _string_leaves(v)]
    return []


def lost_content(conversation: Conversation, text: str) -> list[tuple[int, str]]:
    """What of a conversation its rendered ``text`` does not hold: ``(message index, what)`` for
    every text, thought, tool call (name and string arguments) and tool response (its strings)
    missing from it. Compared stripped (the templates trim), by containment."""
    lost = []
    for i, m in enumerate(conversation.messages):
        parts = []
        if m["role"] == "tool":
            parts += [("tool response", s) for s in _string_leaves(m.get("content"))]
        elif isinstance(m.get("content"), str):
            parts.append(("text", m["content"]))
        if m.get("reasoning_content"):
            parts.append(("thought", m["reasoning_content"]))
        for call in m.get("tool_calls") or ():
            fn = call["function"]
            parts.append(("tool call", fn["name"]))
            parts += [("tool call argument", s) for s in _string_leaves(fn.get("arguments"))]
        lost += [(i, what) for what, s in parts if s.strip() and s.strip() not in text]
    return lost


def split_turns(row: Any, data_format: str = "auto", columns: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """A multi-turn conversation whose earlier turns think, as one row per exchange.

    Gemma 4's template renders only the thoughts after the last user message, so such a row
    cannot be trained whole without losing thoughts (:func:`tokenize_chat` refuses it). Split, each
    exchange (up to an assistant turn that a user turn follows, or the last) becomes a row of the
    conversation so far, its own thoughts kept and the earlier ones dropped (each is kept in its
    own row). A row that loses nothing comes back as one row, in the messages layout.
    """
    conv = to_conversation(row, data_format, columns)
    msgs = conv.messages
    extra = {"tools": conv.tools} if conv.tools else {}
    last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
    if not any(m.get("reasoning_content") for m in msgs[:last_user]):
        return [{"messages": [dict(m) for m in msgs], **extra}]
    ends = [
        j
        for j, m in enumerate(msgs)
        if m["role"] == "assistant" and (j + 1 == len(msgs) or msgs[j + 1]["role"] == "user")
    ]
    rows = []
    for j in ends:
        prefix = [dict(m) for m in msgs[: j + 1]]
        last = max(i for i, m in enumerate(prefix) if m["role"] == "user")
        for m in prefix[:last]:
            m.pop("reasoning_content", None)
        rows.append({"messages": prefix, **extra})
    return rows


def _check_nothing_lost(tokenizer, conversation: Conversation, text: str) -> None:
    """Refuse a row the chat template renders without some of its content (RowError), naming
    what, the template revision and the fix: training on it would drop that part in silence."""
    lost = lost_content(conversation, text)
    if not lost:
        return
    said = "; ".join(f"message {i} ({conversation.messages[i]['role']}) {what}" for i, what in dict.fromkeys(lost))
    revision = template_revision(tokenizer)
    thoughts = [i for i, what in lost if what == "thought"]
    last_user = max((i for i, m in enumerate(conversation.messages) if m["role"] == "user"), default=-1)
    if thoughts and all(i < last_user for i in thoughts) and len(thoughts) == len(lost):
        fix = (
            "Gemma 4's template shows only the thoughts of the turns after the last user message "
            "(earlier ones are dropped by design): split the conversation into one row per assistant "
            "turn (cookbook.data.split_turns), or remove the earlier thoughts"
        )
    elif thoughts:
        fix = (
            "this revision renders no thoughts: give the checkpoint Gemma 4's current template "
            "(cookbook.models.CHAT_TEMPLATE_FILE, revision 5 of 2026-07-09) as its chat_template.jinja, "
            "which vLLM then serves with too, or remove the thoughts from the data"
        )
    else:
        fix = "render with Gemma 4's current template (cookbook.models.CHAT_TEMPLATE_FILE), or drop that part"
    raise RowError(f"the chat template ({revision}) renders no {said}: it would be lost in silence. Fix: {fix}")


def trained_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of a rendered conversation the loss covers: what the model writes.

    That is every model turn after its ``<|turn>model\\n`` opener through its closing
    ``<turn|>``: the thought channel, the answer and the tool calls, with the
    ``<|tool_response>`` that ends a calling turn (where the model stops and waits), but
    never a tool response's body (``response:...<tool_response|>``, which the caller
    writes), nor any user or system turn. A turn cut off without ``<turn|>`` runs to the end.
    """
    spans: list[tuple[int, int]] = []
    pos = 0
    while (start := text.find(MODEL_TURN, pos)) >= 0:
        start += len(MODEL_TURN)
        close = text.find(TURN_END, start)
        end = len(text) if close < 0 else close + len(TURN_END)
        cursor = start
        while (resp := text.find(TOOL_RESPONSE_START, cursor, end)) >= 0:
            spans.append((cursor, resp + len(TOOL_RESPONSE_START)))
            body_end = text.find(TOOL_RESPONSE_END, resp, end)
            cursor = end if body_end < 0 else body_end + len(TOOL_RESPONSE_END)
        if cursor < end:
            spans.append((cursor, end))
        pos = end
    return [(a, b) for a, b in spans if b > a]


def tokenize_chat(
    tokenizer, row: Any, data_format: str = "auto", columns: dict[str, str] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of a whole conversation and its loss mask (1 on the model's tokens only).

    The row (any layout of :data:`FORMATS`) is rendered with the tokenizer's chat template,
    exactly as vLLM renders it, then encoded without adding special tokens (the template
    writes ``<bos>``). A token is trained on when it overlaps :func:`trained_spans`. A row the
    template renders without some of its content (a thought, a tool call or response, a text)
    is refused with a :class:`RowError` naming what, the template revision and the fix.

    Returns:
      ``(token_ids, loss_mask)``, both int32 of the same length.
    """
    conversation = to_conversation(row, data_format, columns)
    text = render(tokenizer, conversation)
    _check_nothing_lost(tokenizer, conversation, text)
    text, spans = as_served(tokenizer, conversation, text)
    return _encode(tokenizer, text, spans)


def as_served(tokenizer, conversation: Conversation, text: str) -> tuple[str, list[tuple[int, int]]]:
    """The rendered row with its last answer after the generation prompt a server sends, and the
    spans trained (:func:`trained_spans`, less what that prompt adds).

    Gemma 4's 12B, 26B-A4B and 31B templates end the generation prompt, with thinking off, with an
    empty thought block (``<|turn>model\\n<|channel>thought\\n<channel|>``); E2B/E4B's end at
    ``<|turn>model\\n``. A finished conversation renders no such block, so trained as rendered, the
    model would learn to answer after a prompt it is never served. Here, where the generation
    prompt for the turns before the last answer is not where the rendered row goes on, what it
    adds after the model turn's opener is put in front of the answer, untrained: the row's tokens
    then start with exactly the prompt's (``tests/data/test_generation_prompt.py``). A template
    whose prompt differs from the row in any other way is refused (RowError): training would not
    see what serving sends. The earlier answers of a multi-turn row stay as the history renders.
    """
    spans = trained_spans(text)
    messages = conversation.messages
    last_prompt = max((i for i, m in enumerate(messages) if m["role"] != "assistant"), default=-1)
    if last_prompt < 0 or last_prompt == len(messages) - 1 or messages[last_prompt]["role"] == "tool":
        return text, spans  # after a tool response the model's own turn goes on: no opener to serve
    served = render(tokenizer, conversation, True, messages[: last_prompt + 1])
    if text.startswith(served):
        return text, spans
    at = served.rfind(MODEL_TURN) + len(MODEL_TURN)  # the served prompt's model-turn opener ends here
    added = served[at:]
    if at < len(MODEL_TURN) or not text.startswith(served[:at]):
        at = len(os.path.commonprefix([served, text]))
        raise RowError(
            f"the chat template ({template_revision(tokenizer)}) opens the answer for serving with "
            f"{served[max(0, at - 40) :]!r} but renders the row with {text[max(0, at - 40) : at + 40]!r}: "
            "the model would be trained on a prompt it is never served. Fix: use the checkpoint's own "
            "template, unedited, or Gemma 4's current one (cookbook.models.CHAT_TEMPLATE_FILE)"
        )
    shift = len(added)
    return text[:at] + added + text[at:], [(a + shift, b + shift) if a >= at else (a, b) for a, b in spans]


def _encode(tokenizer, text: str, spans: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = np.asarray(enc["input_ids"], dtype=np.int32)
    offsets = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    mask = np.zeros(len(ids), dtype=np.int32)
    for start, end in spans:
        mask |= ((offsets[:, 0] < end) & (offsets[:, 1] > start)).astype(np.int32)
    return ids, mask


def prompt_text(tokenizer, row: Any, data_format: str = "auto", columns: dict[str, str] | None = None) -> str:
    """The prompt a server would see: the turns before the last answer (all of them for a row
    that has none yet), plus the generation prompt (``<|turn>model\\n``, unless the last turn
    is a tool response the model continues from), rendered by the chat template with the row's
    tools and thinking setting."""
    conv = to_conversation(row, data_format, columns, require_answer=False)
    messages = list(conv.messages)
    while messages and messages[-1]["role"] == "assistant":
        messages.pop()
    if not messages:
        raise RowError("row has no turns before its answer")
    return render(tokenizer, conv, True, messages)


def prompt_ids(tokenizer, row: Any, data_format: str = "auto", columns: dict[str, str] | None = None) -> list[int]:
    """Token ids of :func:`prompt_text`."""
    text = prompt_text(tokenizer, row, data_format, columns)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def prepare_examples(
    source: Any, tokenizer, config: DataConfig, *, cache: bool = True
) -> tuple[list[Example], DataReport]:
    """Read, validate and tokenise every row; apply the too-long policy; report.

    Args:
      source: anything :func:`read_rows` takes.
      tokenizer: a transformers tokenizer with the Gemma 4 chat template, or the directory
        it is saved in (a checkpoint's), loaded only when the rows are not in the cache.
      config: :class:`DataConfig`.
      cache: read and write the tokenised rows' cache (``cookbook.data._cache``: the same rows,
        tokenizer and layout are tokenised once). Off where tokenising is what is measured.

    Raises :class:`DataError` when no row survives or more than
    ``config.max_bad_fraction`` of the rows were dropped, listing the first reasons.
    """
    raw_rows, problems = read_rows(source)
    bad = {p.row for p in problems}
    tokenised = _cache.tokenised_rows(
        raw_rows,
        bad,
        tokenizer,
        config.data_format,
        config.columns,
        lambda tok, row: tokenize_chat(tok, row, config.data_format, config.columns),
        _load_from_dir,
        use_cache=cache,
    )
    examples: list[Example] = []
    lengths: list[int] = []
    for number, outcome in enumerate(tokenised, start=1):
        if number in bad:
            continue
        if isinstance(outcome, str):
            problems.append(RowProblem(number, outcome))
            continue
        ids, mask = outcome
        lengths.append(len(ids))
        if len(ids) > config.seq_len:
            if config.too_long == "truncate" and mask[: config.seq_len].any():
                problems.append(RowProblem(number, f"{len(ids)} tokens > seq_len={config.seq_len}", "truncated"))
                ids, mask = ids[: config.seq_len], mask[: config.seq_len]
            else:
                why = "" if config.too_long == "drop" else " and no answer token survives truncation"
                problems.append(RowProblem(number, f"{len(ids)} tokens > seq_len={config.seq_len}{why}"))
                continue
        examples.append(Example(ids, mask, number))
    problems.sort(key=lambda p: p.row)
    report = DataReport(
        num_rows=len(raw_rows),
        num_kept=len(examples),
        problems=tuple(problems),
        num_tokens=int(sum(len(e.token_ids) for e in examples)),
        num_loss_tokens=int(sum(int(e.loss_mask.sum()) for e in examples)),
        lengths=tuple(lengths),
        seq_len=config.seq_len,
        too_long=config.too_long,
    )
    if not examples:
        raise DataError(f"no usable rows.\n{report.summary()}")
    if report.bad_fraction > config.max_bad_fraction:
        raise DataError(
            f"{report.num_dropped} of {report.num_rows} rows ({report.bad_fraction:.1%}) are bad, "
            f"over max_bad_fraction={config.max_bad_fraction:.1%}; refusing to train on them. "
            f"Fix the data, or raise max_bad_fraction if dropping them is intended.\n"
            f"{report.summary()}"
        )
    return examples, report


def _load_from_dir(path: str | Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def load_tokenizer(preset: str = "tiny", *, base_dir: str | Path | None = None):
    """The preset's tokenizer: the random presets' from their cached base checkpoint, the
    real ones' from the Hub (tokenizer files only, not the weights)."""
    from transformers import AutoTokenizer

    p = models.get_preset(preset)
    if base_dir is not None:
        return AutoTokenizer.from_pretrained(str(base_dir))
    if p.hf_checkpoint is not None:
        return AutoTokenizer.from_pretrained(p.hf_checkpoint)
    return AutoTokenizer.from_pretrained(str(models.ensure_base(p)))
