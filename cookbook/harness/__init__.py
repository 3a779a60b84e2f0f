"""The harness: notebook records, the run report, the demo and the command line."""

from cookbook.core import work_dir  # the run's work directory, where the stages write too
from cookbook.harness._cli import main
from cookbook.harness._demo import ipc_kernel_manager, schedule
from cookbook.harness._demo import register_cli as register_demo_cli
from cookbook.harness._eval_cli import register_cli as register_eval_cli
from cookbook.harness._gpu_recipe_cli import register_cli as register_gpu_recipe_cli
from cookbook.harness._record import parameter_form, record

__all__ = [
    # what a notebook records and where it works
    "record",
    "work_dir",
    "parameter_form",
    # the demo: notebooks run in parallel, each in its own kernel
    "schedule",
    "ipc_kernel_manager",
    # the command line (cookbook <command>; cookbook demo, and cookbook eval and gpu-recipe, which
    # put later stages' sources together with earlier stages' commands)
    "main",
    "register_demo_cli",
    "register_eval_cli",
    "register_gpu_recipe_cli",
]
