"""cookbook.lora._counts: Qwix's LoRA parameter count against PEFT's, each checked against its formula."""

from __future__ import annotations

import dataclasses

import pytest

from cookbook import lora as L
from cookbook import models
from cookbook.lora import _apply, _config

ALL7 = L.LoraConfig(rank=8, alpha=16.0)


def test_counts_on_tiny_are_measured_checked_and_recorded():
    counts = L.lora_param_counts("tiny", ALL7)
    assert counts.preset == "tiny"
    assert counts.qwix_measured == counts.qwix_expected == L.expected_lora_params("tiny", ALL7)
    assert counts.peft_measured == counts.peft_expected == _apply.peft_lora_params("tiny", ALL7)
    assert counts.peft_measured - counts.qwix_measured == counts.kv_shared_a == 5 * 128 * 8  # 5 sliding layers
    assert counts.trainable_fraction == counts.qwix_measured / models.get_preset("tiny").num_params()
    recorded = counts.results()["counts"]
    assert list(recorded) == [
        "qwix_measured",
        "qwix_expected",
        "peft_measured",
        "peft_expected",
        "kv_shared_a",
        "base_params",
        "trainable_fraction",
    ]
    assert counts.table()["qwix_measured"] == f"{counts.qwix_measured:,}"
    assert counts.table()["trainable_fraction"] == f"{counts.trainable_fraction:.4%}"
    assert counts.describe().startswith(f"Qwix {counts.qwix_measured:,} = PEFT {counts.peft_measured:,} - ")


def test_a_count_off_its_formula_is_an_error_naming_it():
    counts = L.lora_param_counts("tiny", ALL7)
    with pytest.raises(_config.LoraApplicationError, match=r"on tiny: Qwix created [\d,]+, the formula says"):
        dataclasses.replace(counts, qwix_measured=counts.qwix_measured + 1).check()
    with pytest.raises(_config.LoraApplicationError, match="PEFT - Qwix"):
        dataclasses.replace(counts, kv_shared_a=0).check()


def test_family_counts_parse_the_presets_and_check_each():
    cfg = L.LoraConfig(rank=8, alpha=16.0, targets="all-linear")
    family = L.family_param_counts("tiny, ", cfg)
    assert list(family.counts) == ["tiny"]
    assert family.counts["tiny"] == L.lora_param_counts("tiny", cfg)
    assert family.results() == {"family_targets": "all-linear", "family": {"tiny": family.counts["tiny"].as_dict()}}
    assert family.table()["tiny"]["Qwix LoRA params"] == f"{family.counts['tiny'].qwix_measured:,}"
    with pytest.raises(ValueError, match="name at least one preset"):
        L.family_param_counts(" , ", cfg)
