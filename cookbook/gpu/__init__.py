"""Stage 06, section 8: the GPU recipe (TRL + PEFT + FSDP) with the TPU run's objective, and its parity check;
the same for the RL stage (TRL's GRPOTrainer with ``cookbook rl``'s objective)."""

from cookbook.gpu._parity import (  # noqa: F401
    CPU_OVERRIDES,
    import_train_script,
    run_parity,
)
from cookbook.gpu._recipe import (  # noqa: F401
    GpuCluster,
    accelerate_fsdp_config,
    derive_gpu_recipe,
    gpu_batch_layout,
    peft_target_regex,
    write_gpu_recipe,
)
from cookbook.gpu._recipe_cli import register_cli as add_gpu_recipe_parser  # noqa: E402, F401, I001
from cookbook.gpu._recipe_dir import RECIPE_FILES, check_recipe_dir  # noqa: E402, F401, I001
from cookbook.gpu._rl_parity import (  # noqa: E402, F401, I001
    RL_CPU_OVERRIDES,
    import_grpo_script,
    run_rl_parity,
)
from cookbook.gpu._rl_recipe import (  # noqa: E402, F401, I001
    RL_RECIPE_FILES,
    derive_gpu_rl_recipe,
    rl_launch_command,
    rl_summary,
    write_gpu_rl_recipe,
)
from cookbook.gpu._sections import write_recipe_for  # noqa: E402, F401, I001
