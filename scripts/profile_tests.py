"""Where the test suite's time goes, from the per-test profile tests/profiling.py writes, and the
two streams ``scripts/run_tests.sh`` runs side by side, balanced from it.

    python scripts/profile_tests.py [.cache/test-profile] [--top 40] [--json tests/profile.json]
    python scripts/profile_tests.py --split [tests/profile.json]
    python scripts/profile_tests.py --cores

Reads every ``*.jsonl`` in the folder (``scripts/run_tests.sh`` writes one per stream), and
prints each stream's span, wall and CPU seconds, then the files and the tests that cost most, by
wall and by CPU (a test's own process and every child it started, e.g. a notebook kernel or a
vLLM server; a session fixture's cost is in the setup of the first test that asked for it).
``--json`` writes the per-file table (file, stream, tests, wall_s, cpu_s): committed as
``tests/profile.json``, it is what ``--split`` balances.

``--split`` prints two lines, the test files of each stream. The second stream starts with the
main job (``make demo`` and the browser test of its report: :data:`DEMO`), the TPU-host pass
(:data:`TPU_HOST`) ends one of them, and files that share a session fixture in memory stay
together (:data:`TOGETHER`); then every group goes, longest first, to the stream that ends
sooner (LPT), and within each stream the files that use the demo's runs (:data:`SHARED_RUN_USERS`)
go last. A test file the profile does not know yet counts as the median file. Every test
file under tests/ is in exactly one stream.

``--cores`` prints two lines, the CPUs each stream is pinned to (``taskset -c``): this process's
CPUs halved (:func:`core_sets`), or nothing where there are fewer than two. Pinned, a stream's time
is the sum of its files' times on its own core, whatever the other stream runs, so a split from a
pinned run's profile predicts it; unpinned, the two streams' processes slowed each other by amounts
no profile predicted, and every JAX process ran XLA's CPU pool as wide as the machine (a pinned
whole suite took ~6% fewer CPU-seconds, 2026-12-06). The suite's outcome bounds hold either way:
the spreads they are derived from include runs pinned to one core (``benchmarks/outcome_spread.py``),
and a run's cache key names its CPU count (``cookbook.train.result_determinants``), so both streams
share runs.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The main job: make demo on the suite's cache, and its report in a browser (one fixture).
DEMO = ("tests/harness/test_make_demo.py", "tests/harness/test_browser.py")
TPU_HOST = "tpu-host"  # scripts/run_tests.sh's pass in .venv-tpuhost, named by its profile stream
# Files whose tests share a session fixture held in memory: split, each process would rebuild it.
TOGETHER = (
    # one vLLM server (tests/vllm_fixture.py) and Tunix's greedy samples of the shared tiny runs
    ("tests/evaluate/test_generators.py", "tests/serve/test_serve.py", "tests/serve/test_bench.py"),
    # the twins' Tunix evaluation (tests/twins.py jax_eval), before and after training
    (
        "tests/train/test_train_twins.py",
        "tests/merge/test_merge_twins.py",
        "tests/serve/test_serve_twins.py",
        "tests/gpu/test_parity_twins.py",
    ),
)

# Files that use the runs the demo trains too (the tiny plain and thinking runs: tests/userenv.py
# tiny_run, notebooks 06-08, the RL stage): each stream runs them after its other files, so that the
# demo (the second stream's first file) has trained those runs by then and no stream waits on a
# run's lock with its CPU idle; pinned to its own core (--cores), a waiting stream's CPU is lost.
SHARED_RUN_USERS = (
    *TOGETHER[0],
    "tests/notebooks/test_nb_06_train.py",
    "tests/notebooks/test_nb_07_merge.py",
    "tests/notebooks/test_nb_08_serving.py",
    "tests/rl/test_rl.py",
)


def load(folder: Path) -> list[dict]:
    rows = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                rows.append(json.loads(line))
    if not rows:
        raise SystemExit(f"profile_tests: no profile rows under {folder}; run scripts/run_tests.sh first")
    return rows


def by_file(rows: list[dict]) -> list[dict]:
    files: dict[tuple[str, str], dict] = {}
    for r in rows:
        name = r["test"].split("::", 1)[0]
        f = files.setdefault(
            (r["stream"], name), {"file": name, "stream": r["stream"], "tests": 0, "wall_s": 0.0, "cpu_s": 0.0}
        )
        f["tests"] += 1
        f["wall_s"] += r["wall_s"]
        f["cpu_s"] += r["cpu_s"]
    out = sorted(files.values(), key=lambda f: -f["wall_s"])
    for f in out:
        f["wall_s"], f["cpu_s"] = round(f["wall_s"], 1), round(f["cpu_s"], 1)
    return out


def test_files() -> list[str]:
    return sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py"))


def split(profile: list[dict], files: list[str] | None = None) -> tuple[list[str], list[str], float, float]:
    """(first stream's files, second stream's files, their predicted wall seconds) from a per-file
    profile (:func:`by_file`'s rows); the TPU-host pass is the entry :data:`TPU_HOST`."""
    files = test_files() if files is None else files
    # From a run with pinned streams (--cores), a file's wall seconds are what it takes on its own
    # core, its waits (a server starting, a child's sleep) included; the other stream does not slow it.
    wall: dict[str, float] = {}
    for row in profile:  # the TPU-host pass's rows name .venv's files too: they add up to one entry
        key = TPU_HOST if row["stream"] == TPU_HOST else row["file"]
        wall[key] = wall.get(key, 0.0) + row["wall_s"]
    known = [wall[f] for f in files if f in wall]
    default = statistics.median(known) if known else 1.0
    groups = [tuple(f for f in g if f in files) for g in TOGETHER]
    grouped = {f for g in groups for f in g}
    demo = [f for f in DEMO if f in files]
    groups = [g for g in groups if g] + [(f,) for f in files if f not in grouped and f not in demo]
    streams: list[list[str]] = [[], list(demo)]
    ends = [0.0, sum(wall.get(f, default) for f in demo)]
    tpu_host = wall.get(TPU_HOST, 0.0)
    groups.sort(key=lambda g: (-sum(wall.get(f, default) for f in g), g))
    for g in groups:
        i = 0 if ends[0] <= ends[1] else 1
        streams[i] += g
        ends[i] += sum(wall.get(f, default) for f in g)
    for stream in streams:  # the shared runs' users after the rest (stable: LPT order within each part)
        stream.sort(key=lambda f: f in SHARED_RUN_USERS and f not in demo)
    last = 0 if ends[0] <= ends[1] else 1
    streams[last].append(TPU_HOST)
    ends[last] += tpu_host
    return streams[0], streams[1], ends[0], ends[1]


def core_sets(cpus: list[int]) -> tuple[str, str] | None:
    """The ``taskset -c`` lists of the two streams: the first half of ``cpus`` and the rest
    (sorted); None for fewer than two CPUs, where there is nothing to split."""
    cpus = sorted(cpus)
    if len(cpus) < 2:
        return None
    half = len(cpus) // 2
    return ",".join(map(str, cpus[:half])), ",".join(map(str, cpus[half:]))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", default=".cache/test-profile", type=Path)
    ap.add_argument("--top", type=int, default=30, help="tests and files listed per table")
    ap.add_argument("--json", type=Path, help="write the per-file table here")
    ap.add_argument("--split", action="store_true", help="print the two streams' files (folder: a --json file)")
    ap.add_argument("--cores", action="store_true", help="print the two streams' CPU lists (taskset -c)")
    ap.add_argument("--closing-line", action="store_true", help="print 'suite: N passed, N failed, N skipped'")
    args = ap.parse_args(argv)
    if args.closing_line:
        outcomes = collections.Counter(r.get("outcome", "passed") for r in load(args.folder))
        print(f"suite: {outcomes['passed']} passed, {outcomes['failed']} failed, {outcomes['skipped']} skipped")
        return
    if args.cores:
        import os

        sets = core_sets(list(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else None
        if sets:
            print("\n".join(sets))
        return
    if args.split:
        path = args.folder if args.folder.suffix == ".json" else REPO / "tests" / "profile.json"
        first, second, end0, end1 = split(json.loads(path.read_text()) if path.is_file() else [])
        print(" ".join(first))
        print(" ".join(second))
        print(f"predicted: first stream {end0 / 60:.1f} min, second {end1 / 60:.1f} min", file=sys.stderr)
        return
    rows = load(args.folder)
    t0 = min(r["start"] for r in rows)
    streams = collections.defaultdict(list)
    for r in rows:
        streams[r["stream"]].append(r)
    print("stream      tests  start-end (min)  wall (min)  CPU (min)")
    for name, rs in sorted(streams.items()):
        start = min(r["start"] for r in rs) - t0
        end = max(r["start"] + r["wall_s"] for r in rs) - t0
        print(
            f"{name or '-':10} {len(rs):6}  {start / 60:6.1f}-{end / 60:5.1f}     {sum(r['wall_s'] for r in rs) / 60:8.1f}"
            f"  {sum(r['cpu_s'] for r in rs) / 60:9.1f}"
        )
    print(f"all        {len(rows):6}  CPU {sum(r['cpu_s'] for r in rows) / 60:.1f} min")
    files = by_file(rows)
    print(f"\nfiles by wall (top {args.top}): wall s, CPU s, tests, stream")
    for f in files[: args.top]:
        print(f"{f['wall_s']:8.1f} {f['cpu_s']:8.1f} {f['tests']:4}  {f['stream']:9} {f['file']}")
    for key in ("wall_s", "cpu_s"):
        print(f"\ntests by {key[:-2]} (top {args.top}): wall s (setup), CPU s, stream")
        for r in sorted(rows, key=lambda r: -r[key])[: args.top]:
            print(
                f"{r['wall_s']:8.1f} ({r.get('setup_wall_s', 0):6.1f}) {r['cpu_s']:8.1f}  {r['stream']:9} {r['test']}"
            )
    if args.json:
        args.json.write_text(json.dumps(files, indent=1) + "\n")


if __name__ == "__main__":
    main()
