"""Per-test wall and CPU seconds, written as JSON lines when ``COOKBOOK_TEST_PROFILE`` names a file.

A pytest plugin (loaded by tests/conftest.py). CPU time is the test process's own user + system
time, plus that of its children: reaped ones through ``RUSAGE_CHILDREN``, live ones (a vLLM server
a fixture keeps, a notebook kernel) through psutil, so a test is charged for the processes it
starts. Setup, call and teardown are recorded apart: a session fixture's cost (a trained run, a
server start) lands in the setup of the first test that asks for it. ``scripts/profile_tests.py``
reads the files and prints the table, per test and per file; ``scripts/run_tests.sh`` writes one
file per stream under ``.cache/test-profile/``.
"""

from __future__ import annotations

import json
import os
import resource
import time

import pytest


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    try:
        import psutil

        for child in psutil.Process().children(recursive=True):
            try:
                t = child.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
    except ImportError:  # the TPU-host environment may lack psutil: own and reaped time only
        pass
    return total


class Profiler:
    def __init__(self, path: str):
        self.path = path
        self.stream = os.environ.get("COOKBOOK_TEST_STREAM", "")
        self.rows: dict[str, dict] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item):
        yield from self._timed(item, "setup")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        yield from self._timed(item, "call")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item):
        yield from self._timed(item, "teardown")

    def _timed(self, item, phase):
        start, wall0, cpu0 = time.time(), time.perf_counter(), _cpu_s()
        yield
        row = self.rows.setdefault(
            item.nodeid,
            {"test": item.nodeid, "stream": self.stream, "start": round(start, 1), "wall_s": 0.0, "cpu_s": 0.0},
        )
        row[f"{phase}_wall_s"] = round(time.perf_counter() - wall0, 3)
        row["wall_s"] = round(row["wall_s"] + row[f"{phase}_wall_s"], 3)
        # A process tree killed rather than reaped (a vLLM server whose owner is SIGKILLed) takes its
        # CPU time with it: that phase would come out negative, and counts as 0 (an undercount).
        row["cpu_s"] = round(row["cpu_s"] + max(0.0, _cpu_s() - cpu0), 3)

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            if report.nodeid in self.rows:
                self.rows[report.nodeid]["outcome"] = report.outcome

    def pytest_sessionfinish(self, session):
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path, "a") as f:
            for row in self.rows.values():
                f.write(json.dumps(row) + "\n")


def pytest_configure(config):
    path = os.environ.pop("COOKBOOK_TEST_PROFILE", None)  # popped: a pytest this one starts is not profiled
    if path:
        config.pluginmanager.register(Profiler(path), "cookbook-profile")
