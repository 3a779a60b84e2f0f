"""Run a notebook with papermill and read back what it recorded."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def run_notebook(name: str, run_dir: Path, **parameters: Any) -> dict[str, Any]:
    """Execute ``notebooks/<name>.ipynb`` with ``parameters``; return its recorded results.

    ``run_dir`` becomes ``COOKBOOK_RUN_DIR`` for the kernel, so the notebook's artefacts and its
    results JSON land there; the executed copy is saved beside them.
    """
    import papermill as pm
    import userenv

    from cookbook.harness import ipc_kernel_manager, load_results

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    # The kernel starts with this process's environment: a user's (one CPU device, unless the
    # notebook asks for 8 itself, as 00, 01, 03 and 05 do), so that what it trains is the run the
    # demo and the shared fixtures train (tests/userenv.py).
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(userenv.user_env(COOKBOOK_RUN_DIR=str(run_dir)))
    try:
        pm.execute_notebook(
            str(REPO / "notebooks" / f"{name}.ipynb"),
            str(run_dir / f"{name}.ipynb"),
            parameters=parameters,
            cwd=str(REPO / "notebooks"),
            kernel_name="python3",
            progress_bar=False,
            kernel_manager_class=ipc_kernel_manager(),
        )
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return load_results(name, run_dir)
