"""Gemma 4 31B LoRA training plans for TPU v5p-8 and v6e-8, compiled here with no TPU.

Each configuration is the full 60-layer model with LoRA rank 64 on all seven projections,
sequence length 4096, compiled by the real TPU compiler (libtpu, deviceless) in its own
process: 2-4 min of CPU and 8-11 GB of host RAM each on a 2-core machine, so they run
one at a time. Results go to benchmarks/results/plan_31b.json, which notebook 04 reads (no
31B compile in CI), and the recommendation (fewest compiled FLOPs per trained token among
layouts that fit under the safety margin, then the largest such batch) is printed.

Which configurations: the search space was narrowed with figures compiled here earlier
(docs/results.md, "The first 31B compiles, by hand"): per-decoder remat costs ~45% more FLOPs than none, splash
attention saves ~17%, and no-remat with dense attention already fits batch 1 on v5p-8
(63.8 GiB of 88.5) because most of its temp memory is the [T, T] attention probabilities,
which splash attention never stores. So the candidates are no-remat + splash (fewest
FLOPs) at growing batch, against the per-decoder layouts.

    .venv/bin/python benchmarks/plan_31b.py            # all configurations (~20-40 min here)
    .venv/bin/python benchmarks/plan_31b.py --only v5p-8/none/splash512/b1
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
OUT = REPO / "benchmarks" / "results" / "plan_31b.json"
SEQ_LEN = 4096
MESH = {"v5p-8": (1, 4), "v6e-8": (2, 4)}  # tp is capped at 4 by the 4 global KV heads


def cfg(slice_name: str, batch: int, remat: str, attention: str, num_layers: int | None = None) -> dict:
    """A ``cookbook.fit.PlanConfig`` as JSON (the training config's field names)."""
    fsdp, tp = MESH[slice_name]
    flash = attention.startswith("splash")
    return {
        "model_preset": "gemma4_31b",
        "slice_name": slice_name,
        "mesh_fsdp": fsdp,
        "mesh_tp": tp,
        "batch_size": batch,
        "seq_len": SEQ_LEN,
        "remat": remat,
        "flash_attention": flash,
        "flash_block": int(attention.removeprefix("splash")) if flash else 512,
        "lora": {"rank": 64, "alpha": 64.0, "dropout": 0.0, "targets": "all-linear"},
        "num_layers": num_layers,
    }


# name -> config, in the order they run (most informative first).
CONFIGS: dict[str, dict] = {
    "v5p-8/none/splash512/b1": cfg("v5p-8", 1, "none", "splash512"),
    "v5p-8/none/splash512/b2": cfg("v5p-8", 2, "none", "splash512"),
    "v6e-8/decoder/splash512/b2": cfg("v6e-8", 2, "decoder", "splash512"),
    "v5p-8/decoder/dense/b1": cfg("v5p-8", 1, "decoder", "dense"),  # the paper's layout
    "v6e-8/none/splash512/b2": cfg("v6e-8", 2, "none", "splash512"),
    # docs/traps.md trap 5 on a 6-layer slice (same layer shapes, a tenth of the compile): Tunix's default
    # splash block 1024 overflows VMEM in the global layers' backward kernel on v5p.
    "v5p-8/decoder/splash1024/b1/6-layers": cfg("v5p-8", 1, "decoder", "splash1024", num_layers=6),
}


def compile_one(config: dict) -> dict:
    """Compile one PlanConfig in a fresh process (``cookbook.fit``'s own); its report dict plus wall time."""
    from cookbook import fit
    from cookbook.fit._search import plan_in_subprocess

    t0 = time.perf_counter()
    report = plan_in_subprocess(fit.PlanConfig.from_dict(config))
    out = report.to_dict() | {"wall_s": time.perf_counter() - t0}
    if not report.compiles and (report.error or "").startswith("the compile process died"):
        out["crashed"] = True
    return out


def _max_batch(runs: list[dict], margin: float) -> tuple[int, str]:
    """Largest batch (a multiple of fsdp) predicted to fit under ``margin``, and how it was found.

    Temp memory is linear in batch: with two compiled batches the slope is measured; with
    one, all of its temp memory is counted as per-sample (an over-estimate, so safe).
    """
    runs = sorted(runs, key=lambda r: r["config"]["batch_size"])
    last = runs[-1]
    fixed = last["total_bytes"] - last["temp_bytes"]
    if len(runs) >= 2:
        a, b = runs[-2], runs[-1]
        per_sample = (b["temp_bytes"] - a["temp_bytes"]) / (b["config"]["batch_size"] - a["config"]["batch_size"])
        base = b["temp_bytes"] - per_sample * b["config"]["batch_size"]
        how = f"temp slope from compiled batches {a['config']['batch_size']} and {b['config']['batch_size']}"
    else:
        per_sample, base = last["temp_bytes"] / last["config"]["batch_size"], 0.0
        how = f"all temp of compiled batch {last['config']['batch_size']} counted per sample (over-estimate)"
    fsdp = last["fsdp"]
    batch = last["config"]["batch_size"]
    while fixed + base + per_sample * (batch + fsdp) <= margin * last["hbm_bytes"]:
        batch += fsdp
    return batch, how


def recommend(results: dict[str, dict], margin: float) -> dict[str, dict]:
    """Per slice: fewest FLOPs per trained token under the margin, then the largest compiled batch."""
    out = {}
    for slice_name in MESH:
        ok = [
            (name, r)
            for name, r in results.items()
            if r.get("compiles")
            and r["config"]["slice_name"] == slice_name
            and not r["config"].get("num_layers")
            and r["total_bytes"] <= margin * r["hbm_bytes"]
        ]
        if not ok:
            continue
        # FLOPs per token within 2% count as equal; then prefer the larger batch.
        floor = min(r["flops_per_token"] for _, r in ok)
        name, r = max(
            ((n, r) for n, r in ok if r["flops_per_token"] <= 1.02 * floor),
            key=lambda nr: nr[1]["config"]["batch_size"],
        )
        c = r["config"]
        same_layout = [
            x
            for _, x in ok
            if all(x["config"][k] == c[k] for k in ("remat", "flash_attention", "flash_block", "seq_len"))
        ]
        predicted, how = _max_batch(same_layout, margin)
        out[slice_name] = {
            "from": name,
            "mesh_fsdp": r["fsdp"],
            "mesh_tp": r["tp"],
            "batch_size": c["batch_size"],
            "seq_len": c["seq_len"],
            "remat": c["remat"],
            "flash_attention": c["flash_attention"],
            "flash_block": c["flash_block"],
            "flops_per_token": r["flops_per_token"],
            "hbm_fraction": r["total_bytes"] / r["hbm_bytes"],
            "floor_step_s": r["flops_per_chip"] / r["peak_flops"],
            "floor_tokens_per_s": r["tokens_per_step"] * r["peak_flops"] / r["flops_per_chip"],
            "predicted_max_batch": predicted,
            "predicted_max_batch_how": how,
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", default=None, help="names of CONFIGS to (re)compile")
    ap.add_argument("--margin", type=float, default=0.80, help="use at most this fraction of HBM")
    ap.add_argument("--recommend-only", action="store_true", help="recompute the recommendation, compile nothing")
    args = ap.parse_args()
    from cookbook import fit

    data = json.loads(OUT.read_text()) if OUT.is_file() else {}
    # Reports written with the planner's first field names are read into today's.
    results: dict[str, dict] = {
        n: fit.report_from_dict(r).to_dict() | {k: r[k] for k in ("wall_s", "crashed") if k in r}
        for n, r in data.get("results", {}).items()
    }
    names = args.only or [n for n in CONFIGS if n not in results or results[n].get("crashed")]
    if args.recommend_only:
        names = []
        data["recommended"] = recommend(results, args.margin)
        OUT.write_text(json.dumps(data, indent=2, sort_keys=True))
    for name in names:
        print(f"compiling {name} ...", flush=True)
        r = compile_one(CONFIGS[name])
        results[name] = r
        if r.get("crashed"):
            print(f"  crashed: {r['error']}", flush=True)
        else:
            print(fit.report_from_dict(r).summary(), flush=True)
            print(f"  wall {r['wall_s']:.0f} s, host peak RSS {r['host_peak_rss_bytes'] / 2**30:.1f} GiB", flush=True)
        data = {
            "compiled_on": datetime.date.today().isoformat(),
            "machine": "2-core CPU host shared with other jobs, no TPU (deviceless AOT compile, libtpu)",
            "margin": args.margin,
            "mfu": fit.DEFAULT_MFU,
            "results": results,
            "recommended": recommend(results, args.margin),
        }
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(data, indent=2, sort_keys=True))
    print(json.dumps(data.get("recommended", {}), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
