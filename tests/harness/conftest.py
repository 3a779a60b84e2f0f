"""The main job, run once per test session and shared: ``make demo`` from this checkout, first, on the suite's cache.

``tests/harness/test_make_demo.py`` checks what it wrote; ``tests/harness/test_browser.py`` opens its
report in a real browser. One run serves both (it is the longest thing the suite does).
``COOKBOOK_TEST_DEMO_RUN=runs/<timestamp>`` hands the browser test an existing run instead (the
``make demo`` test then skips).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class DemoRun:
    run_dir: Path  # runs/<timestamp>/
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    reused: bool = False  # COOKBOOK_TEST_DEMO_RUN named an existing run instead


@pytest.fixture(scope="session")
def fresh_demo(tmp_path_factory) -> DemoRun:
    """``make demo`` as a new user runs it: every notebook with its committed defaults, in a user's
    environment (``userenv.user_env``: none of the test session's settings, such as its 8 fake
    devices, leak in) on the suite's cache. A fresh clone's cache is empty when ``make test``
    starts, and the demo starts first (scripts/run_tests.sh): what it trains, merges and compiles
    is then what the suite's shared runs reuse, or, where a test got there first, the same
    artefact by the same key (``userenv``), so no recipe is trained twice in one run."""
    reuse = os.environ.get("COOKBOOK_TEST_DEMO_RUN")  # iterating on the browser tests: an earlier run
    if reuse:
        return DemoRun(run_dir=Path(reuse).resolve(), returncode=0, stdout="", stderr="", wall_s=0.0, reused=True)
    tmp = tmp_path_factory.mktemp("demo")
    import userenv

    env = userenv.user_env()
    runs = tmp / "runs"
    t0 = time.perf_counter()
    done = subprocess.run(
        ["make", "demo", f"ARGS=--runs {runs}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=40 * 60
    )
    latest = runs / "latest"
    return DemoRun(
        run_dir=latest.resolve() if latest.exists() else latest,
        returncode=done.returncode,
        stdout=done.stdout,
        stderr=done.stderr,
        wall_s=time.perf_counter() - t0,
    )
