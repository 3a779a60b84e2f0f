"""The end-of-run report: every notebook's recorded results in one Markdown + HTML page.

``write_report(run_dir)`` reads what each notebook recorded (``<run_dir>/<name>.json``,
written by :func:`cookbook.harness.record`) and the demo's own log (``demo.json``) and
writes ``report.md`` (plots as PNG files beside it) and ``report.html`` (plots embedded),
with links to the executed notebooks. Values are rendered by their shape, so a notebook
that records a new key shows up without changing this module: scalars in a table, lists
of numbers as curves, lists of rows and dicts of rows as tables. Each section names the
results a reader looks for first (:data:`SECTIONS`).

A section whose notebook is not in the cookbook says so; one whose notebook was not run
says so; one whose notebook ran but recorded nothing is an error (:class:`ReportError`):
a report that looks complete but is silently missing a result is worse than none.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cookbook.harness._render import (
    Plot,
    Section,
    flatten_scalars,
    fmt_value,
    md_table,
    render_values,
    to_html,
)

DEMO_LOG = "demo.json"


SECTIONS: tuple[Section, ...] = (
    Section(
        prefix="00",
        title="Quickstart",
        about="the tiny base model next to 31B, and Tunix vs transformers logit parity",
        highlights=(r"max_abs_diff", r"num_params|param", r"parity|logit"),
    ),
    Section(
        prefix="01",
        title="Mesh setup",
        about="the runtime found and the (fsdp, tp) mesh chosen, with why",
        highlights=(r"^mesh$", r"gemma4_31b_meshes", r"tp_bound|reason", r"mesh", r"runtime|device|platform"),
    ),
    Section(
        prefix="02",
        title="LoRA naming",
        about="which projections got adapters on each layer type (the K = V trap)",
        highlights=(r"coverage|by_kind", r"naive_global_k|qwix_measured", r"peft_measured", r"lora.*param|param.*lora"),
    ),
    Section(
        prefix="03",
        title="Sharding fixes",
        about="per-device memory table; nothing large replicated by accident",
        highlights=(
            r"replicated_mib_after",
            r"max_per_device_mib_after",
            r"lora_max_per_device",
            r"memory|bytes|mib",
            r"replicat",
        ),
    ),
    Section(
        prefix="04",
        title="Remat and the TPU fit check",
        about="compiled memory and step time per remat choice; the 31B layout search and the cheapest slice",
        highlights=(r"cheapest", r"remat", r"gib|memory|hbm", r"tflop|flop"),
    ),
    Section(
        prefix="05",
        title="Data pipeline",
        about="packing efficiency against padding; bad-row report",
        highlights=(
            r"real_fraction_packed",
            r"real_fraction_padded$",
            r"headroom|tokens_per_s",
            r"packing|pack",
            r"padding|pad",
            r"real",
        ),
    ),
    Section(
        prefix="06",
        title="LoRA fine-tuning",
        about="loss curve; exact match and functional pass@1 (compiled and simulated with Icarus Verilog) "
        "before and after",
        highlights=(
            r"base_accuracy",
            r"finetuned_accuracy",
            r"finetuned_functional_pass1",
            r"base_functional_pass1",
            r"final_eval_loss",
            r"accuracy|exact",
            r"loss",
            r"tokens_per_s|step",
        ),
    ),
    Section(
        prefix="07",
        title="Merge",
        about="merged-model parity with Tunix+LoRA, shard sizes, merge speed and memory",
        highlights=(
            r"logit_max_abs_diff|parity|diff",
            r"largest_shard_bytes|num_shards",
            r"extrapolated|rss|memory|gib",
            r"time|speed|_s$",
        ),
    ),
    Section(
        prefix="08",
        title="Serving with vLLM",
        about="served fine-tuned accuracy and pass@1 / pass@5 (n = 5, T = 0.8) beside the base's; vLLM vs "
        "transformers speed: measured on the ~100M small preset (benchmarks/serve_bench.py), the tiny "
        "figures are smoke tests where overheads dominate",
        highlights=(
            r"served_accuracy",
            r"^pass_at_k\.pass@",
            r"small_benchmark_speedup.speedup",
            r"smoke_speedup",
            r"ttft",
            r"base_accuracy",
            r"throughput|tokens_per_s",
            r"accuracy",
        ),
    ),
    Section(
        prefix="09",
        title="Cost comparison",
        about="the paper's cost table reproduced, the cookbook's predicted row, the cost curve",
        highlights=(r"^train_cost_ratio$", r"total_cost_ratio", r"break_even", r"ratio", r"usd|cost"),
    ),
    Section(
        prefix="10",
        title="RL on the simulator's verdict",
        about="DAPO with Tunix from a short SFT run: reward and pass-rate curves; held-out pass@1 before and after "
        "RL, beside extra SFT steps as the control",
        highlights=(r"^rl_pass1$", r"^sft_pass1$", r"^control_pass1$", r"gain", r"pass1"),
    ),
)


class ReportError(RuntimeError):
    """A notebook ran but its results are missing: the report would be incomplete."""


@dataclasses.dataclass(kw_only=True)
class SectionResult:
    section: Section
    notebook: str | None  # stem, e.g. "06_train"
    status: str  # "ok" | "absent" | "not run" | "failed" | "empty"
    results: dict[str, Any] = dataclasses.field(default_factory=dict)
    message: str = ""
    seconds: float | None = None
    executed: bool = False  # an executed copy of the notebook is in the run directory


@dataclasses.dataclass(kw_only=True)
class Report:
    run_dir: Path
    sections: list[SectionResult]
    markdown: str
    html: str

    @property
    def errors(self) -> list[str]:
        return [s.message for s in self.sections if s.status in ("empty", "failed")]


# --- collecting -----------------------------------------------------------------------


def _notebook_stems(notebooks_dir: Path | None) -> list[str]:
    if notebooks_dir is None or not Path(notebooks_dir).is_dir():
        return []
    return sorted(p.stem for p in Path(notebooks_dir).glob("[0-9][0-9]_*.ipynb"))


def _sections_for(stems: Sequence[str]) -> list[tuple[Section, str | None]]:
    """Known sections in order, plus a generic section for any unknown notebook number."""
    out: list[tuple[Section, str | None]] = []
    known = {s.prefix for s in SECTIONS}
    for s in SECTIONS:
        match = next((st for st in stems if st.startswith(s.prefix + "_")), None)
        out.append((s, match))
    for st in stems:
        if st[:2] not in known:
            title = st[3:].replace("_", " ").capitalize()
            out.append((Section(prefix=st[:2], title=title, about="results recorded by this notebook"), st))
    return sorted(out, key=lambda t: t[0].prefix)


def collect(run_dir: str | Path, notebooks_dir: str | Path | None = None) -> list[SectionResult]:
    """Each section's status and recorded results in ``run_dir``.

    ``notebooks_dir`` (the sources) tells "not in the cookbook" from "not run"; without it,
    the notebooks present in the run directory are taken as the cookbook.
    """
    run_dir = Path(run_dir)
    log = json.loads((run_dir / DEMO_LOG).read_text()) if (run_dir / DEMO_LOG).is_file() else {}
    log_nbs: dict[str, Any] = log.get("notebooks", {})
    ran = {p.stem for p in run_dir.glob("[0-9][0-9]_*.ipynb")}
    recorded = {p.stem for p in run_dir.glob("[0-9][0-9]_*.json")}
    stems = sorted(
        set(_notebook_stems(Path(notebooks_dir)) if notebooks_dir else ran | recorded) | ran | recorded | set(log_nbs)
    )
    out = []
    for section, stem in _sections_for(stems):
        entry = log_nbs.get(stem, {}) if stem else {}
        r = SectionResult(
            section=section, notebook=stem, status="ok", seconds=entry.get("seconds"), executed=stem in ran
        )
        if stem is None:
            r.status, r.message = (
                "absent",
                f"Notebook {section.prefix} ({section.title}) is not part of this cookbook yet.",
            )
        elif entry.get("status") == "failed":
            r.status = "failed"
            r.message = f"{stem} FAILED in this run: {entry.get('error', 'see the executed notebook')}"
        elif stem in recorded:
            r.results = json.loads((run_dir / f"{stem}.json").read_text())
            if not r.results:
                r.status, r.message = "empty", f"{stem} ran but its record is empty"
        elif stem in ran or entry.get("status") == "ok":
            r.status = "empty"
            r.message = (
                f"{stem} ran but recorded nothing ({run_dir / (stem + '.json')} is missing): "
                "the notebook must call cookbook.harness.record(...)"
            )
        else:
            why = (
                entry.get("error") or "not run in this run (an earlier notebook failed, or it was left out with --only)"
            )
            r.status, r.message = "not run", f"{stem}: {why}"
        if r.status == "failed" and stem in recorded:
            r.results = json.loads((run_dir / f"{stem}.json").read_text())
        out.append(r)
    return out


# --- rendering values -----------------------------------------------------------------


# --- the report -------------------------------------------------------------------------


def _section_markdown(r: SectionResult) -> tuple[list[str], list[Plot]]:
    s = r.section
    head = f"## {s.prefix}. {s.title}"
    lines = [head, "", f"*{s.about}*", ""]
    plots: list[Plot] = []
    if r.notebook and r.executed:
        link = f"[{r.notebook}.ipynb]({r.notebook}.ipynb)"
        extra = f" ({r.seconds:.0f} s)" if r.seconds is not None else ""
        lines += [f"Executed notebook: {link}{extra}", ""]
    if r.status != "ok":
        tag = {
            "absent": "Not in this cookbook",
            "not run": "Not run",
            "failed": "**FAILED**",
            "empty": "**ERROR: recorded nothing**",
        }[r.status]
        lines += [f"> {tag}: {r.message}", ""]
    if r.results:
        body, plots = render_values(r.notebook or s.prefix, r.results, s)
        lines += body
    return lines, plots


def _glance(r: SectionResult, per_section: int = 3) -> str:
    """A few highlighted values of one section, for the summary table."""
    if r.status != "ok":
        return {"absent": "not in this cookbook yet", "not run": "not run"}.get(r.status, r.message)
    flat = dict(flatten_scalars(r.results))
    picked: list[str] = []
    for pat in r.section.highlights:
        key = next((k for k in flat if re.search(pat, k, re.I) and k not in picked), None)
        if key is not None:
            picked.append(key)
        if len(picked) == per_section:
            break
    for key in flat:  # notebooks without matching keys still show something
        if len(picked) >= min(per_section, len(flat)):
            break
        if key not in picked:
            picked.append(key)

    def short(v: Any) -> str:
        text = fmt_value(v)
        return text if len(text) <= 60 else text[:57] + "..."

    return "; ".join(f"{k} = {short(flat[k])}" for k in picked)


def quality_section(sections: Sequence[SectionResult]) -> list[str]:
    """The quality table in the paper's form, from every notebook's recorded ``quality`` rows
    (notebook 06: greedy, Tunix; notebook 08: n = 5 samples through vLLM), the GPU recipe's where
    it was trained, and the paper's figures for scale."""
    from cookbook import evaluate

    rows = [
        {**row, "source": row.get("source") or r.notebook}
        for r in sections
        if r.status in ("ok", "failed")
        for row in (r.results.get("quality") or [])
        if isinstance(row, dict)
    ]
    if not rows:
        return []
    lines = [
        "## Quality, in the paper's form",
        "",
        "*Functional pass@k: each completion compiled and simulated with Icarus Verilog against the problem's "
        "testbench; greedy pass@1, and pass@1 / pass@5 of n samples at temperature 0.8 / top-p 0.95 (unbiased "
        "estimate), as the paper scored verilog-eval. Exact match: the completion equals the reference text.*",
        "",
        *evaluate.quality_table(rows),
        "",
    ]
    if not any("GPU" in str(row.get("recipe", "")) for row in rows):
        lines += [
            "The GPU recipe was not trained for this run: `benchmarks/gpu_recipe_e2e.py` trains it (TRL + PEFT, "
            "the TPU run's objective) and adds its row.",
            "",
        ]
    return lines


def render(
    run_dir: str | Path, sections: Sequence[SectionResult], title: str = "Cookbook run report"
) -> tuple[str, str, list[Plot]]:
    """(markdown with ``{plot:NAME}`` placeholders, html, plots)."""
    run_dir = Path(run_dir).resolve()
    log = json.loads((run_dir / DEMO_LOG).read_text()) if (run_dir / DEMO_LOG).is_file() else {}
    lines = [f"# {title}", ""]
    if log:
        lines.append(
            f"Run `{run_dir.name}`: started {log.get('started', '?')}, "
            f"{log.get('total_seconds', 0):.0f} s in all; parameters "
            f"{json.dumps(log.get('parameters', {}))}."
        )
        env = log.get("environment") or {}
        if env:
            lines.append("Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()) + ".")
        lines.append("")
    lines += ["## At a glance", ""]
    lines += md_table(
        ["notebook", "status", "seconds", "key results"],
        [
            [
                r.notebook or f"{r.section.prefix} ({r.section.title})",
                r.status,
                "" if r.seconds is None else f"{r.seconds:.0f}",
                _glance(r),
            ]
            for r in sections
        ],
    )
    lines.append("")
    lines += quality_section(sections)
    plots: list[Plot] = []
    for r in sections:
        body, p = _section_markdown(r)
        lines += body
        plots += p
    md = "\n".join(lines) + "\n"
    return md, to_html(md, plots, title), plots


def write_report(
    run_dir: str | Path,
    notebooks_dir: str | Path | None = None,
    *,
    strict: bool = True,
    title: str = "Cookbook run report",
) -> Report:
    """Write ``report.md`` (+ ``report_files/*.png``) and ``report.html`` into ``run_dir``.

    With ``strict`` (the default), a notebook that ran but recorded nothing raises
    :class:`ReportError` after the report is written (so the reader can still see it).
    """
    run_dir = Path(run_dir)
    sections = collect(run_dir, notebooks_dir)
    md, page, plots = render(run_dir, sections, title)
    files = run_dir / "report_files"
    if plots:
        files.mkdir(exist_ok=True)
    for p in plots:
        (files / f"{p.name}.png").write_bytes(p.png)
        md = md.replace(f"{{plot:{p.name}}}", f"report_files/{p.name}.png")
    (run_dir / "report.md").write_text(md)
    (run_dir / "report.html").write_text(page)
    report = Report(run_dir=run_dir, sections=sections, markdown=md, html=page)
    empty = [s.message for s in sections if s.status == "empty"]
    if strict and empty:
        raise ReportError("; ".join(empty) + f" (report written to {run_dir / 'report.md'})")
    return report
