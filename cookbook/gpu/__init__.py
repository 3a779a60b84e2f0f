"""Stage 06, section 8: the GPU recipe (TRL + PEFT + FSDP) with the TPU run's objective, and its parity check;
the same for the RL stage (TRL's GRPOTrainer with ``cookbook rl``'s objective).

``_recipe`` derives the SFT recipe and writes it (``train_gpu.py`` beside its configs);
``_rl_recipe`` does the same for RL (``train_grpo_gpu.py``); ``_recipe_dir`` says where a recipe
may be written; ``_parity`` and ``_rl_parity`` check on CPU that each optimises the TPU run's
objective (``_parity_parts`` holds the shared pieces); ``_sections`` is notebook 06's GPU section;
``_recipe_cli`` is the ``cookbook gpu-recipe`` parser.
"""

from cookbook.gpu._parity import CPU_OVERRIDES, import_train_script
from cookbook.gpu._recipe import GpuCluster, derive_gpu_recipe, write_gpu_recipe
from cookbook.gpu._recipe_cli import register_cli as add_gpu_recipe_parser
from cookbook.gpu._recipe_dir import check_recipe_dir
from cookbook.gpu._rl_recipe import derive_gpu_rl_recipe, rl_launch_command, rl_summary, write_gpu_rl_recipe
from cookbook.gpu._sections import write_recipe_for

__all__ = [
    # notebook 06's GPU section, a typed result
    "write_recipe_for",
    # the SFT recipe: TRL + PEFT + accelerate FSDP on a GPU cluster
    "GpuCluster",
    "derive_gpu_recipe",
    "write_gpu_recipe",
    "check_recipe_dir",
    # the RL recipe: TRL's GRPOTrainer with cookbook rl's objective
    "derive_gpu_rl_recipe",
    "write_gpu_rl_recipe",
    "rl_summary",
    "rl_launch_command",
    # the written train_gpu.py imported and run on CPU (benchmarks/gpu_recipe_e2e.py, train_step_stacks.py)
    "import_train_script",
    "CPU_OVERRIDES",
    # the command line (cookbook gpu-recipe's parser)
    "add_gpu_recipe_parser",
]
