"""The Gemma 4 31B layout search on the four single-host slices, and the cheapest slice.

Runs ``cookbook.fit.search`` (deviceless TPU compiles at probe depths 6 and 12 layers,
extrapolated to 60; see the module docstring) for each slice's search space below, checks
the extrapolation against the full-depth compiles in ``plan_31b.json``, and writes
``benchmarks/results/plan_search_31b.json``: the ranked layouts per slice, what was
dropped and why, the recommended training layout per slice (what ``cookbook train --preset
gemma4_31b`` runs) and the cheapest slice. Compiles are cached under the cache root, so a
stopped run resumes where it stopped; with nothing cached it takes about 90 minutes on a
2-core machine (two compiles at a time, 3-6 GB of RAM each).

    .venv/bin/python benchmarks/plan_search.py              # all four slices
    .venv/bin/python benchmarks/plan_search.py --slices v5p-8
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
OUT = REPO / "benchmarks" / "results" / "plan_search_31b.json"
FULL_DEPTH = REPO / "benchmarks" / "results" / "plan_31b.json"


def spaces():
    from cookbook.fit import SearchSpace

    grid = dict(remats=("none", "decoder"), attentions=("dense", "splash512"), grow_batch=1)
    return {
        # The paper's training slice: both remat choices and both attentions on the meshes
        # with tensor parallelism; fsdp-only (4 x 1, batch 4) without remat only: its probes
        # compile 3-6 min each here, and it cannot beat 1 x 4 on memory (a whole layer per chip
        # during each all-gather).
        "v5p-8": [SearchSpace(meshes=((1, 4), (2, 2)), **grid),
                  SearchSpace(meshes=((4, 1),), remats=("none",), attentions=("dense", "splash512"), grow_batch=0)],
        # The serving slice (32 GiB chips): without remat only splash fits at all, above the margin
        # (the full-depth compile in plan_31b.json); per-decoder remat with dense or splash 512
        # attention on 2 x 4, splash 512 on the other two meshes (4 x 2, 8 x 1)
        # and at twice the batch, and QLoRA (nf4, int8). An 8-chip probe compiles in 5-9 min here
        # (a 4-chip one in 1-5), which is what keeps this slice's search to 8 layouts; Tunix's
        # "block" remat took over 7 CPU-minutes for one 6-layer probe.
        "v6e-8": [SearchSpace(meshes=((2, 4),), remats=("decoder",), attentions=("splash512",),
                              quantize=("nf4", "int8"), grow_batch=0),
                  SearchSpace(meshes=((2, 4),), remats=("decoder",), attentions=("dense", "splash512"), grow_batch=0),
                  SearchSpace(meshes=((2, 4),), remats=("decoder",), attentions=("splash512",), batch_per_fsdp=(2,),
                              grow_batch=0),
                  SearchSpace(meshes=((4, 2), (8, 1)), remats=("decoder",), attentions=("splash512",), grow_batch=0),
                  SearchSpace(meshes=((2, 4),), remats=("none",), attentions=("splash512",), grow_batch=0)],
        # 4 x 32 GiB and 8 x 16 GiB: without remat the activations alone overflow them; a bf16,
        # nf4 or int8 base (int8 dequantizes by a multiply, Qwix's nf4 by a 16-entry table lookup).
        "v6e-4": [SearchSpace(meshes=((1, 4),), remats=("decoder",), attentions=("splash512",),
                              quantize=(None, "nf4", "int8"), grow_batch=0)],
        "v5e-8": [SearchSpace(meshes=((2, 4),), remats=("decoder",), attentions=("splash512",),
                              quantize=(None, "nf4", "int8"), grow_batch=0)],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slices", default=",".join(spaces()), help="comma-separated slices to search")
    ap.add_argument("--workers", type=int, default=2, help="compiles at a time (each its own process)")
    ap.add_argument("--cached-only", action="store_true",
                    help="compile nothing: write the results from the compiles already cached (a stopped search)")
    args = ap.parse_args()
    from cookbook.core import setup_runtime_env

    setup_runtime_env()
    from cookbook import fit
    from cookbook.fit import _search

    base = fit.PlanConfig(model_preset="gemma4_31b")  # rank 64 all-linear, 4096 tokens, AdamW: the paper's recipe
    results = []
    for slice_name in sorted(args.slices.split(","), key=lambda s: ("v6e-8" in s, s)):  # the slow 8-chip one last
        res = None
        for space in spaces()[slice_name]:
            one = fit.search("gemma4_31b", slice_name, space, base=base, workers=args.workers,
                             cached_only=args.cached_only)
            res = one if res is None else fit.merge_searches(res, one)
        results.append(res)
        print(f"\n{slice_name}:\n{fit.format_rows(res.rows())}", flush=True)
    # The extrapolation against the full-depth compiles committed in plan_31b.json.
    validation = []
    for r in json.loads(FULL_DEPTH.read_text())["results"].values():
        full = fit.report_from_dict(r)
        c = full.plan_config
        if c.num_layers or not full.compiles:
            continue
        probes = fit.compile_all(_search.compiles_needed(c), workers=args.workers, cached_only=args.cached_only)
        if len(probes) < 2:
            continue
        validation.append(fit.validate_extrapolation(full, _search.full_depth_report(c, probes)))
    data = fit.results_dict(results, machine="2-core CPU host, no TPU (deviceless AOT compile, libtpu)",
                                validation=validation)
    OUT.write_text(json.dumps(data, indent=2, sort_keys=True))
    print(json.dumps(data["cheapest"], indent=2))
    print(json.dumps(data["recommended"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
