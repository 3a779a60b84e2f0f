"""What a person sees, in a real browser (Debian's Chromium, headless; tests/browser.py).

1. The report of the session's ``make demo`` run (tests/harness/conftest.py), opened from disk:
   every image has loaded (natural width > 0), every link to an executed notebook resolves, the
   at-a-glance table has one row per notebook. A screenshot is kept as a test artefact.
2. JupyterLab on 127.0.0.1 with a token: notebook 06 opens, its Setup, Parameters and form cells
   run (Shift+Enter, as typed), the form has one widget per parameter, and typing a new value
   into one changes the variable in the kernel. JupyterLab is then shut down, leaving no process.

Screenshots go to ``$COOKBOOK_TEST_ARTIFACTS`` (default ``runs/test-artifacts/``).
"""

from __future__ import annotations

import ast
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import browser
import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("COOKBOOK_TEST_ARTIFACTS", REPO / "runs" / "test-artifacts"))
NOTEBOOKS = sorted(p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="session", autouse=True)
def chromium() -> str:
    """Chromium, or a failure under CI / a skip elsewhere (browser.require_chromium). Session-scoped
    so that it is decided before the session's ``make demo`` (fresh_demo) is started."""
    return browser.require_chromium()


@pytest.mark.slow
def test_report_in_a_browser(fresh_demo):
    report = fresh_demo.run_dir / "report.html"
    assert report.is_file(), f"make demo wrote no report: {fresh_demo.stderr[-2000:]}"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)  # not left to the JupyterLab test (another stream)
    with browser.Browser(ARTIFACTS / "chromium-report.log") as b:
        assert b.navigate(report.as_uri()) is None
        b.wait_for("[...document.images].every(i => i.complete)", what="the report's images")
        images = b.evaluate("[...document.images].map(i => ({alt: i.alt, w: i.naturalWidth, h: i.naturalHeight}))")
        # The table right under "At a glance": its body rows, first cell = the notebook.
        glance = b.evaluate("""(() => {
            const h = [...document.querySelectorAll('h2')].find(e => e.textContent.trim() === 'At a glance');
            let t = h.nextElementSibling; while (t && t.tagName !== 'TABLE') t = t.nextElementSibling;
            return [...t.querySelectorAll('tr')].slice(1).map(r => [...r.cells].map(c => c.textContent.trim()));
        })()""")
        links = b.evaluate("[...document.querySelectorAll('a')].map(a => a.href).filter(h => h.endsWith('.ipynb'))")
        b.screenshot(ARTIFACTS / "report.png")
        unresolved = {href: err for href in links if (err := b.navigate(href))}
    plots = (fresh_demo.run_dir / "report.md").read_text().count("](report_files/")  # the report's own count
    assert plots >= 2 and len(images) == plots, (plots, images)  # 06's loss curve and 09's cost curve at least
    assert not [i for i in images if i["w"] <= 0 or i["h"] <= 0], images
    assert [row[0] for row in glance] == NOTEBOOKS
    assert all(row[1] == "ok" for row in glance), glance
    assert sorted(Path(h).stem for h in links) == NOTEBOOKS  # one executed copy per notebook ...
    assert not unresolved, unresolved  # ... and each opens
    assert (ARTIFACTS / "report.png").stat().st_size > 20_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _parameter_names(nb) -> list[str]:
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    return [t.id for n in ast.parse(cell.source).body if isinstance(n, ast.Assign) for t in n.targets]


def _wait_http(url: str, timeout_s: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _kernel_value(connection_file: Path, expression: str):
    """``expression`` evaluated in the running kernel, through a second client of it."""
    from jupyter_client import BlockingKernelClient

    kc = BlockingKernelClient(connection_file=str(connection_file))
    kc.load_connection_file()
    kc.start_channels()
    try:
        reply = kc.execute_interactive("", user_expressions={"v": expression}, timeout=60, store_history=False)
        value = reply["content"]["user_expressions"]["v"]
        assert value["status"] == "ok", value
        return ast.literal_eval(value["data"]["text/plain"])
    finally:
        kc.stop_channels()


@pytest.mark.slow
def test_notebook_06_form_in_jupyterlab(tmp_path):
    nb_dir = tmp_path / "notebooks"
    nb_dir.mkdir()
    shutil.copy(REPO / "notebooks" / "06_train.ipynb", nb_dir)  # the session may save; never the source
    import nbformat  # here, not at the top: its import takes ~2 CPU-s, spent only when this test runs

    nb = nbformat.read(nb_dir / "06_train.ipynb", as_version=4)
    params = _parameter_names(nb)
    setup = nb.cells.index(next(c for c in nb.cells if c.source.strip() == "## Setup"))
    first_param = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    to_run = [i for i in range(setup, first_param + 2) if nb.cells[i].cell_type == "code"]
    form = first_param + 1
    assert "parameter_form(" in nb.cells[form].source

    token, port = secrets.token_hex(16), _free_port()
    base = f"http://127.0.0.1:{port}"
    runtime = tmp_path / "runtime"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "JUPYTER_RUNTIME_DIR": str(runtime),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "IPYTHONDIR": str(tmp_path / "ipython"),
        "COOKBOOK_RUN_DIR": str(tmp_path / "run"),
        "JUPYTER_PLATFORM_DIRS": "1",
    }
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = (ARTIFACTS / "jupyterlab.log").open("w")
    # No update checks, news feed or extension index: nothing leaves the machine.
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={nb_dir}",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
            *(["--allow-root"] if os.geteuid() == 0 else []),
        ],
        cwd=nb_dir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    kernel_pid = None
    try:
        _wait_http(f"{base}/api/status?token={token}", 120, server)
        with pytest.raises(urllib.error.HTTPError) as refused:  # and nothing without the token
            urllib.request.urlopen(f"{base}/api/sessions", timeout=10).close()
        assert refused.value.code == 403
        with browser.Browser(ARTIFACTS / "chromium-lab.log") as b:
            assert b.navigate(f"{base}/lab/tree/06_train.ipynb?token={token}") is None
            panel = "jupyterapp.shell.currentWidget"
            kernel = f"{panel}.sessionContext.session.kernel"
            b.wait_for(
                f"""window.jupyterapp && {panel} && {panel}.content
                           && {panel}.content.widgets.length === {len(nb.cells)} && {panel}.sessionContext.session
                           && {kernel} && {kernel}.status === 'idle'""",
                timeout_s=240,
                what="notebook 06 open with an idle kernel",
            )
            for i in to_run:  # select the cell, then Shift+Enter on the keyboard
                b.evaluate(
                    f"(() => {{ const n = {panel}.content; n.mode = 'command'; n.activeCellIndex = {i};"
                    " n.node.focus(); return true; })()"
                )
                b.press("Enter", shift=True)
                b.wait_for(
                    f"{panel}.content.widgets[{i}].model.executionCount !== null && {kernel}.status === 'idle'",
                    timeout_s=300,
                    what=f"cell {i} to run",
                )
                errors = b.evaluate(
                    f"{panel}.content.widgets[{i}].model.outputs.toJSON()"
                    ".filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue)"
                )
                assert not errors, (i, errors)
            rows = f"[...{panel}.content.widgets[{form}].node.querySelectorAll('.widget-vbox .widget-inline-hbox')]"
            b.wait_for(f"{rows}.length > 0", timeout_s=60, what="the form to render")
            # A row's label as a person reads it: a text box's label on its left, a checkbox's
            # description on its right (its left label is then a zero-width space).
            label = "r.textContent.replace(/\\u200b/g, '').trim()"
            form_rows = b.evaluate(f"{rows}.map(r => [{label}, r.querySelector('input').value])")
            b.screenshot(ARTIFACTS / "jupyterlab-form-before.png", full_page=False)
            # A new value typed into MAX_STEPS as a person would: click the box, select, type, Enter.
            box = b.evaluate(f"""(() => {{ const r = {rows}.find(r => {label} === 'MAX_STEPS'); const i = r.querySelector('input'); i.scrollIntoView();
                                 const b = i.getBoundingClientRect(); return [b.x + b.width / 2, b.y + b.height / 2];
                              }})()""")
            b.click(*box)
            assert b.evaluate("document.activeElement.tagName") == "INPUT"
            b.evaluate("document.activeElement.select(), true")
            b.type_text("7")
            b.press("Enter")
            connection = runtime / f"kernel-{b.evaluate(f'{kernel}.id')}.json"
            deadline = time.monotonic() + 30
            while _kernel_value(connection, "MAX_STEPS") != 7 and time.monotonic() < deadline:
                time.sleep(0.5)
            values = {name: _kernel_value(connection, name) for name in params}
            kernel_pid = _kernel_value(connection, "__import__('os').getpid()")
            b.screenshot(ARTIFACTS / "jupyterlab-form-after.png", full_page=False)
    finally:
        _shutdown(base, token, server, log)
    defaults = {name: _literal(nb, name) for name in params}
    assert [label for label, _ in form_rows] == params  # one widget per parameter, in order
    assert dict(form_rows)["MAX_STEPS"] == "0" and dict(form_rows)["MODEL_PRESET"] == "tiny"
    assert values == {**defaults, "MAX_STEPS": 7}  # the typed value reached the kernel, nothing else moved
    assert server.returncode is not None
    assert not browser.group_alive(server.pid), "JupyterLab left processes behind"
    assert kernel_pid is not None and not _pid_alive(kernel_pid), "the kernel outlived JupyterLab"


def _literal(nb, name: str):
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    for node in ast.parse(cell.source).body:
        if isinstance(node, ast.Assign) and node.targets[0].id == name:
            return ast.literal_eval(node.value)
    raise KeyError(name)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie waiting to be reaped is not running
        return f.read().split(") ", 1)[1][0] != "Z"


def _shutdown(base: str, token: str, server: subprocess.Popen, log) -> None:
    """JupyterLab's own shutdown (it stops its kernels), then the process group if anything is left."""
    try:
        req = urllib.request.Request(f"{base}/api/shutdown", method="POST", headers={"Authorization": f"token {token}"})
        urllib.request.urlopen(req, timeout=30).close()
        server.wait(timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        pass
    finally:
        if server.poll() is None:
            os.killpg(server.pid, 15)
            server.wait(timeout=30)
        deadline = time.monotonic() + 30
        while browser.group_alive(server.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        log.close()
        print(json.dumps({"jupyterlab_exit": server.returncode}))
