"""Stage 01: devices, the (fsdp, tp) mesh a preset allows on a slice, and multi-host start-up."""

# The slices themselves live in the hardware table (cookbook.core); re-exported for notebook 01.
from cookbook.core import SLICES, chip_of, get_slice  # noqa: E402, F401
from cookbook.mesh._mesh import (  # noqa: F401
    MeshError,
    choose_mesh,
    detect_runtime,
    initialize_distributed,
    make_mesh,
    max_tp,
    mesh_rules,
    run_local_multiprocess,
    sharded_checksum,
    valid_meshes,
    validate_mesh,
)
