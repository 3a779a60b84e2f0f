"""The serving benchmark's results shown and kept: latency and throughput plots, a text table, bench.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cookbook import core


def plot_latency_distribution(points: list[dict[str, Any]], metric: str = "ttft_ms", ax=None):
    """Histogram of one latency metric for each point (e.g. vLLM vs transformers)."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6, 3.5))[1]
    for p in points:
        ax.hist(p["samples"][metric], bins=30, alpha=0.6, label=f"{p['label']} c={p['concurrency']}")
    ax.set_xlabel(metric.replace("_ms", " (ms)").upper())
    ax.set_ylabel("requests")
    ax.legend()
    return ax


def plot_throughput_latency(points: list[dict[str, Any]], latency: str = "ttft_ms", ax=None):
    """Output tokens/s against p50 latency, one line per engine, points labelled by concurrency."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6, 3.5))[1]
    for label in dict.fromkeys(p["label"] for p in points):
        ps = [p for p in points if p["label"] == label]
        xs, ys = [p[latency]["p50"] for p in ps], [p["output_tok_s"] for p in ps]
        ax.plot(xs, ys, marker="o", label=label)
        for p, x, y in zip(ps, xs, ys, strict=True):
            ax.annotate(f"c={p['concurrency']}", (x, y), fontsize=8)
    ax.set_xlabel(f"p50 {latency.replace('_ms', '')} (ms)")
    ax.set_ylabel("output tokens/s")
    ax.legend()
    return ax


def plot_load_test(points: list[dict[str, Any]]):
    """Notebook 08's figure: the TTFT distribution of each engine at the highest concurrency
    measured, beside output tokens/s against p50 end-to-end latency. Returns the figure."""
    import matplotlib.pyplot as plt

    top = max(p["concurrency"] for p in points)
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    plot_latency_distribution([p for p in points if p["concurrency"] == top], "ttft_ms", ax=axes[0])
    plot_throughput_latency(points, "e2e_ms", ax=axes[1])
    axes[0].set_title(f"TTFT at concurrency {top}")
    axes[1].set_title("throughput against latency")
    return fig


def speedup(points: list[dict[str, Any]], *, label: str = "vllm", over: str = "transformers") -> tuple[float, int]:
    """``label``'s output tokens/s over ``over``'s at the highest concurrency both measured:
    ``(ratio, concurrency)``."""
    by = {(p["label"], p["concurrency"]): p for p in points}
    shared = [c for lab, c in by if lab == label and (over, c) in by]
    if not shared:
        raise ValueError(f"no concurrency measured for both {label!r} and {over!r}")
    top = max(shared)
    return by[(label, top)]["output_tok_s"] / by[(over, top)]["output_tok_s"], top


def table(points: list[dict[str, Any]]) -> str:
    """A small text table of points."""
    head = f"{'engine':<14}{'conc':>5}{'tok/s':>9}{'TTFT p50':>10}{'p99':>9}{'TPOT p50':>10}{'E2E p50':>10}"
    rows = [head]
    for p in points:
        rows.append(
            f"{p['label']:<14}{p['concurrency'] or 'all':>5}{p['output_tok_s']:>9.1f}"
            f"{p['ttft_ms']['p50']:>10.1f}{p['ttft_ms']['p99']:>9.1f}{p['tpot_ms']['p50']:>10.2f}"
            f"{p['e2e_ms']['p50']:>10.1f}"
        )
    return "\n".join(rows)


def committed_benchmark(path: str | Path) -> dict[str, Any]:
    """The headline of a ``benchmarks/serve_bench.py`` result: vLLM / transformers at its top load.

    What a reader should take from serving on CPU: on the 2M-parameter ``tiny`` model the
    notebook's sweep is a smoke test (overheads dominate, vLLM can be slower); the
    ~100M-parameter ``small`` benchmark is the measured figure.
    """
    b = json.loads(Path(path).read_text())
    top = max(b["ratio_output_tok_s"], key=int)
    return {
        "preset": b["preset"],
        "num_params": b["num_params"],
        "concurrency": int(top),
        "speedup": b["ratio_output_tok_s"][top],
        "load_avg_1m": b["host"]["load_avg_1m"][0],
        "source": Path(path).name,
    }


def write_json(path: str | Path, payload: Any) -> Path:

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(core.to_jsonable(payload), indent=2))
    return path
