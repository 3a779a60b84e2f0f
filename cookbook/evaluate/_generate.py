"""Samples for a problem set from three generators that agree in kind: a vLLM endpoint, Tunix's
sampler on the JAX model, and transformers ``generate`` (the GPU recipe's model).

"In kind" means: the same chat (the problem's prompt as the user turn, rendered by the
tokenizer's Gemma 4 template with the generation prompt, so the same token ids reach each
model), the same sampling (temperature, nucleus top-p, no top-k, the same new-token budget),
the same stop tokens (``<turn|>``, ``<eos>``), and text decoded without special tokens.
Random streams differ between generators, so sampled completions are not token-identical;
greedy ones are (``tests/evaluate/test_generators.py``). Each takes ``on_done(samples)``, called as samples are finished (a progress bar).
Seeds are recorded per sample:
vLLM gives sample ``i`` of a request seeded ``s`` the seed ``s + i``; transformers is seeded
``s`` once per problem; Tunix once per batch.

The paper's sampling is the default (:data:`PAPER_SAMPLING`: n = 5, T = 0.8, top-p 0.95).

``thinking=True`` (a model trained on thoughts: ``cookbook train --sample-task thinking``, or
CodeV-R1's rows) prompts with Gemma 4's thinking switch on (``enable_thinking``: ``<|think|>``
in a system turn) and keeps the thought apart from the answer, which alone is scored: Tunix's
text keeps the ``<|channel>``/``<channel|>`` markers (``cookbook.data.clean_completion`` drops
what lies between them), transformers decodes with special tokens kept, and vLLM's chat endpoint
returns the answer as ``content`` and the thought as ``reasoning`` (its ``gemma4`` reasoning
parser, which ``cookbook serve`` turns on), or, for token-id prompts, text with the markers kept.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cookbook import core, models
from cookbook.evaluate._problems import Problem


@dataclasses.dataclass(frozen=True, kw_only=True)
class SamplingConfig:
    """How many samples per problem, and how they are drawn."""

    n: int = 5  # samples per problem (pass@k needs n >= k)
    temperature: float = 0.8  # 0: greedy (then n must be 1)
    top_p: float = 0.95
    max_tokens: int = 1024  # new tokens per sample
    seed: int = 0  # first seed; problem i's request is seeded seed + i (see the module doc)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1 sample per problem, got {self.n}")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"temperature must be >= 0 and top_p in (0, 1]; got {self.temperature}, {self.top_p}")
        if self.temperature == 0 and self.n != 1:
            raise ValueError(f"greedy decoding (temperature 0) gives one sample per problem; got n={self.n}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def replace(self, **changes: Any) -> SamplingConfig:
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


PAPER_SAMPLING = SamplingConfig()  # n = 5, T = 0.8, top-p 0.95, as the paper sampled verilog-eval
GREEDY = SamplingConfig(n=1, temperature=0.0, top_p=1.0)


@dataclasses.dataclass(kw_only=True)
class Generation:
    """Completions of a problem set and how they were made."""

    completions: dict[str, list[str]]
    seeds: dict[str, list[int | None]]
    sampling: SamplingConfig
    generator: str  # "vllm", "tunix", "transformers"
    seconds: float
    thinking: bool = False  # prompted with thinking on; completions may hold a thought before the answer
    thoughts: dict[str, list[str | None]] | None = None  # vLLM chat: the reasoning parser's thoughts, apart

    def describe(self) -> dict[str, Any]:
        return {
            "generator": self.generator,
            **self.sampling.as_dict(),
            "seconds": self.seconds,
            "problems": len(self.completions),
            **({"thinking": True} if self.thinking else {}),
        }


def prompt_token_ids(tokenizer, problem: Problem, system: str | None = None, *, thinking: bool = False) -> list[int]:
    """The ids every generator is given: the chat rendered by the tokenizer's own template."""
    return list(
        tokenizer(problem_prompt_text(tokenizer, problem, system, thinking=thinking), add_special_tokens=False)[
            "input_ids"
        ]
    )


def problem_prompt_text(tokenizer, problem: Problem, system: str | None = None, *, thinking: bool = False) -> str:
    """The text of :func:`prompt_token_ids`: the chat and the generation prompt, thinking on or off.

    Rendered here, not by ``cookbook.data.prompt_text``: a problem is a prompt without an answer,
    which the data reader (rightly, for training rows) refuses.
    """
    return tokenizer.apply_chat_template(
        problem.messages(system),
        tokenize=False,
        add_generation_prompt=True,
        **({"enable_thinking": True} if thinking else {}),
    )


# ------------------------------------------------------------------------------------------
# vLLM (any OpenAI-compatible endpoint)
def endpoint_samples(
    client,
    model: str,
    problems: Sequence[Problem],
    sampling: SamplingConfig = PAPER_SAMPLING,
    *,
    tokenizer=None,
    system: str | None = None,
    thinking: bool = False,
    concurrency: int = 16,
    on_done: Callable[[int], None] | None = None,
) -> Generation:
    """Samples through an OpenAI-compatible server (``openai.OpenAI`` client), one request per problem.

    With ``tokenizer``, prompts go as token ids to ``/v1/completions`` (exactly what the
    trainer's template renders); without, as messages to ``/v1/chat/completions`` (the
    server renders them with the checkpoint's template, which for the cookbook's checkpoints
    is the same one). With ``thinking`` (vLLM's own request fields): the template's
    ``enable_thinking``, and special tokens kept in the text. A chat completion's answer is
    its ``content``; its ``reasoning`` (the thought, where the server runs a reasoning parser)
    is kept apart in ``Generation.thoughts`` and never scored.
    """
    extra = (
        {"extra_body": {"skip_special_tokens": False, "chat_template_kwargs": {"enable_thinking": True}}}
        if thinking
        else {}
    )

    def one(i: int) -> tuple[list[str], list[int], list[str | None]]:
        p = problems[i]
        seed = sampling.seed + i
        common = {
            "model": model,
            "n": sampling.n,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "seed": seed,
            **extra,
        }
        if tokenizer is not None:
            resp = client.completions.create(prompt=prompt_token_ids(tokenizer, p, system, thinking=thinking), **common)
            choices = sorted(resp.choices, key=lambda c: c.index)
            texts, thoughts = [c.text for c in choices], [None] * len(choices)
        else:
            resp = client.chat.completions.create(messages=p.messages(system), **common)
            choices = sorted(resp.choices, key=lambda c: c.index)
            texts = [c.message.content or "" for c in choices]
            # vLLM >= 0.10 names it `reasoning` (`reasoning_content` before)
            thoughts = [
                getattr(c.message, "reasoning", None) or getattr(c.message, "reasoning_content", None) for c in choices
            ]
        return texts, [seed + j for j in range(sampling.n)], thoughts

    t0 = time.perf_counter()
    out: dict[int, tuple[list[str], list[int], list[str | None]]] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = {pool.submit(one, i): i for i in range(len(problems))}
        for fut in concurrent.futures.as_completed(futures):
            out[futures[fut]] = fut.result()
            if on_done is not None:
                on_done(sampling.n)
    return Generation(
        completions={p.name: out[i][0] for i, p in enumerate(problems)},
        seeds={p.name: list(out[i][1]) for i, p in enumerate(problems)},
        sampling=sampling,
        generator="vllm",
        seconds=time.perf_counter() - t0,
        thinking=thinking,
        thoughts={p.name: out[i][2] for i, p in enumerate(problems)} if thinking else None,
    )


# ------------------------------------------------------------------------------------------
# Tunix's sampler on the JAX model (the TPU recipe's model, before merging)
def tunix_samples(
    model,
    tokenizer,
    problems: Sequence[Problem],
    sampling: SamplingConfig = PAPER_SAMPLING,
    *,
    batch_size: int = 50,
    sampler=None,
    system: str | None = None,
    thinking: bool = False,
    on_done: Callable[[int], None] | None = None,
) -> tuple[Generation, Any]:
    """Samples from a Tunix Gemma 4 model (with or without LoRA) with Tunix's ``Sampler``.

    Each problem's prompt is repeated ``n`` times in fixed-size batches (one compiled shape);
    batch ``b`` is seeded ``seed + b``. Pass ``sampler`` (the second value returned by an
    earlier call) to reuse its compiled functions: its weights are refreshed from ``model``.

    Returns:
      ``(generation, sampler)``.
    """
    from flax import nnx

    prompts = [problem_prompt_text(tokenizer, p, system, thinking=thinking) for p in problems]
    longest = max(len(prompt_token_ids(tokenizer, p, system, thinking=thinking)) for p in problems)
    max_prompt = 1 << (longest - 1).bit_length()
    cache_size = max_prompt + sampling.max_tokens + 1
    if sampler is None or sampler.cache_config.cache_size < cache_size:
        sampler = models.make_sampler(model, tokenizer, cache_size=cache_size)
    else:
        sampler.transformer_state = nnx.variables(model)
    jobs = [(i, j) for i in range(len(problems)) for j in range(sampling.n)]
    t0 = time.perf_counter()
    out, drew = models.sample_prompts(
        sampler,
        [prompts[i] for i, _ in jobs],
        max_tokens=sampling.max_tokens,
        batch_size=batch_size,
        max_prompt=max_prompt,
        temperature=0.0 if sampling.greedy else sampling.temperature,
        top_p=sampling.top_p,
        seed=sampling.seed,
        on_done=on_done,
    )
    texts, seeds = dict(zip(jobs, out, strict=True)), dict(zip(jobs, drew, strict=True))
    generation = Generation(
        completions={p.name: [texts[(i, j)] for j in range(sampling.n)] for i, p in enumerate(problems)},
        seeds={p.name: [seeds[(i, j)] for j in range(sampling.n)] for i, p in enumerate(problems)},
        sampling=sampling,
        generator="tunix",
        seconds=time.perf_counter() - t0,
        thinking=thinking,
    )
    return generation, sampler


# ------------------------------------------------------------------------------------------
# transformers generate (the GPU recipe's model: a checkpoint, optionally with a PEFT adapter)
def load_transformers_model(model_dir: str | Path, adapter_dir: str | Path | None = None):
    """A transformers model (text-only or multimodal Gemma 4 layout), with a PEFT adapter on top.

    ``AutoModelForCausalLM`` picks the class of each layout: ``Gemma4ForCausalLM`` (text-only),
    ``Gemma4ForConditionalGeneration`` or ``Gemma4UnifiedForConditionalGeneration`` (12B).
    """
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype="auto")
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_dir))
    return model.eval()


def transformers_samples(
    model,
    tokenizer,
    problems: Sequence[Problem],
    sampling: SamplingConfig = PAPER_SAMPLING,
    *,
    system: str | None = None,
    thinking: bool = False,
    num_threads: int | None = None,
    on_done: Callable[[int], None] | None = None,
) -> Generation:
    """Samples with transformers ``generate``: one call per problem (``num_return_sequences=n``),
    seeded ``seed + i`` with ``torch.manual_seed``; no padding, so no padding effects.

    ``num_threads`` sets torch's CPU threads for the call (restored after): on a small
    shared CPU host, 1 is several times faster than spinning threads fighting for cores.
    With ``thinking``, special tokens stay in the text, so the thought can be told from the answer.
    """
    import torch

    if sampling.greedy:
        kwargs: dict[str, Any] = {"do_sample": False}
    else:  # top_k=0: no top-k cut (a generation config may default to 50; vLLM and Tunix apply none)
        kwargs = {
            "do_sample": True,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": 0,
            "num_return_sequences": sampling.n,
        }
    kwargs.update(
        max_new_tokens=sampling.max_tokens,
        eos_token_id=models.stop_token_ids(),
        pad_token_id=models.SPECIAL_TOKEN_IDS["<pad>"],
    )
    completions, seeds = {}, {}
    t0 = time.perf_counter()
    with core.torch_threads(num_threads or None):
        with torch.inference_mode():
            for i, p in enumerate(problems):
                ids = torch.tensor([prompt_token_ids(tokenizer, p, system, thinking=thinking)])
                torch.manual_seed(sampling.seed + i)
                out = model.generate(ids, **kwargs)
                completions[p.name] = [
                    tokenizer.decode(row[ids.shape[1] :].tolist(), skip_special_tokens=not thinking) for row in out
                ]
                seeds[p.name] = [sampling.seed + i] * sampling.n
                if on_done is not None:
                    on_done(sampling.n)
    return Generation(
        completions=completions,
        seeds=seeds,
        sampling=sampling,
        generator="transformers",
        seconds=time.perf_counter() - t0,
        thinking=thinking,
    )
