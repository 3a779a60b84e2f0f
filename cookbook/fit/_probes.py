"""Probe depths: a deep layout compiled at shallow depths and extrapolated to full depth.

**Probe depths.** A full-depth 31B compile takes 2.5 to 36 minutes here (remat and load
decide), too slow to search. A deep model repeats one attention pattern (31B: 5 sliding +
1 global, ten times), so each layout is compiled at one and at two periods of the pattern
(6 and 12 layers for 31B) and every per-chip figure the compiler reports (argument,
output, temp and code bytes, FLOPs, bytes accessed, ``optimal_seconds``, LoRA parameters)
is extrapolated linearly in depth: ``a + (b - a) * (L - la) / (lb - la)``. Checked against
full-depth compiles (``benchmarks/results/plan_31b.json``; ``validate_extrapolation``):
FLOPs agree to 0.1%, per-chip memory to a few percent (numbers in the committed search).
Presets at most two periods deep (``tiny``) are compiled at full depth.

**KV-shared presets** (E2B: 15 layers with their own K/V, then 20 that reuse them; E4B: 24
then 18) have two kinds of layer, so depth alone is not one variable. Each layout is compiled
at (own, shared) = (p, p), (2p, p) and (p, 2p) layers for the period p (E2B 5, E4B 6; the
shared count overridden with ``PlanConfig.num_kv_shared_layers``) and every figure is
extrapolated affinely in both: ``v(p,p) + (N_own - p) (v(2p,p) - v(p,p)) / p + (N_shared - p)
(v(p,2p) - v(p,p)) / p``. The largest probe is 15 layers of E2B against 35: E2B's full-depth
8-chip compile ran out of this host's 24 GiB of RAM.

Written by hand: no library extrapolates compiled TPU programs in depth.
"""

from __future__ import annotations

from cookbook.fit._kernels import splash_kernel_flops_per_chip
from cookbook.fit._plan import plan, preset_for
from cookbook.fit._plan_config import PlanConfig, PlanReport

# Figures a compiled report gives per chip that grow with depth.
_DEPTH_LINEAR = (
    "argument_bytes",
    "output_bytes",
    "alias_bytes",
    "temp_bytes",
    "code_bytes",
    "flops_per_chip",
    "bytes_accessed",
    "compiler_step_s",
    "lora_params",
    "activation_constraints",
)


# --------------------------------------------------------------------------------------
# Probe depths and extrapolation


def probe_depths(config: PlanConfig) -> tuple[int, int] | None:
    """The two depths a repeating layout is compiled at, or None (full depth, or KV-shared:
    :func:`shared_probes`)."""
    preset = preset_for(config)
    period = len(preset.attention_pattern)
    if preset.num_layers <= 2 * period or preset.num_kv_shared_layers:
        return None
    return period, 2 * period


def shared_probes(config: PlanConfig) -> tuple[tuple[int, int], ...] | None:
    """(own, shared) layer counts a KV-shared layout is compiled at: (p, p), (2p, p), (p, 2p) for
    the pattern's period p; None where the preset has no KV-shared layers, or is no deeper than
    that (both kinds at most one period, or not whole periods)."""
    preset = preset_for(config)
    period, shared = len(preset.attention_pattern), preset.num_kv_shared_layers
    own = preset.num_layers - shared
    if not shared or (own <= period and shared <= period) or own % period or shared % period:
        return None
    return (period, period), (2 * period, period), (period, 2 * period)


def probe_configs(config: PlanConfig) -> list[PlanConfig]:
    """The configs compiled for ``config``'s full-depth report, probes first-to-last."""
    pairs = shared_probes(config)
    if pairs is not None:
        return [config.replace(num_layers=own + shared, num_kv_shared_layers=shared) for own, shared in pairs]
    depths = probe_depths(config)
    return [config] if depths is None else [config.replace(num_layers=n) for n in depths]


def extrapolate(a: PlanReport, b: PlanReport, config: PlanConfig) -> PlanReport:
    """``config`` at full depth from its reports at two depths (linear in layers; see the module doc)."""
    la, lb = a.plan_config.num_layers, b.plan_config.num_layers
    t = (preset_for(config).num_layers - la) / (lb - la)
    return _combine((a, b), (1 - t, t), config, (la, lb))


def extrapolate_shared(reports: tuple[PlanReport, PlanReport, PlanReport], config: PlanConfig) -> PlanReport:
    """``config`` at full depth from its (p, p), (2p, p), (p, 2p) probes (affine in own and shared
    layers; see the module doc)."""
    preset = preset_for(config)
    pairs = tuple((r.plan_config.num_layers - _shared(r), _shared(r)) for r in reports)
    (own0, sh0), (own1, _), (_, sh2) = pairs
    t_own = (preset.num_layers - preset.num_kv_shared_layers - own0) / (own1 - own0)
    t_shared = (preset.num_kv_shared_layers - sh0) / (sh2 - sh0)
    return _combine(reports, (1 - t_own - t_shared, t_own, t_shared), config, pairs)


def _shared(report: PlanReport) -> int:
    return preset_for(report.plan_config).num_kv_shared_layers


def _combine(reports: tuple[PlanReport, ...], weights: tuple[float, ...], config: PlanConfig, probes) -> PlanReport:
    """The full-depth report as ``sum(weight * probe)`` of every depth-linear figure (weights sum to 1)."""
    a = reports[0]
    common = dict(
        config=config.to_dict(),
        fsdp=a.fsdp,
        tp=a.tp,
        chips=a.chips,
        hbm_bytes=a.hbm_bytes,
        peak_flops=a.peak_flops,
        mfu=a.mfu,
        compile_s=sum(r.compile_s for r in reports),
        extrapolated_from=probes,
        host_peak_rss_bytes=max(r.host_peak_rss_bytes for r in reports),
    )
    failed = next((r for r in reports if not r.compiles), None)
    if failed is not None:
        where = failed.plan_config.num_layers
        if len(reports) == 3:
            where = f"{where - _shared(failed)} + {_shared(failed)} KV-shared"
        return PlanReport(**common, compiles=False, error=f"at {where} layers: {failed.error}")
    v = {k: sum(w * getattr(r, k) for w, r in zip(weights, reports, strict=True)) for k in _DEPTH_LINEAR}
    for k in (
        "argument_bytes",
        "output_bytes",
        "alias_bytes",
        "temp_bytes",
        "code_bytes",
        "lora_params",
        "activation_constraints",
    ):
        v[k] = int(round(v[k]))
    tokens = a.tokens_per_step
    step_s = (v["flops_per_chip"] + splash_kernel_flops_per_chip(config)) / (a.peak_flops * a.mfu)
    return PlanReport(
        **common,
        compiles=True,
        **v,
        total_bytes=v["argument_bytes"] + v["output_bytes"] - v["alias_bytes"] + v["temp_bytes"] + v["code_bytes"],
        tokens_per_step=tokens,
        flops_per_token=v["flops_per_chip"] * a.chips / tokens,
        predicted_step_s=step_s,
        predicted_tokens_per_s=tokens / step_s if step_s else 0.0,
    )


def compiles_needed(config: PlanConfig) -> list[PlanConfig]:
    """The ``plan()`` configs that give ``config``'s full-depth report."""
    return probe_configs(config)


def plan_probed(config: PlanConfig) -> PlanReport:
    """``plan(config)`` as the search compiles it: a deep model at its two probe depths, then
    extrapolated to full depth (:func:`probe_depths`); a shallow one at full depth."""
    needed = compiles_needed(config)
    return full_depth_report(config, {c: plan(c) for c in needed})


def full_depth_report(config: PlanConfig, probes: dict[PlanConfig, PlanReport]) -> PlanReport | None:
    """``config``'s full-depth report from its compiles in ``probes`` (None if one is missing)."""
    needed = compiles_needed(config)
    if any(n not in probes for n in needed):
        return None
    if len(needed) == 1:
        return probes[needed[0]]
    if len(needed) == 3:
        return extrapolate_shared(tuple(probes[n] for n in needed), config)
    return extrapolate(probes[needed[0]], probes[needed[1]], config)
