"""The GPU baseline for RL: TRL's ``GRPOTrainer`` recipe that optimises ``cookbook rl``'s objective.

``cookbook rl`` runs Tunix's DAPO (or GRPO) learner on the SFT run's LoRA, rewarded by Icarus
Verilog's verdict on the final answer plus a format term. The GPU recipe is *derived* from the same
``cookbook.rl.RLConfig`` and the SFT run's ``cookbook.train.TrainConfig`` (its model and LoRA), and
every TRL 1.16 default that would change the objective is set explicitly:

=========================  ======================================  ==========================================
what                       Tunix (``cookbook rl``)                 derived ``GRPOConfig`` / script
=========================  ======================================  ==========================================
reward                     1 x simulator pass + 0.1 x format       the same, restated in the script (it needs no
                           (``cookbook.rl.VerilogReward``)         cookbook); ``reward_weights=[1.0]``
samples per prompt         ``num_generations`` = G                 ``num_generations`` = G
advantage                  (r - mean_G) / (std_G + 1e-6)           ``scale_rewards="group"``: / (std_G + 1e-4)
                           (std with ddof 1)                       (unbiased std); not settable: see notes
importance ratio           per token, exp(clip(logp - old, 20))    ``importance_sampling_level="token"``
clipping                   clip(r, 1 - 0.2, 1 + 0.28) (DAPO)       ``epsilon`` 0.2, ``epsilon_high`` 0.28
                                                                   (TRL's default high side is epsilon);
                                                                   ``delta=None`` (no two-sided clip)
loss aggregation           token mean over the step's batch        ``loss_type="dapo"``: tokens of the whole
                           (``loss_agg_mode="token-mean"``)        step, every GPU and micro-batch ("bnpo"
                                                                   would average micro-batch means, "grpo"
                                                                   sequence means)
KL to a reference          none (DAPO; GRPO here with beta 0)      ``beta=0.0``; beta > 0 is refused
iterations per batch       1 (one optimizer step per batch)        ``num_iterations=1``, ``steps_per_generation``
                                                                   = ``gradient_accumulation_steps``
temperature in the loss    logits / T                              fused LM head divides by ``temperature``
sampling                   T, top-p, no top-k, stop on <eos>,      ``temperature``, ``top_p``, ``top_k=0``,
                           <turn|>, <|tool_response>, kept         ``min_p=None``, ``repetition_penalty=1``;
                                                                   the script sets the model's eos ids
truncated completions      in the loss                             ``mask_truncated_completions=False``
reward's text              decoded with special tokens             decoded by the script from
                                                                   ``completion_ids`` (TRL's ``completions``
                                                                   drop the thought channel and <turn|>)
other loss terms           none                                    ``entropy_coef=0``, ``top_entropy_quantile=1``,
                                                                   ``off_policy_mask_threshold=None``,
                                                                   ``vllm_importance_sampling_correction=False``,
                                                                   ``router_aux_loss_coef=0`` (MoE: TRL adds
                                                                   the load-balancing loss by default)
LoRA                       the SFT run's, dropout off              same targets, rank, alpha, K/V ``lora_A``
                                                                   tied, ``lora_dropout`` 0; the SFT adapter
                                                                   loaded with ``--adapter``
optimizer                  optax AdamW b1 0.9 b2 0.99, global-     ``adamw_torch``, ``adam_beta2`` 0.99
                           norm clip, constant lr after a linear   (transformers' default 0.999),
                           warm-up                                 ``max_grad_norm``, ``constant_with_warmup``
=========================  ======================================  ==========================================

``derive_gpu_rl_recipe`` returns the configs; ``write_gpu_rl_recipe(dir)`` writes ``grpo_config.json``,
``lora_config.json``, ``recipe.json``, ``fsdp_config.yaml``, the problems (verilog-eval layout) and
``train_grpo_gpu.py`` (a copy of :mod:`cookbook.gpu.train_grpo_gpu`, with ``train_gpu.py`` for its LoRA
helpers; neither needs the cookbook). ``tests/gpu/test_rl_recipe.py`` checks on CPU that the script's
reward equals ``cookbook.rl.VerilogReward`` and that TRL's loss on one batch equals Tunix's.
This package comes before ``cookbook.rl``, so its configs are taken as they are (duck-typed),
never imported; so are the problems (``cookbook.evaluate``'s, or anything with their fields). Written by hand: only the translation between the
two stacks' configurations; the training is TRL's, PEFT's and accelerate's.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cookbook import data as data_lib
from cookbook import models
from cookbook.gpu._recipe import (
    GpuCluster,
    accelerate_fsdp_config,
    bitsandbytes_config,
    peft_lora_kwargs,
    tested_versions,
)
from cookbook.gpu._recipe_dir import MARKER, check_recipe_dir

RL_RECIPE_FILES = (
    "grpo_config.json",
    "lora_config.json",
    "recipe.json",
    "fsdp_config.yaml",
    "README.md",
    "train_grpo_gpu.py",
    "train_gpu.py",
)
PROBLEMS_DIR = "problems"  # verilog-eval layout, what train_grpo_gpu.py reads by default
_PROBLEM_NAME = re.compile(r"Prob\d+_\w+")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuRLRecipe:
    """Everything a GPU user runs for RL, as plain data (written by ``write_gpu_rl_recipe``)."""

    preset: str
    base_model: str | None
    algorithm: str
    grpo: dict[str, Any]  # trl.GRPOConfig keyword arguments
    lora: dict[str, Any]  # peft.LoraConfig keyword arguments
    accelerate: dict[str, Any]  # accelerate config file (FSDP)
    reward: dict[str, Any]  # the reward's weights, thinking flag and simulator limits
    stop_tokens: tuple[str, ...]
    model_dtype: str
    thinking: bool
    notes: tuple[str, ...]
    quantization: dict[str, Any] | None = None
    problems: tuple[str, ...] = ()  # names of the problems it was derived with

    def grpo_config(self, **overrides: Any):
        """A ``trl.GRPOConfig`` (``output_dir`` and CPU switches go in ``overrides``)."""
        from trl import GRPOConfig

        return GRPOConfig(**{**self.grpo, **overrides})

    def peft_config(self):
        """A ``peft.LoraConfig``."""
        from peft import LoraConfig

        return LoraConfig(**self.lora)

    def recipe_json(self) -> dict[str, Any]:
        return {
            "kind": "grpo",
            "preset": self.preset,
            "base_model": self.base_model,
            "algorithm": self.algorithm,
            "model_dtype": self.model_dtype,
            "quantization": self.quantization,
            "lora_a_init": "he_uniform",  # a fresh LoRA only; --adapter loads the SFT run's
            "tie_kv_lora_a": True,
            "stop_tokens": list(self.stop_tokens),
            "thinking": self.thinking,
            "chat_template_kwargs": {"enable_thinking": True} if self.thinking else {},
            "reward": self.reward,
            "problems": list(self.problems),
            "notes": list(self.notes),
        }


def grpo_batch_layout(rl_config: Any, num_gpus: int, per_device_batch: int | None = None) -> tuple[int, int]:
    """``(per_device_train_batch_size, gradient_accumulation_steps)`` for one optimizer step per
    TPU step: ``prompts_per_step x group_size`` completions over ``num_gpus`` GPUs.

    With ``loss_type="dapo"`` the split does not change the loss (every token of the step weighs
    the same), so the default micro-batch is the largest that divides both a GPU's share and the
    group: one group per micro-batch where it fits.
    """
    total = rl_config.prompts_per_step * rl_config.group_size
    if total % num_gpus:
        raise ValueError(
            f"{rl_config.prompts_per_step} prompts x {rl_config.group_size} samples = {total} completions per "
            f"step do not split over {num_gpus} GPUs; use a GPU count that divides {total}"
        )
    per_gpu = total // num_gpus
    per_device = per_device_batch or math.gcd(per_gpu, rl_config.group_size)
    if per_device < 1 or per_gpu % per_device:
        raise ValueError(f"per-device batch {per_device} does not divide the {per_gpu} completions per GPU")
    return per_device, per_gpu // per_device


def completion_budget(
    rl_config: Any,
    train_config: Any,
    problems: Sequence[Any] | None,
    rows: Sequence[dict] | None = None,
    tokenizer=None,
) -> int:
    """``max_completion_length``: the RL config's, else the problems' answer budget (plus the
    thought budget of ``rows`` for a thinking run), as ``cookbook rl`` sizes its rollouts."""
    if rl_config.max_response_tokens is not None:
        return int(rl_config.max_response_tokens)
    if not problems:
        raise ValueError("the completion budget comes from the problems: give problems or set max_response_tokens")
    thinking = getattr(train_config, "sample_task", "plain") == "thinking"
    if thinking and rows is None:
        raise ValueError("a thinking run on given problems needs max_response_tokens (the thought's budget)")
    if tokenizer is None:
        try:
            tokenizer = data_lib.load_tokenizer(train_config.model_preset, base_dir=train_config.base_dir)
        except OSError as e:
            raise ValueError(
                f"the completion budget is counted in {train_config.model_preset}'s tokens and its tokenizer did "
                f"not load ({str(e).splitlines()[0][:120]}); set max_response_tokens (--max-response-tokens)"
            ) from None
    budget = data_lib.answer_budget(tokenizer, list(problems))
    return budget + (data_lib.thought_budget(tokenizer, list(rows)) if thinking else 0)


def derive_gpu_rl_recipe(
    rl_config: Any,
    train_config: Any,
    *,
    problems: Sequence[Any] | None = None,
    rows: Sequence[dict] | None = None,
    reward: Any = None,
    cluster: GpuCluster | None = None,
    per_device_batch: int | None = None,
    base_model: str | None = None,
    tokenizer=None,
    output_dir: str = "gemma4-lora-grpo-gpu",
) -> GpuRLRecipe:
    """The GPU RL recipe with ``cookbook rl``'s objective and hyperparameters.

    Args:
      rl_config: the ``cookbook.rl.RLConfig`` of the TPU run (e.g. ``cookbook.rl.rl_preset("tiny")``).
      train_config: the SFT run's ``cookbook.train.TrainConfig``: model, LoRA, thinking or not.
      problems: ``cookbook.evaluate.Problem``-like objects (name, prompt, ref, test, answer) RL trains
        on: they size the completion budget when ``max_response_tokens`` is None.
      rows: the training rows of a thinking run (their thoughts size the thought budget).
      reward: a ``cookbook.rl.RewardConfig``-like object (``functional``, ``format``, ``sim``);
        default: functional 1, format ``rl_config.format_weight``, the script's simulator limits.
      cluster: GPU count and precision (default: the paper's 2 x H100); per_device_batch: completions per GPU micro-batch.
      base_model: Hub id or directory of the base checkpoint (default: the preset's Hub id).
    """
    if rl_config.beta:
        raise ValueError(
            f"beta={rl_config.beta}: a KL term has no TRL equivalent of Tunix's here (Tunix 0.1.7 takes the "
            "k1 estimate logp - ref_logp against the base model; TRL the k3 estimate against the starting "
            "adapter, with its bias correction). Derive the GPU recipe for beta=0 (DAPO, CodeV-R1's algorithm)"
        )
    cluster = cluster or GpuCluster()
    p = models.get_preset(train_config.model_preset)
    thinking = getattr(train_config, "sample_task", "plain") == "thinking"
    per_device, accum = grpo_batch_layout(rl_config, cluster.num_gpus, per_device_batch)
    dtype = train_config.param_dtype or p.dtype
    bf16 = cluster.bf16 and dtype == "bfloat16"
    max_tokens = completion_budget(rl_config, train_config, problems, rows, tokenizer)
    grpo: dict[str, Any] = {
        "output_dir": output_dir,
        # the objective
        "loss_type": "dapo",
        "num_generations": rl_config.group_size,
        "epsilon": rl_config.epsilon,
        "epsilon_high": rl_config.epsilon_high,
        "delta": None,
        "beta": 0.0,
        "num_iterations": 1,
        "importance_sampling_level": "token",
        "scale_rewards": "group",
        "multi_objective_aggregation": "sum_then_normalize",
        "reward_weights": [1.0],  # the reward function holds the functional and format weights
        "mask_truncated_completions": False,
        "top_entropy_quantile": 1.0,
        "entropy_coef": 0.0,
        "use_adaptive_entropy": False,
        "off_policy_mask_threshold": None,
        "router_aux_loss_coef": 0.0,
        "disable_dropout": True,
        "remove_unused_columns": False,  # the reward reads each row's problem name
        # sampling
        "max_completion_length": max_tokens,
        "temperature": rl_config.temperature,
        "top_p": rl_config.top_p,
        "top_k": 0,
        "min_p": None,
        "repetition_penalty": 1.0,
        "chat_template_kwargs": {"enable_thinking": True} if thinking else None,
        "use_vllm": False,
        "vllm_importance_sampling_correction": False,  # Tunix samples with the trained weights themselves
        # batch: one optimizer step per generation batch of prompts_per_step x group_size
        "per_device_train_batch_size": per_device,
        "gradient_accumulation_steps": accum,
        "steps_per_generation": accum,
        "max_steps": rl_config.max_steps,
        # optimizer: cookbook.rl's optax.adamw(b1=0.9, b2=0.99) after clip_by_global_norm
        "optim": "adamw_torch",
        "learning_rate": rl_config.learning_rate,
        "weight_decay": rl_config.weight_decay,
        "adam_beta1": 0.9,
        "adam_beta2": 0.99,
        "adam_epsilon": 1e-8,
        "warmup_steps": rl_config.warmup_steps,
        "lr_scheduler_type": "constant_with_warmup" if rl_config.warmup_steps else "constant",
        "max_grad_norm": rl_config.max_grad_norm or 0.0,
        # precision and memory
        "bf16": bf16,
        "gradient_checkpointing": (
            cluster.gradient_checkpointing
            if cluster.gradient_checkpointing is not None
            else train_config.remat != "none" or p.hf_checkpoint is not None
        ),
        # bookkeeping
        "seed": rl_config.seed,
        "logging_steps": 1,
        "report_to": "tensorboard",
        "save_strategy": "steps",
        "save_steps": rl_config.checkpoint_every_steps,
        "save_total_limit": rl_config.max_checkpoints,
        "eval_strategy": "no",
        "log_completions": False,
    }
    if reward is not None and bool(reward.thinking) != thinking:
        raise ValueError(f"the reward's thinking={reward.thinking}, but the SFT run's sample task is {thinking=}")
    reward_dict = {
        "functional": float(getattr(reward, "functional", 1.0)),
        "format": float(getattr(reward, "format", rl_config.format_weight)),
        "thinking": thinking,
        "workers": getattr(reward, "workers", None),
        "sim": dataclasses.asdict(reward.sim) if getattr(reward, "sim", None) is not None else None,
    }
    lora = dataclasses.replace(train_config.lora, dropout=0.0)  # cookbook rl trains the LoRA without dropout
    notes = (
        f"Batch: {rl_config.prompts_per_step} prompts x {rl_config.group_size} samples = "
        f"{rl_config.prompts_per_step * rl_config.group_size} completions per step = {cluster.num_gpus} GPU(s) "
        f"x {per_device} x {accum} accumulation; loss: token mean over the step (loss_type dapo).",
        "Advantages: TRL divides by the group's std + 1e-4, Tunix by std + 1e-6 (both unbiased std); "
        "the relative difference is below 1e-4 / std (0.2% at the reward's smallest non-zero group std, 0.05).",
        "Tunix clips the log-ratio to +-20 before exp; TRL does not: equal unless a ratio passes e^20.",
        "Sampling: transformers' generate (or vLLM) against Tunix's vanilla rollout: the same distribution, "
        "other random draws; the problem order (TRL's sampler, Tunix's seeded permutation) differs too.",
        "Start from the SFT adapter: the GPU SFT recipe's run/, or a TPU run's through `cookbook merge "
        "--lora RUN --out merged/ --peft-out adapter/`; without --adapter the script trains a fresh LoRA.",
    )
    quantize = getattr(train_config, "quantize", None)
    return GpuRLRecipe(
        preset=p.name,
        base_model=base_model or p.hf_checkpoint or train_config.base_dir,
        algorithm=rl_config.algorithm,
        grpo=grpo,
        lora=peft_lora_kwargs(lora, p),
        accelerate=accelerate_fsdp_config(cluster, bf16=bf16, preset=p),
        reward=reward_dict,
        stop_tokens=tuple(models.SPECIAL_TOKENS[i] for i in models.stop_token_ids()),
        model_dtype=dtype,
        thinking=thinking,
        notes=notes,
        quantization=bitsandbytes_config(quantize, "bfloat16" if bf16 else dtype),
        problems=tuple(q.name for q in problems or ()),
    )


def write_gpu_rl_recipe(
    out_dir: str | Path,
    recipe: GpuRLRecipe | None = None,
    *,
    problems: Sequence[Any] | None = None,
    overwrite: bool = True,
    **derive_kwargs: Any,
) -> dict[str, Path]:
    """Write the GPU RL recipe to ``out_dir`` (a new or empty directory, or one gpu-recipe wrote).

    Files: ``grpo_config.json`` (``GRPOConfig(**json)``), ``lora_config.json``, ``recipe.json``
    (what TRL/PEFT have no field for: the reward, stop tokens, LoRA tying), ``fsdp_config.yaml``,
    ``train_grpo_gpu.py`` with ``train_gpu.py``, a ``README.md`` and, when ``problems`` are given
    (``cookbook.evaluate.Problem``-like), ``problems/`` in verilog-eval's layout. Pass a ``recipe``
    or :func:`derive_gpu_rl_recipe`'s arguments. ``overwrite`` as in ``write_gpu_recipe``.
    """
    import yaml

    from cookbook.gpu import train_gpu as sft_script
    from cookbook.gpu import train_grpo_gpu as rl_script

    out = check_recipe_dir(out_dir, overwrite=overwrite)
    if recipe is None:
        recipe = derive_gpu_rl_recipe(problems=problems, **derive_kwargs)
    bad = [q.name for q in problems or () if not _PROBLEM_NAME.fullmatch(q.name)]
    if bad:
        raise ValueError(f"problem name {bad[0]!r} is not verilog-eval's ProbNNN_name")
    out.mkdir(parents=True, exist_ok=True)
    # First: a run killed part-way leaves a directory that is still known as a recipe's.
    (out / MARKER).write_text(json.dumps({"kind": "cookbook gpu-recipe --rl", "files": list(RL_RECIPE_FILES)}) + "\n")
    files = {
        "grpo_config.json": json.dumps(recipe.grpo, indent=2, sort_keys=True),
        "lora_config.json": json.dumps(recipe.lora, indent=2, sort_keys=True),
        "recipe.json": json.dumps(recipe.recipe_json(), indent=2),
        "fsdp_config.yaml": yaml.safe_dump(recipe.accelerate, sort_keys=False),
        "README.md": _readme(recipe, with_problems=bool(problems)),
    }
    paths = {}
    for name, text in files.items():
        (out / name).write_text(text + ("" if text.endswith("\n") else "\n"))
        paths[name] = out / name
    for name, module in (("train_grpo_gpu.py", rl_script), ("train_gpu.py", sft_script)):
        shutil.copyfile(module.__file__, out / name)
        paths[name] = out / name
    if problems:
        pdir = out / PROBLEMS_DIR
        if pdir.is_dir():
            shutil.rmtree(pdir)  # this recipe's own earlier problems (check_recipe_dir vouched for out)
        pdir.mkdir()
        for q in problems:
            for suffix, text in (("prompt.txt", q.prompt), ("ref.sv", q.ref), ("test.sv", q.test)):
                (pdir / f"{q.name}_{suffix}").write_text(text)
        paths[PROBLEMS_DIR] = pdir
    return paths


def rl_launch_command(recipe: GpuRLRecipe, *, problems: str | None = None) -> str:
    """The command a GPU user runs in the recipe directory."""
    model = recipe.base_model or "BASE_CHECKPOINT_DIR"
    extra = f" --problems {problems}" if problems else ""
    return (
        "accelerate launch --config_file fsdp_config.yaml train_grpo_gpu.py "
        f"--model {model} --adapter SFT_ADAPTER_DIR{extra} --out run/"
    )


def rl_summary(recipe: GpuRLRecipe) -> dict[str, Any]:
    """A flat table of the settings that matter, for notebooks and the command line."""
    g, lo = recipe.grpo, recipe.lora
    return {
        "algorithm / TRL loss_type": f"{recipe.algorithm} / {g['loss_type']} (token mean over the step)",
        "samples per prompt": g["num_generations"],
        "clip epsilon / epsilon_high": f"{g['epsilon']} / {g['epsilon_high']}",
        "KL beta": g["beta"],
        "per-device batch x accumulation": f"{g['per_device_train_batch_size']} x {g['gradient_accumulation_steps']}",
        "lr / warm-up / schedule": f"{g['learning_rate']} / {g['warmup_steps']} / {g['lr_scheduler_type']}",
        "max_grad_norm": g["max_grad_norm"],
        "temperature / top_p": f"{g['temperature']} / {g['top_p']}",
        "max completion tokens": g["max_completion_length"],
        "reward": f"{recipe.reward['functional']} x simulator pass + {recipe.reward['format']} x format",
        "LoRA r / alpha / dropout": f"{lo['r']} / {lo['lora_alpha']} / {lo['lora_dropout']}",
        "problems": len(recipe.problems),
    }


def _readme(recipe: GpuRLRecipe, *, with_problems: bool) -> str:
    lines = [
        f"# GPU RL baseline ({recipe.algorithm}) for preset {recipe.preset}",
        "",
        "Derived by `cookbook.gpu` from `cookbook rl`'s RLConfig and the SFT run's TrainConfig: same reward",
        "(Icarus Verilog on the final answer, plus the format term), group size, clipping, token-mean loss",
        "and LoRA. Needs `iverilog` and `vvp` on every GPU host (apt-get install iverilog).",
        "",
        "    pip install torch " + " ".join(f"{k}=={v}" for k, v in tested_versions().items()),
        "    " + rl_launch_command(recipe, problems=None if with_problems else "PROBLEMS_DIR"),
        "",
        *[f"- {n}" for n in recipe.notes],
    ]
    return "\n".join(lines)
