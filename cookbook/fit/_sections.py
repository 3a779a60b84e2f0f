"""Notebook 03's sections, each a typed result: a base sharded on a mesh, LoRA on it, an optimizer
built inside ``jit`` (replicated), the fix, and training that keeps the fixed layout.

Each step is one call that returns what its section shows (``describe()``) and what the notebook
records (``results()``); the work is ``_sharding``'s (the projected specs, the memory table, the
replica check, the move) and ``_step``'s (the train step), written by hand there because no
library derives these shardings. The steps hand the model and optimizer on: each later step
works on the earlier one's arrays in place (the fix moves them; training updates them), while
the memory tables are snapshots taken when each step ran.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cookbook import lora as lora_lib
from cookbook import mesh as mesh_lib
from cookbook import models
from cookbook.fit._remat import example_batch
from cookbook.fit._sharding import (
    LoraSpec,
    check_no_large_replicas,
    lora_specs,
    memory_table,
    shard_train_state,
    sharding_signature,
)
from cookbook.fit._step import run_train_steps


def _row(table: tuple[dict[str, Any], ...], what: str) -> dict[str, Any]:
    return next(r for r in table if r["what"] == what)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShardedBase:
    """The base model loaded onto an (fsdp, tp) mesh chosen for the devices present."""

    preset: str  # the preset's name
    fsdp: int
    tp: int
    reason: str  # why this mesh (``mesh.mesh_for_devices``)
    mesh: Any  # the jax.sharding.Mesh its weights are on
    model: Any  # the Tunix model

    def describe(self) -> str:
        return f"{self.reason}\n{self.mesh}"

    def results(self) -> dict[str, Any]:
        return {"preset": self.preset, "mesh": [self.fsdp, self.tp]}


def load_sharded_base(preset: str, fsdp: int = 0, tp: int = 0, *, batch: int) -> ShardedBase:
    """``preset``'s base on an ``fsdp x tp`` mesh (0: from the devices present, for ``batch``).

    Raises ``ValueError`` when ``batch`` does not split evenly over the fsdp axis: the check
    steps shard the batch on it.
    """
    p = models.get_preset(preset)
    choice = mesh_lib.mesh_for_devices(p, fsdp, tp, batch=batch)
    fsdp, tp = choice.shape
    if batch % fsdp:
        raise ValueError(f"batch={batch} must be a multiple of fsdp={fsdp}: the batch is sharded on fsdp")
    mesh = mesh_lib.make_mesh(fsdp, tp)
    model = models.load_tunix_model(models.ensure_base(p), p, mesh=mesh)
    return ShardedBase(preset=p.name, fsdp=fsdp, tp=tp, reason=choice.reason, mesh=mesh, model=model)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoraOnMesh:
    """LoRA applied to a sharded base, and the sharding each adapter pair should have."""

    base: ShardedBase
    config: lora_lib.LoraConfig
    model: Any  # the base with LoRA applied (the same module tree)
    specs: tuple[LoraSpec, ...]  # one per adapted weight: the base's spec projected onto A and B

    @property
    def k_eq_v_b_specs(self) -> list[str]:
        """B's spec of the shared K = V projection (``k_einsum``), the first one found."""
        return [str(s.b_spec) for s in self.specs if "k_einsum" in s.path][:1]

    def describe(self) -> str:
        return (
            f"{len(self.specs)} LoRA pairs (rank {self.config.rank}, alpha {self.config.alpha}, "
            f"{self.config.targets}); B of the K = V weight: {', '.join(self.k_eq_v_b_specs) or 'none'}"
        )

    def results(self) -> dict[str, Any]:
        return {"lora_pairs": len(self.specs), "k_eq_v_b_spec": self.k_eq_v_b_specs}


def lora_on_mesh(base: ShardedBase, *, rank: int, alpha: float, targets: str = "all-linear") -> LoraOnMesh:
    """LoRA on every ``targets`` weight of ``base``'s model, applied on its mesh, with the specs
    each pair should have (:func:`cookbook.fit._sharding.lora_specs`)."""
    config = lora_lib.LoraConfig(rank=rank, alpha=alpha, targets=targets)
    model = lora_lib.apply_lora(base.model, config, preset=base.preset, mesh=base.mesh)
    return LoraOnMesh(base=base, config=config, model=model, specs=tuple(lora_specs(model)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class JitBuiltOptimizer:
    """AdamW over the LoRA parameters, built inside ``jit``: its state as it came out."""

    lora: LoraOnMesh
    optimizer: Any  # the nnx.Optimizer (its mu and nu as jit placed them)
    table: tuple[dict[str, Any], ...]  # the memory table right after it was built
    min_replica_bytes: int
    replica_error: str  # what the replica check said; "" if it passed (one device: nothing is shared)

    @property
    def model(self):
        return self.lora.model

    def describe(self) -> str:
        if not self.replica_error:
            return f"replica check: nothing of >= {self.min_replica_bytes:,} bytes is on every device whole"
        return "replica check: " + self.replica_error[:600]

    def results(self) -> dict[str, Any]:
        opt = _row(self.table, "optimizer state")
        return {
            "opt_replicated_mib_before": opt["replicated_mib"],
            "opt_max_per_device_mib_before": opt["max_per_device_mib"],
        }


def jit_built_optimizer(
    adapted: LoraOnMesh, *, learning_rate: float, min_replica_bytes: int = 1024
) -> JitBuiltOptimizer:
    """Build ``nnx.Optimizer(model, optax.adamw(learning_rate), wrt=nnx.LoRAParam)`` under
    ``nnx.jit``, the usual way to avoid materialising it on one host first, and measure where its
    state landed. Nothing fails: the replica check's complaint is kept to show."""
    import optax
    from flax import nnx

    def build(model):
        return nnx.Optimizer(model, optax.adamw(learning_rate), wrt=nnx.LoRAParam)

    optimizer = nnx.jit(build)(adapted.model)
    table = tuple(memory_table(adapted.model, optimizer))
    try:
        check_no_large_replicas(adapted.model, optimizer, min_bytes=min_replica_bytes)
        error = ""
    except ValueError as err:
        error = str(err)
    return JitBuiltOptimizer(
        lora=adapted, optimizer=optimizer, table=table, min_replica_bytes=min_replica_bytes, replica_error=error
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class FixedShardings:
    """The LoRA parameters and optimizer state after ``shard_train_state``."""

    replicated: JitBuiltOptimizer  # the state before (its arrays are the ones moved)
    moved: dict[str, int]  # arrays moved: {"lora": n, "optimizer": n}
    table: tuple[dict[str, Any], ...]  # the memory table after the move

    @property
    def model(self):
        return self.replicated.model

    @property
    def optimizer(self):
        return self.replicated.optimizer

    def describe(self) -> str:
        opt, lora = _row(self.table, "optimizer state"), _row(self.table, "LoRA params")
        return (
            f"moved: {self.moved}; the optimizer state's fullest device holds {opt['max_per_device_mib']:.3f} MiB "
            f"against the LoRA parameters' {lora['max_per_device_mib']:.3f} (mu and nu: twice)"
        )

    def results(self) -> dict[str, Any]:
        opt, lora = _row(self.table, "optimizer state"), _row(self.table, "LoRA params")
        return {
            "moved": self.moved,
            "opt_replicated_mib_after": opt["replicated_mib"],
            "opt_max_per_device_mib_after": opt["max_per_device_mib"],
            "lora_max_per_device_mib": lora["max_per_device_mib"],
            "opt_total_mib": opt["total_mib"],
        }


def fix_shardings(replicated: JitBuiltOptimizer) -> FixedShardings:
    """Write the projected specs into the LoRA variables and move every LoRA parameter and
    optimizer leaf onto its ``NamedSharding`` (:func:`cookbook.fit.shard_train_state`), in place."""
    mesh = replicated.lora.base.mesh
    moved = shard_train_state(replicated.model, replicated.optimizer, mesh=mesh)
    table = tuple(memory_table(replicated.model, replicated.optimizer))
    return FixedShardings(replicated=replicated, moved=moved, table=table)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayoutAfterTraining:
    """A few train steps on the fixed state, and which arrays' shardings they changed."""

    losses: list[float]
    arrays_compared: int  # LoRA parameters and optimizer-state leaves
    changed: tuple[str, ...]  # those whose (shard shape, replicated) changed

    def describe(self) -> str:
        return (
            f"losses: {[round(x, 4) for x in self.losses]} | arrays whose sharding changed: "
            f"{len(self.changed)} of {self.arrays_compared}"
        )

    def results(self) -> dict[str, Any]:
        return {"losses": self.losses, "shardings_changed_by_training": len(self.changed)}


def check_layout_kept(fixed: FixedShardings, *, batch: int, seq_len: int, steps: int) -> LayoutAfterTraining:
    """``steps`` steps of the update Tunix's ``PeftTrainer`` runs (:func:`cookbook.fit._step.run_train_steps`)
    on one random batch sharded on the mesh; the layout before and after compared. Raises
    ``ValueError`` if training left a large array replicated (the fix's threshold)."""
    model, optimizer = fixed.model, fixed.optimizer
    before = sharding_signature(model, optimizer)
    data = example_batch(batch, seq_len, model.config.num_embed, mesh=fixed.replicated.lora.base.mesh)
    losses = run_train_steps(model, optimizer, data, steps)
    after = sharding_signature(model, optimizer)
    check_no_large_replicas(model, optimizer, min_bytes=fixed.replicated.min_replica_bytes)
    changed = tuple(k for k, v in after.items() if before.get(k) != v)
    return LayoutAfterTraining(losses=losses, arrays_compared=len(after), changed=changed)
