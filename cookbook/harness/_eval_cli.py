"""``cookbook eval``: ``cookbook.evaluate``'s command line, with a training run's model as a source.

``cookbook.evaluate`` comes before ``cookbook.train`` in the stages' order (the training stage
scores its runs with it), so ``--run`` cannot be loaded there; the command is put together here,
in the stage that may import both, as ``cookbook gpu-recipe`` is.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register_cli(sub: argparse._SubParsersAction) -> None:
    from cookbook import evaluate, train

    evaluate.add_eval_parser(sub, check_run=train.check_run_base, run_model=_run_model)


def _run_model(run_dir: Path, base: bool) -> tuple[Any, Any, bool]:
    """A training run's Tunix model (with ``base``, its base with LoRA off), the base checkpoint's
    tokenizer, and whether the run was trained to think (prompted so, as it was trained)."""
    from cookbook import data, train

    config = train.config_of_run(run_dir)
    base_dir = train.resolve_base_dir(config)
    model = train.build_lora_model(config, base_dir) if base else train.restore_lora_model(run_dir)
    return model, data.load_tokenizer(base_dir=base_dir), config.sample_task == "thinking"
