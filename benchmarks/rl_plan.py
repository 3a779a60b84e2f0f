"""The RL actor step on the paper's TPUs, compiled with no TPU: 31B on v5p-8 and v6e-8, E4B on one v6e.

``cookbook rl`` runs Tunix's DAPO learner; on a TPU its update is Tunix's policy loss (the
per-token log-probs of the sampled completions, the clipped importance ratio, token-mean, no KL,
as CodeV-R1 trains) over a group of rollouts, with LoRA gradients and AdamW. This compiles that
step (``cookbook.fit``, ``PlanConfig.objective="dapo"``) for one group of 16 rollouts of 4,096
tokens (a 1,024-token prompt, 3,072 sampled) in micro-batches of 16, 4 or 1 (:data:`MICRO_BATCHES`),
per-decoder remat, splash attention where Tunix
lowers it (31B; dense on E4B), a bf16 base. 31B compiles at 6 and 12 layers and is extrapolated, as
the layout search does; E4B at full depth. Each row: GiB per chip against the usable HBM, the
compiler's step estimate (or the FLOP floor where libtpu gives none) and rollouts per second by it,
and what sampling the group costs by the same estimate: one decoding step of Tunix's sampler for the
16 sequences against a 4,096-token KV cache (``objective="decode"``; never faster than reading the
bytes it accesses at the chip's HBM bandwidth), times the 3,072 sampled tokens, against the update
(the prompt's prefill not counted). The mesh is the SFT step's where it fits on the slice
(``benchmarks/results/runtimes.json``), else ``cookbook.mesh.choose_mesh``'s.
GRPO's KL term would add one reference forward per rollout (Tunix runs it apart, with no
gradient); DAPO has none. Nothing here ran on a TPU.

    .venv/bin/python benchmarks/rl_plan.py       # writes benchmarks/results/rl_plan.json
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
OUT = REPO / "benchmarks" / "results" / "rl_plan.json"
RUNTIMES = REPO / "benchmarks" / "results" / "runtimes.json"

GROUP = 16  # CodeV-R1's samples per prompt
# Rollouts per micro-step of the update: the whole group, 4 of them (the SFT layouts' batch on
# v6e-8) or one, with the group's gradient accumulated over the micro-steps, as Tunix's actor does with a
# training micro-batch smaller than the group. The faster layout that fits is the row.
MICRO_BATCHES = (16, 4, 1)
SEQ_LEN, COMPLETION = 4096, 3072
CELLS = (("gemma4_31b", "v5p-8"), ("gemma4_31b", "v6e-8"), ("gemma4_e4b", "v6e-1"))


def space_for(preset: str, slice_name: str):
    from cookbook import mesh, models
    from cookbook.fit import SearchSpace

    p = models.get_preset(preset)
    sft = json.loads(RUNTIMES.read_text())["rows"].get(f"{preset}/{slice_name}", {})
    if sft.get("fits"):  # the SFT step's mesh there (a 4,096-token batch of its size fits on it)
        fsdp, tp = sft["mesh_fsdp"], sft["mesh_tp"]
    else:
        choice = mesh.choose_mesh(p, slice_name, GROUP)
        fsdp, tp = choice.fsdp, choice.tp
    attention = "dense" if p.num_kv_shared_layers else "splash512"
    return SearchSpace(
        meshes=((fsdp, tp),),
        remats=("decoder",),
        attentions=(attention,),
        batch_per_fsdp=tuple(sorted({m // fsdp for m in MICRO_BATCHES if m % fsdp == 0})),
        grow_batch=0,
    )


def decode_report(preset: str, slice_name: str, fsdp: int, tp: int):
    """One decoding step of the group (``PlanConfig.objective="decode"``), extrapolated in depth
    from the same probe depths as the update where the model is deep (``fit.search``'s rule)."""
    from cookbook import fit

    base = fit.PlanConfig(
        model_preset=preset, slice_name=slice_name, objective="decode", batch_size=GROUP, seq_len=SEQ_LEN,
        mesh_fsdp=fsdp, mesh_tp=tp, remat="none",
    )  # fmt: skip
    return fit.plan_probed(base)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", default=None, help="comma-separated PRESET/SLICE (default: all three)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    from cookbook.core import setup_runtime_env

    setup_runtime_env()
    from cookbook import fit

    cells = [tuple(c.split("/")) for c in args.cells.split(",")] if args.cells else CELLS
    data = json.loads(args.out.read_text()) if args.out.is_file() else {"rows": {}}
    for preset, slice_name in cells:
        base = fit.PlanConfig(model_preset=preset, seq_len=SEQ_LEN, objective="dapo", completion_len=COMPLETION)
        res = fit.search(preset, slice_name, space_for(preset, slice_name), base=base)
        name = res.best()
        reports = list(res.reports.values())
        r = res.reports[name] if name else (reports[0] if reports else None)
        row = {"preset": preset, "slice": slice_name, "objective": "dapo", "group": GROUP, "seq_len": SEQ_LEN}
        row["completion_len"] = COMPLETION
        if r is None or not r.compiles:
            row.update(compiled=False, why=res.rejected() or (r.error if r else "nothing compiled"))
        else:
            micro = r.plan_config.batch_size
            row.update(
                compiled=True,
                fits=name is not None,
                micro_batch=micro,
                group_update_s=r.estimated_step_s * GROUP / micro,
                layout=name or r.plan_config.model_preset,
                mesh=f"{r.fsdp}x{r.tp}",
                gib_per_chip=r.total_bytes / 2**30,
                hbm_gib_per_device=r.hbm_bytes / 2**30,
                extrapolated_from=list(r.extrapolated_from) if r.extrapolated_from else None,
                estimated_step_s=r.estimated_step_s,
                estimate_bound=r.estimate_bound,
                rollouts_per_s=micro / r.estimated_step_s,
                flops_per_chip=r.flops_per_chip,
            )
        if row["compiled"]:
            # A rollout of the group by the same estimate: COMPLETION decoding steps of the 16
            # sequences against a 4,096-token KV cache, on the actor's mesh (the prefill not counted).
            mesh_fsdp, mesh_tp = r.fsdp, r.tp
            decode = decode_report(preset, slice_name, mesh_fsdp, mesh_tp)
            if decode.compiles:
                # Decoding reads every weight and the KV cache for one token each: bound by HBM
                # bandwidth, which the FLOP floor (all libtpu gives on v5e/v6e) does not see.
                from cookbook import core

                bandwidth_s = decode.bytes_accessed / core.get_slice(slice_name).chip.device_hbm_bytes_per_s
                step_s = max(decode.estimated_step_s, bandwidth_s)
                bound = "HBM bandwidth" if bandwidth_s >= decode.estimated_step_s else decode.estimate_bound
                row.update(
                    decode_step_s=step_s,
                    decode_estimate_bound=bound,
                    decode_gib_per_chip=decode.total_bytes / 2**30,
                    rollout_s=COMPLETION * step_s,
                    rollout_over_update=COMPLETION * step_s / (r.estimated_step_s * GROUP / micro),
                )
            else:
                row.update(decode_error=decode.error)
        data["rows"][f"{preset}/{slice_name}"] = row
        data.update(
            written_on=datetime.date.today().isoformat(),
            load_average_at_write=os.getloadavg()[0],
            machine="2-core CPU host, no TPU (deviceless AOT compile, libtpu)",
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
