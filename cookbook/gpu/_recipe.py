"""The GPU baseline: the TRL + PEFT + accelerate FSDP recipe that optimises the TPU run's objective.

The paper compared a TPU run (loss on the answer only) with a GPU run (loss on every token): two objectives
under one set of "identical" hyperparameters. Here the GPU recipe is *derived* from the same
``cookbook.train.TrainConfig`` (its ``LoraConfig`` and ``DataConfig``) that drives Tunix, and every place where
TRL / transformers / PEFT defaults would change the objective is set explicitly:

============================  ==================================  ===============================
what                          Tunix + Qwix (TPU)                  derived GPU recipe
============================  ==================================  ===============================
tokens trained on             answer + its ``<turn|>``            same (pre-tokenised rows with a
                                                                  ``completion_mask``; TRL's own
                                                                  prompt-completion path would
                                                                  also train the ``\\n`` after it)
chat template                 tokenizer's (Gemma 4)               same tokenizer, same template
loss over accumulation        mean of micro-batch token means     ``per_micro_batch`` (one TPU
                              (``optax.MultiSteps``)              micro-batch per GPU micro-batch)
                                                                  or ``tokens_in_step`` when there
                                                                  is no accumulation
K/V LoRA on sliding layers    one ``A`` shared by K and V         ``lora_A`` of v_proj tied to k_proj
K = V global layers           ``k_einsum`` LoRA adapts K and V    ``k_proj`` LoRA (no ``v_proj``)
LoRA A init                   He-uniform                          He-uniform (PEFT: a=sqrt(5))
optimizer                     optax AdamW, warm-up + cosine       torch AdamW, ``cosine`` schedule
clipping                      none unless set                     ``max_grad_norm`` 0 unless set
                                                                  (transformers' default is 1.0)
============================  ==================================  ===============================

``derive_gpu_recipe`` returns the configs; ``write_gpu_recipe(dir)`` writes ``sft_config.json``,
``lora_config.json``, ``recipe.json``, ``fsdp_config.yaml`` and ``train_gpu.py`` (a copy of
:mod:`cookbook.gpu.train_gpu`, which needs no cookbook install) for ``accelerate launch``.
``tests/gpu/test_recipe.py`` checks on CPU that transformers+PEFT (through that very script and TRL's
``SFTTrainer``) and Tunix+Qwix compute the same loss and stay together over AdamW steps. End to end
on CPU (``benchmarks/gpu_recipe_e2e.py``, losses and pass@1 beside Tunix's): docs/results.md.
Written by hand: only the translation between the stacks' configurations; the training is TRL's, PEFT's, accelerate's.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Any, Literal

from cookbook import core, models
from cookbook import lora as lora_lib
from cookbook.gpu._recipe_dir import MARKER, RECIPE_FILES, check_recipe_dir

LossNormalisation = Literal["per_micro_batch", "tokens_in_step"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuCluster:
    """The GPU side of the comparison: the paper's 2 x H100 with FSDP by default."""

    num_gpus: int = 2
    gpu_name: str = "H100 80GB"
    bf16: bool = True  # bf16 weights and compute (as the TPU run for bf16 presets)
    fsdp_version: int = 2  # accelerate FSDP2; reshard_after_forward=True is FULL_SHARD
    # Activation checkpointing on the GPUs. None: on for the released (large) models, else as
    # the TPU run's remat. The TPU layout for 31B runs without remat because a v5p chip has
    # 95 GB and splash attention never stores the T x T probabilities; two 80 GB H100s holding
    # 31B under FSDP at 4,096 tokens do not have that room.
    gradient_checkpointing: bool | None = None

    def __post_init__(self) -> None:
        if self.num_gpus < 1:
            raise ValueError(f"GpuCluster.num_gpus={self.num_gpus}: use at least 1")
        if self.fsdp_version not in (1, 2):
            raise ValueError(f"GpuCluster.fsdp_version={self.fsdp_version}: use 1 or 2")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuRecipe:
    """Everything a GPU user runs, as plain data (written to JSON/YAML by ``write_gpu_recipe``)."""

    preset: str
    base_model: str | None
    sft: dict[str, Any]  # trl.SFTConfig keyword arguments
    lora: dict[str, Any]  # peft.LoraConfig keyword arguments
    accelerate: dict[str, Any]  # accelerate config file (FSDP)
    loss_normalisation: LossNormalisation
    model_dtype: str
    too_long: str  # "drop" or "truncate" examples longer than max_length (cookbook.data's policy)
    notes: tuple[str, ...]
    quantization: dict[str, Any] | None = None  # transformers.BitsAndBytesConfig kwargs (QLoRA)

    def sft_config(self, **overrides: Any):
        """A ``trl.SFTConfig`` (``output_dir`` and CPU switches go in ``overrides``)."""
        from trl import SFTConfig

        return SFTConfig(**{**self.sft, **overrides})

    def peft_config(self):
        """A ``peft.LoraConfig``."""
        from peft import LoraConfig

        return LoraConfig(**self.lora)

    def recipe_json(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "base_model": self.base_model,
            "loss_normalisation": self.loss_normalisation,
            "model_dtype": self.model_dtype,
            "too_long": self.too_long,
            "quantization": self.quantization,
            "lora_a_init": "he_uniform",
            "tie_kv_lora_a": True,
            "notes": list(self.notes),
        }


# ----------------------------------------------------------------------------------------
# From the cookbook's configs


def peft_target_regex(lora: lora_lib.LoraConfig, preset: str | models.ModelPreset) -> str:
    """PEFT ``target_modules`` (a regex PEFT fully matches) for the text decoder only.

    Both layouts are matched (``model.layers.N...`` and the released
    ``model.language_model.layers.N...``); the released checkpoint's vision and audio towers
    also have ``q_proj``/``k_proj``... modules, which a plain list of names would adapt.
    On K = V global layers there is no ``v_proj``; the ``k_proj`` LoRA adapts V there, in
    transformers as in Tunix's ``k_einsum``.
    """
    p = models.get_preset(preset)
    # Validates coverage, and that k_proj / v_proj are targeted together (one Tunix weight).
    module_path = lora_lib.qwix_module_path(lora.targets, p)
    names = lora_lib.hf_target_modules(module_path, p)
    whole = [n for n in names if not n.startswith("layers.")]
    per_layer = [n for n in names if n.startswith("layers.")]
    alts = []
    for parent in dict.fromkeys(lora_lib.HF_PARENT.values()):  # self_attn, mlp
        under = [n for n in whole if lora_lib.HF_PARENT.get(n) == parent]
        if under:
            alts.append(rf"layers\.\d+\.{parent}\.(?:" + "|".join(under) + ")")
    # E2B/E4B per-layer-input projections, the 26B-A4B router: under the layer, or the model.
    for n in (n for n in whole if n not in lora_lib.HF_PARENT):
        path = re.escape(lora_lib.hf_module_path(n))
        alts.append(path if n in lora_lib.MODEL_LEVEL else rf"layers\.\d+\.{path}")
    alts.extend(re.escape(n) for n in per_layer)
    return r"model\.(?:language_model\.)?(?:" + "|".join(alts) + ")"


def peft_lora_kwargs(lora: lora_lib.LoraConfig, preset: str | models.ModelPreset) -> dict[str, Any]:
    """``peft.LoraConfig`` keyword arguments equivalent to the Qwix LoRA of ``lora``."""
    return {
        "r": lora.rank,
        "lora_alpha": float(lora.alpha),  # scale alpha / r, as Qwix
        "lora_dropout": float(lora.dropout),
        "target_modules": peft_target_regex(lora, preset),
        "bias": "none",
        "task_type": "CAUSAL_LM",
        "use_rslora": False,
        "init_lora_weights": True,  # B = 0; A is redrawn He-uniform by train_gpu.py
    }


def gpu_batch_layout(config: Any, num_gpus: int) -> tuple[int, int, LossNormalisation]:
    """``(per_device_train_batch_size, gradient_accumulation_steps, loss_normalisation)``.

    Same sequences per optimizer step as the TPU run, and the same weighting of them:
    with accumulation, each GPU micro-batch holds exactly one TPU micro-batch and losses
    are micro-batch means (``optax.MultiSteps``); without, the step's batch is split over
    the GPUs and every answer token weighs the same (transformers' default, which then
    equals the TPU's one-micro-batch mean).
    """
    b, a = config.data.batch_size, config.grad_accum_steps
    if a > 1:
        if a % num_gpus:
            raise ValueError(
                f"gradient accumulation {a} on the TPU does not divide over {num_gpus} GPUs; each "
                f"GPU micro-batch must hold one TPU micro-batch of {b} for the same loss. Use a "
                f"GPU count that divides {a}, or change grad_accum_steps."
            )
        return b, a // num_gpus, "per_micro_batch"
    if b % num_gpus:
        raise ValueError(
            f"TPU batch {b} (no accumulation) does not split over {num_gpus} GPUs; use a GPU count that divides {b}."
        )
    return b // num_gpus, 1, "tokens_in_step"


def accelerate_fsdp_config(
    cluster: GpuCluster, *, bf16: bool, preset: str | models.ModelPreset = "gemma4_31b"
) -> dict[str, Any]:
    """accelerate ``--config_file`` contents: FSDP full sharding, one wrap unit per decoder layer.

    ``bf16``: the run computes in bf16 (as ``SFTConfig.bf16``; float32 presets do not).
    ``preset``: the model, whose released layout names the decoder layer class (12B's is
    ``Gemma4UnifiedTextDecoderLayer``).
    """
    layer_cls = decoder_layer_class(preset)
    fsdp: dict[str, Any] = {
        "fsdp_version": cluster.fsdp_version,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_transformer_layer_cls_to_wrap": layer_cls,
        "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_offload_params": False,
        "fsdp_state_dict_type": "FULL_STATE_DICT",  # the adapter is small: save it whole
        "fsdp_activation_checkpointing": False,  # SFTConfig.gradient_checkpointing decides
    }
    if cluster.fsdp_version == 2:
        fsdp["fsdp_reshard_after_forward"] = True  # FSDP2's FULL_SHARD
    else:
        fsdp.update(
            fsdp_sharding_strategy="FULL_SHARD",
            fsdp_backward_prefetch="BACKWARD_PRE",
            fsdp_use_orig_params=True,  # needed with frozen base weights (LoRA)
            fsdp_sync_module_states=True,
        )
    return {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "FSDP",
        "mixed_precision": "bf16" if bf16 else "no",
        "num_machines": 1,
        "num_processes": cluster.num_gpus,
        "machine_rank": 0,
        "main_training_function": "main",
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": False,
        "fsdp_config": fsdp,
    }


def decoder_layer_class(preset: str | models.ModelPreset = "gemma4_31b") -> str:
    """Name of the installed transformers' text decoder layer of ``preset``'s layout (FSDP's wrap unit).

    ``Gemma4TextDecoderLayer``; ``Gemma4UnifiedTextDecoderLayer`` for the unified layout (12B).
    """
    import importlib

    layout = models.get_preset(preset).hf_layout
    modeling = importlib.import_module(f"transformers.models.{layout}.modeling_{layout}")
    pretrained = getattr(modeling, f"{models.HF_ARCHITECTURES[layout].split('For')[0]}PreTrainedModel")
    names = [n for n in core.compat.no_split_modules(pretrained) if "Text" in n]
    if not names or not hasattr(modeling, names[0]):
        raise RuntimeError(
            "transformers' Gemma 4 names no text decoder layer in _no_split_modules; "
            "this transformers version is not the one the cookbook was written for"
        )
    return names[0]


def bitsandbytes_config(quantize: str | None, compute_dtype: str) -> dict[str, Any] | None:
    """``transformers.BitsAndBytesConfig`` kwargs for a QLoRA run's ``quantize`` (None: no QLoRA).

    nf4 is QLoRA's own recipe; the quantized values are stored in ``compute_dtype`` words
    (``bnb_4bit_quant_storage``), which FSDP needs to shard them with the rest. bitsandbytes
    has no fp8 weight type: an fp8 run is refused here rather than silently run as nf4.
    """
    if quantize is None:
        return None
    if quantize == "nf4":
        return {
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_compute_dtype": compute_dtype,
            "bnb_4bit_use_double_quant": False,
            "bnb_4bit_quant_storage": compute_dtype,
        }
    if quantize == "int8":
        return {"load_in_8bit": True}
    raise ValueError(
        f"quantize={quantize!r} has no bitsandbytes equivalent for the GPU recipe (bitsandbytes "
        "stores nf4/fp4 and int8 weights); train the GPU baseline with quantize='nf4' or 'int8', "
        "or without quantization"
    )


def derive_gpu_recipe(
    config: Any,
    *,
    cluster: GpuCluster = GpuCluster(),
    base_model: str | None = None,
    output_dir: str = "gemma4-lora-gpu",
) -> GpuRecipe:
    """The GPU recipe with the TPU run's objective and hyperparameters.

    Args:
      config: the ``cookbook.train.TrainConfig`` of the TPU run (e.g.
        ``cookbook.train.train_preset("gemma4_31b")``); its ``lora`` and ``data`` included.
      cluster: GPU count and precision (the paper's 2 x H100, bf16).
      base_model: Hub id or directory of the base checkpoint (default: the preset's Hub
        id, else the config's ``base_dir``).
      output_dir: ``SFTConfig.output_dir`` default (``train_gpu.py --out`` overrides).
    """
    p = models.get_preset(config.model_preset)
    per_device, accum, norm = gpu_batch_layout(config, cluster.num_gpus)
    dtype = config.param_dtype or p.dtype
    bf16 = cluster.bf16 and dtype == "bfloat16"
    scheduler: dict[str, Any] = {"lr_scheduler_type": "cosine"}
    if config.end_lr_fraction:
        # optax's end_value; transformers' cosine_with_min_lr decays to min_lr the same way.
        scheduler = {
            "lr_scheduler_type": "cosine_with_min_lr",
            "lr_scheduler_kwargs": {"min_lr": config.learning_rate * config.end_lr_fraction},
        }
    sft: dict[str, Any] = {
        "output_dir": output_dir,
        # objective
        "completion_only_loss": True,  # labels from the answer mask train_gpu.py builds
        "assistant_only_loss": False,  # needs {% generation %} markers Gemma 4's template lacks
        "max_length": config.data.seq_len,
        "packing": bool(config.data.packing),
        "loss_type": "nll",
        # batch
        "per_device_train_batch_size": per_device,
        "per_device_eval_batch_size": per_device,
        "gradient_accumulation_steps": accum,
        "max_steps": config.max_steps,
        # optimizer: torch AdamW == optax.adamw (eps outside the sqrt, bias-corrected,
        # decoupled decay lr * wd * param); transformers decays every LoRA weight, as optax.
        "optim": "adamw_torch",
        "learning_rate": config.learning_rate,
        "weight_decay": config.weight_decay,
        "adam_beta1": config.adam_b1,
        "adam_beta2": config.adam_b2,
        "adam_epsilon": 1e-8,  # optax.adamw's default, which cookbook.train uses
        "warmup_steps": config.warmup_steps,
        **scheduler,
        "max_grad_norm": config.max_grad_norm or 0.0,  # 0 = no clipping (default would be 1.0)
        # precision and memory
        "bf16": bf16,
        "gradient_checkpointing": (
            cluster.gradient_checkpointing
            if cluster.gradient_checkpointing is not None
            else config.remat != "none" or p.hf_checkpoint is not None
        ),
        # bookkeeping
        "seed": config.seed,
        "data_seed": config.data.seed,
        "logging_steps": 1,
        "report_to": "tensorboard",
        "save_strategy": "steps",
        "save_steps": config.checkpoint_every_steps,
        "save_total_limit": config.max_checkpoints,
        "eval_strategy": "steps",
        "eval_steps": config.eval_every_steps,
    }
    b, a = config.data.batch_size, config.grad_accum_steps
    notes = (
        f"Batch: TPU {b} x {a} accumulation = {cluster.num_gpus} GPU(s) x {per_device} x {accum} "
        f"accumulation ({b * a} {'packed rows' if config.data.packing else 'sequences'} of "
        f"{config.data.seq_len} tokens per step); loss {norm}.",
        "Data order differs (Grain vs the PyTorch sampler), and with packing so does which "
        "examples share a row (Grain's packer vs TRL's best-fit); the loss definition does not.",
        "LoRA dropout draws independent masks for k_proj and v_proj on GPU; Qwix draws one for the "
        "stacked kv_einsum (identical when dropout is 0).",
        f"bf16={bf16}: PEFT keeps LoRA weights in float32 (autocast_adapter_dtype); Qwix keeps "
        "them in the base weights' dtype.",
    )
    quantize = getattr(config, "quantize", None)
    quantization = bitsandbytes_config(quantize, "bfloat16" if bf16 else dtype)
    if quantization is not None:
        notes += (
            f"QLoRA ({quantize}): bitsandbytes quantizes each weight in blocks of 64 consecutive elements "
            "of the flattened (out, in) matrix with a float32 absmax scale each; Qwix in tiles of "
            f"{config.quant_tile} along each weight's contracting axis with one float32 scale per output "
            "channel per tile. Both quantize every decoder projection and dequantize to the compute "
            "dtype inside the matmul; the quantization errors differ, so the two runs' losses agree "
            "only to the quantization noise, not to float32 noise.",
        )
    return GpuRecipe(
        preset=p.name,
        base_model=base_model or p.hf_checkpoint or config.base_dir,
        sft=sft,
        lora=peft_lora_kwargs(config.lora, p),
        accelerate=accelerate_fsdp_config(cluster, bf16=bf16, preset=p),
        loss_normalisation=norm,
        model_dtype=dtype,
        too_long=config.data.too_long,
        notes=notes,
        quantization=quantization,
    )


def write_gpu_recipe(
    out_dir: str | Path, recipe: GpuRecipe | None = None, *, overwrite: bool = True, **derive_kwargs: Any
) -> dict[str, Path]:
    """Write the GPU recipe to ``out_dir``: a new or empty directory, or one it wrote before.

    Files: ``sft_config.json`` (``SFTConfig(**json)``), ``lora_config.json``
    (``peft.LoraConfig(**json)``), ``recipe.json`` (what TRL/PEFT have no field for),
    ``fsdp_config.yaml`` (``accelerate launch --config_file``), ``train_gpu.py`` and a
    ``README.md`` with the launch command. Pass a ``recipe`` or ``derive_gpu_recipe``'s
    arguments (``config=..., cluster=...``). ``overwrite``: rewrite those files in a directory
    that holds a recipe written before (other files there, such as the ``run/`` it trained
    into, are kept); a non-empty directory it did not write is refused either way
    (:func:`check_recipe_dir`). ``cookbook gpu-recipe`` asks for ``--overwrite``.
    """
    import yaml

    from cookbook.gpu import train_gpu as gpu_train

    out = check_recipe_dir(out_dir, overwrite=overwrite)
    if recipe is None:
        recipe = derive_gpu_recipe(**derive_kwargs)
    out.mkdir(parents=True, exist_ok=True)
    # First: a run killed part-way leaves a directory that is still known as a recipe's.
    (out / MARKER).write_text(json.dumps({"kind": "cookbook gpu-recipe", "files": list(RECIPE_FILES)}) + "\n")
    files = {
        "sft_config.json": json.dumps(recipe.sft, indent=2, sort_keys=True),
        "lora_config.json": json.dumps(recipe.lora, indent=2, sort_keys=True),
        "recipe.json": json.dumps(recipe.recipe_json(), indent=2),
        "fsdp_config.yaml": yaml.safe_dump(recipe.accelerate, sort_keys=False),
        "README.md": _readme(recipe),
    }
    paths = {}
    for name, text in files.items():
        (out / name).write_text(text + ("" if text.endswith("\n") else "\n"))
        paths[name] = out / name
    shutil.copyfile(gpu_train.__file__, out / "train_gpu.py")
    paths["train_gpu.py"] = out / "train_gpu.py"
    return paths


def launch_command(recipe: GpuRecipe, *, data: str = "train.jsonl", eval_data: str = "eval.jsonl") -> str:
    """The command a GPU user runs in the recipe directory."""
    model = recipe.base_model or "BASE_CHECKPOINT_DIR"
    return (
        "accelerate launch --config_file fsdp_config.yaml train_gpu.py "
        f"--model {model} --data {data} --eval-data {eval_data} --out run/"
    )


def _readme(recipe: GpuRecipe) -> str:
    lines = [
        f"# GPU baseline for preset {recipe.preset}",
        "",
        "Derived by `cookbook.gpu` from the TPU run's TrainConfig and LoraConfig: same",
        "answer-only loss, same chat template, same batch weighting, same LoRA parameterisation.",
        "",
        "    pip install torch " + " ".join(f"{k}=={v}" for k, v in tested_versions().items()),
        "    " + launch_command(recipe),
        "",
        *[f"- {n}" for n in recipe.notes],
    ]
    return "\n".join(lines)


def tested_versions() -> dict[str, str]:
    """Versions of the GPU-side libraries this recipe was derived and CPU-checked with."""
    from importlib.metadata import version

    return {k: version(k) for k in ("transformers", "trl", "peft", "accelerate", "datasets")}
