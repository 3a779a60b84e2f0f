"""The main job, run once per test session and shared: ``make demo`` from this checkout on a fresh cache.

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
# Set by scripts/run_tests.sh or tests/conftest.py for the test session, not by a user.
SESSION_ONLY = (
    "XLA_FLAGS",
    "JAX_PLATFORMS",
    "VLLM_TARGET_DEVICE",
    "COOKBOOK_CACHE",
    "COOKBOOK_RUN_DIR",
    "JAX_COMPILATION_CACHE_DIR",
    "JAX_COMPILATION_CACHE_MAX_SIZE",  # the suite's compiled steps
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
    "TOKENIZERS_PARALLELISM",
    "PYTEST_CURRENT_TEST",
    "PYTEST_VERSION",
)


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
    """``make demo`` as a new user runs it: every notebook with its committed defaults, in a clean
    environment (none of the test session's settings, such as 8 fake devices or the shared
    artefact and compilation caches, leak in, so nothing trained or compiled by the other tests
    is reused)."""
    reuse = os.environ.get("COOKBOOK_TEST_DEMO_RUN")  # iterating on the browser tests: an earlier run
    if reuse:
        return DemoRun(run_dir=Path(reuse).resolve(), returncode=0, stdout="", stderr="", wall_s=0.0, reused=True)
    tmp = tmp_path_factory.mktemp("demo")
    env = {k: v for k, v in os.environ.items() if k not in SESSION_ONLY}
    env["COOKBOOK_CACHE"] = str(tmp / "cache")  # a fresh machine's empty cache
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
