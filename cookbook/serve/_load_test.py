"""Notebook 08's load test: vLLM against transformers' batched ``generate`` on the same checkpoint,
one point cross-checked with vLLM's own benchmark, and a named scenario (the paper's burst).

Each is one call with a typed result whose ``results()`` are the values the notebook records; the
measuring is :mod:`cookbook.serve._bench` and :mod:`cookbook.serve._bench_hf`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from cookbook import models
from cookbook.serve._bench import Scenario, cross_check, format_cross_check, random_prompts, run_scenario, sweep
from cookbook.serve._bench_hf import hf_sweep, load_hf_model
from cookbook.serve._bench_report import committed_benchmark, speedup, table, write_json
from cookbook.serve._server import VLLMServer


def _without_samples(point: dict[str, Any]) -> dict[str, Any]:
    """A point without its per-request samples: what the record keeps (bench.json keeps them)."""
    return {k: v for k, v in point.items() if k != "samples"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoadTest:
    """:func:`load_test`'s points (vLLM's, then transformers') and the headline ratio."""

    preset: str
    prompts: list[list[int]]  # the random token-id prompts every point sent
    output_len: int
    concurrency: tuple[int, ...]
    points: list[dict[str, Any]]
    speedup: float  # vLLM / transformers output tokens/s at the highest concurrency both ran
    top_concurrency: int
    measured: dict[str, Any]  # committed_benchmark: the measured figure on a larger preset

    @property
    def all_requests_ok(self) -> bool:
        return all(p["num_ok"] == p["num_requests"] for p in self.points)

    def describe(self) -> str:
        m = self.measured
        return (
            f"vLLM / transformers output tokens/s at concurrency {self.top_concurrency}: {self.speedup:.2f}x on "
            f"{self.preset} (a smoke figure at this size: per-request overheads dominate); measured on the "
            f"{m['num_params'] / 1e6:.0f}M '{m['preset']}' preset ({m['source']}): {m['speedup']:.2f}x at "
            f"concurrency {m['concurrency']}"
        )

    def results(self) -> dict[str, Any]:
        return {
            "bench": [_without_samples(p) for p in self.points],
            f"{self.preset}_smoke_speedup_at_max_concurrency": self.speedup,
            "small_benchmark_speedup": self.measured,
            "all_requests_ok": self.all_requests_ok,
        }


def load_test(
    server: VLLMServer,
    preset: str,
    *,
    num_prompts: int,
    input_len: int,
    output_len: int,
    concurrency: list[int],
    committed_json: str | Path,
    json_path: str | Path,
) -> LoadTest:
    """Send ``num_prompts`` random prompts of ``input_len`` tokens (``preset``'s vocabulary) to
    ``server`` at each ``concurrency``, ``output_len`` tokens each (EOS ignored), then the same
    prompts through transformers' batched ``generate`` on the server's checkpoint directory, in this
    process. Writes every point, per-request samples included, to ``json_path``; reads the measured
    benchmark of a larger preset from ``committed_json`` to set the smoke figure beside."""
    name = server.config.served_model_name
    prompts = random_prompts(models.get_preset(preset).vocab_size, num_prompts, input_len)
    points = sweep(server.base_url, name, prompts, output_len, concurrency, api_key=server.api_key)
    points += hf_sweep(load_hf_model(server.config.model_dir), prompts, output_len, concurrency)
    write_json(json_path, points)
    ratio, top = speedup(points)
    return LoadTest(
        preset=preset,
        prompts=prompts,
        output_len=output_len,
        concurrency=tuple(concurrency),
        points=points,
        speedup=ratio,
        top_concurrency=top,
        measured=committed_benchmark(committed_json),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class CrossCheck:
    """:func:`cross_check_point`'s ``cross_check`` (None where it was not asked for)."""

    check: dict[str, Any] | None

    def describe(self) -> str:
        return format_cross_check(self.check) if self.check else "vLLM's benchmark not run (VLLM_BENCH_CHECK = False)"

    def results(self) -> dict[str, Any]:
        return {"vllm_bench_ratios": self.check["ratios"]} if self.check else {}


def cross_check_point(server: VLLMServer, load: LoadTest, *, enabled: bool = True) -> CrossCheck:
    """One point of ``load`` (its middle concurrency, its prompts' length and count) measured by vLLM's
    own benchmark and by ours on ``server``; with ``enabled=False`` nothing runs or is recorded."""
    if not enabled:
        return CrossCheck(check=None)
    check = cross_check(
        server.base_url,
        server.config.served_model_name,
        server.config.model_dir,
        load.prompts,
        output_len=load.output_len,
        concurrency=load.concurrency[len(load.concurrency) // 2],
        api_key=server.api_key,
    )
    return CrossCheck(check=check)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScenarioRun:
    """:func:`measure_scenario`'s point (None where it was not asked for), recorded under the
    scenario's name."""

    scenario: Scenario
    point: dict[str, Any] | None

    def describe(self) -> str:
        return table([self.point]) if self.point else f"scenario {self.scenario.name!r} not run"

    def results(self) -> dict[str, Any]:
        return {self.scenario.name: _without_samples(self.point)} if self.point else {}


def measure_scenario(server: VLLMServer, scenario: Scenario, *, vocab_size: int, enabled: bool = True) -> ScenarioRun:
    """Run the named ``scenario`` (e.g. ``PAPER_BURST``) once against ``server``; with
    ``enabled=False`` nothing runs or is recorded."""
    if not enabled:
        return ScenarioRun(scenario=scenario, point=None)
    point = run_scenario(
        server.base_url, server.config.served_model_name, scenario, vocab_size=vocab_size, api_key=server.api_key
    )
    return ScenarioRun(scenario=scenario, point=point)
