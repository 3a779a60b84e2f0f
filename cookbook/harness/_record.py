"""Notebook harness: where a notebook writes its results, and an optional parameter form.

Every notebook ends its sections with ``record("05_data_pipeline", key=value, ...)``:
the values go to ``$COOKBOOK_RUN_DIR/<notebook>.json`` (default ``runs/interactive``),
merged with what the notebook recorded before. Tests and ``cookbook demo`` read them back
with :func:`load_results`, so a test asserts on what the notebook actually computed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cookbook import core
from cookbook.core import run_dir  # the run's output directory ($COOKBOOK_RUN_DIR), core's


def record(notebook: str, **values: Any) -> None:
    """Merge ``values`` into ``<run_dir>/<notebook>.json`` (:func:`load_results` reads it back).

    Returns nothing, so that a cell ending with it shows nothing: the record is for tests and the
    demo's report, the cell's prints are for the reader."""
    path = run_dir() / f"{notebook}.json"
    current = json.loads(path.read_text()) if path.is_file() else {}
    current.update(core.to_jsonable(values))
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(current, indent=2, sort_keys=True))
    tmp.replace(path)


def load_results(notebook: str, directory: str | Path | None = None) -> dict[str, Any]:
    """What ``notebook`` recorded in ``directory`` (default: this run's directory)."""
    path = Path(directory or run_dir()) / f"{notebook}.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: notebook {notebook!r} recorded nothing in this run")
    return json.loads(path.read_text())


def parameter_form(namespace: dict[str, Any], names: list[str] | None = None):
    """An optional ipywidgets form over the notebook's ALL_CAPS parameters.

    Editing a field assigns the variable in ``namespace`` (the notebook's ``globals()``),
    exactly as papermill would. Headless runs never need it: the parameter cell's
    literals are the defaults. Returns the widget (or None when ipywidgets is missing).
    """
    try:
        import ipywidgets as widgets
    except ImportError:
        return None
    names = names or [k for k, v in namespace.items() if k.isupper() and isinstance(v, bool | int | float | str)]
    rows = []
    for name in names:
        value = namespace[name]
        if isinstance(value, bool):
            w = widgets.Checkbox(value=value, description=name)
        elif isinstance(value, int):
            w = widgets.IntText(value=value, description=name)
        elif isinstance(value, float):
            w = widgets.FloatText(value=value, description=name)
        else:
            w = widgets.Text(value=value, description=name)
        w.style.description_width = "initial"

        def _update(change, _name=name):
            namespace[_name] = change["new"]

        w.observe(_update, names="value")
        rows.append(w)
    return widgets.VBox(rows)


def in_colab() -> bool:
    try:
        import google.colab  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return False
    return True
