"""The two stacks of ``train_step_bench.py``, each run in a process of its own: the shared spec, model and tokens.

``python benchmarks/train_step_stacks.py {jax|torch} WORK`` reads ``WORK/spec.json`` (a
:class:`BenchSpec`) and ``WORK/base.json`` (the base checkpoint), measures one stack and
writes ``WORK/<stack>.json`` (the JAX side also ``WORK/jax.partial.json`` as it goes, so a
run stopped by its time limit keeps what it measured). ``train_step_bench.py`` starts them
one after the other, so neither holds device memory while the other is measured. Written
by hand: the timing loop, the rows of long conversations and the analytic FLOP count;
the steps timed are Tunix's, Qwix's, optax's, TRL's, PEFT's and transformers' own.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # this checkout's cookbook, also under another install


# --------------------------------------------------------------------------------------
# The run's spec, and what both stacks share: model, config, tokens, FLOP count


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchSpec:
    """One benchmark run: the model, the step's shapes, the layouts, the device."""

    preset: str = "tiny"  # a cookbook.models preset; a released one becomes a random twin of its widths
    num_layers: int | None = None  # depth override (a twin with the released widths and this many layers)
    dtype: str | None = None  # None: bfloat16 on a GPU, float32 on a CPU
    batch_size: int = 1
    seq_len: int = 128
    rank: int = 64
    alpha: float = 64.0
    remat: str = "none"  # the main layout's remat (JAX) = gradient checkpointing (PyTorch)
    layouts: tuple[tuple[str, int], ...] = ()  # (remat, micro-batch) for the estimate table
    warmup_steps: int = 2
    steps: int = 5
    threads: int = 1  # CPU only: threads (and cores) each stack may use
    jax_deadline: float | None = None  # unix time: the JAX process starts no extra layout it cannot finish by then
    device: str = "cpu"  # "cpu" or "gpu"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.warmup_steps < 1 or self.steps < 1:
            raise ValueError(f"need warmup_steps >= 1 and steps >= 1 (got {self.warmup_steps}, {self.steps})")
        if self.device not in ("cpu", "gpu"):
            raise ValueError(f"device={self.device!r}: use 'cpu' or 'gpu'")

    @property
    def compute_dtype(self) -> str:
        return self.dtype or ("bfloat16" if self.device == "gpu" else "float32")

    @property
    def max_batch(self) -> int:
        return max([self.batch_size, *(b for _, b in self.layouts)])


def spec_from_dict(d: dict[str, Any]) -> BenchSpec:
    d = dict(d)
    d["layouts"] = tuple(tuple(x) for x in d["layouts"])
    return BenchSpec(**d)


def storage_preset(spec: BenchSpec):
    """The preset of the base checkpoint. A released preset becomes a random twin with its exact
    widths (and ``num_layers`` layers), built offline; ``tiny``/``small`` are used as they are."""
    from cookbook import models

    p = models.get_preset(spec.preset)
    layers = spec.num_layers or p.num_layers
    if p.hf_checkpoint is None and layers == p.num_layers:
        return p
    return p.with_overrides(name=f"{p.name}_widths_{layers}l", hf_checkpoint=None, num_layers=layers)


def compute_preset(spec: BenchSpec):
    return storage_preset(spec).with_overrides(dtype=spec.compute_dtype)


def train_config(spec: BenchSpec, base_dir: Path):
    """The ``TrainConfig`` both stacks are driven from (the GPU recipe is derived from it)."""
    from cookbook import data, lora, train

    steps = spec.warmup_steps + spec.steps
    return train.TrainConfig(
        # A preset object, not a name: a random twin has no registered name, and every stage
        # resolves model_preset through cookbook.models.get_preset, which passes one through.
        model_preset=compute_preset(spec),
        base_dir=str(base_dir),
        lora=lora.LoraConfig(rank=spec.rank, alpha=spec.alpha, dropout=0.0),
        data=data.DataConfig(
            seq_len=spec.seq_len, batch_size=spec.batch_size, packing=False, too_long="truncate", seed=spec.seed
        ),
        max_steps=steps,
        warmup_steps=0,  # no step at learning rate 0; AdamW either way (the JAX side: the planner's)
        learning_rate=1e-4,
        weight_decay=0.001,
        remat=spec.remat,
        param_dtype=spec.compute_dtype,
        seed=spec.seed,
    )


def long_rows(tokenizer, n: int, seq_len: int, seed: int) -> list[dict]:
    """``n`` conversations of sample-task turns, each longer than ``seq_len`` tokens."""
    from cookbook import data

    pool = iter(data.generate_rows("train", n=n * (seq_len // 20 + 16), seed=seed))
    rows = []
    for _ in range(n):
        messages: list[dict] = []
        while not messages or len(data.tokenize_chat(tokenizer, {"messages": messages})[0]) <= seq_len:
            for _ in range(8):
                messages.extend(next(pool)["messages"])
        rows.append({"messages": messages})
    return rows


def host_batch(tokenizer, rows: list[dict], seq_len: int) -> dict[str, Any]:
    """The rows as one JAX batch (``cookbook.data.model_inputs``' fields), numpy, cut at ``seq_len``."""
    import numpy as np

    from cookbook import data

    pairs = [data.tokenize_chat(tokenizer, r) for r in rows]
    tokens = np.stack([ids[:seq_len] for ids, _ in pairs]).astype(np.int32)
    mask = np.stack([m[:seq_len] for _, m in pairs]).astype(bool)
    b = len(rows)
    inputs = data.model_inputs({"input_tokens": tokens, "input_mask": mask,
                                "positions": np.broadcast_to(np.arange(seq_len, dtype=np.int32), (b, seq_len)),
                                "segment_ids": np.ones((b, seq_len), np.int32)})  # fmt: skip
    return {k: np.asarray(v) for k, v in inputs.items()}


def model_flops_per_step(spec: BenchSpec) -> dict[str, float]:
    """Analytic FLOPs of one LoRA step, the same number for both stacks (the MFU numerator).

    Per token: every frozen projection (q, k, v where it exists, o, gate, up, down) and the
    tied LM head cost 2 x params forward + 2 x params for the input gradient, and no weight
    gradient (the base is frozen): 4 x params. Every LoRA parameter costs 6 (forward, input
    and weight gradients), counted as Qwix holds them (one ``A`` for K and V). Attention: QK^T
    and PV over the keys each query really sees (causal, capped at the sliding window),
    forward 4 x heads x head_dim per key, backward twice that. Elementwise work, norms,
    softmax and remat's recomputation are not counted (the usual MFU convention), so MFU
    is useful work per second over peak, comparable across stacks and layouts.
    """
    from cookbook import lora

    p = compute_preset(spec)
    b, t = spec.batch_size, spec.seq_len
    d, n = p.embed_dim, p.num_heads
    frozen = p.vocab_size * d  # the tied embedding as LM head
    attention = 0.0
    for kind in p.layer_kinds:
        glob = kind == "global"
        hd = p.global_head_dim if glob else p.head_dim
        kv = p.effective_global_kv_heads if glob else p.num_kv_heads
        kv_mats = 1 if glob and p.k_eq_v_global else 2
        frozen += d * n * hd * 2 + d * kv * hd * kv_mats + 3 * d * p.hidden_dim
        window = t if glob else min(t, p.sliding_window)
        keys = sum(min(i + 1, window) for i in range(t))  # keys seen, summed over queries
        attention += 3 * 4 * n * hd * keys
    lora_params = lora.expected_lora_params(p, lora.LoraConfig(rank=spec.rank, alpha=spec.alpha))
    per_token = 4 * frozen + 6 * lora_params
    return {
        "flops": b * (t * per_token + attention),
        "frozen_matmul_params": frozen,
        "lora_params": lora_params,
        "attention_flops": b * attention,
    }


def _median_steps(times: list[float], warmup: int) -> float:
    return statistics.median(times[warmup:])


def _pin_cpu(spec: BenchSpec) -> None:
    if spec.device == "cpu" and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))[: spec.threads]
        os.sched_setaffinity(0, cores)


# --------------------------------------------------------------------------------------
# (a) JAX: the planner's lowering of the one train step, run on the real weights


def run_jax(spec: BenchSpec, work: Path) -> dict[str, Any]:
    import jax
    import numpy as np
    from flax import nnx

    from cookbook import core, data, fit, models
    from cookbook import lora as lora_lib
    from cookbook import mesh as mesh_lib

    _pin_cpu(spec)
    device = jax.devices()[0]
    if (device.platform == "gpu") != (spec.device == "gpu"):
        raise RuntimeError(
            f"asked for device={spec.device!r} but JAX's first device is {device} "
            "(on a GPU host, install jax with CUDA; on a CPU host pass --device cpu)"
        )
    info: dict[str, Any] = {
        "device_kind": device.device_kind,
        "platform": device.platform,
        "load_average_start": list(os.getloadavg()),
        "matmul_flops_per_s": _matmul_rate_jax(spec),
    }
    (work / "jax.partial.json").write_text(json.dumps(info))  # the MFU denominator, even if the rest fails
    base_dir = Path(json.loads((work / "base.json").read_text())["base_dir"])
    preset = compute_preset(spec)
    lora_cfg = train_config(spec, base_dir).lora
    t0 = time.perf_counter()
    model = models.load_tunix_model(base_dir, storage_preset(spec), dtype=spec.compute_dtype)
    load_s = time.perf_counter() - t0
    model = lora_lib.apply_lora(model, lora_cfg, preset=preset, seed=spec.seed)
    _, lora_state, rest = nnx.split(model, nnx.LoRAParam, ...)
    del model
    lora_params = int(sum(x.size for x in jax.tree.leaves(lora_state)))
    lora_dtype = str(np.dtype(jax.tree.leaves(lora_state)[0].dtype))
    # Every layout starts from this state (B = 0): a layout that fails after its inputs were
    # donated cannot take the next one's with it.
    lora_start = jax.device_get(lora_state)
    del lora_state
    apply_s = time.perf_counter() - t0 - load_s
    print(
        f"loaded the base in {load_s:.0f} s, applied LoRA ({lora_params:,} parameters) in {apply_s:.0f} s", flush=True
    )
    mesh = mesh_lib.make_mesh(1, 1, devices=[device])
    tokenizer = data.load_tokenizer(base_dir=base_dir)
    rows = long_rows(tokenizer, spec.max_batch, spec.seq_len, spec.seed)
    layouts = [(spec.remat, spec.batch_size), *[x for x in spec.layouts if x != (spec.remat, spec.batch_size)]]
    info.update(load_s=load_s, apply_lora_s=apply_s)
    results, peak, before, last_s = [], None, {}, 0.0
    for i, (remat, batch) in enumerate(layouts):
        t_layout = time.perf_counter()
        if i and spec.jax_deadline is not None and time.time() + last_s > spec.jax_deadline:
            results.append(
                {
                    "remat": remat,
                    "batch_size": batch,
                    "error": f"skipped: the last layout took {last_s:.0f} s, more than the time left",
                }
            )
            continue
        plan_cfg = fit.PlanConfig(model_preset=spec.preset, slice_name="local", batch_size=batch,
                                  seq_len=spec.seq_len, remat=remat, lora=lora_cfg, param_dtype=spec.compute_dtype,
                                  learning_rate=1e-4, weight_decay=0.001)  # fmt: skip
        try:
            t0 = time.perf_counter()
            lowered, _ = fit.lower_train_step(plan_cfg, mesh, preset)
            with core.compile_cache_off():  # compile_s is reported
                compiled = lowered.compile()
            compile_s = time.perf_counter() - t0
            print(f"layout remat={remat} batch={batch}: lowered and compiled in {compile_s:.0f} s", flush=True)
            shardings = compiled.input_shardings[0]
            lora_state = jax.device_put(lora_start, shardings[0])
            rest = jax.device_put(rest, shardings[1])
            # the planner's optimizer, on the real LoRA state
            opt_state = jax.device_put(fit.plan_optimizer(plan_cfg).init(lora_state), shardings[2])
            batch_np = host_batch(tokenizer, rows[:batch], spec.seq_len)
            if i == 0:  # what loading and LoRA left behind, to tell the step's peak from theirs
                before = device.memory_stats() or {}
            times, losses = [], []
            for _ in range(spec.warmup_steps + spec.steps):
                t0 = time.perf_counter()
                lora_state, opt_state, loss = compiled(
                    lora_state, rest, opt_state, jax.device_put(batch_np, shardings[3])
                )
                jax.block_until_ready((lora_state, opt_state, loss))
                times.append(time.perf_counter() - t0)
                losses.append(float(loss))
        except Exception as e:  # a layout that does not fit or compile here: say so and go on
            results.append({"remat": remat, "batch_size": batch, "error": fit.compiler_reason(e)})
            print(f"layout remat={remat} batch={batch} failed: {results[-1]['error']}", flush=True)
            last_s = time.perf_counter() - t_layout
            (work / "jax.partial.json").write_text(json.dumps({**info, "layouts": results}))
            continue
        finally:
            lora_state = opt_state = None  # free the device copies before the next layout
        if i == 0:
            peak = (device.memory_stats() or {}).get("peak_bytes_in_use")
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list | tuple) else cost
        mem = compiled.memory_analysis()
        results.append(
            {
                "remat": remat,
                "batch_size": batch,
                "tokens_per_step": batch * spec.seq_len,
                "compile_s": compile_s,
                "step_times_s": times,
                "step_s": _median_steps(times, spec.warmup_steps),
                "losses": losses,
                "xla_flops": float(cost.get("flops", 0.0)),
                "xla_bytes_accessed": float(cost.get("bytes accessed", 0.0)),
                "xla_optimal_seconds": cost.get("optimal_seconds"),
                "compiled_bytes": int(
                    mem.argument_size_in_bytes
                    + mem.output_size_in_bytes
                    - mem.alias_size_in_bytes
                    + mem.temp_size_in_bytes
                ),
                "compiled_temp_bytes": int(mem.temp_size_in_bytes),
            }
        )
        if i == 0:
            results[0].update(
                device_peak_bytes=peak,
                device_peak_before_steps_bytes=before.get("peak_bytes_in_use"),
                device_in_use_before_steps_bytes=before.get("bytes_in_use"),
            )
        last_s = time.perf_counter() - t_layout
        print(f"  median step {results[-1]['step_s']:.4f} s; loss {losses[0]:.5f} -> {losses[-1]:.5f}", flush=True)
        (work / "jax.partial.json").write_text(json.dumps({**info, "layouts": results}))
    return {
        **info,
        "layouts": results,
        "lora_params": lora_params,
        "lora_dtype": lora_dtype,
        "load_average_end": list(os.getloadavg()),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "versions": _versions("jax", "jaxlib", "flax", "optax", "google-tunix", "qwix"),
    }


def _matmul_rate_jax(spec: BenchSpec) -> float:
    import jax
    import jax.numpy as jnp

    f = jax.jit(lambda x: x @ x)
    return _matmul_rate(spec, lambda a: f(a).block_until_ready(), lambda n: jnp.ones((n, n), spec.compute_dtype))


def _matmul_rate(spec: BenchSpec, matmul, make, sync=lambda: None) -> float:
    """The best of five square matmuls, FLOP/s: what this stack gets from the device in ``spec``'s dtype
    (the MFU denominator where the hardware table has no peak, e.g. a CPU)."""
    n = 8192 if spec.device == "gpu" else 1024
    a = make(n)
    matmul(a)
    sync()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        matmul(a)
        sync()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


# --------------------------------------------------------------------------------------
# (b) PyTorch: the GPU recipe's train_gpu.py, its SFTTrainer, timed between optimizer steps


def run_torch(spec: BenchSpec, work: Path) -> dict[str, Any]:
    import torch
    from transformers import TrainerCallback

    from cookbook import data, gpu

    _pin_cpu(spec)
    load_start = list(os.getloadavg())
    on_gpu = spec.device == "gpu"
    if on_gpu and not torch.cuda.is_available():
        raise RuntimeError("asked for device='gpu' but torch.cuda.is_available() is False")
    if not on_gpu:
        torch.set_num_threads(spec.threads)
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    matmul = _matmul_rate(
        spec,
        lambda x: x @ x,
        lambda n: torch.ones((n, n), dtype=getattr(torch, spec.compute_dtype), device="cuda" if on_gpu else "cpu"),
        sync,
    )
    base_dir = Path(json.loads((work / "base.json").read_text())["base_dir"])
    config = train_config(spec, base_dir)
    bf16 = spec.compute_dtype == "bfloat16"  # the recipe's bf16 weights and autocast, on a CPU too
    recipe = gpu.derive_gpu_recipe(config, cluster=gpu.GpuCluster(num_gpus=1, bf16=bf16), base_model=str(base_dir))
    gpu.write_gpu_recipe(work / "recipe", recipe)
    script = gpu.import_train_script(work / "recipe")
    tokenizer = data.load_tokenizer(base_dir=base_dir)
    rows = long_rows(tokenizer, spec.batch_size, spec.seq_len, spec.seed)
    n_steps = spec.warmup_steps + spec.steps
    overrides = {
        "report_to": "none",
        "save_strategy": "no",
        "eval_strategy": "no",
        "disable_tqdm": True,
        "train_sampling_strategy": "sequential",
        "dataloader_num_workers": 0,
        "max_steps": n_steps,
    }
    if not on_gpu:
        overrides["use_cpu"] = True

    class StepTimer(TrainerCallback):
        """Wall clock at each optimizer step's start and end, the device drained first."""

        def __init__(self):
            self.begin, self.end = [], []

        def on_step_begin(self, args, state, control, **kwargs):
            sync()
            self.begin.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            sync()
            self.end.append(time.perf_counter())

    t0 = time.perf_counter()
    trainer = script.build_trainer(
        model_path=str(base_dir),
        train_rows=rows * n_steps,
        output_dir=work / "run",
        recipe_dir=work / "recipe",
        sft_overrides=overrides,
    )
    setup_s = time.perf_counter() - t0
    print(
        f"recipe trainer built in {setup_s:.0f} s (gradient checkpointing {trainer.args.gradient_checkpointing}, "
        f"bf16 {trainer.args.bf16})",
        flush=True,
    )
    ours = host_batch(tokenizer, rows, spec.seq_len)["input_tokens"]
    theirs = [list(trainer.train_dataset[i]["input_ids"]) for i in range(len(rows))]
    timer = StepTimer()
    trainer.add_callback(timer)
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    intervals = [b - a for a, b in zip(timer.end, timer.end[1:], strict=False)]  # step k-1's end -> step k's end
    inside = [e - b for b, e in zip(timer.begin, timer.end, strict=True)]
    model = trainer.model
    return {
        "device_name": torch.cuda.get_device_name() if on_gpu else platform.processor() or "cpu",
        "setup_s": setup_s,
        "step_times_s": intervals,
        "step_s": _median_steps([0.0, *intervals], spec.warmup_steps),  # interval k ends step k
        "inside_step_s": _median_steps(inside, spec.warmup_steps),
        "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
        "same_tokens_as_jax": theirs == ours.tolist(),
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "gradient_checkpointing": bool(trainer.args.gradient_checkpointing),
        "bf16_autocast": bool(trainer.args.bf16),
        "trainable_params": int(sum(p.numel() for p in model.parameters() if p.requires_grad)),
        "peak_bytes": torch.cuda.max_memory_allocated() if on_gpu else None,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "matmul_flops_per_s": matmul,
        "load_average_start": load_start,
        "load_average_end": list(os.getloadavg()),
        "versions": _versions("torch", "transformers", "peft", "trl", "accelerate"),
    }


def _versions(*names: str) -> dict[str, str | None]:
    import importlib.metadata as md

    out: dict[str, str | None] = {}
    for n in names:
        try:
            out[n] = md.version(n)
        except md.PackageNotFoundError:
            out[n] = None
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in ("jax", "torch"):
        print("usage: train_step_stacks.py {jax|torch} WORK_DIR (started by train_step_bench.py)", file=sys.stderr)
        return 2
    side, work = argv[0], Path(argv[1])
    from cookbook import core

    core.compat.install()  # the library patches every cookbook entry point installs (setup_runtime_env)
    spec = spec_from_dict(json.loads((work / "spec.json").read_text()))
    result = (run_jax if side == "jax" else run_torch)(spec, work)
    (work / f"{side}.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
