"""Measured LoRA step speed: Tunix + Qwix under JAX against the GPU recipe (transformers + PEFT + TRL).

What it measures, in one run on one device (a GPU where there is one, else this CPU):

* (a) JAX: the one LoRA train step (``cookbook.fit._step.make_train_step``: forward, Tunix's
  masked cross-entropy, gradients for the LoRA parameters only, AdamW), lowered exactly as
  the planner lowers it (``cookbook.fit.lower_train_step``, abstract state on a one-device
  mesh of the local device), compiled, and then run on the real weights: Tunix's model
  loaded from the base checkpoint, Qwix LoRA applied by ``cookbook.lora.apply_lora``.
* (b) PyTorch: the GPU recipe as it runs, ``train_gpu.py`` written by
  ``cookbook.gpu.write_gpu_recipe`` from the same ``TrainConfig``: its ``SFTTrainer``
  (TRL's answer-only loss and metrics), PEFT LoRA with Qwix's A initialisation and tied K/V
  ``lora_A``, the checkpoint loaded the way the script loads it (so the attention
  implementation is transformers' default, recorded in the result), ``trainer.train()``
  timed by a callback between optimizer steps.

Same base checkpoint (``cookbook.models.ensure_base``), same token ids and answer masks
(one long multi-turn sample-task conversation per row, cut at ``seq_len``, so no padding
and no packing), same batch, LoRA targets (all seven projections) and rank, no LoRA
dropout, no gradient accumulation, bf16 on a GPU and float32 on a CPU (bf16 is emulated
there). Each stack runs in its own process, one after the other, so neither holds device
memory while the other is measured. Warm-up steps are excluded; the figure is the median
of the timed steps. Reported per stack: step time, tokens/s (every token of the batch),
peak memory (JAX: the device's peak bytes in use where it reports them, else the compiled
step's arguments + outputs + temporaries; PyTorch: ``torch.cuda.max_memory_allocated`` on a
GPU, the process's peak RSS on a CPU), the first step's loss (the two should agree: B = 0,
same weights, same tokens), and MFU from one analytic FLOP count used for both stacks
(``train_step_stacks.model_flops_per_step``); then the ratio (a)/(b). The stacks' code is
``train_step_stacks.py``; this file starts them, checks the estimate and writes the JSON
(``benchmarks/results/train_step_bench_cpu.json`` on a CPU, ``..._<chip>.json`` on a GPU).

The planner's method checked: for several layouts (remat x micro-batch) the compiler's own
``cost_analysis()`` of the lowered step for this device (FLOPs, bytes) and the planner's
estimate from it (FLOPs / (peak x the planner's MFU)), beside the measured step time, and
whether the estimate ranks the layouts in the measured order (per step and per token).

What it does not measure: multi-device sharding (FSDP on GPUs, the TPU mesh), splash or
flash attention on the JAX side (Tunix's flash path is a TPU kernel, so JAX runs dense
attention here), data loading on the JAX side (the batch is the same host array each step,
copied to the device inside the timed step), checkpointing and evaluation, and a TPU. The
GPU recipe here is one process on one device, without accelerate's FSDP wrapper. Written
by hand: only the timing and the FLOP count; every step it times is Tunix's, Qwix's,
optax's, TRL's, PEFT's and transformers' own.

    .venv/bin/python benchmarks/train_step_bench.py --preset tiny     # CPU: 1.5-3.5 min on 2 busy cores
    .venv/bin/python benchmarks/train_step_bench.py --preset small --seq-len 256   # the committed CPU result
    bash benchmarks/device/run_train_step_bench.sh                     # a GPU host (see that script)
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import train_step_stacks as stacks  # beside this file
from train_step_stacks import REPO, BenchSpec, compute_preset, model_flops_per_step, storage_preset

RESULTS = REPO / "benchmarks" / "results"
ENV_AT_START = dict(os.environ)  # what the child processes start from
LOAD_AT_START = list(os.getloadavg())


def peak_flops(device_kind: str, dtype: str, measured: float) -> tuple[float, str]:
    """The MFU denominator: the hardware table's bf16 peak for a known chip, else the best matmul rate
    either stack measured (``train_step_stacks._matmul_rate``)."""
    from cookbook import core

    chip = core.chip_of(device_kind)
    if chip is not None and dtype == "bfloat16":
        return core.CHIPS[chip].bf16_flops, f"datasheet bf16 peak of {chip} (cookbook.core.CHIPS)"
    return measured, (
        f"the better of the two stacks' measured {dtype} 1024^3 matmul rates (no datasheet peak for "
        f"{device_kind!r} in {dtype}); a loaded host's rate, so MFU here is relative, not absolute"
    )


# --------------------------------------------------------------------------------------
# The run: base checkpoint, the two stacks in their own processes, the tables


def child_env(spec: BenchSpec, side: str) -> dict[str, str]:
    env = dict(ENV_AT_START)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["PYTHONUNBUFFERED"] = "1"
    if spec.device == "cpu":
        # One device (no fake 8-device host), the same thread count for both stacks.
        flags = [f for f in env.get("XLA_FLAGS", "").split() if "force_host_platform_device_count" not in f]
        if spec.threads == 1:
            flags.append("--xla_cpu_multi_thread_eigen=false")
        env["XLA_FLAGS"] = " ".join(flags)
        env["JAX_PLATFORMS"] = "cpu"
        env["OMP_NUM_THREADS"] = str(spec.threads)
    elif side == "jax":
        env.pop("JAX_PLATFORMS", None)
        env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.92")  # the other stack has exited
    else:
        env["JAX_PLATFORMS"] = "cpu"  # the torch process builds tokens with JAX: keep it off the GPU
    return env


def run_side(spec: BenchSpec, side: str, work: Path, timeout_s: float | None) -> dict[str, Any]:
    """Run one stack in its own process; its result, or what it printed when it failed."""
    t0 = time.perf_counter()
    cmd = [sys.executable, str(Path(stacks.__file__).resolve()), side, str(work)]
    proc = subprocess.Popen(
        cmd, env=child_env(spec, side), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    tail: collections.deque[str] = collections.deque(maxlen=60)

    def pump() -> None:  # the child's progress, live (a device log shows where a slow run is)
        for line in proc.stdout:
            tail.append(line)
            print(f"[{side}] {line}", end="", flush=True)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=timeout_s)
        failed = f"exited {rc}" if rc else None
    except subprocess.TimeoutExpired:  # the run's time limit: keep what it finished
        proc.kill()
        proc.wait()
        failed = f"was stopped after {timeout_s:.0f} s (--time-limit-s)"
    reader.join(timeout=10)
    out = work / f"{side}.json"
    if failed or not out.is_file():
        partial = work / f"{side}.partial.json"
        return {
            **(json.loads(partial.read_text()) if partial.is_file() else {}),
            "error": f"the {side} process {failed or 'wrote no result'}",
            "output_tail": "".join(tail)[-4000:],
            "wall_s": time.perf_counter() - t0,
        }
    result = json.loads(out.read_text())
    result["wall_s"] = time.perf_counter() - t0
    return result


def stack_row(
    spec: BenchSpec,
    *,
    step_s: float | None,
    peak_bytes: float | None,
    peak_source: str,
    loss: float | None,
    flops: float,
    peak: float,
) -> dict[str, Any]:
    tokens = spec.batch_size * spec.seq_len
    ok = bool(step_s)
    return {
        "step_s": step_s,
        "tokens_per_s": tokens / step_s if ok else None,
        "peak_memory_bytes": peak_bytes,
        "peak_memory_source": peak_source,
        "first_step_loss": loss,
        "mfu": flops / step_s / peak if ok and peak else None,
    }


def rank_check(
    layouts: list[dict[str, Any]], peak: float, planner_mfu: float, hbm_bytes_per_s: float | None
) -> dict[str, Any]:
    """Does the compiler's estimate order the layouts as the measurements do (per step, per token)?

    The planner's estimate is ``cost_analysis()`` FLOPs / (peak x its assumed MFU), so it
    ranks by FLOPs alone; where the chip's memory bandwidth is in the hardware table, a
    roofline (the larger of FLOPs / peak and bytes accessed / bandwidth) is ranked too.
    """
    done = [x for x in layouts if "error" not in x]
    for x in done:
        x["planner_estimate_s"] = x["xla_flops"] / (peak * planner_mfu) if peak else None
        x["measured_s_per_token"] = x["step_s"] / x["tokens_per_step"]
        x["estimated_s_per_token"] = x["xla_flops"] / x["tokens_per_step"] / (peak * planner_mfu) if peak else None
        if hbm_bytes_per_s and peak:
            x["roofline_s"] = max(x["xla_flops"] / peak, x["xla_bytes_accessed"] / hbm_bytes_per_s)

    def verdict(est_key: str, meas_key: str) -> dict[str, Any]:
        names = [f"{x['remat']}/b{x['batch_size']}" for x in done]
        est = [x[est_key] or 0.0 for x in done]
        meas = [x[meas_key] for x in done]
        pairs = [(i, j) for i in range(len(done)) for j in range(i + 1, len(done))]
        # A pair counts as agreeing when both orders say the same; a tie in the estimate
        # (same FLOPs) agrees with nothing.
        agree = sum(1 for i, j in pairs if (est[i] - est[j]) * (meas[i] - meas[j]) > 0)
        return {
            "estimate_order": [names[k] for k in sorted(range(len(done)), key=lambda k: est[k])],
            "measured_order": [names[k] for k in sorted(range(len(done)), key=lambda k: meas[k])],
            "pairs_agreeing": agree,
            "pairs": len(pairs),
            "same_order": bool(pairs) and agree == len(pairs),
        }

    out = {
        "per_step": verdict("xla_flops", "step_s"),
        "per_token": verdict("estimated_s_per_token", "measured_s_per_token"),
    }
    if done and "roofline_s" in done[0]:
        out["roofline_per_step"] = verdict("roofline_s", "step_s")
    return {
        **out,
        "estimate": f"planner: XLA cost_analysis FLOPs / (peak x planner MFU {planner_mfu:g}); "
        "the ranking is by FLOPs alone",
    }


def parse_layouts(text: str, remat: str, batch: int) -> tuple[tuple[str, int], ...]:
    """``"none:1,decoder:2"`` -> ((remat, batch), ...). Empty: the main layout, the other of
    remat none/decoder, and both at twice the micro-batch."""
    if not text:
        other = "decoder" if remat == "none" else "none"
        return ((remat, batch), (other, batch), (remat, 2 * batch), (other, 2 * batch))
    out = []
    for item in text.split(","):
        name, _, size = item.strip().partition(":")
        out.append((name, int(size or batch)))
    return tuple(dict.fromkeys(out))


def main(argv: list[str] | None = None) -> int:
    from cookbook import core

    core.compat.install()  # the library patches every cookbook entry point installs (setup_runtime_env)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny", help="model preset; gemma4_31b = a random twin of its widths")
    parser.add_argument("--num-layers", type=int, default=None, help="depth of the random twin")
    parser.add_argument(
        "--dtype",
        default=None,
        choices=("bfloat16", "float32"),
        help="default: bfloat16 on a GPU, float32 on a CPU (bf16 is emulated on CPUs)",
    )
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--rank", type=int, default=64)
    parser.add_argument("--alpha", type=float, default=64.0)
    parser.add_argument("--remat", default="none", help="main layout: JAX remat = PyTorch gradient checkpointing")
    parser.add_argument(
        "--layouts",
        default="",
        help="REMAT:BATCH,... for the estimate table (default: remat none/decoder x batch b/2b)",
    )
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per measurement (median reported)")
    parser.add_argument("--threads", type=int, default=1, help="CPU only: threads and cores per stack")
    parser.add_argument(
        "--time-limit-s",
        type=float,
        default=None,
        help="finish within this many seconds: extra layouts are skipped, a stack still running is "
        "stopped, and the JSON holds what was measured",
    )
    parser.add_argument(
        "--torch-reserve-s",
        type=float,
        default=150.0,
        help="with --time-limit-s: the JAX process starts no extra layout that would leave the "
        "PyTorch one less than this, and is stopped if it would leave it less than half",
    )
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="JSON path (default: benchmarks/results/train_step_bench_<cpu|gpu chip>.json)",
    )
    args = parser.parse_args(argv)

    device = args.device
    if device == "auto":
        import torch

        device = "gpu" if torch.cuda.is_available() else "cpu"
    os.environ["JAX_PLATFORMS"] = "cpu"  # this process only builds the checkpoint and tokens
    layouts = parse_layouts(args.layouts, args.remat, args.batch_size)
    spec = BenchSpec(
        preset=args.preset,
        num_layers=args.num_layers,
        dtype=args.dtype,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        rank=args.rank,
        alpha=args.alpha,
        remat=args.remat,
        layouts=layouts,
        warmup_steps=args.warmup_steps,
        steps=args.steps,
        threads=args.threads,
        device=device,
        jax_deadline=time.time() + args.time_limit_s - args.torch_reserve_s if args.time_limit_s else None,
    )
    from cookbook import fit, models

    start = time.perf_counter()

    def left(reserve: float = 0.0) -> float | None:
        return max(args.time_limit_s - (time.perf_counter() - start) - reserve, 1.0) if args.time_limit_s else None

    timings: dict[str, float] = {}
    base_dir = models.ensure_base(storage_preset(spec))
    timings["base_checkpoint_s"] = time.perf_counter() - start
    print(f"base checkpoint {base_dir} ({timings['base_checkpoint_s']:.0f} s)", flush=True)
    out = args.out
    with tempfile.TemporaryDirectory(prefix="train-step-bench-") as tmp:
        work = Path(tmp)
        (work / "spec.json").write_text(json.dumps(dataclasses.asdict(spec)))
        (work / "base.json").write_text(json.dumps({"base_dir": str(base_dir)}))
        jax_res = run_side(spec, "jax", work, left(args.torch_reserve_s / 2))
        timings["jax_process_s"] = jax_res["wall_s"]
        print(
            f"JAX process done ({jax_res['wall_s']:.0f} s){': ' + jax_res['error'] if 'error' in jax_res else ''}",
            flush=True,
        )
        result = assemble(spec, jax_res, {"error": "not run yet"}, fit.DEFAULT_MFU, base_dir, timings)
        out = out or RESULTS / f"train_step_bench_{result['device']['label']}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2))  # kept if this process is stopped from outside
        torch_res = run_side(spec, "torch", work, left())
    timings["torch_process_s"] = torch_res["wall_s"]
    result = assemble(spec, jax_res, torch_res, fit.DEFAULT_MFU, base_dir, timings)
    out.write_text(json.dumps(result, indent=2))
    print_tables(result)
    print(f"wrote {out}")
    return 0 if "error" not in jax_res and "error" not in torch_res else 1


def assemble(
    spec: BenchSpec, jax_res: dict, torch_res: dict, planner_mfu: float, base_dir: Path, timings: dict[str, float]
) -> dict[str, Any]:
    from cookbook import core

    p = compute_preset(spec)
    flops = model_flops_per_step(spec)
    kind = jax_res.get("device_kind") or ("cpu" if spec.device == "cpu" else "gpu")
    peak, peak_source = peak_flops(
        kind,
        spec.compute_dtype,
        max(jax_res.get("matmul_flops_per_s") or 0.0, torch_res.get("matmul_flops_per_s") or 0.0),
    )
    main = next((x for x in jax_res.get("layouts", []) if "error" not in x), None)
    main = main if main and (main["remat"], main["batch_size"]) == (spec.remat, spec.batch_size) else None
    gpu = spec.device == "gpu"
    jax_peak = (main or {}).get("device_peak_bytes")
    jax_row = stack_row(
        spec,
        step_s=main and main["step_s"],
        loss=main and main["losses"][0],
        flops=flops["flops"],
        peak=peak,
        peak_bytes=jax_peak if jax_peak else (main or {}).get("compiled_bytes"),
        peak_source="device memory_stats peak_bytes_in_use"
        if jax_peak
        else "compiled memory_analysis: arguments + outputs - aliased + temporaries (device reports no peak)",
    )
    torch_row = stack_row(
        spec,
        step_s=torch_res.get("step_s"),
        loss=(torch_res.get("losses") or [None])[0],
        flops=flops["flops"],
        peak=peak,
        peak_bytes=torch_res.get("peak_bytes") if gpu else torch_res.get("peak_rss_bytes"),
        peak_source="torch.cuda.max_memory_allocated" if gpu else "process peak RSS (host memory, model load included)",
    )
    jax_row.update({k: jax_res.get(k) for k in ("lora_params", "lora_dtype", "load_s", "apply_lora_s")})
    jax_row["process_peak_rss_bytes"] = jax_res.get("peak_rss_bytes")
    torch_row["process_peak_rss_bytes"] = torch_res.get("peak_rss_bytes")
    if main:  # the compiler's own FLOP count (remat recompute and masked attention included) over peak
        jax_row.update(
            compiled_bytes=main["compiled_bytes"],
            device_peak_before_steps_bytes=main.get("device_peak_before_steps_bytes"),
            compile_s=main["compile_s"],
            step_times_s=main["step_times_s"],
            xla_flops=main["xla_flops"],
            hfu_xla_flops=main["xla_flops"] / main["step_s"] / peak if peak else None,
        )
    jax_row["attention"] = "Tunix dense attention (its flash path is a TPU kernel)"
    torch_row.update(
        {
            k: torch_res.get(k)
            for k in (
                "inside_step_s",
                "step_times_s",
                "attn_implementation",
                "gradient_checkpointing",
                "bf16_autocast",
                "trainable_params",
                "same_tokens_as_jax",
                "setup_s",
            )
        }
    )
    ratio = _ratio(jax_row["tokens_per_s"], torch_row["tokens_per_s"])
    if gpu and jax_peak:
        mem_pair, mem_what = (jax_peak, torch_row["peak_memory_bytes"]), "device peak bytes (JAX allocator vs torch)"
    else:  # a CPU has no device allocator to ask: compare like with like, the whole process
        mem_pair = (jax_row["process_peak_rss_bytes"], torch_row["process_peak_rss_bytes"])
        mem_what = "process peak RSS (imports, model load and steps)"
    layouts = jax_res.get("layouts", [])
    chip_name = core.chip_of(kind) if gpu else None
    chip = core.CHIPS[chip_name] if chip_name else None
    label = "cpu" if not gpu else (chip_name or kind.lower().replace(" ", "_"))
    return core.to_jsonable(
        {
            "what": "one LoRA train step, Tunix + Qwix (JAX) vs the GPU recipe (transformers + PEFT + TRL), "
            "same model, weights, tokens, batch, LoRA; median of timed steps after warm-up",
            "measured": True,
            "device": {
                "label": label,
                "kind": spec.device,
                "name": kind,
                "torch_name": torch_res.get("device_name"),
                "peak_flops": peak,
                "peak_flops_source": peak_source,
                "matmul_flops_per_s": {
                    "jax": jax_res.get("matmul_flops_per_s"),
                    "torch": torch_res.get("matmul_flops_per_s"),
                },
                "threads_per_stack": spec.threads if not gpu else None,
                "load_average_at_start": LOAD_AT_START,
                "load_average_1_5_15": list(os.getloadavg()),
                "load_average_per_stack": {
                    k: [r.get("load_average_start"), r.get("load_average_end")]
                    for k, r in (("jax", jax_res), ("torch", torch_res))
                },
                "cpu_count": os.cpu_count(),
            },
            "model": {
                "preset": spec.preset,
                "name": p.name,
                "num_layers": p.num_layers,
                "embed_dim": p.embed_dim,
                "hidden_dim": p.hidden_dim,
                "num_heads": p.num_heads,
                "head_dim": p.head_dim,
                "vocab_size": p.vocab_size,
                "params": p.num_params(),
                "dtype": spec.compute_dtype,
                "random_twin_of_released_widths": models_is_twin(spec),
                "base_dir": str(base_dir),
            },
            "step": {
                "batch_size": spec.batch_size,
                "seq_len": spec.seq_len,
                "tokens_per_step": spec.batch_size * spec.seq_len,
                "remat": spec.remat,
                "lora": {"rank": spec.rank, "alpha": spec.alpha, "dropout": 0.0, "targets": "all 7 projections"},
                "warmup_steps": spec.warmup_steps,
                "timed_steps": spec.steps,
                "grad_accum": 1,
            },
            "flops": {**flops, "definition": model_flops_per_step.__doc__.split("\n\n")[1].strip()},
            "jax": jax_row,
            "torch": torch_row,
            "ratio_jax_over_torch": {
                "tokens_per_s": ratio,
                "peak_memory": _ratio(*mem_pair),
                "peak_memory_compared": mem_what,
            },
            "layouts": layouts,
            "estimate_ranking": rank_check(layouts, peak, planner_mfu, chip.hbm_bytes_per_s if chip else None),
            "errors": {
                k: {"error": r["error"], "output_tail": r.get("output_tail")}
                for k, r in (("jax", jax_res), ("torch", torch_res))
                if "error" in r
            },
            "timings_s": timings,
            "versions": {
                **(jax_res.get("versions") or {}),
                **(torch_res.get("versions") or {}),
                "python": platform.python_version(),
            },
            "command": " ".join(sys.argv),
        }
    )


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def models_is_twin(spec: BenchSpec) -> bool:
    from cookbook import models

    return models.get_preset(spec.preset).hf_checkpoint is not None


def print_tables(r: dict[str, Any]) -> None:
    def fmt(v, spec=".3g"):
        return "-" if v is None else format(v, spec)

    m, s = r["model"], r["step"]
    print(
        f"{m['name']}: {m['num_layers']} layers, embed {m['embed_dim']}, vocab {m['vocab_size']}, {m['dtype']}; "
        f"batch {s['batch_size']} x {s['seq_len']} tokens, LoRA rank {s['lora']['rank']}, remat {s['remat']}; "
        f"{r['device']['name']}"
    )
    print(f"{'stack':34} {'step s':>9} {'tok/s':>10} {'peak GiB':>9} {'MFU':>7} {'loss@1':>9}")
    for key, name in (("jax", "(a) Tunix + Qwix, JAX"), ("torch", "(b) GPU recipe: TRL + PEFT, torch")):
        row = r[key]
        gib = row["peak_memory_bytes"] / 2**30 if row["peak_memory_bytes"] else None
        print(
            f"{name:34} {fmt(row['step_s']):>9} {fmt(row['tokens_per_s'], ',.0f'):>10} {fmt(gib):>9} "
            f"{fmt(row['mfu'], '.1%'):>7} {fmt(row['first_step_loss'], '.5f'):>9}"
        )
    print(
        f"ratio (a)/(b) tokens/s: {fmt(r['ratio_jax_over_torch']['tokens_per_s'])}; "
        f"MFU peak: {r['device']['peak_flops_source']}"
    )
    print(f"\n{'layout':16} {'XLA GFLOP':>11} {'estimate s':>11} {'measured s':>11} {'meas s/tok':>11}")
    for x in r["layouts"]:
        name = f"{x['remat']}/b{x['batch_size']}"
        if "error" in x:
            print(f"{name:16} {x['error'][:70]}")
            continue
        print(
            f"{name:16} {x['xla_flops'] / 1e9:>11.3f} {fmt(x.get('planner_estimate_s')):>11} "
            f"{x['step_s']:>11.4f} {x['measured_s_per_token']:>11.2e}"
        )
    for k, v in r["estimate_ranking"].items():
        if isinstance(v, dict):
            print(
                f"rank {k}: estimate {v['estimate_order']} vs measured {v['measured_order']}: "
                f"{v['pairs_agreeing']}/{v['pairs']} pairs agree"
            )
    for k, e in r["errors"].items():
        print(f"{k} FAILED: {e['error']}\n{e['output_tail']}")


if __name__ == "__main__":
    sys.exit(main())
