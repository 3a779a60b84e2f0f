"""cookbook.harness: orchestration on a temporary notebooks directory of trivial notebooks.

Running every real notebook is what ``make demo`` does; here the ordering, the run
directory, parameters, the stop-at-first-failure message and the report are checked on
notebooks that take a second each (plus notebook 09, the cheapest real one, in
tests/notebooks/test_nb_09_cost_comparison.py).
"""

import json
from pathlib import Path

import nbformat
import pytest

from cookbook import harness
from cookbook.harness import _demo, _report


def _notebook(path, *cells, params="X = 1  # a parameter"):
    nb = nbformat.v4.new_notebook()
    p = nbformat.v4.new_code_cell(params)
    p.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {path.stem}"), p, *[nbformat.v4.new_code_cell(c) for c in cells]]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.fixture(scope="module")
def nbdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("notebooks")
    rec = "from cookbook.harness import record\n"
    _notebook(
        d / "00_hello.ipynb",
        rec + "import os\nrecord('00_hello', x=X, loss_curve=[3.0, 2.0, 1.5, 1.2], cwd=os.path.basename(os.getcwd()))",
    )
    _notebook(d / "01_boom.ipynb", rec + "record('01_boom', before_error=7)\nraise ValueError('boom at step 3')")
    _notebook(d / "02_after.ipynb", rec + "record('02_after', y=2)")
    return d


def test_demo_stops_at_first_failure_and_reports(nbdir, tmp_path):
    with pytest.raises(_demo.NotebookFailed) as err:
        _demo.run_demo(notebooks_dir=nbdir, runs_root=tmp_path, parameters={"X": 41}, jobs=1)
    assert err.value.notebook == "01_boom"
    assert "ValueError: boom at step 3" in str(err.value)
    run = err.value.output.parent
    assert run.parent == tmp_path and (tmp_path / "latest").resolve() == run.resolve()
    # 00 ran with the injected parameter, in the notebooks' directory.
    assert json.loads((run / "00_hello.json").read_text()) == {
        "x": 41,
        "loss_curve": [3.0, 2.0, 1.5, 1.2],
        "cwd": nbdir.name,
    }
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
    assert harness.main(["demo", "--notebooks", str(nbdir), "--runs", str(tmp_path), "--only", "00", "-p", "X=5"]) == 0
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
    with pytest.raises(_report.ReportError, match="00_silent ran but recorded nothing"):
        _demo.run_demo(notebooks_dir=d, runs_root=tmp_path / "runs")
    run = (tmp_path / "runs" / "latest").resolve()
    assert "ERROR: recorded nothing" in (run / "report.md").read_text()


def test_parse_parameters_and_only():
    assert _demo.parse_parameters(["A=3", "B=gemma4_31b", "C=0.5", "D='x'", "E=[1, 2]"]) == {
        "A": 3,
        "B": "gemma4_31b",
        "C": 0.5,
        "D": "x",
        "E": [1, 2],
    }
    with pytest.raises(ValueError, match="NAME=VALUE"):
        _demo.parse_parameters(["no-equals"])
    with pytest.raises(ValueError, match="no such notebook"):
        _demo.list_notebooks(_demo.REPO / "notebooks", only=["77"])


def _simulate(paths, jobs, seconds):
    """When each notebook would start and end if it took ``seconds[stem]``, under the demo's rule:
    each free lane starts the first ready notebook of ``harness.schedule``'s order."""
    pending, running, spans, now = harness.schedule(paths, jobs), {}, {}, 0.0
    while pending or running:
        for _ in range(jobs - len(running)):
            path = _demo.next_ready(pending, list(running))
            if path is None:
                break
            pending.remove(path)
            running[path] = now + seconds[path.stem]
            spans[path.stem[:2]] = (now, running[path])
        now = min(running.values())
        running = {p: end for p, end in running.items() if end > now}
    return spans


def test_free_lanes_take_the_longest_ready_notebook_and_07_follows_06():
    paths = _demo.list_notebooks(_demo.REPO / "notebooks")
    assert harness.schedule(paths, 1) == paths  # one lane (a TPU host): the numbered order
    two = harness.schedule(paths, 2)
    assert sorted(two) == paths and two[:3] == [p for n in ("06", "04", "08") for p in paths if p.stem[:2] == n]
    with pytest.raises(ValueError, match="--jobs 0"):
        harness.schedule(paths, 0)
    # With the seconds the fixed lanes measured (06 -> 07 -> 08 beside the rest: 805 s against
    # 454 s; 10, which also follows 06, in 06's lane too), the free lanes end within 5% of the best
    # two lanes can do (half the work, or the longest notebook), and 07 and 10 start only after 06
    # has finished.
    seconds = _demo.TYPICAL_SECONDS
    assert set(seconds) == {p.stem for p in paths}
    spans = _simulate(paths, 2, seconds)
    makespan = max(end for _, end in spans.values())
    assert makespan <= 1.05 * max(sum(seconds.values()) / 2, max(seconds.values()))
    assert makespan < 0.8 * (seconds["06_train"] + seconds["07_merge"] + seconds["08_serving"] + seconds["10_rl"])
    assert spans["07"][0] >= spans["06"][1] and spans["10"][0] >= spans["06"][1]
    # 08 starts beside 06, after 06 has trained the plain run it merges (its first ~145 s).
    assert spans["06"][0] + 145 < spans["08"][0] < spans["06"][1]


def test_a_finished_kernel_gets_time_to_exit_before_sigterm():
    # jupyter_client's default is 5 s (SIGTERM after 2.5), which a kernel holding libtpu overran.
    assert harness.ipc_kernel_manager()().shutdown_wait_time == _demo.KERNEL_SHUTDOWN_WAIT_S >= 30


def _signals_at_shutdown(manager_cls: type, cwd: Path) -> list[int]:
    """Start a real kernel with ``manager_cls``, wait until it is ready, shut it down; the signals
    jupyter_client sent it on the way."""
    sent: list[int] = []

    class Recording(manager_cls):
        async def _async_signal_kernel(self, signum):
            sent.append(signum)
            await super()._async_signal_kernel(signum)

    km = Recording(kernel_name="python3")
    km.start_kernel(cwd=str(cwd))
    try:
        client = km.client()
        client.start_channels()
        client.wait_for_ready(timeout=120)
        client.stop_channels()
    finally:
        km.shutdown_kernel()
    assert not km.is_alive()
    return sent


def test_a_finished_kernel_is_shut_down_without_a_sigint(tmp_path):
    """jupyter_client interrupts a kernel (SIGINT) before its shutdown request; one that lands while
    the kernel handles a message reached the demo's console as "[IPKernelApp] ERROR |
    KeyboardInterrupt caught in kernel." The demo's kernel manager sends none; jupyter_client's own
    (the control) does."""
    import signal

    from jupyter_client.manager import KernelManager

    assert signal.SIGINT in _signals_at_shutdown(KernelManager, tmp_path)
    assert signal.SIGINT not in _signals_at_shutdown(harness.ipc_kernel_manager(), tmp_path)


def test_one_lane_where_jax_is_not_on_this_cpu(monkeypatch):
    from cookbook import core

    monkeypatch.setattr(core, "on_tpu_host", lambda: True)
    assert _demo.default_jobs() == 1
    monkeypatch.setattr(core, "on_tpu_host", lambda: False)
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    assert _demo.default_jobs() == 1
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert _demo.default_jobs() == 1


@pytest.fixture(scope="module")
def lanes_dir(tmp_path_factory):
    """06 -> 07 (07 follows 06, cookbook.harness._demo.AFTER) beside 05 and 08; each records when it ran (wall
    clock). The order is made by marks in the run directory, not by sleeping longer: each notebook
    leaves ``NAME.started`` as it starts; 05 waits for 06's (so they overlap), 06 for 08's (so 08
    runs while 06 does, in the lane 05 freed), then each sleeps SLEEP. On a loaded machine a kernel
    once took longer to start than another notebook's whole sleep, and fixed sleeps put them out of
    order. With FAIL set, the failing notebook leaves ``failed.mark`` before it raises and the others
    wait for that mark instead: the failure comes first however long each kernel takes to start."""
    d = tmp_path_factory.mktemp("lanes")
    timed = (
        "import os, pathlib, time\nfrom cookbook.harness import record\nt0 = time.time()\n"
        "run = pathlib.Path(os.environ['COOKBOOK_RUN_DIR'])\n(run / '{name}.started').touch()\n"
        "mark = run / 'failed.mark'\n"
        "if FAIL == '{name}':\n    mark.touch()\n    raise RuntimeError('{name} broke')\n"
        "wait = mark if FAIL else (run / '{wait}.started' if '{wait}' else None)\n"
        "while wait is not None and not wait.exists() and time.time() - t0 < 300:\n    time.sleep(0.1)\n"
        "time.sleep(SLEEP)\nrecord('{name}', t0=t0, t1=time.time())"
    )
    waits = {"05_side": "06_first", "06_first": "08_third", "07_second": "", "08_third": ""}
    for name, wait in waits.items():
        _notebook(d / f"{name}.ipynb", timed.format(name=name, wait=wait), params="SLEEP = 2.5\nFAIL = ''")
    return d


def test_two_lanes_run_side_by_side_and_a_failure_starts_nothing_new(lanes_dir, tmp_path):
    run, _ = _demo.run_demo(notebooks_dir=lanes_dir, runs_root=tmp_path / "ok", jobs=2)
    log = json.loads((run / "demo.json").read_text())
    # None of these is in harness.TYPICAL_SECONDS: the numbered order.
    assert log["jobs"] == 2 and log["order"] == ["05_side", "06_first", "07_second", "08_third"]
    t = {n: json.loads((run / f"{n}.json").read_text()) for n in log["notebooks"]}
    assert t["05_side"]["t0"] < t["06_first"]["t1"] and t["06_first"]["t0"] < t["05_side"]["t1"]  # overlapped
    # The lane 05 freed skipped 07 (06 still running) and took 08; 07 started after 06 ended.
    assert t["05_side"]["t1"] <= t["08_third"]["t0"] < t["06_first"]["t1"] <= t["07_second"]["t0"]
    assert all(v["status"] == "ok" for v in log["notebooks"].values())
    # 06 fails at once while 05 runs (05 sleeps 5 s after 06's failure): 05 finishes, 07 and 08
    # never start, the error names 06.
    with pytest.raises(_demo.NotebookFailed) as err:
        _demo.run_demo(
            notebooks_dir=lanes_dir, runs_root=tmp_path / "fail", jobs=2, parameters={"SLEEP": 5.0, "FAIL": "06_first"}
        )
    assert err.value.notebook == "06_first" and "RuntimeError: 06_first broke" in str(err.value)
    run = err.value.output.parent
    log = json.loads((run / "demo.json").read_text())
    assert {n: v["status"] for n, v in log["notebooks"].items()} == {
        "05_side": "ok",
        "06_first": "failed",
        "07_second": "not run",
        "08_third": "not run",
    }
    assert not (run / "07_second.ipynb").exists()
    assert "07_second: not run: 06_first failed before it" in (run / "report.md").read_text()
