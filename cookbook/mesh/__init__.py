"""Stage 01: devices, the (fsdp, tp) mesh a preset allows on a slice, and multi-host start-up.

``_runtime`` says what this process runs on; ``_mesh`` holds the divisibility rules (read
from Tunix's sharding of Gemma 4: which dimension sits on which axis), builds and chooses
meshes; ``_plan`` holds notebook 01's steps as typed results; ``_distributed`` starts JAX's
multi-controller runtime and checks a global mesh across processes. The slices themselves are the hardware table's (``cookbook.core``).
"""

from cookbook.mesh._distributed import check_same_everywhere, initialize_distributed
from cookbook.mesh._launch import launch_local
from cookbook.mesh._launch import register_cli as register_launch_cli
from cookbook.mesh._mesh import (
    MeshError,
    choose_mesh,
    make_mesh,
    max_tp,
    mesh_for_devices,
    valid_meshes,
    validate_mesh,
)
from cookbook.mesh._plan import check_on_devices, plan_mesh, refuse_too_wide_mesh, simulate_hosts, tp_limit
from cookbook.mesh._runtime import detect_runtime
from cookbook.mesh._tables import plot_slices, slice_meshes, slice_table

__all__ = [
    # what this process runs on
    "detect_runtime",
    # notebook 01's steps, each a typed result
    "tp_limit",
    "plan_mesh",
    "refuse_too_wide_mesh",
    "check_on_devices",
    "simulate_hosts",
    "slice_table",
    "slice_meshes",
    "plot_slices",
    # the (fsdp, tp) mesh: the divisibility rules, building and choosing one
    "make_mesh",
    "mesh_for_devices",
    "choose_mesh",
    "valid_meshes",
    "validate_mesh",
    "max_tp",
    # several processes: JAX's multi-controller start-up, one global mesh
    "initialize_distributed",
    "check_same_everywhere",
    "launch_local",
    # the command line (cookbook launch)
    "register_launch_cli",
    # errors: a mesh that does not fit the preset, the batch or the devices present
    "MeshError",
]
