"""Stage 06: LoRA fine-tuning with Tunix's PeftTrainer, Orbax checkpoints, the run cache, evaluation."""

from cookbook.train._cli import config_from_args  # noqa: F401
from cookbook.train._cli import register_cli as register_train_cli  # noqa: F401
from cookbook.train._config import (  # noqa: F401
    TrainConfig,
    cli_command,
    describe_configs,
    for_sample_task,
    make_optimizer,
    recipe_of,
    train_preset,
)
from cookbook.train._evaluate import evaluate, qlora_twin  # noqa: F401
from cookbook.train._pod import pod_commands  # noqa: E402, F401, I001
from cookbook.train._run import Run, TrainedRun, cache_key, prepare, recipe  # noqa: F401
from cookbook.train._runs import (  # noqa: F401
    CHECKPOINT_DIRS,
    base_and_lora_model,
    build_lora_model,
    check_run_base,
    checkpoint_steps,
    config_of_run,
    eval_rows,
    load_lora_weights,
    load_recipe,
    lora_arrays,
    plot_loss,
    read_metrics,
    resolve_base_dir,
    restore_lora_model,
    result_determinants,
    run_summary,
    train_rows,
)
from cookbook.train._sections import multihost, reproducibility, rerun, run_overview, runtime_advice  # noqa: F401
from cookbook.train._trainer import NonFiniteLossError, ensure_trained, train  # noqa: F401
