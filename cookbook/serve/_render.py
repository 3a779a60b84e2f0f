"""What vLLM sees: the model directory it serves for a preset, and a chat rendered exactly as its
OpenAI endpoint renders it (notebook 05 checks the training template against it)."""

from __future__ import annotations

import dataclasses
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


@dataclasses.dataclass(frozen=True)
class RenderingCheck:
    """:func:`check_rendering`'s result: whether vLLM renders the rows' prompts as training does."""

    rows: int
    identical: bool  # every prompt's token ids equal
    example: str  # the first prompt as vLLM renders it, as text

    def describe(self) -> str:
        return f"vLLM's rendering of {self.rows} prompts is identical to training's: {self.identical}\n{self.example!r}"


def check_rendering(preset: str, tokenizer, rows: list[dict]) -> RenderingCheck:
    """Render each row's prompt (its first turn, with the generation prompt) as vLLM's chat endpoint
    would for ``preset`` (:func:`vllm_model_dir`), and compare its token ids with what the training
    pipeline renders (``cookbook.data.prompt_ids``): a served model must see the prompts it trained on."""
    from cookbook import data

    served_dir = vllm_model_dir(preset)
    vllm_ids = [render_with_vllm(served_dir, r["messages"][:1]) for r in rows]
    ours = [data.prompt_ids(tokenizer, r) for r in rows]
    example = render_with_vllm(served_dir, rows[0]["messages"][:1], tokenize=False)
    return RenderingCheck(len(rows), vllm_ids == ours, example)
