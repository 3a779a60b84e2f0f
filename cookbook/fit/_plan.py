"""The TPU fit check: compile the real LoRA train step for a TPU slice, with no TPU and no weights.

``plan(PlanConfig(model_preset="gemma4_31b", slice_name="v5p-8", ...))`` builds the Tunix Gemma 4
model with Qwix LoRA *abstractly* (shapes and shardings only), lowers the same train step
Tunix's ``PeftTrainer`` runs (forward, Tunix's masked cross-entropy, gradients for the LoRA
parameters only, AdamW update) for the devices of a TPU topology that ``libtpu`` describes
without any chip attached (``jax.experimental.topologies``), compiles it with the real TPU
compiler and reads back per-chip memory (``memory_analysis()``) and FLOPs
(``cost_analysis()``). Written by hand because no library does this end to end; everything
it compiles is Tunix's model, Qwix's LoRA and optax's AdamW.

Traps handled here (``docs/traps.md``, traps 1-6): LoRA is applied with
remat off and flash attention off, then both are switched on (traps 1, 2; via
``cookbook.lora.apply_lora``); Tunix's activation ``shard()`` is a no-op in a CPU process, so
it is replaced by a real sharding constraint for the duration of ``.lower()`` (trap 3,
``cookbook.core.compat.tunix_activation_sharding``); the abstract model is built with JAX's tracer
error messages silenced (trap 4, ``cookbook.core.compat.fast_abstract_tracing``);
compile errors such as the splash-attention VMEM overflow come back as "does not compile
for this slice: <reason>" (trap 5); the batch must divide by fsdp (trap 6).
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
import re
import resource
import time
from pathlib import Path
from typing import Any

from cookbook import core, models
from cookbook import lora as lora_lib
from cookbook.fit import _step as step_lib
from cookbook.fit._kernels import splash_kernel_flops_per_chip
from cookbook.fit._plan_config import PlanConfig, PlanReport, report_from_dict

# The steps the planner compiles: PeftTrainer's, an RL actor update, or one token of a rollout
# (Tunix's sampler: every sequence of the batch one token further, its KV cache seq_len long).
OBJECTIVES = ("sft", "dapo", "grpo", "decode")

# --------------------------------------------------------------------------------------
# Devices and chips


def chip_figures(slice_name: str) -> dict[str, float]:
    """Per-device usable HBM bytes, bf16 peak FLOP/s and HBM bandwidth (the hardware table).

    A device is a chip, but on TPU7x, whose two TensorCores JAX shows as two devices with half
    the chip each; the compiler's memory analysis is per device, and so is this.
    """
    chip = core.get_slice(slice_name).chip
    return {
        "hbm_bytes": float(chip.device_hbm_bytes),
        "peak_flops": chip.device_bf16_flops,
        "hbm_bw": chip.device_hbm_bytes_per_s,
    }


def tpu_devices(slice_name: str) -> list:
    """The devices of a TPU slice as libtpu describes them; no TPU needs to be attached."""
    from jax.experimental import topologies

    spec = core.get_slice(slice_name)  # ValueError for unknown slices
    topology = spec.topology
    if not core.on_tpu_host():
        # No chips to guard: let several processes (pytest and a notebook kernel, or
        # parallel plans) describe topologies; libtpu otherwise allows one per host.
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        with core.libtpu_first_load_quiet():  # no chips here: libtpu's metadata complaints only
            topo = topologies.get_topology_desc(**spec.topology_desc_kwargs())
    except Exception as e:  # libtpu missing or too old
        raise RuntimeError(
            f"cannot describe TPU topology {topology!r} ({e}). "
            "Deviceless compilation needs libtpu: pip install 'jax[tpu]' or libtpu."
        ) from e
    return list(topo.devices)


# --------------------------------------------------------------------------------------
# Abstract model and train step


def _abstract_plan_model(config: PlanConfig, preset: models.ModelPreset, mesh):
    """(graphdef, lora state, other state, LoRA count), all abstract with shardings on ``mesh``.

    LoRA goes on with remat and flash attention off (``cookbook.lora.apply_lora`` checks
    the count); flash attention is switched on afterwards on the shared config (``docs/traps.md`` trap 2).
    """
    import jax
    from flax import nnx

    from cookbook import lora as lora_lib
    from cookbook.fit import _sharding as sharding

    model = lora_lib.abstract_lora_model(
        preset, config.lora, remat=config.remat, quantize=config.quantize, quant_tile=config.quant_tile
    )
    if config.flash_attention:
        models.set_flash_attention(model, config.flash_block)
    sharding.set_lora_specs(model)
    graphdef, lora_state, rest = nnx.split(model, nnx.LoRAParam, ...)
    lora_count = sum(x.size for x in jax.tree.leaves(lora_state))
    lora_abs = sharding.abstract_with_shardings(lora_state, mesh)
    rest_abs = sharding.abstract_with_shardings(rest, mesh)
    return graphdef, lora_abs, rest_abs, lora_count


def plan_optimizer(config: PlanConfig):
    """The optimizer the planner compiles: AdamW at the config's learning rate and weight decay.

    Public so that a measurement can run the planner's compiled step on real state
    (``benchmarks/train_step_bench.py``: ``plan_optimizer(config).init(lora_state)``).
    """
    import optax

    return optax.adamw(config.learning_rate, weight_decay=config.weight_decay)


def abstract_batch(batch: int, seq_len: int, mesh) -> dict[str, Any]:
    """Shapes of one training batch, sharded on ``fsdp`` like Tunix's ``shard_input``."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    def sds(shape, dtype):
        spec = PartitionSpec("fsdp", *([None] * (len(shape) - 1)))
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))

    return {
        "input_tokens": sds((batch, seq_len), jnp.int32),
        "input_mask": sds((batch, seq_len), jnp.bool_),
        "positions": sds((batch, seq_len), jnp.int32),
        "attention_mask": sds((batch, seq_len, seq_len), jnp.bool_),
    }


def abstract_rl_example(config: PlanConfig, mesh):
    """Shapes of one RL actor batch (``tunix.rl.common.TrainExample``), sharded on ``fsdp``:
    ``batch_size`` rollouts of ``seq_len - completion_len`` prompt tokens and ``completion_len``
    sampled ones, their advantages, and the reference log-probs where the objective has a KL term
    (GRPO; DAPO has none, and Tunix then runs no reference pass)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec
    from tunix.rl import common

    def sds(shape, dtype):
        spec = PartitionSpec("fsdp", *([None] * (len(shape) - 1)))
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))

    b, c = config.batch_size, config.completion_len
    p = config.seq_len - c
    return common.TrainExample(
        prompt_ids=sds((b, p), jnp.int32),
        prompt_mask=sds((b, p), jnp.int32),
        completion_ids=sds((b, c), jnp.int32),
        completion_mask=sds((b, c), jnp.int32),
        advantages=sds((b,), jnp.float32),
        ref_per_token_logps=sds((b, c), jnp.float32) if config.objective == "grpo" else None,
        old_per_token_logps=None,  # one iteration per batch: Tunix takes the current log-probs
    )


def lower_train_step(config: PlanConfig, mesh, preset: models.ModelPreset):
    """Lower (not compile) the LoRA train step for ``mesh``; returns (lowered, lora_count).

    ``config.objective`` "sft" is Tunix's ``PeftTrainer`` step; "dapo"/"grpo" the RL actor's
    update on a batch of rollouts (``cookbook.fit._step.make_rl_step``)."""
    import jax

    from cookbook.fit import _sharding as sharding

    graphdef, lora_abs, rest_abs, lora_count = _abstract_plan_model(config, preset, mesh)
    tx = plan_optimizer(config)
    opt_abs = sharding.abstract_optimizer_state(tx, lora_abs, mesh)
    if config.objective == "sft":
        batch_abs = abstract_batch(config.batch_size, config.seq_len, mesh)
        step = step_lib.make_train_step(graphdef, tx)
    else:
        batch_abs = abstract_rl_example(config, mesh)
        algo = step_lib.rl_algo_config(config.objective, group=16)  # CodeV-R1's; it shapes nothing in the step
        step = step_lib.make_rl_step(graphdef, tx, algo)
    out_shardings = (
        jax.tree.map(lambda x: x.sharding, lora_abs),
        jax.tree.map(lambda x: x.sharding, opt_abs),
        None,
    )
    jitted = jax.jit(step, out_shardings=out_shardings, donate_argnums=(0, 2))
    on_cpu = mesh.devices.flat[0].platform == "cpu"  # else the program a TPU host runs: Qwix's own gradients
    with (
        core.compat.tunix_activation_sharding(mesh, config.patch_activation_sharding),
        models.remat_policy(config.remat),
        core.compat.qwix_lora_grads_as_is(not on_cpu),
    ):
        lowered = jitted.lower(lora_abs, rest_abs, opt_abs, batch_abs)
    return lowered, lora_count


def lower_decode_step(config: PlanConfig, mesh, preset: models.ModelPreset):
    """Lower one decoding step of Tunix's sampler (``Sampler._sample_step``'s model call): each of
    ``batch_size`` sequences one token further against a KV cache of ``seq_len`` (the model's own
    ``init_cache``), the LoRA policy as the RL rollout samples it. Returns (lowered, lora_count)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec

    graphdef, lora_abs, rest_abs, lora_count = _abstract_plan_model(config, preset, mesh)
    b, t = config.batch_size, config.seq_len
    model = nnx.merge(graphdef, lora_abs, rest_abs)
    cache_shapes = jax.eval_shape(lambda: model.init_cache(b, t, jnp.bfloat16))

    def batch_sharded(x):
        spec = PartitionSpec("fsdp", *([None] * (x.ndim - 1))) if x.ndim else PartitionSpec()
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, spec))

    cache_abs = jax.tree.map(batch_sharded, cache_shapes)
    token = batch_sharded(jax.ShapeDtypeStruct((b, 1), jnp.int32))
    mask = batch_sharded(jax.ShapeDtypeStruct((b, 1, t), jnp.bool_))

    def decode(lora, rest, cache, last_token, positions, attention_mask):
        step_model = nnx.merge(graphdef, lora, rest)
        return step_model(last_token, positions=positions, cache=cache, attention_mask=attention_mask)

    jitted = jax.jit(decode, donate_argnums=(2,))
    with core.compat.tunix_activation_sharding(mesh, config.patch_activation_sharding):
        lowered = jitted.lower(lora_abs, rest_abs, cache_abs, token, token, mask)
    return lowered, lora_count


def argument_bytes_floor(config: PlanConfig) -> int:
    """A floor of ``config``'s HBM per device, from the lowered step alone (nothing compiled).

    The step's arguments (the frozen base, LoRA, the optimizer state, the batch) are in HBM for
    the whole step. Their bytes, summed over the lowered program's abstract arguments, divided by
    the devices, are at most what the busiest device holds: sharding spreads them, replication only
    adds, and the compiler adds outputs, temporaries and code on top. So when this floor exceeds a
    device's HBM the configuration cannot fit, however the compile would go. For a program this
    host cannot compile (its RAM, not the TPU's, runs out) it decides the misfit; it says nothing
    about a fit. Lowering 31B at full depth takes about 11 s and little memory here; its compile
    was killed at 24 GB. Measured: 31B nf4 on v5e-1 at 6 layers, 4.2923 GiB lowered against the
    compiler's 4.2940 (its padding)."""
    import math

    import jax

    fsdp, tp = precheck(config)
    devices = tpu_devices(config.slice_name)
    lowered, _ = lower_step(config, fsdp, tp, devices)
    # nf4's uint4 codes are 4 bits, not a byte
    bits = sum(math.prod(a.shape) * jax.dtypes.itemsize_bits(a.dtype) for a in jax.tree.leaves(lowered.args_info))
    return bits // 8 // len(devices)


def lower_step(config: PlanConfig, fsdp: int, tp: int, devices: list):
    """Lower ``config``'s step (train or decode) on an fsdp x tp mesh of ``devices``: (lowered, lora_count)."""
    from cookbook import mesh as mesh_lib

    lower = lower_decode_step if config.objective == "decode" else lower_train_step
    return lower(config, mesh_lib.make_mesh(fsdp, tp, devices=devices), preset_for(config))


def preset_for(config: PlanConfig) -> models.ModelPreset:
    """The model preset the plan compiles: bfloat16 unless asked otherwise, depth overridable."""
    preset = models.get_preset(config.model_preset).with_overrides(dtype=config.param_dtype or "bfloat16")
    if config.num_layers is not None:
        preset = preset.with_overrides(num_layers=config.num_layers)
    if config.num_kv_shared_layers is not None:
        preset = preset.with_overrides(num_kv_shared_layers=config.num_kv_shared_layers)
    return preset


def count_sharding_constraints(lowered) -> int:
    """Sharding constraints in the lowered step: 0 means Tunix's activation ``shard()`` was skipped."""
    text = lowered.as_text()
    return text.count("sdy.sharding_constraint") + text.count("@Sharding")


def compiler_reason(err: BaseException) -> str:
    """The compiler's own one-line reason, without the Python traceback around it."""
    text = str(err).strip()
    for pattern in (r"(\w*Oom\w*[^\n]*)", r"RESOURCE_EXHAUSTED:[^\n]*", r"INVALID_ARGUMENT:[^\n]*"):
        m = re.search(pattern, text)
        if m:
            return m.group(0)[:500]
    return (text.splitlines() or [type(err).__name__])[0][:500]


def check_config(config: PlanConfig, preset: models.ModelPreset, fsdp: int, tp: int, chips: int) -> None:
    """Reject, before compiling, what would fail deep inside JAX (with the fix in the message)."""
    from cookbook import mesh as mesh_lib

    # mesh.validate_mesh names the dimension that does not divide (heads, batch: docs/traps.md trap 6)
    mesh_lib.validate_mesh(preset, fsdp, tp, config.batch_size, num_devices=chips)
    models.get_remat_choice(config.remat)
    lora_lib.check_quant_tile(preset, config.quantize, config.quant_tile)  # QLoRA: the tile, no experts
    if config.objective not in OBJECTIVES:
        raise ValueError(f"objective {config.objective!r} is not one of {OBJECTIVES}")
    if config.objective in ("dapo", "grpo") and not 0 < config.completion_len < config.seq_len:
        raise ValueError(
            f"an RL step ({config.objective}) needs 0 < completion_len < seq_len (a prompt and a completion); "
            f"got completion_len {config.completion_len}, seq_len {config.seq_len}"
        )
    if config.objective == "decode" and config.flash_attention:
        raise ValueError(
            "a decode step attends with one query token, as Tunix's sampler does: leave flash attention off"
        )
    if config.flash_attention and config.seq_len % config.flash_block:
        raise ValueError(
            f"flash attention needs seq_len ({config.seq_len}) to be a multiple of flash_block ({config.flash_block})"
        )


def compiler_versions() -> dict[str, str | None]:
    """The versions that decide what the TPU compiler produces (cache keys, committed results)."""
    versions: dict[str, str | None] = {}
    for pkg in ("jax", "jaxlib", "libtpu", "google-tunix", "qwix", "flax", "optax"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return versions


LOWER_FAILED = "does not lower"


def plan_cache_path(config: PlanConfig) -> Path:
    """``<cache root>/plans/<key>.json``; the key covers the config, preset and compiler."""
    from cookbook import lora as lora_lib

    fields = config.to_dict()
    if fields["objective"] == "sft":  # the SFT step's keys stay as they were before RL steps were planned
        del fields["objective"], fields["completion_len"]
    if fields["num_kv_shared_layers"] is None:  # keys stay as they were before KV-shared probes
        del fields["num_kv_shared_layers"]
    parts = {"config": fields, "preset": repr(preset_for(config)), "versions": compiler_versions()}
    if config.quantize:  # the cookbook's own part of a QLoRA program (bf16 keys stay as they were)
        parts["qlora_step"] = lora_lib.QLORA_STEP
    key = json.dumps(parts, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return core.cache_root() / "plans" / f"{config.model_preset}-{config.slice_name}-{digest}.json"


def plan(config: PlanConfig, *, use_cache: bool = True) -> PlanReport:
    """Compile ``config``'s LoRA train step for its TPU slice and report memory and FLOPs.

    Raises ValueError for a configuration that is wrong before compiling (mesh, batch);
    returns a report with ``compiles=False`` and the compiler's reason when the TPU
    compiler rejects it (for example a VMEM overflow in the splash-attention kernel).
    A compile is deterministic for a given config and compiler, so reports are cached
    under the cache root's ``plans/`` (``use_cache=False`` recompiles).
    """
    path = plan_cache_path(config)
    if use_cache and path.is_file():
        cached = report_from_dict(json.loads(path.read_text()))
        # A program that did not lower failed in the cookbook's own code (its shardings, a kernel's
        # shapes), which the key does not cover; lowering again takes seconds. Compiles stay cached.
        if not (cached.error or "").startswith(LOWER_FAILED):
            return cached
    report = _compile_plan(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")  # two processes may compile the same plan
    tmp.write_text(json.dumps(report.to_dict(), indent=2))
    tmp.replace(path)
    return report


def precheck(config: PlanConfig) -> tuple[int, int]:
    """The (fsdp, tp) ``config`` compiles on, after every check that needs no compile
    (ValueError naming the problem and the fix; nothing is compiled)."""
    from cookbook import mesh as mesh_lib

    preset = preset_for(config)
    chips = core.get_slice(config.slice_name).num_devices  # TPU7x: 2 per chip
    if config.mesh_fsdp is None and config.mesh_tp is None:
        choice = mesh_lib.choose_mesh(preset, config.slice_name, config.batch_size)
        fsdp, tp = choice.fsdp, choice.tp
    else:
        fsdp = config.mesh_fsdp or chips // config.mesh_tp
        tp = config.mesh_tp or chips // config.mesh_fsdp
    check_config(config, preset, fsdp, tp, chips)
    return fsdp, tp


def _compile_plan(config: PlanConfig) -> PlanReport:
    fsdp, tp = precheck(config)
    devices = tpu_devices(config.slice_name)
    chips = len(devices)
    figures = chip_figures(config.slice_name)
    base = dict(
        config=config.to_dict(),
        fsdp=fsdp,
        tp=tp,
        chips=chips,
        hbm_bytes=figures["hbm_bytes"],
        peak_flops=figures["peak_flops"],
        mfu=config.mfu,
    )
    t0 = time.perf_counter()
    try:
        lowered, lora_count = lower_step(config, fsdp, tp, devices)
    except ValueError as e:  # a kernel that refuses the shapes (Tunix's splash on KV-shared layers)
        return PlanReport(
            **base, compiles=False, error=f"{LOWER_FAILED}: {compiler_reason(e)}", compile_s=time.perf_counter() - t0
        )
    constraints = count_sharding_constraints(lowered)
    try:
        with core.compile_cache_off():
            compiled = lowered.compile()
    except Exception as e:  # the TPU compiler's verdict on this configuration
        return PlanReport(
            **base,
            compiles=False,
            error=compiler_reason(e),
            lora_params=int(lora_count),
            activation_constraints=constraints,
            compile_s=time.perf_counter() - t0,
        )
    compile_s = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    flops = float(cost.get("flops", 0.0))
    args, out, alias = mem.argument_size_in_bytes, mem.output_size_in_bytes, mem.alias_size_in_bytes
    temp, code = mem.temp_size_in_bytes, mem.generated_code_size_in_bytes
    tokens = config.batch_size * (1 if config.objective == "decode" else config.seq_len)  # decode: one each
    # At the assumed MFU, with the splash kernels' FLOPs the compiler does not count.
    step_s = (flops + splash_kernel_flops_per_chip(config)) / (figures["peak_flops"] * config.mfu)
    return PlanReport(
        **base,
        compiles=True,
        argument_bytes=args,
        output_bytes=out,
        alias_bytes=alias,
        temp_bytes=temp,
        code_bytes=code,
        total_bytes=args + out - alias + temp + code,
        flops_per_chip=flops,
        tokens_per_step=tokens,
        flops_per_token=flops * chips / tokens,
        predicted_step_s=step_s,
        predicted_tokens_per_s=tokens / step_s if step_s else 0.0,
        lora_params=int(lora_count),
        activation_constraints=constraints,
        compile_s=compile_s,
        host_peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        bytes_accessed=float(cost.get("bytes accessed", 0.0)),
        compiler_step_s=float(cost.get("optimal_seconds", 0.0)),
    )
