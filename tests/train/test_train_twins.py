"""The random twins train on the sample task with the CPU recipe (short schedule), and resume from Orbax.

One cached run per twin (tests/twins.py), shared with the merge and serve tests of the twins.
"""

import shutil

import numpy as np
import pytest
import twins

from cookbook import train
from cookbook.train import _runs, _trainer


@pytest.mark.slow
@pytest.mark.parametrize("name", twins.TWINS)
def test_short_run_learns_the_task_and_resumes_bit_for_bit(name, twin_run, tmp_path):
    run_dir = twin_run(name)
    ev = twins.jax_eval(name)
    print(name, "held-out exact match: base", ev["base"]["accuracy"], "tuned", ev["tuned"]["accuracy"])
    # The base (random) gets none right; the trained LoRA a clear fraction: at least the bound derived
    # from the schedule's spread over seeds (tests/twins.py).
    assert ev["base"]["correct"] == 0
    assert ev["tuned"]["accuracy"] >= twins.min_tuned_exact_match(name), ev["tuned"]["completions"][:3]
    metrics = train.read_metrics(run_dir)
    assert metrics["eval/loss"][-1][1] < 0.25 * metrics["eval/loss"][0][1]

    # Orbax resume: the run without its last checkpoint resumes from the one before and ends on
    # the same LoRA weights, bit for bit (same config, devices and threads: train.result_determinants).
    steps = train.checkpoint_steps(run_dir)
    assert steps[-1] == twins.SHORT_SCHEDULE[name]["max_steps"] and len(steps) >= 2
    cut = tmp_path / "cut"
    shutil.copytree(run_dir, cut, ignore=shutil.ignore_patterns(str(steps[-1]), "summary.json"))
    resumed = _trainer.train(twins.config(name), cut, progress=False)
    assert resumed.resumed_from == steps[-2] and resumed.final_step == steps[-1]
    got = _runs.lora_arrays(train.restore_lora_model(cut))
    want = _runs.lora_arrays(train.restore_lora_model(run_dir))
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
