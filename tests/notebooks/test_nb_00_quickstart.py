"""Notebook 00 through papermill with non-default parameters, asserting on its results."""

import pytest
from nbutil import run_notebook


@pytest.mark.slow  # over ~30 s in the profile (tests/profile.json): make test only
def test_quickstart_records_parity_on_another_mesh(tmp_path):
    results = run_notebook(
        "00_quickstart", tmp_path, MESH_FSDP=2, MESH_TP=2, PARITY_BATCH=1, PARITY_SEQ_LEN=96, MAX_NEW_TOKENS=4
    )
    parity = results["parity"]
    assert results["mesh"] == [2, 2]
    assert parity["seq_len"] == 96 > parity["sliding_window"]
    # Bounds measured in the notebook from transformers' float32-vs-float64 floor (numerics).
    assert 0 < parity["float32_floor"] and parity["bound_max_abs"] == 4 * parity["float32_floor"]
    assert parity["max_abs_diff"] <= parity["bound_max_abs"]
    assert parity["mean_abs_diff"] <= parity["bound_mean_abs"]
    assert parity["control_over_bound"] >= 100
    assert parity["argmax_agreement"] == 1.0
    assert results["sample_completion"] != ""
    assert 1e6 < results["num_params"] < 3e6


@pytest.mark.slow  # over ~30 s in the profile (tests/profile.json): make test only
@pytest.mark.parametrize("preset", ["tiny_e2b", "tiny_26b_a4b"])
def test_quickstart_runs_each_structural_twin(tmp_path, preset):
    """The E2B/E4B twin (per-layer inputs, KV-shared layers) and the 26B-A4B twin (experts) through
    the same notebook: Tunix matches transformers within the float32 bound, and it samples."""
    results = run_notebook(
        "00_quickstart", tmp_path, MODEL_PRESET=preset, MESH_FSDP=2, MESH_TP=2, PARITY_BATCH=1, MAX_NEW_TOKENS=4
    )
    parity = results["parity"]
    assert results["preset"] == preset and parity["max_abs_diff"] <= parity["bound_max_abs"]
    assert parity["control_over_bound"] >= 100 and parity["argmax_agreement"] == 1.0
    assert results["sample_completion"] != ""


@pytest.mark.slow  # ~30 s: make test only
def test_quickstart_runs_as_committed_on_one_device(tmp_path):
    """What a one-chip runtime (Colab's v5e-1) looks like to the code: one device. The mesh
    parameters' default (0 = from the devices present) makes a 1 x 1 mesh; a fixed 4 x 2, the
    old default, stopped in section 3 asking for 8 devices."""
    results = run_notebook("00_quickstart", tmp_path, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=1"})
    parity = results["parity"]
    assert results["devices"] == 1 and results["mesh"] == [1, 1]
    assert parity["max_abs_diff"] <= parity["bound_max_abs"] and parity["control_over_bound"] >= 100
    assert results["sample_completion"] != ""
