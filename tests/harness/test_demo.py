"""cookbook.harness: orchestration on a temporary notebooks directory of trivial notebooks.

Running every real notebook is what ``make demo`` does; here the ordering, the run
directory, parameters, the stop-at-first-failure message and the report are checked on
notebooks that take a second each (plus notebook 09, the cheapest real one, in
tests/notebooks/test_nb_09_cost_comparison.py).
"""

import json

import nbformat
import pytest

from cookbook import harness


def _notebook(path, *cells, params="X = 1  # a parameter"):
    nb = nbformat.v4.new_notebook()
    p = nbformat.v4.new_code_cell(params)
    p.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {path.stem}"), p,
                *[nbformat.v4.new_code_cell(c) for c in cells]]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.fixture(scope="module")
def nbdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("notebooks")
    rec = "from cookbook.harness import record\n"
    _notebook(d / "00_hello.ipynb",
              rec + "import os\nrecord('00_hello', x=X, loss_curve=[3.0, 2.0, 1.5, 1.2],"
                    " cwd=os.path.basename(os.getcwd()))")
    _notebook(d / "01_boom.ipynb", rec + "record('01_boom', before_error=7)\nraise ValueError('boom at step 3')")
    _notebook(d / "02_after.ipynb", rec + "record('02_after', y=2)")
    return d


def test_demo_stops_at_first_failure_and_reports(nbdir, tmp_path):
    with pytest.raises(harness.NotebookFailed) as err:
        harness.run_demo(notebooks_dir=nbdir, runs_root=tmp_path, parameters={"X": 41})
    assert err.value.notebook == "01_boom"
    assert "ValueError: boom at step 3" in str(err.value)
    run = err.value.output.parent
    assert run.parent == tmp_path and (tmp_path / "latest").resolve() == run.resolve()
    # 00 ran with the injected parameter, in the notebooks' directory.
    assert json.loads((run / "00_hello.json").read_text()) == {
        "x": 41, "loss_curve": [3.0, 2.0, 1.5, 1.2], "cwd": nbdir.name}
    assert not (run / "02_after.ipynb").exists() and not (run / "02_after.json").exists()
    log = json.loads((run / "demo.json").read_text())
    assert [log["notebooks"][n]["status"] for n in ("00_hello", "01_boom", "02_after")] == ["ok", "failed", "not run"]
    assert log["environment"]["jax"] and log["environment"]["python"].startswith("3.")
    md = (run / "report.md").read_text()
    assert "01_boom FAILED in this run: ValueError: boom at step 3" in md
    assert "02_after: not run: 01_boom failed before it" in md
    assert "| x | 41 |" in md and "[00_hello.ipynb](00_hello.ipynb)" in md
    # The loss curve became a plot, embedded in the HTML.
    assert (run / "report_files" / "00_hello_loss_curve.png").is_file()
    assert "data:image/png;base64," in (run / "report.html").read_text()


def test_cli_only_subset_and_failure_message(nbdir, tmp_path, capsys):
    assert harness.main(["demo", "--notebooks", str(nbdir), "--runs", str(tmp_path), "--only", "00",
                     "-p", "X=5"]) == 0
    run = (tmp_path / "latest").resolve()
    assert json.loads((run / "00_hello.json").read_text())["x"] == 5
    md = (run / "report.md").read_text()
    # 01 and 02 exist in the cookbook but were left out of this run; 03-09 are absent.
    assert "Not run" in md and "01_boom" in md
    assert "Notebook 03 (Sharding fixes) is not part of this cookbook yet." in md
    capsys.readouterr()
    assert harness.main(["demo", "--notebooks", str(nbdir), "--runs", str(tmp_path), "--only", "01"]) == 1
    err = capsys.readouterr().err
    assert "STOPPED" in err and "notebook 01_boom failed" in err and "ValueError: boom at step 3" in err


def test_notebook_that_records_nothing_is_an_error(tmp_path):
    d = tmp_path / "nbs"
    d.mkdir()
    _notebook(d / "00_silent.ipynb", "print('I forgot to record')")
    with pytest.raises(harness.ReportError, match="00_silent ran but recorded nothing"):
        harness.run_demo(notebooks_dir=d, runs_root=tmp_path / "runs")
    run = (tmp_path / "runs" / "latest").resolve()
    assert "ERROR: recorded nothing" in (run / "report.md").read_text()


def test_parse_parameters_and_only():
    assert harness.parse_parameters(["A=3", "B=gemma4_31b", "C=0.5", "D='x'", "E=[1, 2]"]) == {
        "A": 3, "B": "gemma4_31b", "C": 0.5, "D": "x", "E": [1, 2]}
    with pytest.raises(ValueError, match="NAME=VALUE"):
        harness.parse_parameters(["no-equals"])
    with pytest.raises(ValueError, match="no such notebook"):
        harness.list_notebooks(harness.REPO / "notebooks", only=["77"])
