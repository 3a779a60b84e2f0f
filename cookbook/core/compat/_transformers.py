"""transformers: the decoder layer class a model's ``_no_split_modules`` names (FSDP's wrap unit).

Checked against transformers 5.12.1. ``_no_split_modules`` is private, but it
is how accelerate and TRL find the layer to wrap; the GPU recipe does the same.
"""

from __future__ import annotations


def no_split_modules(pretrained_cls: type) -> list[str]:
    """The module class names ``pretrained_cls`` (a ``PreTrainedModel`` subclass) keeps whole."""
    return list(getattr(pretrained_cls, "_no_split_modules", None) or [])


def checks() -> dict[str, bool]:
    from transformers.models.gemma4 import modeling_gemma4

    return {
        "transformers Gemma4PreTrainedModel._no_split_modules names a text decoder layer": any(
            "Text" in n for n in no_split_modules(modeling_gemma4.Gemma4PreTrainedModel)
        ),
    }
