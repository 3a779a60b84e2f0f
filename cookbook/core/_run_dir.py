"""Where a run writes: its output directory, and a work directory per stage for its artefacts.

A notebook run (``cookbook demo``, a notebook test, papermill) sets ``$COOKBOOK_RUN_DIR``; an
interactive session writes to ``runs/interactive``. The notebooks record their results there
(``cookbook.harness.record``), and a stage's function that writes artefacts a reader looks at
afterwards (a run of two local hosts, an RL run, a written GPU recipe) puts them, unless told
otherwise, in the run's ``work/<name>``, so that a notebook never composes a path itself.
"""

from __future__ import annotations

import os
from pathlib import Path


def run_dir() -> Path:
    """This run's output directory: ``$COOKBOOK_RUN_DIR`` or ``runs/interactive``."""
    path = Path(os.environ.get("COOKBOOK_RUN_DIR", "runs/interactive"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def work_dir(name: str) -> Path:
    """A directory for artefacts (checkpoints, merged models, written recipes) inside the run."""
    path = run_dir() / "work" / name
    path.mkdir(parents=True, exist_ok=True)
    return path
