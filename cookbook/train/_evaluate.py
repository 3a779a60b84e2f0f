"""Greedy exact-match evaluation of a LoRA model with Tunix's ``Sampler`` (notebook 06)."""

from __future__ import annotations

from typing import Any

from cookbook import data as data_lib
from cookbook import models


def evaluate(
    model,
    tokenizer,
    rows: list[dict],
    *,
    batch_size: int = 50,
    max_new_tokens: int | None = None,
    sampler=None,
) -> dict[str, Any]:
    """Greedy-decode each row's prompt with Tunix's ``Sampler``; exact match vs its answer.

    Prompts are rendered with the chat template and generation prompt (as vLLM renders
    them, with the row's settings: a row whose answer carries a thought is prompted with
    thinking on, and its answer alone is compared); decoding stops at ``<eos>`` or
    ``<turn|>``. Pass ``sampler`` (from a previous call's ``"sampler"``) to reuse its
    compiled functions; its weights are refreshed.

    Returns:
      ``{"accuracy", "correct", "n", "completions", "sampler"}``.
    """
    from flax import nnx

    from cookbook import data

    if not rows:
        raise ValueError("evaluate() needs at least one row")
    prompts = [data_lib.prompt_text(tokenizer, r) for r in rows]
    prompt_len = max(len(data_lib.prompt_ids(tokenizer, r)) for r in rows)
    if max_new_tokens is None:  # the budget vLLM's served check gets: the answer, its thought, 8 spare
        max_new_tokens = data.answer_budget(tokenizer, rows, slack=8) + data.thought_budget(tokenizer, rows)
    max_prompt = 1 << (prompt_len - 1).bit_length()
    if sampler is None:
        sampler = models.make_sampler(model, tokenizer, cache_size=max_prompt + max_new_tokens + 1)
    else:
        sampler.transformer_state = nnx.variables(model)
    completions, _ = models.sample_prompts(
        sampler, prompts, max_tokens=max_new_tokens, batch_size=batch_size, max_prompt=max_prompt
    )
    correct = sum(data.exact_match(c, r) for c, r in zip(completions, rows, strict=True))
    return {"accuracy": correct / len(rows), "correct": correct, "n": len(rows),
            "completions": completions, "sampler": sampler}  # fmt: skip
