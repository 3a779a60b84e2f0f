"""The planner's reports as tables and plots (notebook 04, ``cookbook plan``)."""

from __future__ import annotations

from typing import Any

from cookbook.fit._plan_config import PlanReport


def report_row(r: PlanReport, name: str | None = None) -> dict[str, Any]:
    """One table row (GiB, TFLOP, tokens/s) for a report."""
    c, gib = r.plan_config, 2**30
    attention = f"splash {c.flash_block}" if c.flash_attention else "dense"
    row = {
        "plan": name or f"{c.slice_name} {c.remat} {attention} b{c.batch_size}",
        "slice": c.slice_name,
        "mesh": f"{r.fsdp}x{r.tp}",
        "batch x seq": f"{c.batch_size} x {c.seq_len}",
        "remat": c.remat,
        "attention": attention,
    }
    if not r.compiles:
        row["result"] = f"does not compile: {r.error}"
        return row
    row.update(
        {
            "args GiB": round(r.argument_bytes / gib, 3),
            "temp GiB": round(r.temp_bytes / gib, 3),
            "total GiB": round(r.total_bytes / gib, 3),
            "HBM %": round(100 * r.total_bytes / r.hbm_bytes, 1),
            "TFLOP/chip/step": round(r.flops_per_chip / 1e12, 4),
            "GFLOP/token": round(r.flops_per_token / 1e9, 3),
            f"tokens/s @{r.mfu:.0%} MFU": round(r.predicted_tokens_per_s),
            "compiler tokens/s": round(r.estimated_tokens_per_s) if r.has_compiler_estimate else "-",
            "$/1M tokens": round(cost, 3) if (cost := r.usd_per_million_tokens()) and r.has_compiler_estimate else "-",
            "result": "fits" if r.fits_with_margin else ("fits, under margin" if r.fits else "does not fit"),
        }
    )
    return row


def format_reports(reports: list[PlanReport] | dict[str, PlanReport]) -> str:
    """A plain-text table of reports (a dict's keys name the rows)."""
    items = list(reports.items()) if isinstance(reports, dict) else [(None, r) for r in reports]
    return format_rows([report_row(r, n) for n, r in items])


def format_rows(rows: list[dict[str, Any]]) -> str:
    """A plain-text table of dict rows (columns in first-seen order)."""
    cols = list(dict.fromkeys(k for row in rows for k in row))
    width = {c: max(len(c), *(len(str(row.get(c, ""))) for row in rows)) for c in cols}
    lines = ["  ".join(c.ljust(width[c]) for c in cols)]
    lines += ["  ".join(str(row.get(c, "")).ljust(width[c]) for c in cols) for row in rows]
    return "\n".join(lines)


def plot_reports(reports: list[PlanReport], title: str = ""):
    """Stacked per-chip memory (args + temp) and FLOPs per token for each compiled plan."""
    import matplotlib.pyplot as plt

    ok = [r for r in reports if r.compiles]
    names = [report_row(r)["plan"] for r in ok]
    gib = 2**30
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.6))
    a.bar(names, [r.argument_bytes / gib for r in ok], label="arguments")
    a.bar(names, [r.temp_bytes / gib for r in ok], bottom=[r.argument_bytes / gib for r in ok], label="temporaries")
    a.set_ylabel("GiB per chip")
    a.legend()
    b.bar(names, [r.flops_per_token / 1e9 for r in ok], color="tab:green")
    b.set_ylabel("GFLOP per trained token")
    for ax in (a, b):
        ax.tick_params(axis="x", rotation=30, labelsize=8)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_search(results, title: str = ""):
    """Per slice, each layout's estimated tokens/s against its per-chip HBM (``cookbook.fit.search``):
    ranked layouts filled, dropped ones hollow, the margin as a line."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.6), squeeze=False)
    for ax, res in zip(axes[0], results, strict=True):
        ranked = set(res.ranked)
        for name, r in res.reports.items():
            if not r.compiles:
                continue
            c = r.plan_config
            color = {"none": "tab:blue", "block": "tab:orange", "decoder": "tab:green"}.get(c.remat, "tab:gray")
            marker = "s" if c.quantize else ("o" if c.flash_attention else "^")
            ax.scatter(
                r.total_bytes / 2**30,
                r.estimated_tokens_per_s,
                color=color,
                marker=marker,
                facecolors=color if name in ranked else "none",
                s=40,
            )
            if res.ranked and name == res.ranked[0]:
                ax.annotate(
                    "best",
                    (r.total_bytes / 2**30, r.estimated_tokens_per_s),
                    textcoords="offset points",
                    xytext=(6, 4),
                    fontsize=8,
                )
        hbm = next((r.hbm_bytes for r in res.reports.values() if r.hbm_bytes), 0.0) / 2**30
        ax.axvline(res.margin * hbm, color="red", linestyle="--", linewidth=1)
        ax.set_title(f"{res.slice_name} ({hbm:.0f} GiB per chip)", fontsize=10)
        ax.set_xlabel("GiB per chip (compiled)")
    axes[0][0].set_ylabel("est. tokens/s (compiler)")
    handles = [
        plt.Line2D([], [], color=c, marker="o", linestyle="", label=f"remat {n}")
        for n, c in (("none", "tab:blue"), ("block", "tab:orange"), ("decoder", "tab:green"))
    ]
    handles += [
        plt.Line2D([], [], color="k", marker=m, linestyle="", markerfacecolor="none", label=n)
        for m, n in (("o", "splash"), ("^", "dense"), ("s", "nf4 base"))
    ]
    handles.append(plt.Line2D([], [], color="red", linestyle="--", label="margin (80% HBM)"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def format_runtimes(data: dict[str, Any] | None = None) -> str:
    """The runtimes table (``cookbook.fit.runtimes_table``) as fixed-width text."""
    from cookbook.fit._runtimes import runtimes_table

    return format_rows(runtimes_table(data))


def plot_runtimes(data: dict[str, Any] | None = None):
    """Sizes x runtimes: colour = fits (green shades by the share of the usable HBM per device, grey
    where it does not fit, white where not compiled); text = base, GiB, tokens/s and $ per 1M tokens."""
    import matplotlib.pyplot as plt
    import numpy as np

    from cookbook.fit._runtimes import RUNTIME_SLICES, SIZES_BY_PARAMS, load_runtimes

    rows = (data or load_runtimes())["rows"]
    fig, ax = plt.subplots(figsize=(1.9 * len(RUNTIME_SLICES) + 1.5, 0.95 * len(SIZES_BY_PARAMS) + 1.2))
    shade = np.full((len(SIZES_BY_PARAMS), len(RUNTIME_SLICES), 3), 1.0)
    greens = plt.get_cmap("Greens")
    for i, preset in enumerate(SIZES_BY_PARAMS):
        for j, slice_name in enumerate(RUNTIME_SLICES):
            r = rows.get(f"{preset}/{slice_name}")
            if r is None or r["fits"] is None:
                text = "not compiled"
            elif not r["fits"]:
                shade[i, j] = (0.82, 0.82, 0.82)
                gib = (
                    f"\n{r['gib_per_chip']:.0f} GiB"
                    if "gib_per_chip" in r
                    else f"\nargs >= {min(r['argument_floor_gib'].values()):.0f} GiB"
                    if "argument_floor_gib" in r
                    else "\nHBM OOM"
                )
                text = f"does not fit{gib}"
            else:
                shade[i, j] = greens(0.25 + 0.6 * r["hbm_fraction"] / 0.8)[:3]
                base = r.get("quantize") or "bf16"
                text = (
                    f"{base} {r['seq_len']} tok, {r['gib_per_chip']:.1f} GiB\n"
                    f"{r['tokens_per_s']:,.0f} tok/s\n${r['usd_per_million_tokens']:.3f}/1M"
                )
            ax.text(j, i, text, ha="center", va="center", fontsize=7)
    ax.imshow(shade, aspect="auto")
    ax.set_xticks(range(len(RUNTIME_SLICES)), RUNTIME_SLICES)
    ax.set_yticks(range(len(SIZES_BY_PARAMS)), [p.removeprefix("gemma4_").upper() for p in SIZES_BY_PARAMS])
    ax.set_title("Gemma 4 LoRA: which size trains on which TPU (deviceless compiles; green = fits, darker = fuller)")
    fig.tight_layout()
    return fig
