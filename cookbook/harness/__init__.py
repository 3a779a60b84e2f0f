"""The harness: notebook records, the run report, the demo and the command line."""

from cookbook.harness._cli import (  # noqa: F401
    COMMANDS,
    build_parser,
    main,
)
from cookbook.harness._demo import (  # noqa: F401
    KERNEL_SHUTDOWN_WAIT_S,
    REPO,
    TYPICAL_SECONDS,
    NotebookFailed,
    default_jobs,
    ipc_kernel_manager,
    list_notebooks,
    next_ready,
    parse_parameters,
    run_demo,
    schedule,
)
from cookbook.harness._demo import register_cli as register_demo_cli  # noqa: E402, F401, I001
from cookbook.harness._gpu_recipe_cli import register_cli as register_gpu_recipe_cli  # noqa: E402, F401, I001
from cookbook.harness._record import (  # noqa: F401
    load_results,
    parameter_form,
    record,
    work_dir,
)
from cookbook.harness._report import (  # noqa: F401
    ReportError,
    write_report,
)
