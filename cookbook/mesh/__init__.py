"""Stage 01: devices, the (fsdp, tp) mesh a preset allows on a slice, and multi-host start-up.

``_runtime`` says what this process runs on; ``_mesh`` holds the divisibility rules (read
from Tunix's sharding of Gemma 4: which dimension sits on which axis), builds and chooses
meshes; ``_plan`` holds notebook 01's steps as typed results; ``_distributed`` starts JAX's
multi-controller runtime and checks a global mesh across processes. The slices themselves are the hardware table's (``cookbook.core``).
"""

from cookbook.core import SLICES, chip_of, get_slice  # noqa: F401
from cookbook.mesh._distributed import (  # noqa: F401
    check_same_everywhere,
    initialize_distributed,
    run_local_multiprocess,
    sharded_checksum,
)
from cookbook.mesh._launch import launch_local, process_env  # noqa: E402, F401, I001
from cookbook.mesh._launch import register_cli as register_launch_cli  # noqa: E402, F401, I001
from cookbook.mesh._mesh import (  # noqa: F401
    MeshError,
    choose_mesh,
    make_mesh,
    max_tp,
    mesh_for_devices,
    mesh_rules,
    valid_meshes,
    validate_mesh,
)

# Notebook 01's steps, each a typed result
from cookbook.mesh._plan import (  # noqa: E402, F401, I001
    check_on_devices,
    plan_mesh,
    refuse_too_wide_mesh,
    simulate_hosts,
    tp_limit,
)
from cookbook.mesh._runtime import Runtime, detect_runtime, use_fake_cpu_devices  # noqa: F401
from cookbook.mesh._tables import plot_slices, slice_meshes, slice_table  # noqa: E402, F401, I001
