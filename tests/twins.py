"""The random twins' one short training run, shared by every twin test (train, merge, serve).

The CPU recipe (``cookbook.train.train_preset``: the ``tiny`` recipe on the twin's structure) on a
shortened schedule: few enough steps for CI, enough that held-out exact match ends clearly above
the base's (measured: see ``SHORT_SCHEDULE``). Trained once per cache through
``train.ensure_trained`` (locked: parallel test processes wait for one trainer).
"""

from __future__ import annotations

TWINS = ("tiny_e2b", "tiny_26b_a4b")
# Measured on a 2-core CPU (8 fake devices, as the suite runs), 50 held-out prompts: see
# test_train_twins.py for the bounds asserted.
SHORT_SCHEDULE = {"max_steps": 80, "warmup_steps": 10, "eval_every_steps": 80, "checkpoint_every_steps": 75}


def config(name: str):
    from cookbook import train

    return train.train_preset(name).replace(**SHORT_SCHEDULE)


def run(name: str):
    from cookbook import train

    return train.ensure_trained(config(name), progress=False)
