"""Device meshes for the TPU slice (and fake CPU devices): axes ``fsdp`` x ``tp``.

What runs where: :func:`detect_runtime` says what this process sees (TPU generation and
chip count, GPU, CPU); :data:`core.SLICES` holds the TPU slices the cookbook plans for, with
per-chip HBM, bf16 peak and HBM bandwidth; :func:`choose_mesh` picks a (fsdp, tp) mesh for
a preset on a slice and says why; :func:`validate_mesh` checks a mesh against every
dimension Tunix shards (the 31B's 4 global KV heads, not its 32 query heads, bound tp);
:func:`initialize_distributed` wraps ``jax.distributed.initialize`` for multi-host pods.

JAX builds the mesh; the hand-written part is only the divisibility rules, read from
Tunix's ``ShardingConfig`` for Gemma 4 (which dimension sits on which axis).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any

from cookbook import core, models


def make_mesh(fsdp: int, tp: int, *, devices=None):
    """A ``jax.sharding.Mesh`` with axes ``("fsdp", "tp")`` and Auto axis types.

    Tunix annotates parameters with logical axes ``fsdp``/``tp`` and relies on
    Auto-sharded (GSPMD) propagation; ``jax.make_mesh`` defaults to Explicit axes in this
    JAX, which Tunix's code does not support.
    """
    import jax
    import numpy as np

    devices = list(devices if devices is not None else jax.devices())
    if fsdp * tp > len(devices):
        raise ValueError(
            f"mesh fsdp={fsdp} x tp={tp} needs {fsdp * tp} devices; only {len(devices)} are present"
        )
    grid = np.asarray(devices[: fsdp * tp]).reshape(fsdp, tp)
    return jax.sharding.Mesh(grid, ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)


# --------------------------------------------------------------------------------------
# What this process runs on


@dataclasses.dataclass(frozen=True, kw_only=True)
class Runtime:
    platform: str  # "tpu" | "gpu" | "cpu"
    device_kind: str
    num_devices: int  # global, across processes
    num_local_devices: int
    process_count: int
    process_index: int
    chip: str | None  # "v5p", "v6e", "v5e", ... for TPUs
    slice: core.SliceSpec | None  # the matching known slice (TPU) or core.cpu_slice (CPU)
    fake_cpu_devices: bool  # CPU devices made with --xla_force_host_platform_device_count

    def describe(self) -> str:
        procs = f"{self.process_count} process{'es' if self.process_count > 1 else ''}"
        if self.platform == "tpu":
            where = (
                self.slice.describe() if self.slice else f"{self.num_devices} x {self.device_kind}"
            )
            return f"TPU: {where}; {self.num_local_devices} chips on this host, {procs}"
        if self.platform == "gpu":
            return f"GPU: {self.num_devices} x {self.device_kind}, {procs}"
        fake = " (fake, from XLA_FLAGS)" if self.fake_cpu_devices else ""
        return f"CPU: {self.num_devices} device{'s' if self.num_devices > 1 else ''}{fake}, {procs}; no accelerator"


def detect_runtime() -> Runtime:
    """Describe the devices JAX sees (initialising JAX's backend)."""
    import jax

    devices = jax.devices()
    d0 = devices[0]
    chip = core.chip_of(d0.device_kind) if d0.platform != "cpu" else None
    found: core.SliceSpec | None = None
    if d0.platform == "tpu" and chip:
        found = next(
            (s for s in core.SLICES.values() if s.chip.name == chip and s.num_chips == len(devices)),
            None,
        )
    elif d0.platform == "cpu":
        found = core.cpu_slice(len(devices))
    return Runtime(
        platform=d0.platform,
        device_kind=d0.device_kind,
        num_devices=len(devices),
        num_local_devices=jax.local_device_count(),
        process_count=jax.process_count(),
        process_index=jax.process_index(),
        chip=chip,
        slice=found,
        fake_cpu_devices=d0.platform == "cpu"
        and "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""),
    )


# --------------------------------------------------------------------------------------
# Which meshes a model allows


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeshAxisRule:
    """A model dimension that one mesh axis shards (from Tunix's Gemma 4 ShardingConfig)."""

    axis: str  # "fsdp" | "tp"
    dimension: str
    size: int
    where: str


def mesh_rules(preset: str | models.ModelPreset, batch: int | None = None) -> list[MeshAxisRule]:
    """Every dimension each mesh axis must divide, for ``preset`` (and the batch on fsdp)."""
    p = models.get_preset(preset)
    tp = [
        ("query heads", p.num_heads, "q_einsum / attn_vec_einsum (N on tp)"),
        ("KV heads (sliding layers)", p.num_kv_heads, "kv_einsum (K on tp)"),
        ("vocabulary", p.vocab_size, "embedding table (V on tp)"),
        ("MLP hidden", p.hidden_dim, "gate/up/down_proj (F on tp)"),
        ("embed (activations)", p.embed_dim, "activations [B, T, D] (D on tp)"),
        ("head dim (sliding)", p.head_dim, "q/k RMSNorm scale (on tp)"),
    ]
    if p.global_layers:
        tp.insert(
            2,
            (
                "global KV heads",
                p.effective_global_kv_heads,
                "global k_einsum / kv_einsum (K on tp)",
            ),
        )
        tp.append(("head dim (global)", p.global_head_dim, "global q/k RMSNorm scale (on tp)"))
    rules = [MeshAxisRule(axis="tp", dimension=d, size=s, where=w) for d, s, w in tp]
    rules.append(
        MeshAxisRule(
            axis="fsdp", dimension="embed", size=p.embed_dim, where="all weights (D on fsdp)"
        )
    )
    if batch is not None:
        rules.append(
            MeshAxisRule(
                axis="fsdp", dimension="batch", size=batch, where="activations (B on fsdp)"
            )
        )
    return rules


class MeshError(ValueError):
    """A mesh that does not fit the model, the batch or the devices."""


def valid_meshes(
    preset: str | models.ModelPreset, num_devices: int, batch: int | None = None
) -> list[tuple[int, int]]:
    """All (fsdp, tp) with fsdp * tp == num_devices that :func:`validate_mesh` accepts."""
    out = []
    for tp in range(1, num_devices + 1):
        if num_devices % tp:
            continue
        fsdp = num_devices // tp
        if not _violations(preset, fsdp, tp, batch):
            out.append((fsdp, tp))
    return out


def _violations(preset, fsdp: int, tp: int, batch: int | None) -> list[MeshAxisRule]:
    sizes = {"fsdp": fsdp, "tp": tp}
    return [r for r in mesh_rules(preset, batch) if r.size % sizes[r.axis]]


def validate_mesh(
    preset: str | models.ModelPreset,
    fsdp: int,
    tp: int,
    batch: int | None = None,
    *,
    num_devices: int | None = None,
) -> None:
    """Raise :class:`MeshError` naming the dimension that does not divide, and the valid meshes.

    Args:
      preset: the model.
      fsdp, tp: the mesh.
      batch: the global batch (per step, before gradient accumulation); sharded on fsdp.
      num_devices: the devices to fill (default ``fsdp * tp``); valid choices are listed
        for this count.
    """
    p = models.get_preset(preset)
    if fsdp < 1 or tp < 1:
        raise MeshError(f"mesh fsdp={fsdp} x tp={tp}: both axes must be >= 1")
    n = num_devices or fsdp * tp
    if fsdp * tp != n:
        raise MeshError(
            f"mesh fsdp={fsdp} x tp={tp} uses {fsdp * tp} devices, not the {n} available; valid "
            f"meshes for {n} devices: {_fmt(valid_meshes(p, n, batch))}"
        )
    bad = _violations(p, fsdp, tp, batch)
    if bad:
        what = "; ".join(
            f"{r.axis}={fsdp if r.axis == 'fsdp' else tp} does not divide {r.dimension} = {r.size} "
            f"({r.where})"
            for r in bad
        )
        valid = valid_meshes(p, n, batch)
        hint = f"valid (fsdp, tp) for {n} devices: {_fmt(valid)}"
        if not valid and batch is not None:
            hint += (
                f" (none at batch {batch}; valid batch sizes are multiples of {_min_batch(p, n)})"
            )
        raise MeshError(
            f"mesh fsdp={fsdp} x tp={tp} does not fit preset {p.name!r}: {what}. {hint}"
        )


def _fmt(meshes: list[tuple[int, int]]) -> str:
    return ", ".join(f"{f}x{t}" for f, t in meshes) or "none"


def _min_batch(preset, n: int) -> int:
    fsdps = [f for f, _ in valid_meshes(preset, n, None)]
    return min(fsdps) if fsdps else 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeshChoice:
    fsdp: int
    tp: int
    slice: str
    reason: str
    candidates: tuple[tuple[int, int], ...]  # every valid (fsdp, tp) for the slice

    @property
    def shape(self) -> tuple[int, int]:
        return (self.fsdp, self.tp)


def max_tp(preset: str | models.ModelPreset) -> tuple[int, str]:
    """The largest tp any mesh can use for ``preset``, and the dimension that bounds it."""
    rules = [r for r in mesh_rules(preset) if r.axis == "tp"]
    tp = max(t for t in range(1, 4097) if all(r.size % t == 0 for r in rules))
    bound = min(rules, key=lambda r: r.size)
    return tp, bound.dimension


def choose_mesh(
    preset: str | models.ModelPreset, slice_: str | core.SliceSpec | int, batch: int
) -> MeshChoice:
    """Pick (fsdp, tp) for training ``preset`` on a slice (or a device count) at ``batch``.

    Policy: as much tensor parallelism as the model allows (tp shards weights and compute
    and needs nothing from the batch; LoRA at micro-batch 1-2 has little activation memory
    for fsdp to save), the rest of the chips on fsdp, which needs the batch to divide.
    On v5p-8 (4 chips) that is the paper's fsdp 1 x tp 4; on v6e-8 fsdp 2 x tp 4.
    """
    p = models.get_preset(preset)
    s = core.cpu_slice(slice_) if isinstance(slice_, int) else core.get_slice(slice_)
    n = s.num_chips
    candidates = valid_meshes(p, n, batch)
    limit, bound = max_tp(p)
    if not candidates:
        any_batch = valid_meshes(p, n, None)
        raise MeshError(
            f"no mesh over the {n} devices of {s.name} fits preset {p.name!r} at batch {batch}: "
            f"model-valid meshes are {_fmt(any_batch)} and each needs the batch to divide by fsdp; "
            f"use a batch that is a multiple of {_min_batch(p, n)}"
            + (" (or fewer devices)" if any_batch else "")
        )
    fsdp, tp = max(candidates, key=lambda c: c[1])
    why = [
        f"{s.name} has {n} devices.",
        f"tp is capped at {limit} by {bound} = "
        f"{next(r.size for r in mesh_rules(p) if r.dimension == bound)}"
        + (
            f" (query heads: {p.num_heads}, KV heads: {p.num_kv_heads})."
            if bound != "query heads"
            else "."
        ),
    ]
    if tp < min(limit, n):
        why.append(
            f"tp={min(limit, n)} would leave fsdp={n // min(limit, n)}, which batch {batch} does not fill."
        )
    why.append(
        f"Chose fsdp={fsdp} x tp={tp}: the largest tp that fits, the remaining factor {fsdp} on fsdp "
        f"(batch {batch} divides by it)."
    )
    return MeshChoice(
        fsdp=fsdp, tp=tp, slice=s.name, reason=" ".join(why), candidates=tuple(candidates)
    )


# --------------------------------------------------------------------------------------
# Multi-host


@dataclasses.dataclass(frozen=True, kw_only=True)
class DistributedInfo:
    initialized: bool  # jax.distributed.initialize was called (by this or an earlier call)
    mode: str  # "single-host" | "explicit" | "tpu-pod"
    process_count: int
    process_index: int


def _tpu_pod_env() -> bool:
    """Environment variables that GKE / multislice set on multi-host TPU jobs."""
    hosts = os.environ.get("TPU_WORKER_HOSTNAMES", "")
    return len([h for h in hosts.split(",") if h.strip()]) > 1 or bool(
        os.environ.get("MEGASCALE_COORDINATOR_ADDRESS")
    )


def _on_tpu_host() -> bool:
    """TPU chips attached and JAX not pinned to CPU."""
    return core.on_tpu_host() and os.environ.get("JAX_PLATFORMS", "") != "cpu"


def initialize_distributed(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    local_device_ids: list[int] | None = None,
) -> DistributedInfo:
    """Join a multi-host JAX job; a no-op on one host. Call before anything touches devices.

    * ``num_processes > 1``: explicit, e.g. ``initialize_distributed("10.0.0.2:8476", 4, i)``
      (also from ``COOKBOOK_COORDINATOR``, ``COOKBOOK_NUM_PROCESSES``, ``COOKBOOK_PROCESS_ID``).
    * On a TPU host (or with GKE's ``TPU_WORKER_HOSTNAMES`` listing several hosts):
      ``jax.distributed.initialize()`` with no arguments; JAX discovers the coordinator and
      process ids from the environment or the Cloud TPU metadata server (a single-host
      slice joins as 1 process of 1).
    * Otherwise (CPU, GPU without arguments) nothing happens.

    Every host runs the same program; afterwards ``jax.devices()`` lists all chips of the
    slice and a mesh built from them is global.
    """
    import jax

    coordinator = coordinator or os.environ.get("COOKBOOK_COORDINATOR")
    if num_processes is None and os.environ.get("COOKBOOK_NUM_PROCESSES"):
        num_processes = int(os.environ["COOKBOOK_NUM_PROCESSES"])
    if process_id is None and os.environ.get("COOKBOOK_PROCESS_ID"):
        process_id = int(os.environ["COOKBOOK_PROCESS_ID"])

    if jax.distributed.is_initialized():
        return DistributedInfo(
            initialized=True,
            mode="already",
            process_count=jax.process_count(),
            process_index=jax.process_index(),
        )
    if num_processes is not None and num_processes > 1:
        if coordinator is None or process_id is None:
            raise ValueError(
                f"num_processes={num_processes} needs coordinator='HOST:PORT' (process 0's address) "
                f"and this process's process_id in [0, {num_processes}); got coordinator="
                f"{coordinator!r}, process_id={process_id!r}"
            )
        if not 0 <= process_id < num_processes:
            raise ValueError(f"process_id={process_id} is outside [0, {num_processes})")
        jax.distributed.initialize(
            coordinator_address=coordinator,
            num_processes=num_processes,
            process_id=process_id,
            local_device_ids=local_device_ids,
        )
        mode = "explicit"
    elif _tpu_pod_env() or _on_tpu_host():
        # JAX finds the pod's coordinator and this host's id itself (GKE environment
        # variables, or the Cloud TPU VM metadata server); a single-host VM joins as 1 of 1.
        try:
            jax.distributed.initialize()
        except ValueError:
            if _tpu_pod_env():
                raise
            # no cluster detected (e.g. a notebook runtime without TPU metadata): one host
            return DistributedInfo(
                initialized=False, mode="single-host", process_count=1, process_index=0
            )
        mode = "tpu-pod"
    else:
        return DistributedInfo(
            initialized=False, mode="single-host", process_count=1, process_index=0
        )
    return DistributedInfo(
        initialized=True,
        mode=mode,
        process_count=jax.process_count(),
        process_index=jax.process_index(),
    )


def sharded_checksum(mesh, size: int = 1024) -> dict[str, Any]:
    """A jitted computation over a global array sharded on ``mesh``, from each process's part.

    Each process contributes the rows of a known matrix that its devices hold; the result
    (a sum of squares and a matrix product reduced over fsdp) must be the same number on
    every process and equal to the closed form. Used to check a multi-host mesh.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    rows = int(mesh.shape["fsdp"]) * 8
    cols = int(mesh.shape["tp"]) * 4
    full = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) / size
    sharding = NamedSharding(mesh, P("fsdp", "tp"))
    x = jax.make_array_from_callback(full.shape, sharding, lambda idx: full[idx])

    @jax.jit
    def f(a):
        gram = a.T @ a  # contracts over the fsdp-sharded rows: a cross-process all-reduce
        return jnp.sum(a * a), jnp.trace(gram)

    total, trace = f(x)
    return {
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "global_devices": len(mesh.devices.flat),
        "local_devices": len(mesh.local_devices),
        "sum_sq": float(total),
        "trace": float(trace),
        "expected": float(np.sum(full.astype(np.float64) ** 2)),
        # Any summation order on any mesh is within this of the exact value (numerics).
        "bound": core.summation_bound(full.size, float(np.sum(full.astype(np.float64) ** 2))),
    }


def _worker(argv: list[str]) -> int:
    """``python -m cookbook.mesh._mesh COORD NUM_PROCESSES PROCESS_ID FSDP TP``: one process of a check."""
    coordinator, num, pid, fsdp, tp = argv
    info = initialize_distributed(coordinator, int(num), int(pid))
    m = make_mesh(int(fsdp), int(tp))
    out = sharded_checksum(m)
    out["mode"] = info.mode
    print("RESULT " + json.dumps(out), flush=True)
    import jax

    jax.distributed.shutdown()
    return 0


def run_local_multiprocess(
    num_processes: int = 2,
    devices_per_process: int = 4,
    fsdp: int | None = None,
    tp: int = 2,
    timeout_s: float = 120.0,
) -> list[dict[str, Any]]:
    """Simulate a multi-host slice on this machine: N CPU processes on 127.0.0.1.

    Each process gets ``devices_per_process`` fake CPU devices, joins through
    :func:`initialize_distributed`, builds one global (fsdp, tp) mesh and runs
    :func:`sharded_checksum`. Returns each process's result (they must agree).
    """
    import socket
    import subprocess

    total = num_processes * devices_per_process
    fsdp = fsdp or total // tp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices_per_process}"
    env["JAX_PLATFORMS"] = "cpu"
    for k in (
        "COOKBOOK_COORDINATOR",
        "COOKBOOK_NUM_PROCESSES",
        "COOKBOOK_PROCESS_ID",
        "TPU_WORKER_HOSTNAMES",
    ):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "cookbook.mesh._mesh", f"127.0.0.1:{port}", str(num_processes)]
    procs = [
        subprocess.Popen(
            [*cmd, str(i), str(fsdp), str(tp)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(num_processes)
    ]
    results, logs = [], []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=timeout_s)
            logs.append(out)
            line = next((ln for ln in out.splitlines() if ln.startswith("RESULT ")), None)
            if proc.returncode != 0 or line is None:
                raise RuntimeError(
                    f"process {len(results)} of the local multi-host check failed (exit {proc.returncode}):\n"
                    + out[-3000:]
                )
            results.append(json.loads(line[len("RESULT ") :]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1:]))
