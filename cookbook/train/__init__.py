"""Stage 06: LoRA fine-tuning with Tunix's PeftTrainer, Orbax checkpoints, the run cache, evaluation."""

from cookbook.train._train import (  # noqa: F401
    NonFiniteLossError,
    TrainConfig,
    build_lora_model,
    cache_key,
    checkpoint_steps,
    cli_command,
    config_from_args,
    config_of_run,
    describe_configs,
    ensure_trained,
    eval_rows,
    evaluate,
    load_tokenizer,
    lora_arrays,
    make_optimizer,
    make_sampler,
    plot_loss,
    read_metrics,
    recipe,
    resolve_base_dir,
    restore_lora_model,
    result_determinants,
    train,
    train_preset,
)
from cookbook.train._train import register_cli as register_train_cli  # noqa: E402, F401, I001
