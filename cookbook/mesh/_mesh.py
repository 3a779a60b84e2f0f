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
        raise ValueError(f"mesh fsdp={fsdp} x tp={tp} needs {fsdp * tp} devices; only {len(devices)} are present")
    grid = np.asarray(devices[: fsdp * tp]).reshape(fsdp, tp)
    return jax.sharding.Mesh(grid, ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)


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
    rules.append(MeshAxisRule(axis="fsdp", dimension="embed", size=p.embed_dim, where="all weights (D on fsdp)"))
    if batch is not None:
        rules.append(MeshAxisRule(axis="fsdp", dimension="batch", size=batch, where="activations (B on fsdp)"))
    return rules


class MeshError(ValueError):
    """A mesh that does not fit the model, the batch or the devices."""


def valid_meshes(preset: str | models.ModelPreset, num_devices: int, batch: int | None = None) -> list[tuple[int, int]]:
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
            f"{r.axis}={fsdp if r.axis == 'fsdp' else tp} does not divide {r.dimension} = {r.size} ({r.where})"
            for r in bad
        )
        valid = valid_meshes(p, n, batch)
        hint = f"valid (fsdp, tp) for {n} devices: {_fmt(valid)}"
        if not valid and batch is not None:
            hint += f" (none at batch {batch}; valid batch sizes are multiples of {_min_batch(p, n)})"
        raise MeshError(f"mesh fsdp={fsdp} x tp={tp} does not fit preset {p.name!r}: {what}. {hint}")


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


def choose_mesh(preset: str | models.ModelPreset, slice_: str | core.SliceSpec | int, batch: int | None) -> MeshChoice:
    """Pick (fsdp, tp) for training ``preset`` on a slice (or a device count) at ``batch``.

    Policy: as much tensor parallelism as the model allows (tp shards weights and compute
    and needs nothing from the batch; LoRA at micro-batch 1-2 has little activation memory
    for fsdp to save), the rest of the chips on fsdp, which needs the batch to divide.
    On v5p-8 (4 chips) that is the paper's fsdp 1 x tp 4; on v6e-8 fsdp 2 x tp 4. ``batch``
    None: no batch to divide (a mesh that only holds weights, as for loading a model).
    """
    p = models.get_preset(preset)
    s = core.cpu_slice(slice_) if isinstance(slice_, int) else core.get_slice(slice_)
    n = s.num_devices  # TPU7x: 2 per chip
    candidates = valid_meshes(p, n, batch)
    limit, bound = max_tp(p)
    if not candidates:
        any_batch = valid_meshes(p, n, None)
        raise MeshError(
            f"no mesh over the {n} devices of {s.name} fits preset {p.name!r} at batch {batch}: "
            f"model-valid meshes are {_fmt(any_batch)} and each needs the batch to divide by fsdp; "
            f"use a batch that is a multiple of {_min_batch(p, n)}" + (" (or fewer devices)" if any_batch else "")
        )
    fsdp, tp = max(candidates, key=lambda c: c[1])
    why = [
        f"{s.name} has {n} devices.",
        f"tp is capped at {limit} by {bound} = "
        f"{next(r.size for r in mesh_rules(p) if r.dimension == bound)}"
        + (f" (query heads: {p.num_heads}, KV heads: {p.num_kv_heads})." if bound != "query heads" else "."),
    ]
    if tp < min(limit, n):
        why.append(f"tp={min(limit, n)} would leave fsdp={n // min(limit, n)}, which batch {batch} does not fill.")
    why.append(
        f"Chose fsdp={fsdp} x tp={tp}: the largest tp that fits, the remaining factor {fsdp} on fsdp"
        + (f" (batch {batch} divides by it)." if batch is not None else ".")
    )
    return MeshChoice(fsdp=fsdp, tp=tp, slice=s.name, reason=" ".join(why), candidates=tuple(candidates))


def mesh_for_devices(
    preset: str | models.ModelPreset, fsdp: int = 0, tp: int = 0, batch: int | None = None
) -> MeshChoice:
    """The (fsdp, tp) that a notebook's mesh parameters ask for, 0 meaning "from the devices present".

    Both 0: :func:`choose_mesh` on the slice JAX runs on (:func:`detect_runtime`), so the same
    notebook runs on a one-chip Colab runtime (1 x 1), on a v5p-8 (1 x 4 for 31B) and on the CPU
    default of 8 fake devices (4 x 2 for ``tiny``). One of them 0: the devices the other leaves.
    Neither: as given (it may use fewer devices than are present); only the count is checked
    here, what the model's shapes allow is :func:`validate_mesh`'s.
    """
    from cookbook.mesh._runtime import detect_runtime

    if fsdp < 0 or tp < 0:
        raise MeshError(f"mesh fsdp={fsdp} x tp={tp}: give sizes of 1 or more, or 0 for 'from the devices present'")
    runtime = detect_runtime()
    n = runtime.num_devices
    if not fsdp and not tp:
        found = runtime.slice if runtime.slice is not None and runtime.slice.num_devices == n else n
        return choose_mesh(preset, found, batch)
    if not (fsdp and tp):  # one axis given: the other takes the devices it leaves
        given = fsdp or tp
        if n % given:
            raise MeshError(
                f"mesh {'fsdp' if fsdp else 'tp'}={given} does not divide the {n} devices present; "
                "give a divisor of the device count, or 0 for both to choose from the devices"
            )
        fsdp, tp = fsdp or n // tp, tp or n // fsdp
    if fsdp * tp > n:
        raise MeshError(f"mesh fsdp={fsdp} x tp={tp} needs {fsdp * tp} devices; {n} are present (0 and 0 choose)")
    return MeshChoice(
        fsdp=fsdp,
        tp=tp,
        slice=runtime.slice.name if runtime.slice is not None else f"{n} devices",
        reason=f"fsdp={fsdp} x tp={tp} as given: {fsdp * tp} of the {n} devices present.",
        candidates=tuple(valid_meshes(preset, n, batch)),
    )
