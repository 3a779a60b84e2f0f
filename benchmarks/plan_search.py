"""The Gemma 4 layout search on the four single-host slices, and the cheapest slice, per size.

Runs ``cookbook.fit.search`` (deviceless TPU compiles; see its module docstring) for each
slice's search space below, checks the probe extrapolation against full-depth compiles, and
writes ``benchmarks/results/plan_search_<size>.json`` (``cookbook.fit.plan_results_path``):
the ranked layouts per slice, what was dropped and why, the recommended training layout per
slice (what ``cookbook train --preset P`` runs) and the cheapest slice. Compiles are cached
under the cache root, so a stopped run resumes where it stopped.

- ``gemma4_31b``: probes at 6 and 12 layers extrapolated to 60, checked against the full-depth
  compiles in ``plan_31b.json``; with nothing cached about 90 minutes on a 2-core machine
  (two compiles at a time, 3-6 GB of RAM each).
- ``gemma4_26b_a4b``: probes at 6 and 12 layers extrapolated to 30, checked against one
  full-depth compile (``FULL_DEPTH_CHECKS``).
- ``gemma4_e2b``, ``gemma4_e4b``: compiled at full depth (their trailing KV-shared layers are
  not a repeat of the pattern the probes would extrapolate; ``cookbook.fit._probes.probe_depths``).

The small sizes' spaces are small on purpose (the CPU time of a 2-core machine): the mesh their
KV heads allow per chip count, per-decoder remat, no remat on v5p-8, and an nf4 base on v5e-8 (16 GB
chips) for the two sizes whose bf16 layout does not fit there. Measured 2026-12-02 on the 2-core,
24 GiB machine, one or two compiles at a time: a full-depth E4B compile 5-10 min wall (6-8 CPU-min),
9-13 GB RSS; a full-depth E2B compile on 4 chips ~6 min, 12 GB, while on 8 chips (v5e-8) it ran out
of the 24 GiB (killed at 24.3 GB), so E2B's two 8-chip slices are not compiled here
(``NOT_COMPILABLE_HERE``: the file and the family table say so); a 26B-A4B probe 4-7 min at 6 or 12
layers, 6-9 GB (v5p-8 with its full-depth check: 11 min). Every other cell of the 4 sizes x 4 slices is
compiled.

    .venv/bin/python benchmarks/plan_search.py                       # 31B, all four slices
    .venv/bin/python benchmarks/plan_search.py --preset gemma4_e2b --workers 1
    .venv/bin/python benchmarks/plan_search.py --slices v5p-8
    .venv/bin/python benchmarks/plan_search.py --refresh-hardware   # every committed file, no compile

``--refresh-hardware`` re-decides the committed files against today's hardware table and prices
without compiling: each report's per-device HBM becomes the table's (usable HBM since 2026-12-05:
v5e 15.75 GiB, v6e 31.25 GiB, where the datasheet's 16 and 32 GB had been used), and the fits,
rankings, recommendations and cheapest slice are recomputed from the compiled memory and FLOPs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
FULL_DEPTH = REPO / "benchmarks" / "results" / "plan_31b.json"


def spaces_31b():
    from cookbook.fit import SearchSpace

    grid = dict(remats=("none", "decoder"), attentions=("dense", "splash512"), grow_batch=1)
    return {
        # The paper's training slice: both remat choices and both attentions on the meshes
        # with tensor parallelism; fsdp-only (4 x 1, batch 4) without remat only: its probes
        # compile 3-6 min each here, and it cannot beat 1 x 4 on memory (a whole layer per chip
        # during each all-gather).
        "v5p-8": [
            SearchSpace(meshes=((1, 4), (2, 2)), **grid),
            SearchSpace(meshes=((4, 1),), remats=("none",), attentions=("dense", "splash512"), grow_batch=0),
        ],
        # The serving slice (32 GiB chips): without remat only splash fits at all, above the margin
        # (the full-depth compile in plan_31b.json); per-decoder remat with dense or splash 512
        # attention on 2 x 4, splash 512 on the other two meshes (4 x 2, 8 x 1)
        # and at twice the batch, and QLoRA (nf4, int8). An 8-chip probe compiles in 5-9 min here
        # (a 4-chip one in 1-5), which is what keeps this slice's search to 8 layouts; Tunix's
        # "block" remat took over 7 CPU-minutes for one 6-layer probe.
        "v6e-8": [
            SearchSpace(
                meshes=((2, 4),), remats=("decoder",), attentions=("splash512",), quantize=("nf4", "int8"), grow_batch=0
            ),
            SearchSpace(meshes=((2, 4),), remats=("decoder",), attentions=("dense", "splash512"), grow_batch=0),
            SearchSpace(
                meshes=((2, 4),), remats=("decoder",), attentions=("splash512",), batch_per_fsdp=(2,), grow_batch=0
            ),
            SearchSpace(meshes=((4, 2), (8, 1)), remats=("decoder",), attentions=("splash512",), grow_batch=0),
            SearchSpace(meshes=((2, 4),), remats=("none",), attentions=("splash512",), grow_batch=0),
        ],
        # 4 x 32 GiB and 8 x 16 GiB: without remat the activations alone overflow them; a bf16,
        # nf4 or int8 base (int8 dequantizes by a multiply, Qwix's nf4 by a 16-entry table lookup).
        "v6e-4": [
            SearchSpace(
                meshes=((1, 4),),
                remats=("decoder",),
                attentions=("splash512",),
                quantize=(None, "nf4", "int8"),
                grow_batch=0,
            )
        ],
        "v5e-8": [
            SearchSpace(
                meshes=((2, 4),),
                remats=("decoder",),
                attentions=("splash512",),
                quantize=(None, "nf4", "int8"),
                grow_batch=0,
            )
        ],
    }


def spaces_small(
    meshes: dict[int, tuple[int, int]], attention: str, *, try_splash: bool = False, qlora_v5e: bool = False
):
    """Per slice: the mesh at the KV-head cap for its chip count, per-decoder remat; on v5p-8 (95 GB
    chips) also no remat, and (``try_splash``) splash 512 once, to record why it does not lower;
    (``qlora_v5e``) on v5e-8, where the bf16 layout was compiled and does not fit its 16 GB chips
    with margin, the same layout on an nf4 base, so that the table says what would fit there."""
    from cookbook.fit import SearchSpace

    chips = {"v5e-8": 8, "v6e-4": 4, "v6e-8": 8, "v5p-8": 4}
    out = {
        s: [SearchSpace(meshes=(meshes[n],), remats=("decoder",), attentions=(attention,), grow_batch=0)]
        for s, n in chips.items()
    }
    out["v5p-8"].append(SearchSpace(meshes=(meshes[4],), remats=("none",), attentions=(attention,), grow_batch=0))
    if try_splash:
        out["v5p-8"].append(
            SearchSpace(meshes=(meshes[4],), remats=("decoder",), attentions=("splash512",), grow_batch=0)
        )
    if qlora_v5e:
        out["v5e-8"].append(
            SearchSpace(
                meshes=(meshes[8],), remats=("decoder",), attentions=(attention,), quantize=("nf4",), grow_batch=0
            )
        )
    return out


def spaces(preset: str):
    """Each slice's search spaces for ``preset``."""
    if preset == "gemma4_31b":
        return spaces_31b()
    # E2B has one KV head (tp 1: fsdp over every chip, batch = chips); E4B and 26B-A4B two global
    # KV heads (tp 2). E2B and E4B run dense attention: Tunix's splash path hands its transposed
    # K/V to the KV-shared layers, which then refuse them at lowering (one row records it).
    # Compiles of these sizes took 5-10 CPU-minutes each on this 2-core machine (full depth for
    # E2B/E4B), so each slice gets the per-decoder layout and v5p-8 also the no-remat one.
    return {
        "gemma4_e2b": lambda: spaces_small({4: (4, 1), 8: (8, 1)}, "dense", try_splash=True),
        # E4B (13.4 GiB of 14.9 per chip) and 26B-A4B (23.3) do not fit v5e-8 in bf16: nf4 there too.
        "gemma4_e4b": lambda: spaces_small({4: (2, 2), 8: (4, 2)}, "dense", try_splash=True, qlora_v5e=True),
        "gemma4_26b_a4b": lambda: spaces_small({4: (2, 2), 8: (4, 2)}, "splash512", qlora_v5e=True),
    }[preset]()


# What this 2-core, 24 GiB host cannot compile (measured), per preset and slice: the committed file
# and the family table say why instead of "not compiled yet" alone.
NOT_COMPILABLE_HERE = {
    "gemma4_e2b": {
        "v5e-8": "its full-depth 8-chip compile ran out of this host's 24 GiB of RAM (killed at 24.3 GB, "
        "2026-12-02); compile it on a host with more memory",
        "v6e-8": "the same full-depth 8-chip program as v5e-8's, which ran out of this host's 24 GiB of RAM; "
        "compile it on a host with more memory",
    },
}

# Layouts compiled at full depth to check the probe extrapolation against (31B: plan_31b.json).
FULL_DEPTH_CHECKS = {
    "gemma4_26b_a4b": [
        dict(
            slice_name="v5p-8",
            mesh_fsdp=2,
            mesh_tp=2,
            batch_size=2,
            remat="decoder",
            flash_attention=True,
            flash_block=512,
        )
    ],
}


def full_depth_checks(preset: str, base) -> list:
    """The full-depth reports the extrapolation is checked against (committed or listed above)."""
    from cookbook import fit

    if preset == "gemma4_31b":
        return [fit.report_from_dict(r) for r in json.loads(FULL_DEPTH.read_text())["results"].values()]
    return [base.replace(model_preset=preset, **c) for c in FULL_DEPTH_CHECKS.get(preset, [])]


def refresh_hardware(preset: str) -> None:
    """Re-decide a committed search against today's hardware table and prices (no compile).

    The compiled figures (per-device bytes and FLOPs, the compiler's step estimate) stay; each
    report's HBM capacity and peak become the table's, and everything decided from them is
    recomputed. When and with what the layouts were compiled stays as written.
    """
    import dataclasses

    from cookbook import fit

    path = fit.plan_results_path(preset)
    data = json.loads(path.read_text())
    results = []
    for res in fit.load_search(data):
        figures = fit.chip_figures(res.slice_name)
        reports = {
            n: dataclasses.replace(r, hbm_bytes=figures["hbm_bytes"], peak_flops=figures["peak_flops"])
            for n, r in res.reports.items()
        }
        results.append(dataclasses.replace(res, reports=reports))
    out = fit.results_dict(results, machine=data["machine"], validation=data.get("validation"))
    kept = ("compiled_on", "load_average_at_write", "versions", "qlora_step", "not_compiled", "not_compiled_why")
    out.update({k: data[k] for k in kept if k in data})
    before = {s: r.get("from") for s, r in data["recommended"].items()}
    after = {s: r.get("from") for s, r in out["recommended"].items()}
    out["hardware_refreshed"] = {
        "on": __import__("datetime").date.today().isoformat(),
        "why": "per-device usable HBM (v5e 15.75 GiB, v6e 31.25 GiB) and list prices per chip-hour",
    }
    path.write_text(json.dumps(out, indent=2, sort_keys=True))
    winner = (out["cheapest"]["winner"] or {}).get("slice")
    print(f"{path.name}: recommended {'unchanged' if before == after else f'{before} -> {after}'}; cheapest {winner}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--preset", default="gemma4_31b", help="a released size: gemma4_31b, gemma4_26b_a4b, gemma4_e4b, gemma4_e2b"
    )
    ap.add_argument("--slices", default=None, help="comma-separated slices to search (default: all four)")
    ap.add_argument("--workers", type=int, default=2, help="compiles at a time (each its own process)")
    ap.add_argument(
        "--refresh-hardware",
        action="store_true",
        help="compile nothing: re-decide every committed plan_search_<size>.json with today's HBM and prices",
    )
    ap.add_argument(
        "--cached-only",
        action="store_true",
        help="compile nothing: write the results from the compiles already cached (a stopped search)",
    )
    args = ap.parse_args()
    from cookbook.core import setup_runtime_env

    setup_runtime_env()
    from cookbook import fit
    from cookbook.fit import _probes

    if args.refresh_hardware:
        from cookbook.fit._layouts import PLAN_RESULTS

        for preset in PLAN_RESULTS:
            refresh_hardware(preset)
        return 0

    preset = args.preset
    space_of = spaces(preset)
    # Rank 64 all-linear, 4096 tokens, AdamW: the paper's recipe, for every size.
    base = fit.PlanConfig(model_preset=preset)
    results = []
    slices = args.slices.split(",") if args.slices else list(space_of)
    for slice_name in sorted(slices, key=lambda s: ("v6e-8" in s, s)):  # the slow 8-chip one last
        res = None
        for space in space_of[slice_name]:
            one = fit.search(preset, slice_name, space, base=base, workers=args.workers, cached_only=args.cached_only)
            res = one if res is None else fit.merge_searches(res, one)
        results.append(res)
        print(f"\n{slice_name}:\n{fit.format_rows(res.rows())}", flush=True)
    # The extrapolation against full-depth compiles of the same layouts.
    validation = []
    for full in full_depth_checks(preset, base):
        if isinstance(full, fit.PlanConfig):
            got = fit.compile_all([full], workers=args.workers, cached_only=args.cached_only)
            if full not in got:
                continue
            full = got[full]
        c = full.plan_config
        if c.num_layers or not full.compiles:
            continue
        probes = fit.compile_all(_probes.compiles_needed(c), workers=args.workers, cached_only=args.cached_only)
        if len(probes) < 2:
            continue
        validation.append(fit.validate_extrapolation(full, _probes.full_depth_report(c, probes)))
    data = fit.results_dict(
        results,
        machine="2-core CPU host, no TPU (deviceless AOT compile, libtpu)",
        validation=validation if _probes.probe_depths(base) else None,
    )
    # What the spaces hold that a --cached-only write left out (not compiled yet), per slice.
    data["not_compiled"] = {}
    for res in results:
        wanted = {}
        for space in res.spaces:
            wanted |= fit.candidates(base.replace(slice_name=res.slice_name), space)
        data["not_compiled"][res.slice_name] = sorted(set(wanted) - set(res.reports))
    data["not_compiled_why"] = {
        s: why for s, why in NOT_COMPILABLE_HERE.get(preset, {}).items() if data["not_compiled"].get(s)
    }
    out = fit.plan_results_path(preset)
    out.write_text(json.dumps(data, indent=2, sort_keys=True))
    print(f"wrote {out}")
    print(json.dumps(data["cheapest"], indent=2))
    print(json.dumps(data["recommended"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
