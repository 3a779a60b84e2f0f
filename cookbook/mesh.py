"""Device meshes for the TPU slice (and fake CPU devices): axes ``fsdp`` x ``tp``."""

from __future__ import annotations


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
