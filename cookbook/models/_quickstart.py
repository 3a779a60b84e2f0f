"""Notebook 00's steps: a base checkpoint's files, presets side by side, the parity verdict, a sample."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from cookbook.models import _parity as parity_lib
from cookbook.models import _presets as presets

# The swapped-norm control must land this many bounds away at least: a bound that lets a 1% change
# of one norm scale through would not tell a wrong loader from a right one.
CONTROL_MIN_OVER_BOUND = 100


class ParityError(AssertionError):
    """Tunix's logits are not within the bound of transformers', or the control is not outside it."""


def checkpoint_files(ckpt_dir: str | Path) -> list[str]:
    """The names of the files in a Hugging Face checkpoint directory, sorted."""
    return sorted(p.name for p in Path(ckpt_dir).iterdir())


def compare_presets(*names: str | presets.ModelPreset):
    """:func:`describe` of each preset, one column per preset (a pandas DataFrame)."""
    import pandas as pd

    return pd.DataFrame([presets.describe(presets.get_preset(n)) for n in names]).set_index("preset").T


def check_parity(parity: dict[str, Any]) -> str:
    """One line saying what :func:`logit_parity` found; raises :class:`ParityError` when the logits
    are outside the bound or the swapped-norm control is fewer than :data:`CONTROL_MIN_OVER_BOUND`
    bounds away (a bound that loose separates nothing)."""
    line = (
        f"max |Tunix - transformers| {parity['max_abs_diff']:.2e} <= bound {parity['bound_max_abs']:.2e} "
        f"(4 x transformers' float32 floor {parity['float32_floor']:.2e}); swapped-norm control "
        f"{parity['control_over_bound']:.0f} x the bound"
    )
    if not parity["within_bound"]:
        raise ParityError(f"Tunix's logits are outside the bound: {line}. Check the preset against the checkpoint.")
    if parity["control_over_bound"] < CONTROL_MIN_OVER_BOUND:
        raise ParityError(
            f"the control is only {parity['control_over_bound']:.0f} bounds away (at least "
            f"{CONTROL_MIN_OVER_BOUND} needed): {line}. The bound does not separate a wrong model from a right one."
        )
    return line


def sample_chat(
    model, ckpt_dir: str | Path, preset, prompts: list[str], *, max_new_tokens: int, mesh=None
) -> list[str]:
    """Greedy completions of single-turn chats (:func:`generate`), with the checkpoint's own
    tokenizer, inside ``mesh`` where the model is sharded on one."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(ckpt_dir))
    with mesh if mesh is not None else contextlib.nullcontext():
        return parity_lib.generate(model, tok, preset, prompts, max_new_tokens=max_new_tokens)
