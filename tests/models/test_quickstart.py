"""Notebook 00's steps (cookbook.models._quickstart) on hand-made inputs."""

import pytest

from cookbook import models

GOOD = {
    "max_abs_diff": 1e-5,
    "bound_max_abs": 4e-5,
    "float32_floor": 1e-5,
    "control_over_bound": 500.0,
    "within_bound": True,
}


@pytest.mark.jax_only
def test_check_parity_passes_a_bound_that_separates_and_refuses_the_rest():
    line = models.check_parity(GOOD)
    assert "1.00e-05 <= bound 4.00e-05" in line and "500 x the bound" in line
    with pytest.raises(models.ParityError, match="outside the bound"):
        models.check_parity({**GOOD, "max_abs_diff": 9e-5, "within_bound": False})
    # A control only 99 bounds away: the bound would let a wrong model through.
    with pytest.raises(models.ParityError, match="only 99 bounds away"):
        models.check_parity({**GOOD, "control_over_bound": 99.0})


@pytest.mark.jax_only
def test_presets_side_by_side_and_a_checkpoints_files(tmp_path):
    table = models.compare_presets("tiny", "gemma4_31b")
    assert list(table.columns) == ["tiny", "gemma4_31b"]
    assert table.loc["layers", "gemma4_31b"] == models.gemma4_31b().num_layers
    for name in ("b.json", "a.safetensors"):
        (tmp_path / name).write_text("{}")
    assert models.checkpoint_files(tmp_path) == ["a.safetensors", "b.json"]
