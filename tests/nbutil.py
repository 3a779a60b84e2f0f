"""Run a notebook with papermill and read back what it recorded."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def run_notebook(
    name: str | Path, run_dir: Path, *, env: dict[str, str] | None = None, **parameters: Any
) -> dict[str, Any]:
    """Execute ``notebooks/<name>.ipynb`` with ``parameters``; return its recorded results.

    ``run_dir`` becomes ``COOKBOOK_RUN_DIR`` for the kernel, so the notebook's artefacts and its
    results JSON land there; the executed copy is saved beside them. ``env``: variables set for
    the kernel on top of a user's environment (e.g. ``XLA_FLAGS`` for one CPU device).
    """
    import papermill as pm

    from cookbook.harness import ipc_kernel_manager
    from cookbook.harness._record import load_results

    path = name if isinstance(name, Path) else REPO / "notebooks" / f"{name}.ipynb"
    name = path.stem
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    # The kernel starts with this process's environment: a user's (one CPU device, unless the
    # notebook asks for 8 itself, as 00, 01, 03 and 05 do), so that what it trains is the run the
    # demo and the shared fixtures train (tests/userenv.py), in the suite's cache.
    saved = dict(os.environ)
    kernel_env = kernel_environment(run_dir) | dict(env or {})  # before the clear: derived from it
    os.environ.clear()
    os.environ.update(kernel_env)
    try:
        pm.execute_notebook(
            str(path),
            str(run_dir / path.name),
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


def kernel_environment(run_dir: Path) -> dict[str, str]:
    """What a notebook test's kernel runs with: this process's environment as a user's
    (``userenv.user_env``: the suite's cache root and PATH kept, its 8 fake devices not), and
    ``COOKBOOK_RUN_DIR`` = ``run_dir``."""
    import userenv

    return userenv.user_env(COOKBOOK_RUN_DIR=str(run_dir))
