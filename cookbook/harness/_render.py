"""Rendering recorded values by their shape: scalars as tables, lists of numbers as curves, rows as
tables; a few sections get a renderer of their own (loss curve, serving load test, cost curve).
Markdown out, and a self-contained HTML page from the report's small Markdown subset (plots
embedded). Written here: a few dozen lines, not worth a templating dependency.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class Section:
    """One notebook's place in the report."""

    prefix: str  # "06": matches notebooks/06_*.ipynb
    title: str
    about: str  # what the reader should look at
    highlights: tuple[str, ...] = ()  # regexes over recorded keys, shown first


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def fmt_value(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v == 0:
            return "0"
        if abs(v) >= 1e5 or abs(v) < 1e-3:
            return f"{v:.3e}"
        return f"{v:.4g}"
    if isinstance(v, str):
        return v.replace("|", "\\|").replace("\n", " ")
    text = json.dumps(v, separators=(", ", ": "))
    return (text if len(text) <= 200 else text[:197] + "...").replace("|", "\\|")


def _is_curve(v: Any) -> bool:
    return isinstance(v, list) and len(v) >= 3 and all(_is_num(x) for x in v)


def _is_rows(v: Any) -> bool:
    return (
        isinstance(v, list)
        and len(v) >= 1
        and all(isinstance(x, dict) for x in v)
        and all(not isinstance(y, dict | list) for x in v for y in x.values())
    )


def _is_row_dict(v: Any) -> bool:
    return (
        isinstance(v, dict)
        and len(v) >= 1
        and all(isinstance(x, dict) for x in v.values())
        and all(not isinstance(y, dict | list) for x in v.values() for y in x.values())
    )


def _is_series_dict(v: Any) -> bool:
    """``{"step": [...], "loss": [...]}``: several curves of one length (first is x)."""
    if not isinstance(v, dict) or len(v) < 2:
        return False
    lists = [x for x in v.values() if isinstance(x, list)]
    return len(lists) >= 2 and all(_is_curve(x) for x in lists) and len({len(x) for x in lists}) == 1


def _is_numeric_rows(v: Any) -> bool:
    """``[{"step": 0, "loss": 4.1}, ...]``: a long log of numbers, better drawn than listed."""
    return (
        _is_rows(v)
        and len(v) >= 8
        and len({tuple(x) for x in v}) == 1
        and len(v[0]) >= 2
        and all(_is_num(y) for x in v for y in x.values())
    )


def _is_curve_dict(v: Any) -> bool:
    """``{"train_loss": [...], "eval_loss": [...]}`` with lengths that differ."""
    return isinstance(v, dict) and len(v) >= 1 and all(_is_curve(x) for x in v.values())


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(fmt_value(h) for h in header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(fmt_value(c) for c in row) + " |" for row in rows]
    return lines


def _is_cost_curve(v: Any) -> bool:
    return isinstance(v, dict) and {"hours", "tpu_usd", "gpu_usd", "ratio"} <= set(v)


def _compact(v: Any) -> bool:
    """Small enough to sit in a table cell (scalars, short lists, as compact JSON)."""
    if not isinstance(v, dict | list):
        return True
    return not _is_curve(v) and len(json.dumps(v)) <= 120


def _is_block(v: Any) -> bool:
    """A value drawn or tabulated on its own rather than in the result/value table."""
    if _is_cost_curve(v) or _is_curve(v) or _is_series_dict(v) or _is_curve_dict(v):
        return True
    if isinstance(v, list):
        return not _compact(v)
    return _is_row_dict(v) and len(v) >= 2


def _walk(d: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, value) pairs: nested dicts opened, blocks and small values kept whole."""
    out: list[tuple[str, Any]] = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v and not _is_block(v):
            out += _walk(v, key + ".")
        else:
            out.append((key, v))
    return out


def flatten_scalars(d: Mapping[str, Any]) -> list[tuple[str, Any]]:
    return [(k, v) for k, v in _walk(d) if not _is_block(v)]


@dataclasses.dataclass
class Plot:
    name: str
    png: bytes
    caption: str


def _plot_series(name: str, xs: Sequence[float] | None, series: Mapping[str, Sequence[float]], caption: str) -> Plot:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(series)
    fig, axes = plt.subplots(1, n, figsize=(min(4.2 * n, 13), 3.2), squeeze=False)
    for ax, (label, ys) in zip(axes[0], series.items(), strict=True):
        x = list(xs) if xs is not None else list(range(len(ys)))
        ax.plot(x, ys, marker="." if len(ys) < 40 else None)
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return Plot(name=name, png=buf.getvalue(), caption=caption)


def _cost_plot(name: str, curve: Mapping[str, Any]) -> Plot:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from cookbook import cost

    fig = cost.plot_cost_curve(curve)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return Plot(name=name, png=buf.getvalue(), caption="training + H hours of serving: total cost and GPU/TPU ratio")


def _render_cost(stem: str, results: dict[str, Any]) -> tuple[list[str], list[str], list[Plot], set[str]]:
    """Notebook 09's own view: the paper's table with the predicted row, then the curve."""
    from cookbook import cost

    if "paper_table" not in results:
        return [], [], [], set()
    lines = [cost.format_table(results["paper_table"], results.get("predicted")), ""]
    return lines, [], [], {"paper_table", "predicted", "total_cost_ratio_at_hours"}


def _render_train(stem: str, results: dict[str, Any]) -> tuple[list[str], list[str], list[Plot], set[str]]:
    """Notebook 06: the loss curve, read back from the training run's own metrics log."""
    run = results.get("run_dir")
    if not run or not (Path(run) / "metrics.jsonl").is_file():
        return [], [], [], set()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from cookbook import train

    metrics = train.read_metrics(run)
    ax = train.plot_loss(run)
    ax.set_title("LoRA fine-tuning: loss")
    buf = io.BytesIO()
    ax.figure.tight_layout()
    ax.figure.savefig(buf, format="png", dpi=90)
    plt.close(ax.figure)
    slug = f"{stem}_loss_curve"
    summary = ", ".join(
        f"{name} {fmt_value(points[0][1])} → {fmt_value(points[-1][1])} ({len(points)} points)"
        for name, points in metrics.items()
        if name.endswith("loss") and points
    )
    after = [f"**loss curve** (from {run}/metrics.jsonl): {summary}", "", f"![loss curve]({{plot:{slug}}})", ""]
    return [], after, [Plot(name=slug, png=buf.getvalue(), caption="train and eval loss")], set()


def _render_serving(stem: str, results: dict[str, Any]) -> tuple[list[str], list[str], list[Plot], set[str]]:
    """Notebook 08: the load-test points as one table, and throughput / TTFT by concurrency."""
    bench = results.get("bench")
    if not (isinstance(bench, list) and bench and all(isinstance(p, dict) and "output_tok_s" in p for p in bench)):
        return [], [], [], set()

    def pct(p: Mapping[str, Any], metric: str, q: str) -> Any:
        return (p.get(metric) or {}).get(q, "") if isinstance(p.get(metric), dict) else ""

    cols = [
        "label",
        "concurrency",
        "request_rate",
        "ok",
        "output tok/s",
        "TTFT p50 ms",
        "TTFT p90 ms",
        "TPOT p50 ms",
        "E2E p50 ms",
    ]
    rows = [
        [
            p.get("label", ""),
            p.get("concurrency", ""),
            p.get("request_rate") or "",
            f"{p.get('num_ok', '')}/{p.get('num_requests', '')}",
            p.get("output_tok_s", ""),
            pct(p, "ttft_ms", "p50"),
            pct(p, "ttft_ms", "p90"),
            pct(p, "tpot_ms", "p50"),
            pct(p, "e2e_ms", "p50"),
        ]
        for p in bench
    ]
    after = ["**bench** (each load-test point)", "", *md_table(cols, rows), ""]
    plots: list[Plot] = []
    labels = list(dict.fromkeys(p.get("label", "") for p in bench))
    points = [p for p in bench if p.get("concurrency") is not None and isinstance(p.get("ttft_ms"), dict)]
    if points:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
        for label in labels:
            mine = sorted((p for p in points if p.get("label", "") == label), key=lambda p: p["concurrency"])
            xs = [p["concurrency"] for p in mine]
            axes[0].plot(xs, [p["output_tok_s"] for p in mine], "o-", label=label)
            axes[1].plot(xs, [p["ttft_ms"].get("p50") for p in mine], "o-", label=label)
        for ax, title in zip(axes, ("output tokens/s", "TTFT p50, ms"), strict=True):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("concurrency")
            ax.set_title(title, fontsize=9)
            ax.grid(alpha=0.3)
            ax.legend()
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=90)
        plt.close(fig)
        slug = f"{stem}_bench"
        plots.append(Plot(name=slug, png=buf.getvalue(), caption="throughput and TTFT by concurrency"))
        after += [f"![bench]({{plot:{slug}}})", ""]
    return [], after, plots, {"bench"}


# Section-specific views, for results whose shape the generic renderer shows poorly:
# (stem, results) -> (lines before the generic part, lines after it, plots, keys consumed).
CUSTOM_RENDERERS = {"06": _render_train, "08": _render_serving, "09": _render_cost}


def render_values(stem: str, results: Mapping[str, Any], section: Section) -> tuple[list[str], list[Plot]]:
    """Markdown lines and plots for one notebook's recorded values."""
    lines: list[str] = []
    plots: list[Plot] = []
    after: list[str] = []
    custom = CUSTOM_RENDERERS.get(section.prefix)
    if custom is not None:
        try:
            lines, after, plots, consumed = custom(stem, dict(results))
        except Exception as e:  # a broken extra view must not hide the recorded values
            lines, after, plots, consumed = [f"> (section view failed: {type(e).__name__}: {e})", ""], [], [], set()
        results = {k: v for k, v in results.items() if k not in consumed}
    pats = [re.compile(p, re.I) for p in section.highlights]

    def rank(key: str) -> int:
        return next((i for i, p in enumerate(pats) if p.search(key)), len(pats))

    items = _walk(results)
    order = {k: i for i, (k, _) in enumerate(items)}
    items.sort(key=lambda kv: (rank(kv[0]), order[kv[0]]))
    scalars = [(k, v) for k, v in items if not _is_block(v)]
    if scalars:
        lines += md_table(["result", "value"], scalars)
        lines.append("")
    for k, v in items:
        if not _is_block(v):
            continue
        slug = re.sub(r"[^A-Za-z0-9]+", "_", f"{stem}_{k}").strip("_")
        if _is_cost_curve(v):
            plots.append(_cost_plot(slug, v))
            lines.append(
                f"**{k}**: ratio {fmt_value(v['ratio'][0])}x with no serving, tending to "
                f"{fmt_value(v.get('asymptotic_ratio'))}x; break-even: "
                f"{'never' if v.get('break_even_hours') is None else fmt_value(v['break_even_hours']) + ' h'}"
            )
            lines.append(f"\n![{k}]({{plot:{slug}}})\n")
        elif _is_curve(v):
            plots.append(_plot_series(slug, None, {k: v}, k))
            lines.append(
                f"**{k}**: {len(v)} points, first {fmt_value(v[0])}, last {fmt_value(v[-1])}, "
                f"min {fmt_value(min(v))}, max {fmt_value(max(v))}"
            )
            lines.append(f"\n![{k}]({{plot:{slug}}})\n")
        elif _is_series_dict(v):
            names = [n for n, x in v.items() if isinstance(x, list)]
            xname, ynames = names[0], names[1:]
            plots.append(_plot_series(slug, v[xname], {f"{n} vs {xname}": v[n] for n in ynames[:4]}, k))
            lines.append(f"**{k}**: " + ", ".join(f"{n} {fmt_value(v[n][0])} → {fmt_value(v[n][-1])}" for n in ynames))
            lines.append(f"\n![{k}]({{plot:{slug}}})\n")
        elif _is_numeric_rows(v):
            cols = list(v[0])
            series = {c: [row[c] for row in v] for c in cols}
            plots.append(_plot_series(slug, series[cols[0]], {f"{c} vs {cols[0]}": series[c] for c in cols[1:5]}, k))
            lines.append(
                f"**{k}**: {len(v)} rows; "
                + ", ".join(f"{c} {fmt_value(series[c][0])} → {fmt_value(series[c][-1])}" for c in cols[1:])
            )
            lines.append(f"\n![{k}]({{plot:{slug}}})\n")
        elif _is_curve_dict(v):
            plots.append(_plot_series(slug, None, {n: x for n, x in list(v.items())[:4]}, k))
            lines.append(
                f"**{k}**: "
                + ", ".join(f"{n} {fmt_value(x[0])} → {fmt_value(x[-1])} ({len(x)} points)" for n, x in v.items())
            )
            lines.append(f"\n![{k}]({{plot:{slug}}})\n")
        elif _is_rows(v):
            cols = list(dict.fromkeys(c for row in v for c in row))
            lines += [f"**{k}**", ""]
            lines += md_table(cols, [[row.get(c, "") for c in cols] for row in v[:40]])
            lines.append("" if len(v) <= 40 else f"\n({len(v) - 40} more rows in the JSON)\n")
        elif _is_row_dict(v):
            cols = list(dict.fromkeys(c for row in v.values() for c in row))
            lines += [f"**{k}**", ""]
            lines += md_table(["", *cols], [[name, *[row.get(c, "") for c in cols]] for name, row in v.items()])
            lines.append("")
        else:
            text = json.dumps(v, indent=1)
            lines += [f"**{k}**", ""]
            lines.append("```json\n" + (text if len(text) < 1500 else text[:1500] + "\n...") + "\n```")
            lines.append("")
    return lines + after, plots


def to_html(md: str, plots: Sequence[Plot], title: str) -> str:
    """A self-contained HTML page from the report's small Markdown subset, plots embedded."""
    by_name = {p.name: p for p in plots}
    out = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        "<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;"
        "font-size:90%}blockquote{border-left:4px solid #c33;margin:0;padding:.2em 1em;background:#fee}"
        "img{max-width:100%}pre{background:#f6f6f6;padding:.5em;overflow:auto}</style></head><body>",
    ]

    def inline(text: str) -> str:
        text = html.escape(text)
        text = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)
        text = re.sub(r"\*(.+?)\*", r"<i>\1</i>", text)
        text = re.sub(r"`(.+?)`", r"<code>\1</code>", text)
        return re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r"<a href='\2'>\1</a>", text)

    lines = md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append("<pre>" + html.escape("\n".join(lines[i + 1 : j])) + "</pre>")
            i = j + 1
            continue
        if line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in re.split(r"(?<!\\)\|", lines[i].strip())[1:-1]]
                if not all(re.fullmatch(r"-+:?|:?-+", c) for c in cells):
                    rows.append(cells)
                i += 1
            out.append("<table>")
            for n, cells in enumerate(rows):
                tag = "th" if n == 0 else "td"
                out.append(
                    "<tr>" + "".join(f"<{tag}>{inline(c.replace(chr(92) + '|', '|'))}</{tag}>" for c in cells) + "</tr>"
                )
            out.append("</table>")
            continue
        m = re.fullmatch(r"!\[(.*)\]\(\{plot:(.+)\}\)", line.strip())
        if m:
            p = by_name[m.group(2)]
            b64 = base64.b64encode(p.png).decode()
            out.append(
                f"<figure><img alt='{html.escape(m.group(1))}' src='data:image/png;base64,{b64}'>"
                f"<figcaption>{html.escape(p.caption)}</figcaption></figure>"
            )
        elif line.startswith("# "):
            out.append(f"<h1>{inline(line[2:])}</h1>")
        elif line.startswith("## "):
            out.append(f"<h2>{inline(line[3:])}</h2>")
        elif line.startswith("> "):
            out.append(f"<blockquote>{inline(line[2:])}</blockquote>")
        elif line.strip():
            out.append(f"<p>{inline(line)}</p>")
        i += 1
    out.append("</body></html>")
    return "\n".join(out)
