"""Which Gemma 4 size trains with LoRA on which TPU runtime: every size x the runtimes users have.

One row per (size, slice) in ``benchmarks/results/runtimes.json``: the layout the planner picks
there, whether it fits (80% of the usable HBM per device), its per-device GiB, the compiler's
step estimate (or the FLOP floor where libtpu's deviceless cost model gives none), tokens/s,
$ per 1M trained tokens at the list price, and the hours and dollars of the paper's run
(9.2M trained tokens, 31B LoRA). Every fit is decided by a deviceless TPU compile of the real
train step (the paper's recipe: LoRA rank 64 on all seven projections, 4,096 tokens, AdamW);
nothing here ran on a TPU.

A cell the layout search already compiled (``benchmarks/results/plan_search_<size>.json``) is
read from there: its best layout, any base. Every other cell is compiled here, with the same
planner (``cookbook.fit.search``): the mesh ``cookbook.mesh.choose_mesh`` picks for the devices
(one sequence per fsdp shard), per-decoder remat, splash attention (dense on E2B/E4B, where
Tunix's splash path does not lower), first a bf16 base, then nf4 QLoRA where bf16 does not fit
(not on 26B-A4B: Qwix cannot quantize its experts). Sizes whose pattern repeats (12B, 26B-A4B,
31B) compile at 6 and 12 layers and are extrapolated, as the layout search does; E2B/E4B, whose
trailing layers share K/V, compile at (own, shared) = (p, p), (2p, p), (p, 2p) layers, extrapolated
affinely in both (``cookbook.fit._probes.shared_probes``); their rows written before those probes
(2026-12-07) were compiled at full depth, and have no ``extrapolated_from``. E2B's full-depth
8-chip compile on v5e-8 and v6e-8 ran out of this host's 24 GiB of RAM. Compiles are cached, so a stopped run resumes; rows accumulate in the file.

Before any compile, each base's step is lowered (not compiled) at the shortest row length and
its arguments' bytes per device summed (``cookbook.fit._plan.argument_bytes_floor``: the frozen
base, LoRA, optimizer state and batch, a floor of what the compiler would place). Where that
floor exceeds the device's whole HBM, that base does not fit whatever the compile would say, and
is not compiled (``argument_floor_gib`` in the row: 12B's bf16 base on one v5e chip); for every
base, the row says so (``decided_by``) without compiling: 31B on one v5e chip, whose nf4 compile
this host cannot finish (killed at 24 GB of RAM).

    .venv/bin/python benchmarks/runtimes.py                          # every cell not yet in the file
    .venv/bin/python benchmarks/runtimes.py --cells gemma4_e2b/v5e-1,gemma4_31b/v6e-1
    .venv/bin/python benchmarks/runtimes.py --table                  # print the committed table
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
OUT = REPO / "benchmarks" / "results" / "runtimes.json"

PAPER_TRAIN_TOKENS = 9.2e6  # the paper's 31B run: 1,244 steps, 9.2M trained tokens


SEQ_LENS = (4096, 2048, 1024)  # the paper's 4,096 first; a chip too small for it gets shorter rows
# E4B is E2B grown in every dimension (layers 42 vs 35, width 2560 vs 1536, KV heads 2 vs 1, the
# same per-layer-input width): a rung E2B does not fit, E4B does not either, so on a slice where
# E2B needed a shorter row or nf4, E4B's ladder starts at that rung (each full-depth E4B compile
# costs 5-10 CPU-minutes here). Not for 12B against E4B: 12B has no per-layer-input table.
CONTAINS = {"gemma4_e4b": "gemma4_e2b"}


def spaces(preset: str, slice_name: str):
    """The layouts tried for a cell not in the layout search, in order: bf16, then nf4."""
    from cookbook import mesh, models
    from cookbook.fit import SearchSpace

    p = models.get_preset(preset)
    choice = mesh.choose_mesh(p, slice_name, None)
    attention = "dense" if p.num_kv_shared_layers else "splash512"
    quants = (None,) if p.is_moe else (None, "nf4")
    return [
        SearchSpace(
            meshes=((choice.fsdp, choice.tp),),
            remats=("decoder",),
            attentions=(attention,),
            quantize=(q,),
            grow_batch=0,
        )
        for q in quants
    ]


def argument_floors(preset: str, slice_name: str) -> dict[str | None, tuple[str, int]]:
    """Per base (quantize): its layout's name and the lowered step's argument bytes per device.

    Lowered at the shortest rung (:data:`SEQ_LENS`): the batch is the only argument that grows
    with the row length, so a floor over the HBM there is over it at every rung.
    """
    from cookbook import fit
    from cookbook.fit._plan import argument_bytes_floor
    from cookbook.fit._search import candidates

    base = fit.PlanConfig(model_preset=preset, slice_name=slice_name, seq_len=min(SEQ_LENS))
    return {
        config.quantize: (name, argument_bytes_floor(config))
        for space in spaces(preset, slice_name)
        for name, config in candidates(base, space).items()
    }


def over_hbm(slice_name: str, floors: dict[str | None, tuple[str, int]]) -> dict[str, float]:
    """{layout: GiB per device} of the bases whose arguments alone exceed the device's whole HBM."""
    from cookbook import core

    hbm = core.get_slice(slice_name).chip.device_hbm_bytes
    return {name: b / 2**30 for name, b in floors.values() if b > hbm}


def floor_text(over: dict[str, float]) -> str:
    return (
        "the lowered step's arguments alone (frozen base, LoRA, optimizer state, batch), per device, exceed the "
        "device's HBM: " + ", ".join(f"{k} {v:.2f} GiB" for k, v in over.items()) + f" at {min(SEQ_LENS)} tokens "
        "(longer rows only add)"
    )


def floor_row(preset: str, slice_name: str, floors: dict[str | None, tuple[str, int]]) -> dict | None:
    """The row of a cell whose every base's arguments alone exceed the device's HBM, else None."""
    from cookbook import core

    over = over_hbm(slice_name, floors)
    if len(over) < len(floors):
        return None  # a base may fit: only a compile decides
    s = core.get_slice(slice_name)
    return {
        "preset": preset,
        "slice": slice_name,
        "runtime": s.runtime or "Cloud TPU",
        "devices": s.num_devices,
        "hbm_gib_per_device": s.chip.device_hbm_bytes / 2**30,
        "compiled": False,
        "fits": False,
        "decided_by": "argument floor",
        "seq_lens_tried": [min(SEQ_LENS)],
        "bases_tried": sorted(q or "bf16" for q in floors),
        "argument_floor_gib": over,
        "source": "benchmarks/runtimes.py",
        "why": f"for every base, {floor_text(over)}",
    }


def row_of(
    preset: str, slice_name: str, res, source: str, tried: list[int] | None = None, over: dict | None = None
) -> dict:
    """The table row of a cell from its search (the best layout that fits, any base); ``over``:
    the bases not compiled because their arguments alone exceed the HBM (:func:`over_hbm`)."""
    row = _row_of(preset, slice_name, res, source, tried)
    if over:
        row["argument_floor_gib"] = over
        row["bases_tried"] = sorted(
            set(row["bases_tried"]) | {n.rsplit("/", 1)[1] if n.endswith("/nf4") else "bf16" for n in over}
        )
        if not row["fits"] and isinstance(row.get("why"), dict):
            row["why"].update({name: f"not compiled: {floor_text({name: gib})}" for name, gib in over.items()})
    return row


def _row_of(preset: str, slice_name: str, res, source: str, tried: list[int] | None = None) -> dict:
    from cookbook import core

    s = core.get_slice(slice_name)
    name = res.best()
    compiled = [r for r in res.reports.values() if r.compiles]
    oom = [r for r in res.reports.values() if out_of_memory(r)]
    row = {
        "preset": preset,
        "slice": slice_name,
        "runtime": s.runtime or "Cloud TPU",
        "devices": s.num_devices,
        "hbm_gib_per_device": s.chip.device_hbm_bytes / 2**30,
        "compiled": bool(compiled or oom),
        # The rows lengths compiled for the cell: a misfit at 4,096 alone says less than one at 1,024 too.
        "seq_lens_tried": tried or sorted({r.plan_config.seq_len for r in res.reports.values()}, reverse=True),
        "bases_tried": sorted({r.plan_config.quantize or "bf16" for r in res.reports.values()}),
        "source": source,
    }
    died = {k: r for k, r in res.reports.items() if "the compile process died" in (r.error or "")}
    if name is None and died:
        # A compile this host could not finish (killed for its 24 GiB of RAM) decides nothing: the
        # cell is open, not a misfit, whatever the other layouts said.
        row.update(
            compiled=False,
            fits=None,
            why=f"{', '.join(sorted(died))}: the compile process died on this host (killed for memory) at "
            f"{sorted({r.plan_config.seq_len for r in died.values()})} tokens; every layout: {res.rejected()}. "
            "Compile it on a host with more memory",
        )
        return row
    if name is None:
        smallest = min(compiled, key=lambda r: r.total_bytes, default=None)
        why = res.rejected() or "not compiled"
        if not res.reports and source.startswith("plan_search"):
            from cookbook import fit

            why = fit.load_plan_results(preset).get("not_compiled_why", {}).get(slice_name, why)
        row.update(fits=False if compiled or oom else None, why=why)
        if smallest is not None:
            row["gib_per_chip"] = smallest.total_bytes / 2**30
            row["quantize"] = smallest.plan_config.quantize
        return row
    r = res.reports[name]
    c = r.plan_config
    price = core.get_price(core.platform_of_slice(slice_name)).usd_per_hour
    tps = r.estimated_tokens_per_s
    hours = PAPER_TRAIN_TOKENS / tps / 3600
    row.update(
        fits=True,
        layout=name,
        quantize=c.quantize,
        mesh_fsdp=r.fsdp,
        mesh_tp=r.tp,
        batch_size=c.batch_size,
        seq_len=c.seq_len,
        remat=c.remat,
        flash_attention=c.flash_attention,
        flash_block=c.flash_block,
        gib_per_chip=r.total_bytes / 2**30,
        hbm_fraction=r.total_bytes / r.hbm_bytes,
        extrapolated_from=list(r.extrapolated_from) if r.extrapolated_from else None,
        estimated_step_s=r.estimated_step_s,
        estimate_bound=r.estimate_bound,
        tokens_per_s=tps,
        floor_tokens_per_s=r.tokens_per_step / r.flop_floor_s,  # every FLOP at the chips' bf16 peak
        usd_per_hour=price,
        usd_per_million_tokens=r.usd_per_million_tokens(),
        paper_run_hours=hours,
        paper_run_usd=hours * price,
    )
    return row


def committed_cell(preset: str, slice_name: str):
    """The layout search's result for the cell, if it searched this slice (else None)."""
    from cookbook import fit
    from cookbook.fit._layouts import PLAN_RESULTS

    if preset not in PLAN_RESULTS:
        return None
    data = fit.load_plan_results(preset)
    for res in fit.load_search(data):
        if res.slice_name == slice_name and (res.reports or slice_name in data.get("not_compiled_why", {})):
            # searched; no reports: this host cannot compile it (the file says why), nor is it retried here
            return res, fit.plan_results_path(preset).name
    return None


def compile_cell(
    preset: str,
    slice_name: str,
    workers: int,
    start: tuple[int, str | None] | None = None,
    cached_only: bool = False,
    skip: frozenset = frozenset(),
):
    """bf16 then nf4 at 4,096 tokens, then at 2,048 and 1,024: the first layout that fits wins.

    ``start``: (seq_len, quantize) of the rung to begin at (:data:`CONTAINS`). With ``cached_only``
    a rung that was never compiled ends the ladder with no result (None): a misfit is said only
    when every rung was compiled, never from the rungs that happen to be cached. ``skip``: the
    bases (quantize) not compiled, their arguments alone being over the HBM (:func:`over_hbm`).
    """
    from cookbook import fit

    res = None
    started = start is None
    tried: list[int] = []  # layout names carry no row length: a later rung's report replaces an earlier one's
    for seq_len in SEQ_LENS:
        base = fit.PlanConfig(model_preset=preset, seq_len=seq_len)
        for space in spaces(preset, slice_name):
            started = started or (seq_len, space.quantize[0]) == start
            if not started or space.quantize[0] in skip:
                continue
            one = fit.search(preset, slice_name, space, base=base, workers=workers, cached_only=cached_only)
            if cached_only and not one.reports:  # this rung was never compiled: the ladder is open
                return None, "benchmarks/runtimes.py", tried
            if one.reports and seq_len not in tried:
                tried.append(seq_len)
            res = one if res is None else fit.merge_searches(res, one)
            if res.best() is not None:
                return res, "benchmarks/runtimes.py", tried
    return res, "benchmarks/runtimes.py", tried


def validate_shared(row: dict) -> dict:
    """Compile the (own, shared) probes of a KV-shared cell whose row came from a full-depth
    compile, and say how far their extrapolation lands from it (``cookbook.fit._probes``)."""
    from cookbook import fit
    from cookbook.fit import _probes

    assert row["fits"] and not row.get("extrapolated_from"), "needs a cell compiled at full depth"
    config = fit.PlanConfig(
        model_preset=row["preset"],
        slice_name=row["slice"],
        mesh_fsdp=row["mesh_fsdp"],
        mesh_tp=row["mesh_tp"],
        batch_size=row["batch_size"],
        seq_len=row["seq_len"],
        remat=row["remat"],
        flash_attention=row["flash_attention"],
        flash_block=row["flash_block"],
        quantize=row["quantize"],
    )
    needed = _probes.compiles_needed(config)
    report = _probes.full_depth_report(config, fit.compile_all(needed, workers=1))
    full_bytes = row["gib_per_chip"] * 2**30
    floor_tps = report.tokens_per_step / report.flop_floor_s
    return {
        "cell": f"{row['preset']}/{row['slice']}",
        "probes": [list(p) for p in report.extrapolated_from],
        "full_gib_per_chip": row["gib_per_chip"],
        "extrapolated_gib_per_chip": report.total_bytes / 2**30,
        "total_bytes_relative_error": report.total_bytes / full_bytes - 1,
        "floor_tokens_per_s_relative_error": floor_tps / row["floor_tokens_per_s"] - 1,
        "probe_compile_s": report.compile_s,
        "probe_peak_rss_gib": report.host_peak_rss_bytes / 2**30,
    }


def out_of_memory(report) -> bool:
    """A compile the TPU compiler refused for HBM: its verdict is "does not fit", not "not compiled"."""
    return not report.compiles and any(
        k in (report.error or "") for k in ("RESOURCE_EXHAUSTED", "Ran out of memory", "HbmOom")
    )


def load(path: Path = OUT) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {"rows": {}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", default=None, help="comma-separated PRESET/SLICE cells (default: all not in the file)")
    ap.add_argument("--workers", type=int, default=1, help="compiles at a time (each its own process)")
    ap.add_argument("--cached-only", action="store_true", help="compile nothing: rows from the compiles already cached")
    ap.add_argument(
        "--retry-uncompiled",
        action="store_true",
        help="compile a cell here where the layout search covered its slice but could not compile it",
    )
    ap.add_argument("--table", action="store_true", help="print the committed table and exit")
    ap.add_argument("--out", type=Path, default=OUT, help="the table to add rows to (default: the committed one)")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown (README) and exit")
    ap.add_argument("--plot", type=Path, default=None, help="draw the table to this PNG (docs/runtimes.png) and exit")
    ap.add_argument(
        "--validate-kv-shared",
        default=None,
        metavar="PRESET/SLICE",
        help="compile the KV-shared probes of a cell compiled at full depth (gemma4_e2b/tpu7x-8) and record how far "
        "their extrapolation lands from it",
    )
    args = ap.parse_args()
    from cookbook.core import setup_runtime_env

    setup_runtime_env()
    data = load(args.out)
    if args.table:
        from cookbook.fit import format_runtimes

        print(format_runtimes(data))
        return 0
    if args.markdown:
        from cookbook.fit import runtime_answers, runtimes_table

        rows = runtimes_table(data)
        cols = list(dict.fromkeys(k for r in rows for k in r))
        print("| " + " | ".join(cols) + " |\n| " + " | ".join("---" for _ in cols) + " |")
        for r in rows:
            print("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
        for q, a in runtime_answers(data).items():
            print(f"- {q}: {a}")
        return 0
    if args.validate_kv_shared:
        key = args.validate_kv_shared
        data["kv_shared_validation"] = validate_shared(data["rows"][key])
        args.out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        print(json.dumps(data["kv_shared_validation"], indent=2))
        return 0
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        from cookbook.fit import plot_runtimes

        plot_runtimes(data).savefig(args.plot, dpi=110)
        print(f"wrote {args.plot}")
        return 0
    from cookbook.fit import RUNTIME_SLICES, SIZES_BY_PARAMS

    cells = [tuple(c.split("/")) for c in args.cells.split(",")] if args.cells else None
    for preset in SIZES_BY_PARAMS:
        for slice_name in RUNTIME_SLICES:
            key = f"{preset}/{slice_name}"
            if cells is not None and (preset, slice_name) not in cells:
                continue
            if cells is None and data["rows"].get(key, {}).get("fits") is not None:
                continue  # decided: by a compile, or by the argument floor
            found = committed_cell(preset, slice_name)
            if found and args.retry_uncompiled and not found[0].reports:
                found = None  # the search's "not compiled here" is retried with this ladder
            smaller = data["rows"].get(f"{CONTAINS.get(preset)}/{slice_name}", {})
            start = (smaller["seq_len"], smaller.get("quantize")) if smaller.get("fits") else None
            found = (*found, None) if found else None
            floors = {} if found else argument_floors(preset, slice_name)
            row = floor_row(preset, slice_name, floors) if floors else None
            if row is None:
                over = over_hbm(slice_name, floors)
                skip = frozenset(q for q, (name, _) in floors.items() if name in over)
                res, source, tried = found or compile_cell(
                    preset, slice_name, args.workers, start, args.cached_only, skip
                )
                if res is None or (not res.reports and not found):
                    continue  # --cached-only and a rung of the cell's ladder not cached: left as it was
                row = row_of(preset, slice_name, res, source, tried, over)
            data = load(args.out)  # again: another run may have added rows meanwhile
            data["rows"][key] = row
            data.update(
                written_on=datetime.date.today().isoformat(),
                load_average_at_write=os.getloadavg()[0],
                machine="2-core CPU host, no TPU (deviceless AOT compile, libtpu)",
                paper_train_tokens=PAPER_TRAIN_TOKENS,
                margin=0.8,
            )
            args.out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
            r = data["rows"][key]
            print(f"{key}: fits={r['fits']} {r.get('layout', r.get('why'))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
