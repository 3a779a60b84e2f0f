"""Shardings for LoRA parameters and optimizer state, and a per-device memory table.

Every LoRA ``A``/``B`` pair gets the partition spec of the base weight it adapts, projected
onto its own axes (``A`` keeps the spec of the weight's input axes, ``B`` of its output
axes; the rank axis is never sharded), and every optimizer-state leaf (AdamW's ``mu`` and
``nu``) gets the spec of the parameter it tracks. ``shard_train_state`` puts the arrays
there; ``abstract_with_shardings`` gives the same shardings to shape-only state, which is
how ``cookbook.fit`` compiles for a TPU slice.

Why it is needed: Qwix places LoRA weights correctly only when it runs eagerly on an
already-sharded model, and an optimizer (or LoRA) built inside ``jit`` comes out fully
replicated: every chip then holds a whole copy of ``mu`` and ``nu``. Written by hand:
neither Tunix, Qwix, flax nor optax derives these shardings for you.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from cookbook import core

LORA_SUFFIXES = ("_lora_a", "_lora_b")


# --------------------------------------------------------------------------------------
# Specs


def _spec_tuple(spec: Any, ndim: int) -> tuple:
    spec = tuple(spec or ())
    return spec + (None,) * (ndim - len(spec))


def _contracted_axes(module, weight_name: str, ndim: int) -> tuple[int, ...]:
    """Axes of the base weight that are summed over (its input axes)."""
    einsum_str = getattr(module, "einsum_str", None)
    if weight_name == "w" and einsum_str:
        lhs, rest = einsum_str.replace(" ", "").split(",")
        rhs, out = rest.split("->")
        return tuple(i for i, c in enumerate(rhs) if c in lhs and c not in out)
    if weight_name == "kernel" and ndim == 2:  # nnx.Linear: (in, out)
        return (0,)
    raise ValueError(
        f"cannot project a sharding onto LoRA of {type(module).__name__}.{weight_name}: "
        "only Tunix Einsum (w) and nnx.Linear (kernel) are supported"
    )


def project_lora_specs(base_spec: tuple, contracted: Iterable[int], ndim: int) -> tuple[tuple, tuple]:
    """(spec of A, spec of B) from the base weight's spec.

    ``A`` has the weight's input axes then the rank; ``B`` the rank then the output axes
    (Qwix's layout); the rank axis is replicated.
    """
    contracted = tuple(contracted)
    spec = _spec_tuple(base_spec, ndim)
    a = tuple(spec[i] for i in contracted) + (None,)
    b = (None,) + tuple(spec[i] for i in range(ndim) if i not in contracted)
    return a, b


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoraSpec:
    """The intended sharding of one LoRA pair."""

    path: str  # e.g. "layers/5/attn/k_einsum/w"
    base_shape: tuple[int, ...]
    base_spec: tuple
    a_shape: tuple[int, ...]
    a_spec: tuple
    b_shape: tuple[int, ...]
    b_spec: tuple


def lora_specs(model) -> list[LoraSpec]:
    """The projected spec of every LoRA pair in ``model`` (works on abstract models)."""
    from flax import nnx

    out = []
    for path, module in model.iter_modules():
        for name in ("w", "kernel"):
            a = getattr(module, name + "_lora_a", None)
            b = getattr(module, name + "_lora_b", None)
            base = getattr(module, name, None)
            if not (isinstance(a, nnx.Variable) and isinstance(b, nnx.Variable)):
                continue
            if not isinstance(base, nnx.Variable):  # QLoRA: Qwix's WithAux; its qvalue has the weight's shape and spec
                base = base.array.qvalue
            shape = tuple(base.get_value().shape)
            contracted = _contracted_axes(module, name, len(shape))
            a_spec, b_spec = project_lora_specs(core.variable_spec(base), contracted, len(shape))
            a_shape, b_shape = tuple(a.get_value().shape), tuple(b.get_value().shape)
            want_a = tuple(shape[i] for i in contracted)
            if a_shape[:-1] != want_a or len(b_shape) != len(shape) - len(contracted) + 1:
                raise ValueError(
                    f"{'/'.join(map(str, path))}: LoRA shapes A{a_shape} B{b_shape} do not follow "
                    f"weight {shape} (expected A{want_a + (a_shape[-1],)}); has Qwix's layout changed?"
                )
            out.append(
                LoraSpec(
                    path="/".join(map(str, (*path, name))),
                    base_shape=shape,
                    base_spec=core.variable_spec(base),
                    a_shape=a_shape,
                    a_spec=a_spec,
                    b_shape=b_shape,
                    b_spec=b_spec,
                )
            )
    if not out:
        raise ValueError("the model has no LoRA parameters; apply LoRA first (cookbook.lora.apply_lora)")
    return out


def set_lora_specs(model) -> list[LoraSpec]:
    """Write the projected specs into the LoRA variables' metadata (no data moves)."""
    specs = {s.path: s for s in lora_specs(model)}
    for path, module in model.iter_modules():
        for name in ("w", "kernel"):
            s = specs.get("/".join(map(str, (*path, name))))
            if s is None:
                continue
            getattr(module, name + "_lora_a").set_metadata(out_sharding=s.a_spec)
            getattr(module, name + "_lora_b").set_metadata(out_sharding=s.b_spec)
    return list(specs.values())


# --------------------------------------------------------------------------------------
# Matching optimizer-state leaves to parameters


def _key_str(k) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def _norm_path(path) -> tuple[str, ...]:
    keys = tuple(_key_str(k) for k in path)
    return keys[:-1] if keys and keys[-1] == "value" else keys


def _param_spec_index(params) -> dict[tuple[str, ...], tuple]:
    """Normalised key path -> spec for every leaf of an nnx state of Variables."""
    import jax
    from flax import nnx

    index = {}
    for path, var in jax.tree_util.tree_flatten_with_path(params, is_leaf=lambda x: isinstance(x, nnx.Variable))[0]:
        if isinstance(var, nnx.Variable):
            index[_norm_path(path)] = core.variable_spec(var)
    return index


def spec_for_state_leaf(path: tuple[str, ...], ndim: int, index: dict[tuple[str, ...], tuple]) -> tuple:
    """The spec of the parameter whose path is the longest suffix of ``path``; else replicated."""
    for start in range(len(path)):
        spec = index.get(path[start:])
        if spec is not None and len(spec) == ndim:
            return spec
    return (None,) * ndim


# --------------------------------------------------------------------------------------
# Putting live state where it belongs


def shard_train_state(model, optimizer=None, *, mesh) -> dict[str, int]:
    """Move LoRA parameters and optimizer state to their projected shardings on ``mesh``.

    Returns how many arrays moved (``{"lora": n, "optimizer": m}``); 0 means they were
    already right. Base weights are left as they were loaded.
    """
    import jax
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec

    set_lora_specs(model)
    moved = {"lora": 0, "optimizer": 0}

    def put(x, spec):
        target = NamedSharding(mesh, PartitionSpec(*spec))
        if getattr(x, "sharding", None) is not None and x.sharding.is_equivalent_to(target, x.ndim):
            return x, 0
        return jax.device_put(x, target), 1

    lora_state = nnx.state(model, nnx.LoRAParam)
    for _, var in lora_state.flat_state():
        new, n = put(var.get_value(), core.variable_spec(var))
        var.set_value(new)
        moved["lora"] += n
    nnx.update(model, lora_state)
    if optimizer is not None:
        index = _param_spec_index(lora_state)
        opt_state = nnx.state(optimizer, nnx.optimizer.OptState)
        for path, var in opt_state.flat_state():
            value = var.get_value()
            spec = spec_for_state_leaf(_norm_path(path), value.ndim, index)
            new, n = put(value, spec)
            var.set_value(new)
            if value.ndim:
                var.set_metadata(out_sharding=spec)
            moved["optimizer"] += n
        nnx.update(optimizer, opt_state)
    return moved


# --------------------------------------------------------------------------------------
# Shape-only state for ahead-of-time compilation


def abstract_with_shardings(state, mesh):
    """``jax.ShapeDtypeStruct`` leaves with ``NamedSharding(mesh, variable's spec)``."""
    import jax
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec

    def to_sds(var):
        if not isinstance(var, nnx.Variable):
            return var
        value = var.get_value()
        spec = core.divisible_spec(core.variable_spec(var), value.shape, mesh)  # as lora places Qwix's scales
        return var.replace(
            jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=NamedSharding(mesh, PartitionSpec(*spec)))
        )

    return jax.tree.map(to_sds, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def abstract_optimizer_state(tx, params_abstract, mesh):
    """Shapes of ``tx.init(params)`` with each leaf sharded like the parameter it tracks."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    index = _param_spec_index(params_abstract)
    shapes = jax.eval_shape(tx.init, params_abstract)

    def with_sharding(path, x):
        spec = spec_for_state_leaf(_norm_path(path), len(x.shape), index)
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, PartitionSpec(*spec)))

    return jax.tree_util.tree_map_with_path(with_sharding, shapes)


# --------------------------------------------------------------------------------------
# Memory per device and accidental replication


@dataclasses.dataclass(frozen=True, kw_only=True)
class ArrayPlacement:
    path: str
    shape: tuple[int, ...]
    nbytes: int
    spec: str
    shard_shape: tuple[int, ...]
    replicated: bool  # every device holds the whole array


def placements(tree, prefix: str = "") -> list[ArrayPlacement]:
    """Where every array of ``tree`` (an nnx state, or any pytree) lives."""
    import jax
    from jax.sharding import NamedSharding

    out = []
    for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if not hasattr(x, "sharding") or not hasattr(x, "addressable_shards"):
            continue
        sh = x.sharding
        spec = str(sh.spec) if isinstance(sh, NamedSharding) else type(sh).__name__
        out.append(
            ArrayPlacement(
                path=prefix + "/".join(_norm_path(path)),
                shape=tuple(x.shape),
                nbytes=int(x.nbytes),
                spec=spec,
                shard_shape=tuple(sh.shard_shape(x.shape)),
                replicated=len(sh.device_set) > 1 and sh.is_fully_replicated,
            )
        )
    return out


def per_device_bytes(tree) -> dict[Any, int]:
    """Bytes each device holds for ``tree`` (from the actual shards)."""
    import jax

    totals: dict[Any, int] = {}
    for x in jax.tree.leaves(tree):
        for shard in getattr(x, "addressable_shards", ()):
            totals[shard.device] = totals.get(shard.device, 0) + int(shard.data.nbytes)
    return totals


def memory_table(model, optimizer=None) -> list[dict[str, Any]]:
    """Rows of (what, arrays, total MiB, max MiB on one device, replicated MiB per device)."""
    from flax import nnx

    groups = {
        "base params": nnx.state(model, nnx.Param),
        "LoRA params": nnx.state(model, nnx.LoRAParam),
    }
    if optimizer is not None:
        groups["optimizer state"] = nnx.state(optimizer, nnx.optimizer.OptState)
    rows = []
    mib = 2**20
    for what, state in groups.items():
        pl = placements(state)
        per_dev = per_device_bytes(state)
        rows.append(
            {
                "what": what,
                "arrays": len(pl),
                "total_mib": sum(p.nbytes for p in pl) / mib,
                "max_per_device_mib": max(per_dev.values(), default=0) / mib,
                "replicated_mib": sum(p.nbytes for p in pl if p.replicated) / mib,
            }
        )
    return rows


def format_memory_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'what':<16} {'arrays':>6} {'total MiB':>10} {'max/device MiB':>15} {'replicated MiB':>15}"]
    for r in rows:
        lines.append(
            f"{r['what']:<16} {r['arrays']:>6} {r['total_mib']:>10.3f} {r['max_per_device_mib']:>15.3f} "
            f"{r['replicated_mib']:>15.3f}"
        )
    return "\n".join(lines)


def replicated_arrays(tree, *, min_bytes: int = 1024) -> list[ArrayPlacement]:
    """Arrays of at least ``min_bytes`` that every device holds whole (likely by accident)."""
    return [p for p in placements(tree) if p.replicated and p.nbytes >= min_bytes]


def check_no_large_replicas(model, optimizer=None, *, min_bytes: int = 1024) -> None:
    """Raise listing every array >= ``min_bytes`` replicated on all devices."""
    from flax import nnx

    trees = {"model": nnx.state(model)}
    if optimizer is not None:
        trees["optimizer"] = nnx.state(optimizer, nnx.optimizer.OptState)
    bad = [(name, p) for name, tree in trees.items() for p in replicated_arrays(tree, min_bytes=min_bytes)]
    if bad:
        listing = "\n".join(f"  {name}: {p.path} {p.shape} ({p.nbytes:,} bytes)" for name, p in bad[:20])
        raise ValueError(
            f"{len(bad)} arrays of >= {min_bytes:,} bytes are replicated on every device:\n{listing}\n"
            "Call cookbook.fit.shard_train_state(model, optimizer, mesh=mesh) to shard them."
        )


def format_lora_specs(specs: list[LoraSpec], *, layers: tuple[int, ...] = (0,)) -> str:
    """A table of base spec -> A spec, B spec for the LoRA pairs of some layers."""
    keep = [s for s in specs if any(s.path.startswith(f"layers/{i}/") for i in layers)]
    lines = [f"{'weight':<32} {'base spec':<28} {'A spec':<18} {'B spec':<26}"]
    for s in keep:
        lines.append(f"{s.path:<32} {s.base_spec!s:<28} {s.a_spec!s:<18} {s.b_spec!s:<26}")
    return "\n".join(lines)


def plot_memory(before: list[dict[str, Any]], after: list[dict[str, Any]], title: str = ""):
    """Bars: the most any one device holds, per group, before and after the fix."""
    import matplotlib.pyplot as plt
    import numpy as np

    names = [r["what"] for r in before]
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.bar(x - 0.2, [r["max_per_device_mib"] for r in before], 0.4, label="before (jitted optimizer)")
    ax.bar(x + 0.2, [r["max_per_device_mib"] for r in after], 0.4, label="after shard_train_state")
    ax.set_xticks(x, names)
    ax.set_ylabel("MiB on the fullest device")
    ax.set_title(title or "per-device memory")
    ax.legend()
    fig.tight_layout()
    return fig


def sharding_signature(model, optimizer=None) -> dict[str, tuple]:
    """path -> (per-device shard shape, replicated?) for LoRA params and optimizer state.

    Compares physical layouts: ``P('fsdp', None)`` and ``P('fsdp')`` are the same layout.
    """
    from flax import nnx

    def sig(pl):
        return {p.path: (p.shard_shape, p.replicated) for p in pl}

    out = sig(placements(nnx.state(model, nnx.LoRAParam), "lora/"))
    if optimizer is not None:
        out.update(sig(placements(nnx.state(optimizer, nnx.optimizer.OptState), "opt/")))
    return out
