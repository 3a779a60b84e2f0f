"""Run a notebook with papermill and read back what it recorded."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def run_notebook(name: str, run_dir: Path, **parameters: Any) -> dict[str, Any]:
    """Execute ``notebooks/<name>.ipynb`` with ``parameters``; return its recorded results.

    ``run_dir`` becomes ``COOKBOOK_RUN_DIR`` for the kernel, so the notebook's artefacts
    and its results JSON land there; the executed copy is saved beside them.
    """
    import papermill as pm

    from cookbook.harness import ipc_kernel_manager, load_results

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    old = os.environ.get("COOKBOOK_RUN_DIR")
    os.environ["COOKBOOK_RUN_DIR"] = str(run_dir)
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
        if old is None:
            os.environ.pop("COOKBOOK_RUN_DIR", None)
        else:
            os.environ["COOKBOOK_RUN_DIR"] = old
    return load_results(name, run_dir)
