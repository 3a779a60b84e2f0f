"""Quickstart helpers: logit parity between Tunix and transformers, and greedy sampling.

Backs ``notebooks/00_quickstart.ipynb``: after loading a checkpoint into Tunix, the first
thing to check is that Tunix computes what transformers computes on the same weights,
on sequences longer than the sliding window (so sliding and global layers both count).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cookbook import core
from cookbook.models import _loader as loader
from cookbook.models import _presets as models
from cookbook.models import _tokenizer as tokenizer


def random_text_tokens(preset: models.ModelPreset, batch: int, length: int, seed: int = 0) -> np.ndarray:
    """Random ordinary-token ids (never the special or multimodal marker ids)."""
    rng = np.random.default_rng(seed)
    return rng.integers(len(tokenizer.SPECIAL_TOKENS), min(preset.vocab_size, 1024), size=(batch, length))


def tunix_logits(model, tokens: np.ndarray, mesh=None) -> np.ndarray:
    """Full-sequence logits from a Tunix Gemma 4 model (causal mask, positions 0..T-1)."""
    import contextlib

    import jax.numpy as jnp
    from flax import nnx
    from tunix.sft import utils as sft_utils

    b, t = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(t), (b, t))
    mask = sft_utils.make_causal_attn_mask(jnp.ones((b, t), bool))
    # nnx.jit, not jax.jit over a closure: a Qwix LoRA model mutates RNG state when called.
    forward = nnx.jit(lambda mdl, x, p, m: mdl(x, p, None, m)[0])
    with mesh if mesh is not None else contextlib.nullcontext():
        return np.asarray(forward(model, jnp.asarray(tokens), positions, mask))


def transformers_logits(
    ckpt_dir: str | Path, tokens: np.ndarray, dtype: str = "float32", *, threads: int | None = None
) -> np.ndarray:
    """Logits from transformers (in ``dtype``: float32, or float64 for a noise floor).

    ``threads``: torch's intra-op threads (default :data:`cookbook.core.REFERENCE_TORCH_THREADS`,
    one: with more, the float32 logits differ between processes; see :func:`cookbook.core.torch_threads`).
    """
    import torch
    from transformers import AutoModelForCausalLM

    # Gemma4ForCausalLM for the text-only layout, the released Gemma4(Unified)ForConditionalGeneration
    # for the multimodal ones (transformers' causal-LM mapping of each model_type).
    # MoE layers: transformers' default experts kernel (torch grouped_mm) has no float64; its
    # eager loop computes the same function in any dtype.
    kwargs = {"experts_implementation": "eager"} if dtype == "float64" else {}
    model = AutoModelForCausalLM.from_pretrained(ckpt_dir, dtype=getattr(torch, dtype), **kwargs).eval()
    with torch.no_grad(), core.torch_threads(core.REFERENCE_TORCH_THREADS if threads is None else threads):
        # a copy: tokens may be a read-only view (a JAX array's host buffer), which torch warns about
        return model(input_ids=torch.tensor(np.asarray(tokens))).logits.numpy()


def logit_parity(
    ckpt_dir: str | Path,
    preset: str | models.ModelPreset,
    *,
    model=None,
    mesh=None,
    batch: int = 2,
    length: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Compare Tunix and transformers logits on random text longer than the sliding window.

    Returns max and mean absolute difference, the logits' scale, the relative error (max
    diff / max |logit|), and the bound the difference must stay within: derived from
    transformers' own float32 error on these tokens (its float32 vs float64 logits; see
    :mod:`cookbook.core`). In float32 both frameworks are ~1e-4 from a float64
    reference at a hundred positions, so expect max diffs of that order, not zero. The
    control is the same model with one norm scale perturbed by 1%: it must be far outside.
    """
    p = models.get_preset(preset)
    length = length or 2 * p.sliding_window
    tokens = random_text_tokens(p, batch, length, seed)
    if model is None:
        model = loader.load_tunix_model(ckpt_dir, p, mesh=mesh)
    ours = tunix_logits(model, tokens, mesh)
    ref = transformers_logits(ckpt_dir, tokens)
    floor = core.float32_floor(ref, transformers_logits(ckpt_dir, tokens, dtype="float64"))
    check = core.compare(ours, ref, floor)
    control = core.compare(swapped_norm_logits(model, tokens, mesh), ref, floor)
    diff = np.abs(ours - ref)
    return {
        "batch": batch,
        "seq_len": length,
        "sliding_window": p.sliding_window,
        "max_abs_diff": float(diff.max()),
        "mean_abs_diff": float(diff.mean()),
        "max_abs_logit": float(np.abs(ref).max()),
        "relative_max_diff": float(diff.max() / np.abs(ref).max()),
        "argmax_agreement": float((ours.argmax(-1) == ref.argmax(-1)).mean()),
        "float32_floor": floor.max_abs,
        "bound_max_abs": check["bound_max_abs"],
        "bound_mean_abs": check["bound_mean_abs"],
        "within_bound": check["ok"],
        "control_max_abs_diff": control["max_abs_diff"],
        "control_over_bound": control["max_over_bound"],
    }


def swapped_norm_logits(model, tokens: np.ndarray, mesh=None) -> np.ndarray:
    """Logits with the last layer's two feed-forward norm scales swapped, then restored.

    The control of the parity check: the kind of bug a name mapping makes (the norms are
    randomised in the random bases precisely so that this one is visible).
    """
    layer = model.layers[-1]
    a, b = layer.pre_ffw_norm.scale.value, layer.post_ffw_norm.scale.value
    layer.pre_ffw_norm.scale.value, layer.post_ffw_norm.scale.value = b, a
    try:
        return tunix_logits(model, tokens, mesh)
    finally:
        layer.pre_ffw_norm.scale.value, layer.post_ffw_norm.scale.value = a, b


def make_sampler(model, tokenizer, cache_size: int):
    """A greedy-capable Tunix ``Sampler`` for a Gemma 4 model, with a KV cache of ``cache_size``."""
    from tunix.generate import sampler as sampler_lib

    cfg = model.config
    return sampler_lib.Sampler(
        transformer=model,
        tokenizer=tokenizer,
        cache_config=sampler_lib.CacheConfig(
            cache_size=cache_size, num_layers=cfg.num_layers, num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim
        ),
    )


def sample_prompts(
    sampler,
    prompts: list[str],
    *,
    max_tokens: int,
    batch_size: int,
    max_prompt: int | None = None,
    temperature: float = 0.0,
    top_p: float | None = None,
    seed: int | None = None,
    on_done=None,
) -> tuple[list[str], list[int | None]]:
    """Tunix's ``Sampler`` over ``prompts`` in fixed-size batches, stopping at Gemma 4's stop tokens.

    The one sampling loop of the cookbook (``train.evaluate``, ``evaluate.tunix_samples`` and
    :func:`generate` call it). The last batch is padded with its own last prompt, so every call
    has one compiled shape; ``temperature`` 0 is greedy, and otherwise batch ``b`` draws with
    ``seed + b`` (top-p ``top_p``, no top-k). ``on_done(k)`` is called after each batch with its
    real prompt count (a progress bar).

    Returns:
      ``(texts, seeds)``: one completion per prompt, in order, and the seed its batch drew with.
    """
    texts: list[str] = []
    seeds: list[int | None] = []
    sampling = {"temperature": 0.0} if temperature == 0 else {"temperature": temperature, "top_p": top_p, "top_k": None}
    for b, start in enumerate(range(0, len(prompts), batch_size)):
        chunk = prompts[start : start + batch_size]
        batch_seed = None if seed is None else seed + b
        out = sampler(
            chunk + [chunk[-1]] * (batch_size - len(chunk)),
            max_generation_steps=max_tokens,
            eos_tokens=tokenizer.stop_token_ids(),
            **({} if max_prompt is None else {"max_prompt_length": max_prompt}),
            **({} if batch_seed is None else {"seed": batch_seed}),
            **sampling,
        )
        texts.extend(out.text[: len(chunk)])
        seeds.extend([batch_seed] * len(chunk))
        if on_done is not None:
            on_done(len(chunk))
    return texts, seeds


def generate(
    model,
    tok,
    preset: str | models.ModelPreset,
    user_messages: list[str],
    *,
    max_new_tokens: int = 32,
    sampler=None,
) -> list[str]:
    """Greedy completions of single-turn chats, rendered with the Gemma 4 chat template."""
    sampler = sampler or make_sampler(model, tok, cache_size=256)
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": m}], tokenize=False, add_generation_prompt=True)
        for m in user_messages
    ]
    return sample_prompts(sampler, prompts, max_tokens=max_new_tokens, batch_size=len(prompts))[0]
