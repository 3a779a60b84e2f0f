"""Notebook 01's steps as typed results: the tp bound, the mesh chosen for a slice, the checks on devices.

Each function composes the rules of ``_mesh`` and the checks of ``_distributed`` into one step a
reader runs (and a test asserts on), and says what it found through ``describe()``; ``results()``
gives what notebook 01 records of it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cookbook import models
from cookbook.mesh._distributed import run_local_multiprocess, sharded_checksum
from cookbook.mesh._mesh import (
    MeshAxisRule,
    MeshChoice,
    MeshError,
    choose_mesh,
    make_mesh,
    max_tp,
    mesh_rules,
    validate_mesh,
)
from cookbook.mesh._runtime import Runtime, detect_runtime

# The paper's two slices for Gemma 4 31B and the batch each trains at: v5p-8's 4 chips at batch 1,
# v6e-8's 8 chips at a batch that fills fsdp 2.
REFERENCE_PRESET = "gemma4_31b"
REFERENCE_SLICES = (("v5p-8", 1), ("v6e-8", 2))


@dataclasses.dataclass(frozen=True, kw_only=True)
class TpLimit:
    """The largest tp a preset allows, the dimension that bounds it, and every rule behind it."""

    preset: str
    max_tp: int
    bound: str  # the dimension with the smallest size on tp, e.g. "global KV heads"
    rules: tuple[MeshAxisRule, ...]  # every dimension each axis must divide (the batch on fsdp included)

    def describe(self) -> str:
        return f"{self.preset}: tp <= {self.max_tp}, bounded by {self.bound}"

    def table(self) -> list[dict[str, Any]]:
        """One row per rule: axis, dimension, size, where Tunix shards it."""
        return [dataclasses.asdict(r) for r in self.rules]

    def results(self) -> dict[str, Any]:
        """What notebook 01 records of the bound."""
        return {"max_tp": self.max_tp, "tp_bound": self.bound}


def tp_limit(preset: str | models.ModelPreset, batch: int | None = None) -> TpLimit:
    """What bounds tensor parallelism for ``preset``: :func:`max_tp` with the rules of :func:`mesh_rules`."""
    p = models.get_preset(preset)
    limit, bound = max_tp(p)
    return TpLimit(preset=p.name, max_tp=limit, bound=bound, rules=tuple(mesh_rules(p, batch)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeshPlan:
    """The mesh :func:`choose_mesh` picks for a preset on a slice, beside the paper's two for 31B."""

    preset: str
    batch: int | None
    choice: MeshChoice
    reference_meshes: dict[str, tuple[int, int]]  # gemma4_31b's mesh on each of REFERENCE_SLICES

    @property
    def fsdp(self) -> int:
        return self.choice.fsdp

    @property
    def tp(self) -> int:
        return self.choice.tp

    def describe(self) -> str:
        c = self.choice
        return (
            f"{self.preset} on {c.slice}, batch {self.batch}: fsdp={c.fsdp} x tp={c.tp}\n{c.reason}\n"
            f"{REFERENCE_PRESET}: {self.reference_meshes}"
        )

    def results(self) -> dict[str, Any]:
        """What notebook 01 records of the choice."""
        c = self.choice
        return {
            "preset": self.preset,
            "slice": c.slice,
            "batch": self.batch,
            "mesh": list(c.shape),
            "candidates": [list(m) for m in c.candidates],
            "reason": c.reason,
            "gemma4_31b_meshes": {k: list(v) for k, v in self.reference_meshes.items()},
        }


def plan_mesh(
    preset: str | models.ModelPreset, slice_name: str, batch: int | None, runtime: Runtime | None = None
) -> MeshPlan:
    """:func:`choose_mesh` for ``preset`` on ``slice_name``, or ("") on the devices of this process.

    The devices of this process are the known TPU slice they form where there is one (a v5p-8 VM
    plans for v5p-8), else their count (fake CPU devices, a GPU, a TPU runtime of no known
    shape). ``runtime`` is :func:`detect_runtime`'s, looked up here if not given.
    """
    p = models.get_preset(preset)
    target: str | int = slice_name
    if not slice_name:
        runtime = runtime or detect_runtime()
        on_known_tpu = runtime.platform == "tpu" and runtime.slice is not None
        target = runtime.slice.name if on_known_tpu else runtime.num_devices
    reference = {s: choose_mesh(REFERENCE_PRESET, s, b).shape for s, b in REFERENCE_SLICES}
    return MeshPlan(preset=p.name, batch=batch, choice=choose_mesh(p, target, batch), reference_meshes=reference)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeshRefusal:
    """A mesh one step wider on tp than the model allows, and what :func:`validate_mesh` said of it."""

    fsdp: int
    tp: int
    error: str  # the MeshError's message; "" if the mesh was (wrongly) accepted

    def results(self) -> dict[str, Any]:
        """What notebook 01 records of the refusal."""
        return {"invalid_mesh_error": self.error}


def refuse_too_wide_mesh(plan: MeshPlan) -> MeshRefusal:
    """:func:`validate_mesh` on twice the largest tp the preset allows, over the plan's devices.

    The error names the dimension that does not divide and lists the meshes that would, where the
    same mistake would otherwise surface as an ``IndivisibleError`` deep in the checkpoint loader.
    """
    too_wide = 2 * max_tp(plan.preset)[0]
    fsdp = max(1, plan.fsdp * plan.tp // too_wide)
    try:
        validate_mesh(plan.preset, fsdp, too_wide, plan.batch)
    except MeshError as err:
        return MeshRefusal(fsdp=fsdp, tp=too_wide, error=str(err))
    return MeshRefusal(fsdp=fsdp, tp=too_wide, error="")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LocalCheck:
    """The planned mesh built on this process's devices and :func:`sharded_checksum` run on it.

    ``mesh`` and ``checksum`` are None when the plan needs more devices than this process has
    (a plan for a slice this host is not).
    """

    planned_for: str
    num_devices: int
    mesh: Any  # jax.sharding.Mesh, or None
    checksum: dict[str, Any] | None

    def describe(self) -> str:
        if self.mesh is None:
            return f"planned for {self.planned_for}; this process has only {self.num_devices} devices"
        return f"{self.mesh}\n{self.checksum}"

    def results(self) -> dict[str, Any]:
        """What notebook 01 records: the checksum, nothing when the mesh could not be built here."""
        return {} if self.checksum is None else {"local_check": self.checksum}


def check_on_devices(plan: MeshPlan, runtime: Runtime | None = None) -> LocalCheck:
    """Build ``plan``'s mesh on this process's devices and compute on it, if they suffice.

    The checksum (a sum of squares and the trace of ``x.T @ x``, contracted over the
    fsdp-sharded rows) must equal its closed form within ``bound``.
    """
    runtime = runtime or detect_runtime()
    if plan.fsdp * plan.tp > runtime.num_devices:
        return LocalCheck(planned_for=plan.choice.slice, num_devices=runtime.num_devices, mesh=None, checksum=None)
    device_mesh = make_mesh(plan.fsdp, plan.tp)
    return LocalCheck(
        planned_for=plan.choice.slice,
        num_devices=runtime.num_devices,
        mesh=device_mesh,
        checksum=sharded_checksum(device_mesh),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostsCheck:
    """Processes on this machine playing the hosts of a slice: each one's view of one global mesh."""

    processes: int  # 0: not run
    hosts: tuple[dict[str, Any], ...]  # sharded_checksum of each process, in process order

    @property
    def agree(self) -> bool:
        """Every process computed the same sum of squares and the same trace."""
        return len({h["sum_sq"] for h in self.hosts}) == 1 and len({h["trace"] for h in self.hosts}) == 1

    def describe(self) -> str:
        if not self.processes:
            return "no simulated hosts (0 processes asked for)"
        return f"all processes agree: {self.agree}"

    def table(self) -> list[dict[str, Any]]:
        """One row per process: its index, its devices, what it computed, the closed form and bound."""
        return list(self.hosts)

    def results(self) -> dict[str, Any]:
        """What notebook 01 records: each process's result and whether they agree; nothing if not run."""
        if not self.processes:
            return {}
        return {"multihost": list(self.hosts), "multihost_agree": self.agree}


def simulate_hosts(
    processes: int, devices_per_process: int, preset: str | models.ModelPreset, *, timeout_s: float = 120.0
) -> HostsCheck:
    """:func:`run_local_multiprocess` with ``processes`` hosts of fake CPU devices; 0 runs nothing.

    The mesh is tp 2 (or less where ``preset`` allows less) with the remaining devices on fsdp,
    so that the checksum's contraction crosses processes.
    """
    if processes < 0:
        raise ValueError(f"simulate_hosts(processes={processes}): use 0 (skip) or more")
    if not processes:
        return HostsCheck(processes=0, hosts=())
    tp = min(2, max_tp(preset)[0])
    hosts = run_local_multiprocess(processes, devices_per_process, tp=tp, timeout_s=timeout_s)
    return HostsCheck(processes=processes, hosts=tuple(hosts))
