"""LoRA parameter counts, Qwix's against PEFT's, each measured and checked against its formula.

Qwix's count is read from the abstract Tunix model with LoRA applied (no weights); PEFT's from
``get_peft_model`` on transformers' model built on the meta device (no memory, 31B included).
Each must equal its formula (:func:`expected_lora_params`, :func:`peft_lora_params`), and the two
differ by exactly the second ``A`` PEFT has on each stacked K/V weight (:func:`kv_shared_a_params`);
a count that breaks either is an error here, not a number in a table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from cookbook import models
from cookbook.lora._apply import (
    abstract_lora_model,
    count_lora_params,
    expected_lora_params,
    kv_shared_a_params,
    peft_lora_params,
    peft_trainable_params,
)
from cookbook.lora._config import LoraApplicationError, LoraConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoraParamCounts:
    """LoRA parameters of one config on one preset: Qwix and PEFT, each measured and expected."""

    preset: str
    qwix_measured: int  # read from the abstract Tunix model with Qwix's LoRA
    qwix_expected: int  # expected_lora_params
    peft_measured: int  # PEFT's get_nb_trainable_parameters on the meta-device model
    peft_expected: int  # peft_lora_params
    kv_shared_a: int  # PEFT's second A on each stacked K/V: peft - qwix
    base_params: int
    trainable_fraction: float  # qwix_measured / base_params

    def as_dict(self) -> dict[str, Any]:
        """The counts by name (the preset left out): what notebook 02 records for each preset."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "preset"}

    def check(self) -> None:
        """Raise :class:`LoraApplicationError` unless each count is its formula's and they differ by ``kv_shared_a``."""
        problems = []
        if self.qwix_measured != self.qwix_expected:
            problems.append(f"Qwix created {self.qwix_measured:,}, the formula says {self.qwix_expected:,}")
        if self.peft_measured != self.peft_expected:
            problems.append(f"PEFT created {self.peft_measured:,}, the formula says {self.peft_expected:,}")
        if self.peft_measured - self.qwix_measured != self.kv_shared_a:
            problems.append(
                f"PEFT - Qwix = {self.peft_measured - self.qwix_measured:,}, not the {self.kv_shared_a:,} of the "
                "second A on each stacked K/V"
            )
        if problems:
            raise LoraApplicationError(
                f"LoRA parameter counts on {self.preset}: " + "; ".join(problems) + ". The cookbook's name "
                "translation or its formulas no longer match what Qwix or PEFT build: check their versions."
            )

    def table(self) -> dict[str, str]:
        """Each count formatted for display (thousands separated; the fraction as a percentage)."""
        return {k: f"{v:,}" if isinstance(v, int) else f"{v:.4%}" for k, v in self.as_dict().items()}

    def describe(self) -> str:
        return (
            f"Qwix {self.qwix_measured:,} = PEFT {self.peft_measured:,} - {self.kv_shared_a:,} "
            f"(shared K/V A); {100 * self.trainable_fraction:.2f}% of {self.preset}'s parameters"
        )

    def results(self) -> dict[str, Any]:
        """What notebook 02 records of the counts."""
        return {"counts": self.as_dict()}


def lora_param_counts(preset: str | models.ModelPreset, lora: LoraConfig, *, check: bool = True) -> LoraParamCounts:
    """Count ``lora``'s parameters on ``preset`` with Qwix and with PEFT, and (``check``) check them.

    Raises:
      LoraApplicationError: a count is not its formula's, or the two differ by more than the
        shared K/V ``A`` (:meth:`LoraParamCounts.check`).
    """
    p = models.get_preset(preset)
    qwix = count_lora_params(abstract_lora_model(p, lora))
    counts = LoraParamCounts(
        preset=p.name,
        qwix_measured=qwix,
        qwix_expected=expected_lora_params(p, lora),
        peft_measured=peft_trainable_params(p, lora),
        peft_expected=peft_lora_params(p, lora),
        kv_shared_a=kv_shared_a_params(p, lora),
        base_params=p.num_params(),
        trainable_fraction=qwix / p.num_params(),
    )
    if check:
        counts.check()
    return counts


@dataclasses.dataclass(frozen=True, kw_only=True)
class FamilyCounts:
    """:func:`lora_param_counts` of one config on several presets (the Gemma 4 sizes), each checked."""

    targets: tuple[str, ...] | str
    counts: dict[str, LoraParamCounts]  # by preset name, in the order asked for

    def table(self) -> dict[str, dict[str, str]]:
        """Per preset: Qwix's and PEFT's counts, their difference and the share of the model."""
        return {
            name: {
                "Qwix LoRA params": f"{c.qwix_measured:,}",
                "PEFT LoRA params": f"{c.peft_measured:,}",
                "PEFT - Qwix (K/V A shared)": f"{c.kv_shared_a:,}",
                "of the model": f"{c.trainable_fraction:.3%}",
            }
            for name, c in self.counts.items()
        }

    def results(self) -> dict[str, Any]:
        """What notebook 02 records of the family: the targets and each preset's counts."""
        return {"family_targets": self.targets, "family": {n: c.as_dict() for n, c in self.counts.items()}}


def family_param_counts(presets: str | Sequence[str], lora: LoraConfig) -> FamilyCounts:
    """:func:`lora_param_counts` (checked) of ``lora`` on each of ``presets`` ("a,b,c" or a list).

    Raises:
      ValueError: no preset named.
      LoraApplicationError: a preset's counts fail their check (the message names it).
    """
    names = [p.strip() for p in (presets.split(",") if isinstance(presets, str) else presets) if p.strip()]
    if not names:
        raise ValueError(f"family_param_counts({presets!r}): name at least one preset, e.g. 'gemma4_e2b,gemma4_31b'")
    return FamilyCounts(targets=lora.targets, counts={n: lora_param_counts(n, lora) for n in names})
