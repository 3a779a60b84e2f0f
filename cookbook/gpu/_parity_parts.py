"""The pieces of the GPU-parity run: the same rows, batches and LoRA weights on both stacks.

Copying Qwix's LoRA into PEFT and back (through ``cookbook.lora``'s Tunix <-> PEFT tensor
mapping), padded batches in ``cookbook.data``'s layout, rows whose answers differ in length
(so micro-batch weighting matters), the float64 twin that measures transformers' own float32
error, and small numeric helpers.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from cookbook import lora as lora_lib
from cookbook import models

# What changes for a CPU run: precision, no FSDP launcher, nothing written, a known order.
CPU_OVERRIDES: dict[str, Any] = {
    "bf16": False,
    "use_cpu": True,
    "report_to": "none",
    "save_strategy": "no",
    "eval_strategy": "no",
    "train_sampling_strategy": "sequential",
    "gradient_checkpointing": False,
    "dataloader_num_workers": 0,
    "disable_tqdm": True,
}


def import_train_script(recipe_dir: str | Path, name: str = "train_gpu.py"):
    """Import the script ``name`` written into ``recipe_dir`` (the file a GPU user runs)."""
    path = Path(recipe_dir) / name
    spec = importlib.util.spec_from_file_location(f"{path.stem}_{abs(hash(str(path)))}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tunix_optimizer(config: Any):
    """The TPU run's optimizer: ``cookbook.train.make_optimizer``, with Tunix's
    ``optax.MultiSteps`` accumulation (what ``PeftTrainer`` wraps it in)."""
    import optax

    from cookbook import train

    opt = train.make_optimizer(config)
    if config.grad_accum_steps > 1:
        opt = optax.MultiSteps(opt, every_k_schedule=config.grad_accum_steps)
    return opt


def parity_train_config(**changes: Any):
    """A small ``TrainConfig`` for the parity run: tiny, rank 8, 2 x 2 accumulation, 4 steps
    (2 of warm-up), weight decay on, no dropout, padded rows of the sliding window's length."""
    from cookbook import data as data_lib
    from cookbook import train

    cfg = train.TrainConfig(
        model_preset="tiny",
        lora=lora_lib.LoraConfig(rank=8, alpha=16.0, dropout=0.0),
        data=data_lib.DataConfig(seq_len=64, batch_size=2, packing=False, seed=0),
        max_steps=4,
        warmup_steps=2,
        learning_rate=3e-3,
        weight_decay=0.1,
        grad_accum_steps=2,
    )
    return cfg.replace(**changes) if changes else cfg


def pad_batch(examples: list[tuple[np.ndarray, np.ndarray]], seq_len: int) -> dict[str, np.ndarray]:
    """One example per row, padded to ``seq_len`` (``cookbook.data``'s padded layout)."""
    b = len(examples)
    out = {k: np.zeros((b, seq_len), np.int32) for k in ("input_tokens", "input_mask", "positions", "segment_ids")}
    for i, (ids, mask) in enumerate(examples):
        n = len(ids)
        if n > seq_len:
            raise ValueError(f"example {i} has {n} tokens, more than seq_len={seq_len}")
        out["input_tokens"][i, :n] = ids
        out["input_mask"][i, :n] = mask
        out["positions"][i, :n] = np.arange(n)
        out["segment_ids"][i, :n] = 1
    return out


def uneven_rows(n: int, *, seed: int = 0) -> list[dict]:
    """``n`` sample-task rows; in the first half the answer is cut to its first line.

    The sample task's answers all have the same length, so micro-batches would hold equal
    numbers of answer tokens, and weighing micro-batches (Tunix) or tokens (transformers'
    default) would give the same loss. With uneven answers they do not, and a recipe with
    the wrong weighting fails the step-loss comparison.
    """
    from cookbook import data

    rows = data.generate_rows("train", n=n, seed=seed)
    out = []
    for i, row in enumerate(rows):
        messages = [dict(m) for m in row["messages"]]
        if i < n // 2:
            messages[-1]["content"] = messages[-1]["content"].strip().splitlines()[0]
        out.append({"messages": messages})
    return out


def _tunix_lora_numpy(model) -> dict[str, np.ndarray]:
    from flax import nnx

    return {
        "/".join(map(str, k)): np.asarray(v.get_value() if hasattr(v, "get_value") else v.value)
        for k, v in nnx.state(model, nnx.LoRAParam).flat_state()
    }


def _peft_key(key: str) -> str:
    """``...q_proj.lora_A.weight`` (adapter file) -> ``...q_proj.lora_A.default.weight`` (module)."""
    return key.replace(".lora_A.weight", ".lora_A.default.weight").replace(".lora_B.weight", ".lora_B.default.weight")


def copy_tunix_lora_into_peft(tunix_model, peft_model, preset: models.ModelPreset, lora: lora_lib.LoraConfig) -> int:
    """Set every PEFT LoRA weight from the Tunix model's; returns how many tensors were set.

    Raises if a PEFT LoRA weight is left without a Tunix counterpart.
    """
    import torch
    from flax import nnx

    tensors = lora_lib.tunix_lora_to_peft(
        nnx.state(tunix_model, nnx.LoRAParam), preset, lora, layout="multimodal", vllm_kv_copy=False
    )
    params = dict(peft_model.named_parameters(remove_duplicate=False))
    lora_names = {n for n in params if ".lora_A." in n or ".lora_B." in n}
    done = set()
    with torch.no_grad():
        for key, value in tensors.items():
            name = _peft_key(key)
            if name not in params:
                raise KeyError(f"PEFT model has no parameter {name} (from {key})")
            params[name].copy_(torch.from_numpy(np.array(value, dtype=np.float32)))
            done.add(name)
    left = lora_names - done
    if left:
        raise ValueError(f"{len(left)} PEFT LoRA weights have no Tunix counterpart, e.g. {sorted(left)[:3]}")
    return len(done)


def _peft_as_tunix(
    peft_model, preset: models.ModelPreset, *, grads: bool = False, dtype=np.float32
) -> dict[str, np.ndarray]:
    """PEFT LoRA weights (or their gradients) in the Tunix layout, keyed like
    ``_tunix_lora_numpy``."""
    tensors = {}
    for name, p in peft_model.named_parameters(remove_duplicate=False):
        if ".lora_A." in name or ".lora_B." in name:
            t = p.grad if grads else p
            tensors[name.replace(".default.weight", ".weight")] = t.detach().numpy().astype(dtype)
    state = lora_lib.peft_to_tunix_lora(tensors, preset)
    flat: dict[str, np.ndarray] = {}

    def walk(node, prefix):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}/{k}" if prefix else str(k))
        else:
            flat[prefix] = np.asarray(node)

    walk(state, "")
    return flat


def _float64_twin(script, peft_model, base_dir: Path, recipe_dir: Path, seed: int):
    """The recipe's PEFT model again, in float64, with ``peft_model``'s LoRA weights.

    Built from the base checkpoint, not copied: the trainer's model is wrapped so that its
    outputs come back in float32."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg = script.load_recipe(recipe_dir)
    # 26B-A4B: transformers' default experts kernel (torch grouped_mm) takes no float64; its eager
    # loop over the experts computes the same function.
    hf_cfg = json.loads((Path(base_dir) / "config.json").read_text())
    moe = (hf_cfg.get("text_config") or hf_cfg).get("enable_moe_block")
    kwargs = {"experts_implementation": "eager"} if moe else {}
    twin = script.apply_lora(
        AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float64, **kwargs),
        cfg["lora"],
        cfg["recipe"],
        seed=seed,
    )
    src = dict(peft_model.named_parameters(remove_duplicate=False))
    with torch.no_grad():
        for name, param in twin.named_parameters(remove_duplicate=False):
            if ".lora_" in name:
                param.copy_(src[name].detach().double())
    return twin.eval()


def _answer_token_nll(model, batch):
    """Negative log-likelihood of every answer token (labels != -100) of a collated batch."""
    import torch

    logits = model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask")).logits
    labels = batch["labels"][:, 1:]
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    keep = labels != -100
    return -logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)[keep]


def _set_lora(model, pure: dict, *, rng: np.random.Generator | None = None, rel_noise: float = 0.0) -> None:
    """Set the model's LoRA weights from a pure dict, optionally times (1 + noise)."""
    from flax import nnx

    def visit(node):
        if isinstance(node, dict):
            return {k: visit(v) for k, v in node.items()}
        x = np.asarray(node)
        if rng is not None and rel_noise:
            x = (x * (1 + rel_noise * rng.standard_normal(x.shape))).astype(x.dtype)
        return x

    state = nnx.state(model, nnx.LoRAParam)
    nnx.replace_by_pure_dict(state, visit(pure))
    nnx.update(model, state)


def _rel_norm(num: dict[str, np.ndarray], den: dict[str, np.ndarray]) -> float:
    n = math.sqrt(sum(float(np.sum(np.square(v, dtype=np.float64))) for v in num.values()))
    d = math.sqrt(sum(float(np.sum(np.square(v, dtype=np.float64))) for v in den.values()))
    return n / max(d, 1e-30)


def _as_jax(batch: dict[str, np.ndarray]) -> dict:
    import jax.numpy as jnp

    return {k: jnp.asarray(v) for k, v in batch.items()}


def _sibling(model, name: str, leaf: str):
    return model.get_submodule(name.rsplit(".", 1)[0] + "." + leaf)


def _randomise_b(tree: dict, rng: np.random.Generator, std: float) -> None:
    for k, v in tree.items():
        if isinstance(v, dict):
            _randomise_b(v, rng, std)
        elif str(k).endswith("_lora_b"):
            tree[k] = (std * rng.standard_normal(np.shape(v))).astype(np.asarray(v).dtype)
