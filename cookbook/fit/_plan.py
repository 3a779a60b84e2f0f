"""The TPU fit check: compile the real LoRA train step for a TPU slice, with no TPU and no weights.

``plan(PlanConfig(preset="gemma4_31b", slice_name="v5p-8", ...))`` builds the Tunix Gemma 4
model with Qwix LoRA *abstractly* (shapes and shardings only), lowers the same train step
Tunix's ``PeftTrainer`` runs (forward, Tunix's masked cross-entropy, gradients for the LoRA
parameters only, AdamW update) for the devices of a TPU topology that ``libtpu`` describes
without any chip attached (``jax.experimental.topologies``), compiles it with the real TPU
compiler and reads back per-chip memory (``memory_analysis()``) and FLOPs
(``cost_analysis()``). Written by hand because no library does this end to end; everything
it compiles is Tunix's model, Qwix's LoRA and optax's AdamW.

Traps handled here (../shared/REFERENCE.md, "Deviceless AOT compile"): LoRA is applied with
remat off and flash attention off, then both are switched on (traps 1, 2; via
``cookbook.lora.apply_lora``); Tunix's activation ``shard()`` is a no-op in a CPU process, so
it is replaced by a real sharding constraint for the duration of ``.lower()`` (trap 3);
the abstract model is built with JAX's tracer error messages silenced (trap 4, in
``cookbook.lora.abstract_lora_model``);
compile errors such as the splash-attention VMEM overflow come back as "does not compile
for this slice: <reason>" (trap 5); the batch must divide by fsdp (trap 6).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import resource
import time
from pathlib import Path
from typing import Any

from cookbook import core, models
from cookbook.fit import _step as step_lib
from cookbook.fit._layouts import SAFETY_MARGIN
from cookbook.fit._predict import DEFAULT_MFU


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanConfig:
    """One training configuration to compile for a TPU slice."""

    preset: str = "tiny"
    slice_name: str = "v5p-8"
    fsdp: int | None = None  # None: cookbook.mesh chooses
    tp: int | None = None
    batch: int = 1  # per optimizer micro-step, global (all chips)
    seq_len: int = 4096
    remat: str = "decoder"  # a cookbook.fit choice: none, block, decoder, decoder_dots
    flash: bool = False  # splash attention (TPU Pallas kernel)
    block: int = 512  # splash block size (Tunix default 1024 overflows VMEM on 31B v5p)
    lora_rank: int = 64
    lora_alpha: float = 64.0
    lora_targets: str = "all-linear"
    learning_rate: float = 1e-4
    weight_decay: float = 0.001
    dtype: str | None = None  # parameter dtype; default: bfloat16 for TPU
    num_layers: int | None = None  # override the preset's depth (layer-slice probes)
    mfu: float = DEFAULT_MFU
    patch_activation_sharding: bool = True  # trap 3: apply Tunix's shard() on the TPU mesh


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanReport:
    """What the TPU compiler said about one configuration (per chip unless named)."""

    config: dict[str, Any]
    compiles: bool
    error: str | None = None
    fsdp: int = 0
    tp: int = 0
    chips: int = 0
    hbm_bytes: float = 0.0
    peak_flops: float = 0.0
    argument_bytes: int = 0
    output_bytes: int = 0
    alias_bytes: int = 0
    temp_bytes: int = 0
    code_bytes: int = 0
    total_bytes: int = 0
    flops_per_chip: float = 0.0
    tokens_per_step: int = 0
    flops_per_token: float = 0.0  # all chips together
    predicted_step_s: float = 0.0
    predicted_tokens_per_s: float = 0.0
    mfu: float = DEFAULT_MFU
    lora_params: int = 0
    activation_constraints: int = 0  # sharding constraints in the lowered step (trap 3)
    compile_s: float = 0.0
    host_peak_rss_bytes: int = 0

    @property
    def fits(self) -> bool:
        return self.compiles and self.total_bytes <= self.hbm_bytes

    @property
    def fits_with_margin(self) -> bool:
        return self.compiles and self.total_bytes <= SAFETY_MARGIN * self.hbm_bytes

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["fits"] = self.fits
        d["fits_with_margin"] = self.fits_with_margin
        return d

    def summary(self) -> str:
        c = self.config
        head = (
            f"{c['preset']} on {c['slice_name']} (fsdp {self.fsdp} x tp {self.tp}), "
            f"batch {c['batch']} x {c['seq_len']}, remat {c['remat']}, "
            f"{'splash block ' + str(c['block']) if c['flash'] else 'dense attention'}"
        )
        if not self.compiles:
            return f"{head}\n  does not compile for this slice: {self.error}"
        gib = 2**30
        return (
            f"{head}\n"
            f"  per chip: args {self.argument_bytes / gib:.3g} GiB, temp {self.temp_bytes / gib:.3g} GiB, "
            f"total {self.total_bytes / gib:.3g} GiB of {self.hbm_bytes / gib:.1f} GiB HBM "
            f"({100 * self.total_bytes / self.hbm_bytes:.1f}%) -> "
            f"{'fits' if self.fits else 'DOES NOT FIT'}\n"
            f"  {_si(self.flops_per_chip)}FLOP per chip per step, "
            f"{_si(self.flops_per_token)}FLOP per trained token; at {self.mfu:.0%} MFU: "
            f"{self.predicted_step_s:.4g} s/step, {self.predicted_tokens_per_s:,.0f} tokens/s "
            f"(a prediction: real speed is measured only on a TPU)\n"
            f"  LoRA parameters {self.lora_params:,}; activation sharding constraints applied: "
            f"{self.activation_constraints}; compiled in {self.compile_s:.1f} s"
        )


def _si(x: float) -> str:
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} "


# --------------------------------------------------------------------------------------
# Devices and chips


def chip_figures(slice_name: str) -> dict[str, float]:
    """Per-chip HBM bytes, bf16 peak FLOP/s and HBM bandwidth (``cookbook.mesh.SLICES``)."""
    from cookbook import mesh as mesh_lib

    chip = mesh_lib.get_slice(slice_name).chip
    return {"hbm_bytes": float(chip.hbm_bytes), "peak_flops": chip.bf16_flops, "hbm_bw": chip.hbm_bytes_per_s}


def tpu_devices(slice_name: str) -> list:
    """The devices of a TPU slice as libtpu describes them; no TPU needs to be attached."""
    from jax.experimental import topologies

    from cookbook import mesh as mesh_lib

    topology = mesh_lib.get_slice(slice_name).topology  # ValueError for unknown slices
    if not core.on_tpu_host():
        # No chips to guard: let several processes (pytest and a notebook kernel, or
        # parallel plans) describe topologies; libtpu otherwise allows one per host.
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        topo = topologies.get_topology_desc(platform="tpu", topology_name=topology)
    except Exception as e:  # libtpu missing or too old
        raise RuntimeError(
            f"cannot describe TPU topology {topology!r} ({e}). "
            "Deviceless compilation needs libtpu: pip install 'jax[tpu]' or libtpu."
        ) from e
    return list(topo.devices)


# --------------------------------------------------------------------------------------
# Trap workarounds as context managers


# --------------------------------------------------------------------------------------
# Abstract model and train step


def abstract_lora_model(config: PlanConfig, preset: models.ModelPreset, mesh):
    """(graphdef, lora state, other state, LoRA count), all abstract with shardings on ``mesh``.

    LoRA goes on with remat and flash attention off (``cookbook.lora.apply_lora`` checks
    the count); flash attention is switched on afterwards on the shared config (trap 2).
    """
    import jax
    from flax import nnx

    from cookbook import lora as lora_lib
    from cookbook.fit import _sharding as sharding

    lora_cfg = lora_lib.LoraConfig(
        rank=config.lora_rank, alpha=config.lora_alpha, dropout=0.0, targets=config.lora_targets
    )
    model = lora_lib.abstract_lora_model(preset, lora_cfg, remat=config.remat)
    if config.flash:
        for _, module in model.iter_modules():
            cfg = getattr(module, "config", None)
            if cfg is not None and hasattr(cfg, "use_flash_attention"):
                cfg.use_sliding_window_kv_cache = False  # Tunix forbids it with flash attention
                cfg.use_flash_attention = True
                cfg.flash_attention_block_size = config.block
    sharding.set_lora_specs(model)
    graphdef, lora_state, rest = nnx.split(model, nnx.LoRAParam, ...)
    lora_count = sum(x.size for x in jax.tree.leaves(lora_state))
    lora_abs = sharding.abstract_with_shardings(lora_state, mesh)
    rest_abs = sharding.abstract_with_shardings(rest, mesh)
    return graphdef, lora_abs, rest_abs, lora_count


def make_optimizer(config: PlanConfig):
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


def lower_train_step(config: PlanConfig, mesh, preset: models.ModelPreset):
    """Lower (not compile) the LoRA train step for ``mesh``; returns (lowered, lora_count)."""
    import jax

    from cookbook.fit import _sharding as sharding

    graphdef, lora_abs, rest_abs, lora_count = abstract_lora_model(config, preset, mesh)
    tx = make_optimizer(config)
    opt_abs = sharding.abstract_optimizer_state(tx, lora_abs, mesh)
    batch_abs = abstract_batch(config.batch, config.seq_len, mesh)
    step = step_lib.make_train_step(graphdef, tx)
    out_shardings = (
        jax.tree.map(lambda x: x.sharding, lora_abs),
        jax.tree.map(lambda x: x.sharding, opt_abs),
        None,
    )
    jitted = jax.jit(step, out_shardings=out_shardings, donate_argnums=(0, 2))

    with core.tunix_activation_sharding(mesh, config.patch_activation_sharding), models.remat_policy(config.remat):
        lowered = jitted.lower(lora_abs, rest_abs, opt_abs, batch_abs)
    return lowered, lora_count


def _preset_for(config: PlanConfig) -> models.ModelPreset:
    preset = models.get_preset(config.preset).with_overrides(dtype=config.dtype or "bfloat16")
    if config.num_layers is not None:
        preset = preset.with_overrides(num_layers=config.num_layers)
    return preset


def count_sharding_constraints(lowered) -> int:
    """Sharding constraints in the lowered step: 0 means Tunix's activation ``shard()`` was skipped."""
    text = lowered.as_text()
    return text.count("sdy.sharding_constraint") + text.count("@Sharding")


def _compiler_reason(err: BaseException) -> str:
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

    # mesh.validate_mesh names the dimension that does not divide (heads, batch: trap 6)
    mesh_lib.validate_mesh(preset, fsdp, tp, config.batch, num_devices=chips)
    models.get_remat_choice(config.remat)
    if config.flash and config.seq_len % config.block:
        raise ValueError(
            f"flash attention needs seq_len ({config.seq_len}) to be a multiple of block ({config.block})"
        )


def _cache_path(config: PlanConfig) -> Path:
    """``$COOKBOOK_CACHE/plans/<key>.json``; the key covers the config, preset and compiler."""
    import hashlib
    import importlib.metadata as md

    versions = {}
    for pkg in ("jax", "jaxlib", "libtpu", "google-tunix", "qwix", "flax", "optax"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    key = json.dumps(
        {"config": dataclasses.asdict(config), "preset": repr(_preset_for(config)), "versions": versions},
        sort_keys=True,
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    root = Path(os.environ.get("COOKBOOK_CACHE", Path.home() / ".cache" / "cookbook"))
    return root / "plans" / f"{config.preset}-{config.slice_name}-{digest}.json"


def plan(config: PlanConfig, *, use_cache: bool = True) -> PlanReport:
    """Compile ``config``'s LoRA train step for its TPU slice and report memory and FLOPs.

    Raises ValueError for a configuration that is wrong before compiling (mesh, batch);
    returns a report with ``compiles=False`` and the compiler's reason when the TPU
    compiler rejects it (for example a VMEM overflow in the splash-attention kernel).
    A compile is deterministic for a given config and compiler, so reports are cached
    under ``$COOKBOOK_CACHE/plans`` (``use_cache=False`` recompiles).
    """
    path = _cache_path(config)
    if use_cache and path.is_file():
        return report_from_dict(json.loads(path.read_text()))
    report = _compile_plan(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report.to_dict(), indent=2))
    tmp.replace(path)
    return report


def report_from_dict(d: dict[str, Any]) -> PlanReport:
    """A ``PlanReport`` from its ``to_dict()`` form (derived keys dropped)."""
    names = {f.name for f in dataclasses.fields(PlanReport)}
    return PlanReport(**{k: v for k, v in d.items() if k in names})


def _compile_plan(config: PlanConfig) -> PlanReport:
    from cookbook import mesh as mesh_lib

    preset = _preset_for(config)
    devices = tpu_devices(config.slice_name)
    chips = len(devices)
    if config.fsdp is None and config.tp is None:
        choice = mesh_lib.choose_mesh(preset, config.slice_name, config.batch)
        fsdp, tp = choice.fsdp, choice.tp
    else:
        fsdp = config.fsdp or chips // config.tp
        tp = config.tp or chips // config.fsdp
    check_config(config, preset, fsdp, tp, chips)
    mesh = mesh_lib.make_mesh(fsdp, tp, devices=devices)
    figures = chip_figures(config.slice_name)
    base = dict(
        config=dataclasses.asdict(config),
        fsdp=fsdp,
        tp=tp,
        chips=chips,
        hbm_bytes=figures["hbm_bytes"],
        peak_flops=figures["peak_flops"],
        mfu=config.mfu,
    )
    t0 = time.perf_counter()
    lowered, lora_count = lower_train_step(config, mesh, preset)
    constraints = count_sharding_constraints(lowered)
    try:
        compiled = lowered.compile()
    except Exception as e:  # the TPU compiler's verdict on this configuration
        return PlanReport(
            **base,
            compiles=False,
            error=_compiler_reason(e),
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
    total = args + out - alias + temp + code
    tokens = config.batch * config.seq_len
    step_s = flops / (figures["peak_flops"] * config.mfu)
    return PlanReport(
        **base,
        compiles=True,
        argument_bytes=args,
        output_bytes=out,
        alias_bytes=alias,
        temp_bytes=temp,
        code_bytes=code,
        total_bytes=total,
        flops_per_chip=flops,
        tokens_per_step=tokens,
        flops_per_token=flops * chips / tokens,
        predicted_step_s=step_s,
        predicted_tokens_per_s=tokens / step_s if step_s else 0.0,
        lora_params=int(lora_count),
        activation_constraints=constraints,
        compile_s=compile_s,
        host_peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    )


# --------------------------------------------------------------------------------------
# Tables and plots


def report_row(r: PlanReport, name: str | None = None) -> dict[str, Any]:
    """One table row (GiB, TFLOP, tokens/s) for a report."""
    c, gib = r.config, 2**30
    attention = f"splash {c['block']}" if c["flash"] else "dense"
    row = {
        "plan": name or f"{c['slice_name']} {c['remat']} {attention} b{c['batch']}",
        "slice": c["slice_name"],
        "mesh": f"{r.fsdp}x{r.tp}",
        "batch x seq": f"{c['batch']} x {c['seq_len']}",
        "remat": c["remat"],
        "attention": attention,
    }
    if not r.compiles:
        row["result"] = f"does not compile: {r.error}"
        return row
    row.update(
        {
            "args GiB": round(r.argument_bytes / gib, 3),
            "temp GiB": round(r.temp_bytes / gib, 3),
            "total GiB": round(r.total_bytes / gib, 3),
            "HBM %": round(100 * r.total_bytes / r.hbm_bytes, 1),
            "TFLOP/chip/step": round(r.flops_per_chip / 1e12, 4),
            "GFLOP/token": round(r.flops_per_token / 1e9, 3),
            f"tokens/s @{r.mfu:.0%} MFU": round(r.predicted_tokens_per_s),
            "result": "fits" if r.fits_with_margin else ("fits, under margin" if r.fits else "does not fit"),
        }
    )
    return row


def format_reports(reports: list[PlanReport] | dict[str, PlanReport]) -> str:
    """A plain-text table of reports (a dict's keys name the rows)."""
    items = list(reports.items()) if isinstance(reports, dict) else [(None, r) for r in reports]
    rows = [report_row(r, n) for n, r in items]
    cols = list(dict.fromkeys(k for row in rows for k in row))
    width = {c: max(len(c), *(len(str(row.get(c, ""))) for row in rows)) for c in cols}
    lines = ["  ".join(c.ljust(width[c]) for c in cols)]
    lines += ["  ".join(str(row.get(c, "")).ljust(width[c]) for c in cols) for row in rows]
    return "\n".join(lines)


def plot_reports(reports: list[PlanReport], title: str = ""):
    """Stacked per-chip memory (args + temp) and FLOPs per token for each compiled plan."""
    import matplotlib.pyplot as plt

    ok = [r for r in reports if r.compiles]
    names = [report_row(r)["plan"] for r in ok]
    gib = 2**30
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.6))
    a.bar(names, [r.argument_bytes / gib for r in ok], label="arguments")
    a.bar(names, [r.temp_bytes / gib for r in ok], bottom=[r.argument_bytes / gib for r in ok], label="temporaries")
    a.set_ylabel("GiB per chip")
    a.legend()
    b.bar(names, [r.flops_per_token / 1e9 for r in ok], color="tab:green")
    b.set_ylabel("GFLOP per trained token")
    for ax in (a, b):
        ax.tick_params(axis="x", rotation=30, labelsize=8)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------
# CLI


def register_cli(sub) -> None:
    p = sub.add_parser(
        "plan",
        help="compile the LoRA train step for a TPU slice, with no TPU: memory and FLOPs",
        description=(
            "Compile the real LoRA training step ahead of time for a TPU slice (no TPU, no "
            "weights needed) and report per-chip memory against HBM, FLOPs per step and the "
            "predicted step time at a stated MFU."
        ),
    )
    p.add_argument("--preset", default="tiny", help="model preset (tiny, gemma4_31b, ...)")
    p.add_argument("--slice", dest="slice_name", default="v5p-8", help="TPU slice, e.g. v5p-8, v6e-8 (cookbook.mesh.SLICES)")
    p.add_argument("--fsdp", type=int, default=None, help="fsdp axis size (default: chosen)")
    p.add_argument("--tp", type=int, default=None, help="tensor-parallel axis size (default: chosen)")
    p.add_argument("--batch", type=int, default=1, help="global batch per step")
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--remat", default="decoder", choices=["none", "block", "decoder", "decoder_dots"])
    p.add_argument("--flash", action="store_true", help="splash attention")
    p.add_argument("--block", type=int, default=512, help="splash attention block size")
    p.add_argument("--rank", type=int, default=64, help="LoRA rank")
    p.add_argument("--alpha", type=float, default=64.0, help="LoRA alpha")
    p.add_argument("--mfu", type=float, default=DEFAULT_MFU, help="assumed MFU for the predicted speed")
    p.add_argument("--json", default=None, help="also write the report to this JSON file")
    p.set_defaults(func=_cli)


def _cli(args) -> int:
    config = PlanConfig(
        preset=args.preset,
        slice_name=args.slice_name,
        fsdp=args.fsdp,
        tp=args.tp,
        batch=args.batch,
        seq_len=args.seq_len,
        remat=args.remat,
        flash=args.flash,
        block=args.block,
        lora_rank=args.rank,
        lora_alpha=args.alpha,
        mfu=args.mfu,
    )
    try:
        report = plan(config)
    except (ValueError, RuntimeError) as e:
        print(f"cookbook plan: {e}")
        return 2
    print(report.summary())
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2))
    return 0 if report.fits else 1
