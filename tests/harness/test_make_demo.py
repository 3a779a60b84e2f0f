"""The main job, as a new user runs it: ``make demo`` from this checkout on a fresh cache.

Every notebook with its committed defaults (this is the suite's run of the notebooks as
committed), in a clean environment: none of the test session's settings (8 fake devices,
the shared artefact cache) leak in, so nothing trained by the other tests is reused and a
check that only holds on the tests' own run fails here. Budget: ~6 minutes on a quiet
2-core machine.
"""

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Set by scripts/run_tests.sh or tests/conftest.py for the test session, not by a user.
SESSION_ONLY = ("XLA_FLAGS", "JAX_PLATFORMS", "VLLM_TARGET_DEVICE", "COOKBOOK_CACHE", "COOKBOOK_RUN_DIR",
                "TOKENIZERS_PARALLELISM", "PYTEST_CURRENT_TEST", "PYTEST_VERSION")


@pytest.mark.slow
def test_make_demo_on_a_fresh_cache(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in SESSION_ONLY}
    env["COOKBOOK_CACHE"] = str(tmp_path / "cache")  # a fresh machine's empty cache
    runs = tmp_path / "runs"
    t0 = time.perf_counter()
    done = subprocess.run(["make", "demo", f"ARGS=--runs {runs}"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=40 * 60)
    wall_s = time.perf_counter() - t0
    assert done.returncode == 0, done.stderr[-4000:]
    assert "all notebooks ran" in done.stdout
    run = (runs / "latest").resolve()
    log = json.loads((run / "demo.json").read_text())
    notebooks = sorted(p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert sorted(log["notebooks"]) == notebooks
    assert {n: v["status"] for n, v in log["notebooks"].items()} == {n: "ok" for n in notebooks}
    assert log["parameters"] == {}  # the committed defaults
    md = (run / "report.md").read_text()
    glance = md.split("## At a glance", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in glance.splitlines() if re.match(r"\| \d\d_", line)]
    assert [r.split("|")[1].strip() for r in rows] == notebooks
    assert all("| ok |" in r for r in rows)
    assert (run / "report.html").stat().st_size > 10_000
    for n in notebooks:
        assert (run / f"{n}.ipynb").is_file() and json.loads((run / f"{n}.json").read_text())
    print(f"make demo: {wall_s:.0f} s wall; per notebook (s): "
          + ", ".join(f"{n[:2]} {v['seconds']:.0f}" for n, v in log["notebooks"].items()))
