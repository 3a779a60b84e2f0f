"""The layout search: compile every candidate layout of a preset for a TPU slice, rank them.

``search(preset, slice_name, SearchSpace(...))`` compiles (deviceless, ``cookbook.fit.plan``)
each candidate layout: mesh shapes the model allows, remat choices, dense or splash
attention at given block sizes, micro-batch sizes and a bf16 or quantized (QLoRA) base.
It drops what does not compile or does not fit under :data:`SAFETY_MARGIN` of HBM and ranks
the rest by the compiler's own estimated step time per trained token
(``PlanReport.estimated_step_s``: ``cost_analysis()``'s ``optimal_seconds`` plus the splash
kernels' work, which the compiler does not count (``cookbook.fit._kernels``), never below the
FLOP floor). ``cookbook.fit._search_results.cheapest`` takes the searches of the
single-host slices and names the slice and layout with the lowest estimated cost per million
trained tokens.

**Probe depths** (``cookbook.fit._probes``): a deep layout is compiled at two or three shallow
depths and extrapolated to full depth.

Every compile is one ``plan()`` call, cached under the cache root by config and compiler
version: a search that is stopped loses only the compile in flight, and a search that
finds everything cached is instant. Compiles run in child processes (``workers`` at a
time, each compile in a fresh one, so a compile killed for memory costs its own row only).
Written by hand: no library searches TPU layouts by compiling them.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from cookbook import models
from cookbook.fit._layouts import SAFETY_MARGIN
from cookbook.fit._plan import plan, plan_cache_path, precheck
from cookbook.fit._plan_config import PlanConfig, PlanReport, report_from_dict
from cookbook.fit._probes import compiles_needed, full_depth_report

# The single-host slices ``cheapest`` compares (cookbook.core's slice table names them).
SINGLE_HOST_SLICES = ("v5e-8", "v6e-4", "v6e-8", "v5p-8")
# What validate_extrapolation compares.
VALIDATED = ("total_bytes", "temp_bytes", "argument_bytes", "flops_per_chip", "compiler_step_s")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchSpace:
    """The candidate layouts: the product of these lists (None: every valid mesh)."""

    meshes: tuple[tuple[int, int], ...] | None = None  # (fsdp, tp); None: every mesh the model allows
    remats: tuple[str, ...] = ("none", "decoder")
    attentions: tuple[str, ...] = ("dense", "splash512")  # "dense" or "splash<block>"
    batch_per_fsdp: tuple[int, ...] = (1,)  # micro-batch = fsdp x each
    quantize: tuple[str | None, ...] = (None,)
    grow_batch: int = 2  # then double the best layout's batch up to this many times while it fits

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SearchSpace:
        d = dict(d)
        if d.get("meshes") is not None:
            d["meshes"] = tuple(tuple(m) for m in d["meshes"])
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def parse_attention(name: str) -> tuple[bool, int]:
    """``"dense"`` -> (False, 512); ``"splash256"`` -> (True, 256); anything else: ValueError."""
    if name == "dense":
        return False, PlanConfig.flash_block
    if name.startswith("splash") and name.removeprefix("splash").isdigit():
        return True, int(name.removeprefix("splash"))
    raise ValueError(f"attention {name!r}: write 'dense' or 'splash<block>' (for example splash512)")


def layout_name(c: PlanConfig, fsdp: int, tp: int) -> str:
    attention = f"splash{c.flash_block}" if c.flash_attention else "dense"
    return f"{c.slice_name}/{fsdp}x{tp}/b{c.batch_size}/{c.remat}/{attention}" + (
        f"/{c.quantize}" if c.quantize else ""
    )


def candidates(base: PlanConfig, space: SearchSpace) -> dict[str, PlanConfig]:
    """Every layout of ``space`` for ``base``'s preset and slice, by name (meshes checked first)."""
    from cookbook import core
    from cookbook import mesh as mesh_lib

    preset = models.get_preset(base.model_preset)
    chips = core.get_slice(base.slice_name).num_devices  # what a mesh spans (TPU7x: 2 per chip)
    meshes = space.meshes or tuple(mesh_lib.valid_meshes(preset, chips))
    for fsdp, tp in meshes:
        mesh_lib.validate_mesh(preset, fsdp, tp, num_devices=chips)
    for r in space.remats:
        models.get_remat_choice(r)
    out = {}
    for (fsdp, tp), remat, attention, k, q in itertools.product(
        meshes, space.remats, space.attentions, space.batch_per_fsdp, space.quantize
    ):
        flash, block = parse_attention(attention)
        c = base.replace(
            mesh_fsdp=fsdp,
            mesh_tp=tp,
            batch_size=fsdp * k,
            remat=remat,
            flash_attention=flash,
            flash_block=block,
            quantize=q,
        )
        out[layout_name(c, fsdp, tp)] = c
    return out


# --------------------------------------------------------------------------------------
# The search


def plan_or_reason(config: PlanConfig) -> PlanReport:
    """``plan(config)``, or a failed report naming why ``config`` was refused before compiling."""
    try:
        precheck(config)  # cheap: a refused layout never waits for a compile slot
        return plan(config)
    except ValueError as e:  # a layout the model or the slice cannot take (_plan.check_config)
        return PlanReport(config=config.to_dict(), compiles=False, error=f"refused before compiling: {e}")


_CHILD = """
import json, sys
from cookbook.core import setup_runtime_env
setup_runtime_env()
from cookbook.fit import PlanConfig
from cookbook.fit._search import plan_or_reason
print("REPORT" + json.dumps(plan_or_reason(PlanConfig.from_dict(json.loads(sys.argv[1]))).to_dict()))
"""


def plan_in_subprocess(config: PlanConfig) -> PlanReport:
    """``plan_or_reason(config)`` in a fresh Python process; a failed report if that process dies
    (killed for memory, say), so one bad compile costs its own row and nothing else."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(config.to_dict())], capture_output=True, text=True)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("REPORT")), None)
    if line is None:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])[:500]
        return PlanReport(
            config=config.to_dict(), compiles=False, error=f"the compile process died (exit {proc.returncode}): {tail}"
        )
    return report_from_dict(json.loads(line[len("REPORT") :]))


def _cached(config: PlanConfig) -> PlanReport | None:
    path = plan_cache_path(config)
    return report_from_dict(json.loads(path.read_text())) if path.is_file() else None


def compile_all(
    configs: Iterable[PlanConfig],
    *,
    workers: int = 1,
    progress: bool = True,
    say: Callable[[str], None] = print,
    cached_only: bool = False,
) -> dict[PlanConfig, PlanReport]:
    """``plan()`` of each config: cached ones at once, the rest in ``workers`` child processes
    (0: in this process), with a progress bar and, after the first compile, the time left.
    ``cached_only``: compile nothing; the configs not in the cache are left out."""
    from tqdm.auto import tqdm

    todo, done = [], {}
    for c in dict.fromkeys(configs):
        hit = _cached(c)
        if hit is None:
            try:
                precheck(c)
            except ValueError:
                hit = plan_or_reason(c)  # refused before compiling: no compile to wait for
        if hit is None:
            todo.append(c)
        else:
            done[c] = hit
    if not todo or cached_only:
        if todo:
            say(f"{len(todo)} of {len(todo) + len(done)} compiles are not cached: left out (cached_only)")
        return done
    known = [r.compile_s for r in done.values() if r.compile_s]
    if known:
        say(
            f"{len(todo)} compiles to do ({len(done)} cached); at the cached compiles' mean "
            f"{sum(known) / len(known):.0f} s each, about {len(todo) * sum(known) / len(known) / 60 / max(workers, 1):.0f} min"
        )
    else:
        say(f"{len(todo)} compiles to do ({len(done)} cached); the time left is estimated after the first")
    bar = tqdm(total=len(todo), desc="compiling layouts", disable=not progress)
    t0 = time.perf_counter()

    def finished(c: PlanConfig, r: PlanReport) -> None:
        done[c] = r
        bar.update(1)
        if bar.n == 1 and len(todo) > 1:
            say(
                f"first compile took {time.perf_counter() - t0:.0f} s: about "
                f"{(len(todo) - 1) * (time.perf_counter() - t0) / 60 / max(workers, 1):.0f} min left"
            )

    try:
        if workers == 0:
            for c in todo:
                finished(c, plan_or_reason(c))
        else:
            with ThreadPoolExecutor(workers) as pool:  # threads that each wait on one child process
                futures = {pool.submit(plan_in_subprocess, c): c for c in todo}
                for f in as_completed(futures):
                    finished(futures[f], f.result())
    finally:
        bar.close()
    return done


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchResult:
    """A slice's search: every layout's full-depth report, and the ranking of those that fit."""

    preset: str
    slice_name: str
    spaces: tuple[SearchSpace, ...]  # what was searched (two after a merge)
    reports: dict[str, PlanReport]
    margin: float = SAFETY_MARGIN

    @property
    def ranked(self) -> list[str]:
        """Layouts that fit with margin, fastest estimated tokens/s first (then less HBM)."""
        ok = [n for n, r in self.reports.items() if r.compiles and r.total_bytes <= self.margin * r.hbm_bytes]
        return sorted(ok, key=lambda n: (-self.reports[n].estimated_tokens_per_s, self.reports[n].total_bytes))

    def rejected(self) -> dict[str, str]:
        """Why each layout that is not ranked was dropped."""
        out = {}
        for n, r in self.reports.items():
            if not r.compiles:
                out[n] = f"does not compile: {r.error}"
            elif r.total_bytes > self.margin * r.hbm_bytes:
                out[n] = (
                    f"does not fit with margin: {r.total_bytes / 2**30:.1f} GiB per chip of "
                    f"{r.hbm_bytes / 2**30:.1f} ({100 * r.total_bytes / r.hbm_bytes:.0f}% > {self.margin:.0%})"
                )
        return out

    def best(self, *, base_only: bool = False) -> str | None:
        """The top-ranked layout (``base_only``: the best with an unquantized base)."""
        names = [n for n in self.ranked if not (base_only and self.reports[n].plan_config.quantize)]
        return names[0] if names else None

    def rows(self, overrides: dict[str, float] | None = None) -> list[dict[str, Any]]:
        """The ranked table (then the dropped layouts, with why); prices with ``overrides``."""
        out = [search_row(n, self.reports[n], rank=rank, overrides=overrides) for rank, n in enumerate(self.ranked, 1)]
        out += [
            search_row(n, self.reports[n], rank=None, dropped=why, overrides=overrides)
            for n, why in self.rejected().items()
        ]
        return out


def search_row(
    name: str, r: PlanReport, *, rank: int | None, dropped: str | None = None, overrides: dict[str, float] | None = None
) -> dict[str, Any]:
    """One row of a search table: per-chip HBM, the compiler's estimate beside the FLOP floor."""
    c = r.plan_config
    row: dict[str, Any] = {
        "rank": rank or "-",
        "layout": name,
        "mesh": f"{r.fsdp or c.mesh_fsdp}x{r.tp or c.mesh_tp}",
        "batch": c.batch_size,
        "remat": c.remat,
        "attention": f"splash {c.flash_block}" if c.flash_attention else "dense",
        "base": c.quantize or "bf16",
    }
    if r.compiles:
        cost = r.usd_per_million_tokens(overrides=overrides)
        row.update(
            {
                "GiB/chip": round(r.total_bytes / 2**30, 2),
                "HBM %": round(100 * r.total_bytes / r.hbm_bytes, 1),
                "est. s/step": float(f"{r.estimated_step_s:.4g}"),
                "FLOP floor s/step": float(f"{r.flop_floor_s:.4g}"),
                "set by": r.estimate_bound,
                "depth": "extrapolated" if r.extrapolated_from else "full",
                "est. tokens/s": round(r.estimated_tokens_per_s),
                "$/1M tokens": float(f"{cost:.4g}") if cost is not None else "price unknown",
            }
        )
    row["result"] = dropped or "fits"
    return row


def search(
    preset: str,
    slice_name: str,
    space: SearchSpace = SearchSpace(),
    *,
    base: PlanConfig | None = None,
    workers: int = 1,
    margin: float = SAFETY_MARGIN,
    progress: bool = True,
    say: Callable[[str], None] = print,
    cached_only: bool = False,
) -> SearchResult:
    """Compile and rank ``space``'s layouts of ``preset`` on ``slice_name`` (see the module doc).

    ``base`` gives everything that is not searched (sequence length, LoRA, optimizer);
    default ``PlanConfig()``'s. After the grid, the best layout's batch is doubled up to
    ``space.grow_batch`` times while it still fits with margin. ``cached_only``: compile
    nothing, rank the layouts whose compiles are cached (a stopped search, written as it is).
    """
    base = (base or PlanConfig()).replace(model_preset=preset, slice_name=slice_name)
    layouts = candidates(base, space)
    probes = compile_all(
        [p for c in layouts.values() for p in compiles_needed(c)],
        workers=workers,
        progress=progress,
        say=say,
        cached_only=cached_only,
    )
    reports = {n: r for n, c in layouts.items() if (r := full_depth_report(c, probes)) is not None}
    result = SearchResult(preset=preset, slice_name=slice_name, spaces=(space,), reports=reports, margin=margin)
    for _ in range(space.grow_batch):
        top = result.best()
        if top is None:
            break
        c = layouts.get(top) or result.reports[top].plan_config
        bigger = c.replace(batch_size=2 * c.batch_size)
        name = layout_name(bigger, result.reports[top].fsdp, result.reports[top].tp)
        if name in reports:
            break
        more = compile_all(
            compiles_needed(bigger), workers=min(workers, 2), progress=progress, say=say, cached_only=cached_only
        )
        if (grown := full_depth_report(bigger, more)) is None:
            break
        reports[name] = grown
        layouts[name] = bigger
        result = dataclasses.replace(result, reports=reports)
        if name not in result.ranked:
            break
    return result
