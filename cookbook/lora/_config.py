"""LoRA settings (``LoraConfig``) and the errors of applying one."""

from __future__ import annotations

import dataclasses
import re

from cookbook.lora._names import ALL_LINEAR, HF_PROJECTIONS


class LoraCoverageError(ValueError):
    """A LoRA target selection matches nothing, or only some of the layers."""


class LoraApplicationError(RuntimeError):
    """Qwix created a different number of LoRA parameters than the targets imply."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoraConfig:
    """What to adapt and how.

    ``targets`` takes what PEFT's ``target_modules`` takes: a tuple of projection names
    (``"q_proj"``, ... ``"down_proj"``, or suffixes such as ``"layers.5.self_attn.k_proj"``),
    the string ``"all-linear"``, or a regex string fully matched against module names
    such as ``model.layers.3.self_attn.q_proj``.
    """

    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    targets: tuple[str, ...] | str = HF_PROJECTIONS

    def __post_init__(self) -> None:
        if not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"LoraConfig.rank={self.rank!r}: use a positive integer (e.g. 16)")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoraConfig.dropout={self.dropout!r}: use a value in [0, 1)")
        if isinstance(self.targets, list):
            object.__setattr__(self, "targets", tuple(self.targets))
        if not self.targets:
            raise ValueError("LoraConfig.targets is empty: name projections or use 'all-linear'")

    @property
    def scale(self) -> float:
        """The factor LoRA's update is multiplied by (``alpha / rank``, as PEFT and Qwix)."""
        return self.alpha / self.rank


def parse_targets(text: str) -> tuple[str, ...] | str:
    """Targets from one string (a notebook parameter or a CLI flag), as PEFT reads them.

    ``"all-linear"`` stays; text with regex characters (``*\\()[]|^$+?``) is a regex;
    anything else is a comma-separated list of names: ``"q_proj,v_proj"``.
    """
    text = text.strip()
    if text == ALL_LINEAR or re.search(r"[*\\()\[\]|^$+?]", text):
        return text
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    if not names:
        raise ValueError("no LoRA targets given: name projections, 'all-linear', or a regex")
    return names
