"""What the served adapters score (notebook 08, section 6): the fine-tune served as the text-only
base plus its PEFT adapter (``--enable-lora``) beside the merged checkpoint, the same adapter with
B = 0 as the base's control, and a thinking run loaded into the running server and asked through
vLLM's chat endpoint with thinking on, its answers scored beside Tunix's own greedy answers.

One call, one typed result; a server vLLM cannot start or serve is reported as the result's
``error`` (vLLM's reason), not raised, so the notebook says why and goes on. The answers are
scored with ``cookbook.evaluate`` (which comes before this stage); the thinking run is
``cookbook.train``'s, its PEFT adapter ``cookbook.merge``'s.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cookbook import evaluate, merge, train
from cookbook.serve._check import agreement, served_exact_match
from cookbook.serve._config import ServeError


@dataclasses.dataclass(frozen=True)
class ServedThinking:
    """A thinking run's greedy answers through vLLM's chat endpoint and through Tunix, scored."""

    problems: list[evaluate.Problem]
    chat: Any  # vLLM's: answers in ``completions``, the reasoning parser's thoughts apart
    served: Any  # evaluate's Scores
    tunix: Any

    @property
    def same_outcomes(self) -> bool:
        return self.served.same_outcomes(self.tunix)

    @property
    def content_has_no_thought(self) -> bool:
        """No answer vLLM returned holds the thought channel (the reasoning parser took it out)."""
        return not any("<|channel>" in c[0] for c in self.chat.completions.values())

    def describe(self) -> str:
        first = self.problems[0].name
        return (
            f"thinking run, pass@1 through vLLM {self.served.pass_at(1):.1%}, through Tunix "
            f"{self.tunix.pass_at(1):.1%} on {len(self.problems)} problems; the same outcome on every "
            f"problem: {self.same_outcomes}\n"
            f"reasoning: {self.chat.thoughts[first][0]!r}\n"
            f"content:   {self.chat.completions[first][0]!r}"
        )

    def results(self) -> dict[str, Any]:
        return {
            "thinking_served_pass1": self.served.pass_at(1),
            "thinking_tunix_pass1": self.tunix.pass_at(1),
            "thinking_same_outcomes": self.same_outcomes,
            "thinking_content_has_no_thought": self.content_has_no_thought,
        }


@dataclasses.dataclass(frozen=True)
class AdapterServing:
    """:func:`served_adapters`' result. With no server, every field is None and nothing is recorded."""

    startup_s: float | None = None
    adapter: dict[str, Any] | None = None  # served_exact_match of the adapter
    base: dict[str, Any] | None = None  # the same with the zero adapter: the base
    merged: dict[str, Any] | None = None  # the merged checkpoint's, for comparison
    thinking: ServedThinking | None = None
    error: str | None = None  # vLLM's reason, where it could not serve the adapters

    def describe(self) -> str:
        if self.error:
            return f"vLLM could not serve the adapter:\n{self.error}"
        if self.adapter is None:
            return "no adapter server (SERVE_LORA = False)"
        line = f"adapter: {self.adapter['accuracy']:.1%}   base: {self.base['accuracy']:.1%}"
        if self.merged:
            same = agreement(self.adapter["completions"], self.merged["completions"])
            line += f"   merged: {self.merged['accuracy']:.1%}\nidentical completions, adapter vs merged: {same:.1%}"
        return line

    def describe_thinking(self) -> str:
        return self.thinking.describe() if self.thinking else "the thinking run was not served here"

    def results(self) -> dict[str, Any]:
        """What notebook 08 records: the scores, or the error."""
        if self.error:
            return {"lora_error": self.error[:2000]}
        if self.adapter is None:
            return {}
        out = {
            "lora_accuracy": self.adapter["accuracy"],
            "base_accuracy": self.base["accuracy"],
            "lora_startup_s": self.startup_s,
        }
        return out | (self.thinking.results() if self.thinking else {})


def served_adapters(
    server,
    tokenizer,
    rows: list[dict],
    *,
    adapter: str = "verilog",
    base: str = "base",
    merged: dict[str, Any] | None = None,
    thinking_config=None,
    thinking_rows: int = 100,
) -> AdapterServing:
    """Score a LoRA server's adapters on ``rows`` (greedy exact match through its completions
    endpoint), then stop it.

    ``server``: a :class:`VLLMServer` (:func:`adapter_config`) with ``adapter``
    and ``base`` (the same adapter with B = 0) among its LoRA modules, started or starting; one
    never started (or None) serves nothing, and the result is empty. ``merged``: the merged
    checkpoint's :func:`served_exact_match` on the same rows, to compare with. With
    ``thinking_config`` (the thinking recipe's TrainConfig) and a server with room for an adapter
    added while it runs (``runtime_slots=1``): the thinking run is trained (or found in the cache)
    while the server runs, loaded into it, asked through the chat endpoint with thinking on for its
    first ``thinking_rows`` held-out rows, and scored beside Tunix's greedy answers to the same rows.
    """
    if server is None or server.process is None:
        return AdapterServing()
    if not server.config.runtime_lora:
        thinking_config = None
    chat = None
    try:
        with server:
            server.wait_ready()
            client = server.client()
            tuned = served_exact_match(client, adapter, tokenizer, rows)
            zero = served_exact_match(client, base, tokenizer, rows)
            if thinking_config is not None:
                run = train.ensure_trained(thinking_config)
                server.load_lora_adapter(f"{adapter}-thinking", merge.ensure_peft(run, layout="text"))
                t_rows = train.eval_rows(train.config_of_run(run))[:thinking_rows]
                problems = evaluate.sample_task_problems(t_rows)
                sampling = evaluate.greedy_sampling(tokenizer, t_rows, thinking=True)
                chat = evaluate.endpoint_samples(client, f"{adapter}-thinking", problems, sampling, thinking=True)
    except ServeError as e:  # said, with vLLM's reason, rather than hidden
        return AdapterServing(error=str(e))
    thinking = None
    if chat is not None:
        tunix = evaluate.held_out_greedy(
            train.restore_lora_model(run), tokenizer, t_rows, thinking=True, batch_size=thinking_rows
        )
        thinking = ServedThinking(problems, chat, evaluate.score_generation(problems, chat), tunix.scores)
    return AdapterServing(server.startup_s, tuned, zero, merged, thinking)
