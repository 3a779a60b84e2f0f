"""Greedy exact-match evaluation of a LoRA model with Tunix's ``Sampler`` (notebook 06), and a
run's QLoRA twin measured that way."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
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


@dataclasses.dataclass(frozen=True)
class QLoraTwin:
    """A run's QLoRA twin (:func:`qlora_twin`): the quantized base's memory, and where it was
    trained, its held-out exact match as trained and with its adapters on the unquantized base."""

    quantize: str | None  # None: the memory table only
    tile: int
    memory: list[dict[str, Any]]  # lora.quantized_memory_table's rows
    run_dir: Path | None = None  # the twin's run, where trained
    as_trained: float | None = None
    on_dense_base: float | None = None
    sampler: Any = dataclasses.field(default=None, repr=False, compare=False)  # the quantized model's, to reuse

    def describe(self) -> str:
        from cookbook import lora

        lines = [lora.format_quantized_memory(self.memory)]
        if self.quantize:
            lines.append(
                f"QLoRA {self.quantize} (tile {self.tile}): exact match {self.as_trained:.1%} as trained, "
                f"{self.on_dense_base:.1%} with the adapters on the unquantized base (a merge)"
            )
        return "\n".join(lines)

    def results(self) -> dict[str, Any]:
        """What notebook 06 records of it."""
        out: dict[str, Any] = {"qlora_memory": self.memory}
        if self.quantize:
            out["qlora"] = {"quantize": self.quantize, "tile": self.tile, "as_trained": self.as_trained,
                            "on_dense_base": self.on_dense_base}  # fmt: skip
        return out


def qlora_twin(
    config,
    quantize: str,
    *,
    tile: int = 0,
    tokenizer=None,
    rows: Sequence[dict] = (),
    batch_size: int = 50,
    compare_with: Sequence[str] = ("gemma4_31b",),
) -> QLoraTwin:
    """``config``'s QLoRA twin: the memory of its base (and of ``compare_with``'s) quantized at
    ``tile`` (0: ``lora.default_quant_tile`` of the preset); with ``quantize`` ("nf4", "int8",
    "fp8"; "" for the memory only), the twin trained (or reused from the run cache) and scored on
    ``rows``: as trained, and on the unquantized base."""
    from cookbook import lora
    from cookbook.train._runs import restore_lora_model
    from cookbook.train._trainer import ensure_trained

    tile = tile or lora.default_quant_tile(config.model_preset)
    memory = lora.quantized_memory_table([config.model_preset, *compare_with], tile=tile)
    if not quantize:
        return QLoraTwin(None, tile, memory)
    if not rows or tokenizer is None:
        raise ValueError("qlora_twin: training the twin needs the tokenizer and held-out rows to score it on")
    run = ensure_trained(config.replace(quantize=quantize, quant_tile=tile))
    as_trained = evaluate(restore_lora_model(run), tokenizer, list(rows), batch_size=batch_size)
    dense = evaluate(restore_lora_model(run, dense_base=True), tokenizer, list(rows), batch_size=batch_size)
    return QLoraTwin(quantize, tile, memory, run, as_trained["accuracy"], dense["accuracy"], as_trained["sampler"])
