"""rl.sft_start: notebook 06's SFT run at the checkpoint RL starts from, and the control checkpoint
beside it, both checked before any RL step runs."""

import pytest
import userenv

from cookbook import rl, train
from cookbook.rl import _start


@pytest.fixture(scope="module")
def tiny_sft_run():
    return userenv.tiny_run()  # notebook 06's run, in a user's process (one device), shared by the suite


@pytest.fixture
def asked(monkeypatch, tiny_sft_run):
    """``ensure_trained`` answered with the run a user's process trained (this process has 8 fake
    devices: its own run of the recipe would be another run); the configs it was asked for."""
    configs = []

    def ensure_trained(config, **_):
        configs.append(config)
        return tiny_sft_run

    monkeypatch.setattr(_start.train_lib, "ensure_trained", ensure_trained)
    return configs


@pytest.mark.slow
def test_the_start_and_the_control_are_checkpoints_of_the_recipes_run(asked, tiny_sft_run):
    start = rl.sft_start("tiny", step=100, rl_steps=50)
    assert asked == [train.train_preset("tiny")]
    assert start.kept_steps == tuple(train.checkpoint_steps(tiny_sft_run)) and {100, 150} <= set(start.kept_steps)
    assert start.checkpoint == (tiny_sft_run, 100) and start.control_checkpoint == (tiny_sft_run, 150)
    assert start.results() == {"sft_step": 100}
    assert "step 100" in start.describe() and "step 150" in start.describe()


@pytest.mark.slow
def test_a_start_or_control_the_run_does_not_keep_is_refused_naming_what_it_keeps(asked, tiny_sft_run):
    kept = train.checkpoint_steps(tiny_sft_run)
    with pytest.raises(ValueError, match=rf"no checkpoint 130 \(the control: step 100 \+ 30 RL steps\).*{kept}"):
        rl.sft_start("tiny", step=100, rl_steps=30)
    with pytest.raises(ValueError, match=r"no checkpoint 120 \(the start"):
        rl.sft_start("tiny", step=120, rl_steps=30)


def test_no_rl_steps_is_refused_before_any_training(monkeypatch):
    def ensure_trained(config, **_):
        raise AssertionError("trained before checking its arguments")

    monkeypatch.setattr(_start.train_lib, "ensure_trained", ensure_trained)
    with pytest.raises(ValueError, match="rl_steps=0"):
        rl.sft_start("tiny", step=100, rl_steps=0)
