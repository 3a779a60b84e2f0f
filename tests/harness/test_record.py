"""cookbook.harness records: what a notebook records, where, merged; the optional parameter form."""

import json

import numpy as np
import pytest

from cookbook import harness
from cookbook.harness import _record


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    d = tmp_path / "run"
    monkeypatch.setenv("COOKBOOK_RUN_DIR", str(d))
    return d


def test_record_merges_into_the_notebooks_json(run_dir):
    # None, so that a cell ending with record(...) shows no copy of the whole record
    assert harness.record("05_data_pipeline", rows=np.int64(12), loss=np.float32(0.5)) is None
    first = {"rows": 12, "loss": 0.5}
    assert json.loads((run_dir / "05_data_pipeline.json").read_text()) == first
    harness.record("05_data_pipeline", loss=0.25, curve=np.array([3.0, np.nan]), path=run_dir / "x")
    whole = {"rows": 12, "loss": 0.25, "curve": [3.0, "nan"], "path": str(run_dir / "x")}
    assert json.loads((run_dir / "05_data_pipeline.json").read_text()) == whole
    assert _record.load_results("05_data_pipeline") == whole
    assert _record.load_results("05_data_pipeline", run_dir) == whole
    harness.record("06_train", steps=3)  # another notebook, another file
    assert _record.load_results("06_train") == {"steps": 3}
    assert sorted(p.name for p in run_dir.iterdir()) == ["05_data_pipeline.json", "06_train.json"]  # no temporaries


def test_record_refuses_what_json_cannot_hold_and_keeps_the_old_record(run_dir):
    harness.record("07_merge", ok=True)
    with pytest.raises(TypeError, match="cannot store a set"):
        harness.record("07_merge", layers={1, 2})
    assert _record.load_results("07_merge") == {"ok": True}


def test_load_results_names_the_missing_notebook(run_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="notebook '08_serving' recorded nothing"):
        _record.load_results("08_serving")
    with pytest.raises(FileNotFoundError, match="08_serving"):
        _record.load_results("08_serving", tmp_path / "elsewhere")


def test_work_dir_is_inside_the_run(run_dir):
    d = harness.work_dir("07_merge")
    assert d.is_dir() and d == run_dir / "work" / "07_merge"
    assert harness.work_dir("07_merge") == d  # again: the same directory, no error


def test_parameter_form_edits_the_namespace():
    import ipywidgets as widgets

    ns = {
        "STEPS": 10,
        "LR": 1e-4,
        "USE_REMAT": True,
        "PRESET": "tiny",
        "lower": 1,
        "SHAPE": (2, 3),
        "__name__": "__main__",
    }
    form = harness.parameter_form(ns)
    assert isinstance(form, widgets.VBox)
    fields = {w.description: w for w in form.children}
    assert list(fields) == ["STEPS", "LR", "USE_REMAT", "PRESET"]  # ALL_CAPS scalars only, in order
    kinds = {name: type(w) for name, w in fields.items()}
    assert kinds == {
        "STEPS": widgets.IntText,
        "LR": widgets.FloatText,
        "USE_REMAT": widgets.Checkbox,
        "PRESET": widgets.Text,
    }
    assert [fields[n].value for n in fields] == [10, 1e-4, True, "tiny"]
    fields["STEPS"].value = 25
    fields["LR"].value = 3e-4
    fields["USE_REMAT"].value = False
    fields["PRESET"].value = "small"
    assert ns["STEPS"] == 25 and ns["LR"] == 3e-4 and ns["USE_REMAT"] is False and ns["PRESET"] == "small"
    assert ns["lower"] == 1 and ns["SHAPE"] == (2, 3)


def test_parameter_form_over_chosen_names():
    ns = {"STEPS": 10, "LR": 1e-4}
    form = harness.parameter_form(ns, ["LR"])
    (field,) = form.children
    field.value = 0.5
    assert ns == {"STEPS": 10, "LR": 0.5}
