"""Print where the test suite's time goes, from the per-test profile tests/profiling.py writes.

    python scripts/test_profile.py [.cache/test-profile] [--top 40] [--json OUT]

Reads every ``*.jsonl`` in the folder (``scripts/run_tests.sh`` writes one per stream), and
prints each stream's span, wall and CPU seconds, then the files and the tests that cost most, by
wall and by CPU (a test's own process and every child it started, e.g. a notebook kernel or a
vLLM server; a session fixture's cost is in the setup of the first test that asked for it).
``--json`` writes the per-file table (file, stream, tests, wall_s, cpu_s), the input of the
stream balance in ``scripts/run_tests.sh``.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path


def load(folder: Path) -> list[dict]:
    rows = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                rows.append(json.loads(line))
    if not rows:
        raise SystemExit(f"test_profile: no profile rows under {folder}; run scripts/run_tests.sh first")
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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", default=".cache/test-profile", type=Path)
    ap.add_argument("--top", type=int, default=30, help="tests and files listed per table")
    ap.add_argument("--json", type=Path, help="write the per-file table here")
    args = ap.parse_args(argv)
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
