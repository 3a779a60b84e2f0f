"""scripts/run_tests.sh's parts: the per-test profile (tests/profiling.py) and the stream balance
(scripts/profile_tests.py --split)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import profile_tests  # noqa: E402

_BURN = """
import time

def test_burns_cpu():
    t = time.process_time()
    while time.process_time() - t < 0.6:
        pass

def test_sleeps():
    time.sleep(0.6)

def test_waits_on_a_child():
    import subprocess, sys
    subprocess.run([sys.executable, "-c", "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.6: pass"])
"""


def test_profile_charges_wall_and_cpu_to_the_test_including_its_children(tmp_path):
    (tmp_path / "test_burn.py").write_text(_BURN)
    out = tmp_path / "p.jsonl"
    env = {
        **os.environ,
        "COOKBOOK_TEST_PROFILE": str(out),
        "COOKBOOK_TEST_STREAM": "s1",
        "PYTHONPATH": str(REPO / "tests"),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "profiling",
            "-p",
            "no:cacheprovider",
            str(tmp_path / "test_burn.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["test"].split("::")[1]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(rows) == {"test_burns_cpu", "test_sleeps", "test_waits_on_a_child"}
    assert all(r["stream"] == "s1" and r["outcome"] == "passed" for r in rows.values())
    assert rows["test_burns_cpu"]["cpu_s"] >= 0.55 and rows["test_burns_cpu"]["wall_s"] >= 0.55
    assert rows["test_sleeps"]["wall_s"] >= 0.55 and rows["test_sleeps"]["cpu_s"] < 0.3
    assert rows["test_waits_on_a_child"]["cpu_s"] >= 0.55  # a reaped child's time is the test's
    assert rows["test_burns_cpu"]["start"] <= rows["test_sleeps"]["start"]


def test_split_puts_every_test_file_in_one_stream_and_keeps_the_rules():
    files = profile_tests.test_files()
    profile = json.loads((REPO / "tests" / "profile.json").read_text())
    first, second, end0, end1 = profile_tests.split(profile)
    assert sorted(f for f in first + second if f != profile_tests.TPU_HOST) == files
    assert (first + second).count(profile_tests.TPU_HOST) == 1
    assert [f for f in second[: len(profile_tests.DEMO)]] == list(profile_tests.DEMO)  # the main job first
    for group in profile_tests.TOGETHER:
        assert set(group) <= set(first) or set(group) <= set(second), group
    assert profile_tests.TPU_HOST in (first[-1], second[-1])  # after the tests of its stream
    for stream in (first, second):  # the demo's runs' users after every other file (the demo trains them)
        files_only = [f for f in stream if f != profile_tests.TPU_HOST and f not in profile_tests.DEMO]
        users = [f in profile_tests.SHARED_RUN_USERS for f in files_only]
        assert users == sorted(users), stream
    assert set(profile_tests.SHARED_RUN_USERS) <= set(files)


@pytest.mark.parametrize("walls", [[50, 40, 30, 20, 10, 5, 5], [100, 1, 1, 1], [3] * 9])
def test_split_balances_longest_first(walls):
    files = [f"tests/x/test_{i}.py" for i in range(len(walls))]
    profile = [{"file": f, "stream": "first", "wall_s": w} for f, w in zip(files, walls, strict=True)]
    first, second, end0, end1 = profile_tests.split(profile, files)
    assert sorted(first + second) == sorted([*files, profile_tests.TPU_HOST])
    # LPT's bound: the streams end at most one item apart, and the sums are what they hold.
    assert abs(end0 - end1) <= max(walls)
    by_name = dict(zip(files, walls, strict=True))
    assert sum(by_name.get(f, 0) for f in first) == end0 and sum(by_name.get(f, 0) for f in second) == end1


@pytest.mark.parametrize(
    ("cpus", "expected"),
    [
        ([1, 0], ("0", "1")),
        ([0, 1, 2, 3, 4], ("0,1", "2,3,4")),
        ([6, 2, 4, 7], ("2,4", "6,7")),
        ([3], None),
        ([], None),
    ],
)
def test_the_streams_are_pinned_to_disjoint_halves_of_the_cpus(cpus, expected):
    sets = profile_tests.core_sets(cpus)
    assert sets == expected
    if sets:  # every CPU in exactly one stream
        halves = [set(map(int, s.split(","))) for s in sets]
        assert not halves[0] & halves[1] and halves[0] | halves[1] == set(cpus)


def test_cores_prints_one_line_per_stream_from_this_process_affinity():
    done = subprocess.run(
        ["taskset", "-c", "0", sys.executable, str(REPO / "scripts" / "profile_tests.py"), "--cores"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == ""  # one CPU: nothing to split, the streams run unpinned
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "profile_tests.py"), "--cores"],
        capture_output=True,
        text=True,
        check=True,
    )
    cpus = sorted(os.sched_getaffinity(0))
    assert done.stdout.splitlines() == (list(profile_tests.core_sets(cpus)) if len(cpus) > 1 else [])
