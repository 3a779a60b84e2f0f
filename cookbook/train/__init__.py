"""Stage 06: LoRA fine-tuning with Tunix's PeftTrainer, Orbax checkpoints, the run cache, evaluation.

``_config`` holds a run as data (:class:`TrainConfig`, the recipe per preset, the optimizer it
implies); ``_run`` resolves a config once and types a finished run; ``_trainer`` trains with
Tunix's ``PeftTrainer``, resumably, and keeps runs in the cache (:func:`ensure_trained`);
``_runs`` reads run directories back (their config, metrics, checkpoints, LoRA weights);
``_evaluate`` scores a LoRA model by greedy exact match; ``_pod`` writes the commands of a
multi-host pod run; ``_sections`` holds notebook 06's training steps as typed results, and
``_scores`` its scores of the base, the fine-tune and the thinking run (``cookbook.evaluate``'s
simulator on their greedy answers); ``_cli`` is ``cookbook train``.
"""

from cookbook.train._cli import register_cli as register_train_cli
from cookbook.train._config import (
    TrainConfig,
    cli_command,
    describe_configs,
    for_sample_task,
    make_optimizer,
    train_preset,
)
from cookbook.train._evaluate import evaluate, qlora_twin
from cookbook.train._run import prepare
from cookbook.train._runs import (
    CHECKPOINT_DIRS,
    base_and_lora_model,
    build_lora_model,
    check_run_base,
    checkpoint_steps,
    config_of_run,
    eval_rows,
    load_lora_weights,
    load_recipe,
    plot_loss,
    read_metrics,
    resolve_base_dir,
    restore_lora_model,
    result_determinants,
    train_rows,
)
from cookbook.train._scores import metric_examples, score_base_model, score_fine_tuned, score_thinking_variant
from cookbook.train._sections import multihost, reproducibility, rerun, run_overview, runtime_advice
from cookbook.train._trainer import NonFiniteLossError, ensure_trained

__all__ = [
    # the config: a run as data, the recipe per preset, the optimizer it implies
    "TrainConfig",
    "train_preset",
    "for_sample_task",
    "describe_configs",
    "cli_command",
    "make_optimizer",
    # notebook 06's training steps, each a typed result
    "runtime_advice",
    "run_overview",
    "reproducibility",
    "rerun",
    "multihost",
    "qlora_twin",
    # notebook 06's scores of its runs (the simulator's and exact match), each a typed result
    "score_base_model",
    "score_fine_tuned",
    "metric_examples",
    "score_thinking_variant",
    # training, once per config: the run cache and what keys it
    "prepare",
    "ensure_trained",
    "result_determinants",
    # a run directory read back: its config, base, rows, metrics, checkpoints and LoRA model
    "CHECKPOINT_DIRS",
    "config_of_run",
    "load_recipe",
    "read_metrics",
    "plot_loss",
    "checkpoint_steps",
    "resolve_base_dir",
    "check_run_base",
    "train_rows",
    "eval_rows",
    "build_lora_model",
    "base_and_lora_model",
    "load_lora_weights",
    "restore_lora_model",
    # greedy exact match of a LoRA model with Tunix's sampler
    "evaluate",
    # the command line (cookbook train)
    "register_train_cli",
    # errors: a loss that is no longer finite stops the run
    "NonFiniteLossError",
]
