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


EVAL_ROWS = 50  # held-out prompts scored (one Tunix sampler batch; one vLLM request)
_EVALS: dict[str, dict] = {}


def jax_eval(name: str) -> dict:
    """Greedy exact match of the Tunix model on ``EVAL_ROWS`` held-out rows, before (the LoRA at
    B = 0: the base) and after training, computed once per session (the train and serve tests
    compare against it). ``{"rows", "base", "tuned"}``, each of the last two ``train.evaluate``'s
    result without its sampler."""
    if name not in _EVALS:
        from cookbook import train

        run_dir = run(name)
        cfg = train.config_of_run(run_dir)
        rows = train.eval_rows(cfg)[:EVAL_ROWS]
        tokenizer = train.load_tokenizer(cfg.base_dir)
        tuned = train.evaluate(train.restore_lora_model(run_dir), tokenizer, rows)
        base = train.evaluate(train.build_lora_model(cfg.replace(lora={"dropout": 0.0})), tokenizer, rows,
                              sampler=tuned.pop("sampler"))
        base.pop("sampler")
        _EVALS[name] = {"rows": rows, "base": base, "tuned": tuned}
    return _EVALS[name]
