"""Chat rows to tokens with the tokenizer's own Gemma 4 chat template, loss on the answer only.

Each row is rendered with the template vLLM uses when serving (training and serving see the
same tokens); the loss mask covers the answer tokens, closing ``<turn|>`` included, found
from the template's character offsets (written here: no library derives answer masks from
Gemma 4's template, which has no generation markers).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from cookbook import models
from cookbook.data._config import DataConfig
from cookbook.data._rows import (
    ANSWER_ROLES,
    DataError,
    DataReport,
    RowError,
    RowProblem,
    read_rows,
    to_messages,
)


@dataclasses.dataclass(frozen=True)
class Example:
    """One tokenised conversation: token ids and the loss mask (1 on answer tokens)."""

    token_ids: np.ndarray  # int32 [n]
    loss_mask: np.ndarray  # int32 [n]
    row: int  # 1-based row number in the source


def _render(tokenizer, messages: list[dict], add_generation_prompt: bool) -> str:
    if not getattr(tokenizer, "chat_template", None):
        raise DataError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template; load the "
            "checkpoint's tokenizer (cookbook.data.load_tokenizer), which carries Gemma 4's"
        )
    try:
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt
        )
    except Exception as e:  # jinja raises from inside the template (e.g. raise_exception)
        raise RowError(f"the chat template rejected the row: {e}") from e


def tokenize_chat(tokenizer, row: Any) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of a whole conversation and its loss mask (1 on answer tokens only).

    The conversation is rendered with the tokenizer's chat template, exactly as vLLM
    renders it, then encoded without adding special tokens (the template writes
    ``<bos>``). A token is trained on when it lies inside an assistant turn's content or
    its closing ``<turn|>``: the span between the rendering of the conversation up to the
    turn *with* the generation prompt and the rendering *including* the turn (trailing
    whitespace after ``<turn|>`` excluded).

    Returns:
      ``(token_ids, loss_mask)``, both int32 of the same length.
    """
    messages = to_messages(row)
    full = _render(tokenizer, messages, False)
    spans = []
    for i, m in enumerate(messages):
        if m["role"] not in ANSWER_ROLES:
            continue
        before = _render(tokenizer, messages[:i], True)
        through = _render(tokenizer, messages[: i + 1], False)
        if not (full.startswith(before) and full.startswith(through)):
            raise RowError(
                "the chat template does not render conversations prefix-consistently; "
                "cannot locate the answer tokens"
            )
        spans.append((len(before), len(through.rstrip())))
    enc = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    ids = np.asarray(enc["input_ids"], dtype=np.int32)
    offsets = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    mask = np.zeros(len(ids), dtype=np.int32)
    for start, end in spans:
        mask |= ((offsets[:, 0] < end) & (offsets[:, 1] > start)).astype(np.int32)
    return ids, mask


def prompt_ids(tokenizer, row: Any) -> list[int]:
    """Token ids of the prompt a server would see: turns before the last answer, plus
    the generation prompt (``<|turn>model\\n``), rendered by the chat template."""
    messages = row["messages"] if isinstance(row, dict) and "messages" in row else to_messages(row)
    while messages and messages[-1]["role"] in ANSWER_ROLES:
        messages = messages[:-1]
    if not messages:
        raise RowError("row has no turns before its answer")
    text = _render(tokenizer, list(messages), True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def prepare_examples(
    source: Any, tokenizer, config: DataConfig
) -> tuple[list[Example], DataReport]:
    """Read, validate and tokenise every row; apply the too-long policy; report.

    Raises :class:`DataError` when no row survives or more than
    ``config.max_bad_fraction`` of the rows were dropped, listing the first reasons.
    """
    raw_rows, problems = read_rows(source)
    bad = {p.row for p in problems}
    examples: list[Example] = []
    for number, raw in enumerate(raw_rows, start=1):
        if number in bad:
            continue
        try:
            ids, mask = tokenize_chat(tokenizer, raw)
        except RowError as e:
            problems.append(RowProblem(number, str(e)))
            continue
        if len(ids) > config.seq_len:
            if config.too_long == "truncate" and mask[: config.seq_len].any():
                problems.append(
                    RowProblem(number, f"{len(ids)} tokens > seq_len={config.seq_len}", "truncated")
                )
                ids, mask = ids[: config.seq_len], mask[: config.seq_len]
            else:
                why = "" if config.too_long == "drop" else " and no answer token survives truncation"
                problems.append(
                    RowProblem(number, f"{len(ids)} tokens > seq_len={config.seq_len}{why}")
                )
                continue
        examples.append(Example(ids, mask, number))
    problems.sort(key=lambda p: p.row)
    report = DataReport(
        num_rows=len(raw_rows),
        num_kept=len(examples),
        problems=tuple(problems),
        num_tokens=int(sum(len(e.token_ids) for e in examples)),
        num_loss_tokens=int(sum(int(e.loss_mask.sum()) for e in examples)),
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
