"""A notebook test's kernel runs as a user's process would, in the suite's cache (tests/nbutil.py)."""

import os

import nbformat
from nbutil import run_notebook

_PROBE = """import os
from cookbook.harness import record
record("env_probe", **{k: os.environ.get(k) for k in ("COOKBOOK_CACHE", "PATH", "HOME", "XLA_FLAGS", "COOKBOOK_RUN_DIR")})
"""


def test_the_kernel_keeps_the_suites_cache_and_path_and_drops_the_fake_devices(tmp_path):
    """The kernel once started with an empty environment (the user environment was derived after
    the clear): its runs and merges went to ~/.cache, not the suite's cache, and were trained
    again beside the ones the fixtures and the demo share."""
    probe = tmp_path / "env_probe.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(_PROBE)]), probe)
    got = run_notebook(probe, tmp_path / "run")
    assert got["COOKBOOK_CACHE"] == os.environ["COOKBOOK_CACHE"]  # the suite's, set by run_tests.sh or conftest
    assert got["PATH"] == os.environ["PATH"] and got["HOME"] == os.environ["HOME"]
    assert "--xla_force_host_platform_device_count=8" in os.environ["XLA_FLAGS"] and got["XLA_FLAGS"] is None
    assert got["COOKBOOK_RUN_DIR"] == str(tmp_path / "run")
