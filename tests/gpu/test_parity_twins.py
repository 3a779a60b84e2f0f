"""The GPU recipe (transformers + PEFT + TRL, through the generated train_gpu.py) optimises the Tunix
run's objective on the random twins too: E2B's per-layer inputs and KV-shared layers (TRL trains
with ``use_cache=False``), 12B's K = V global layer with one KV head in its unified layout, 26B-A4B's
experts beside the dense MLP (and its router's top-k)."""

import pytest
import twins

from cookbook.core._numerics import PARITY_FACTOR


@pytest.mark.slow
@pytest.mark.parametrize("name", twins.TWINS)
def test_same_loss_gradients_and_adamw_steps_on_the_twin(name, tmp_path):
    from cookbook.gpu import _parity, _parity_parts

    r = _parity.run_parity(config=_parity_parts.parity_train_config(model_preset=name), work_dir=tmp_path)
    print(
        name,
        {
            k: r.as_dict()[k]
            for k in (
                "initial_loss_diff",
                "loss_float32_floor",
                "grad_rel_err",
                "grad_float32_floor",
                "max_step_loss_diff",
                "control_max_step_loss_diff",
            )
        },
    )
    assert r.tokens_equal and r.masks_equal
    # One lora_A for K and V on the layers with K/V of their own (5 of the twin's layers: E2B's
    # last 5 share K/V, 12B's and 26B-A4B's sixth is their K = V global layer).
    assert r.kv_lora_a_tied == 5
    # Bounds from transformers' own float32 error on this batch (against float64), measured here.
    assert 0 < r.loss_float32_floor < 1e-3 and 0 < r.grad_float32_floor < 1e-2
    assert r.initial_loss_diff <= PARITY_FACTOR * r.loss_float32_floor
    assert r.grad_rel_err <= PARITY_FACTOR * r.grad_float32_floor
    t, h = r.step_losses_tunix, r.step_losses_hf
    assert abs(t[0] - h[0]) <= PARITY_FACTOR * r.loss_float32_floor and t[0] == pytest.approx(t[1])
    assert t[0] - t[-1] > 0.3  # the steps move the loss; the two stacks move it together
    # Control: Tunix against itself from LoRA weights perturbed by 1e-4 drifts further than the stacks.
    assert r.max_step_loss_diff <= r.control_max_step_loss_diff
    assert r.rel_lora_update_diff <= r.control_rel_lora_update_diff
