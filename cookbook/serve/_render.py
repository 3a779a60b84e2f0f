"""What vLLM sees: the model directory it serves for a preset, and a chat rendered exactly as its
OpenAI endpoint renders it (notebook 05 checks the training template against it)."""

from __future__ import annotations

from pathlib import Path

from cookbook import merge, models


def vllm_model_dir(preset: str = "tiny") -> str:
    """The model vLLM serves for ``preset``: the Hub id of a real one; for a random preset
    its base checkpoint in the text-only layout vLLM on CPU loads (converted once)."""
    p = models.get_preset(preset)
    if p.hf_checkpoint is not None:
        return p.hf_checkpoint
    return str(merge.ensure_text_only_base(models.ensure_base(p), p))


def render_with_vllm(
    model_dir: str | Path,
    messages: list[dict],
    *,
    add_generation_prompt: bool = True,
    tokenize: bool = True,
    tools: list[dict] | None = None,
    **chat_template_kwargs,
) -> list[int] | str:
    """Render a chat exactly as vLLM's OpenAI chat endpoint does, without a server.

    Uses vLLM's own chat-template resolution and ``safe_apply_chat_template`` on the
    model directory vLLM would serve (on CPU, the text-only layout: see
    ``cookbook.merge.ensure_text_only_base``). ``tools`` and ``chat_template_kwargs`` (e.g.
    ``enable_thinking=True``) are a request's ``tools`` and ``chat_template_kwargs``.
    Importing vLLM takes ~10-20 s.
    """
    from vllm.config import ModelConfig
    from vllm.renderers.hf import safe_apply_chat_template
    from vllm.tokenizers import get_tokenizer

    model_config = ModelConfig(model=str(model_dir))
    out = safe_apply_chat_template(
        model_config,
        get_tokenizer(str(model_dir)),
        messages,
        tokenize=tokenize,
        add_generation_prompt=add_generation_prompt,
        tools=tools,
        **chat_template_kwargs,
    )
    return list(out) if tokenize else out
