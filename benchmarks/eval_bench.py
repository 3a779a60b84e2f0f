"""The functional scorer's throughput: problems simulated per second, the pool against one at a time.

Scores the sample task's 200 held-out problems with one completion each (the reference
answer, so every sample compiles and runs its whole testbench: 16-36 edge-case pairs and
200 random ones), first one simulation at a time (what a plain loop over ``iverilog`` /
``vvp`` does), then with ``cookbook.evaluate``'s pool of one simulation per CPU. Writes
``benchmarks/results/eval_bench.json``.

    .venv/bin/python benchmarks/eval_bench.py            # ~20 s on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "eval_bench.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=200, help="sample-task problems to simulate")
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    from cookbook import data, evaluate

    problems = evaluate.sample_task_problems(data.generate_rows("eval", n=args.problems))
    completions = {p.name: [p.answer] for p in problems}
    points = []
    for workers in sorted({1, len(os.sched_getaffinity(0))}):
        scores = evaluate.score(problems, completions, workers=workers)
        assert scores.pass_at(1) == 1.0, scores.outcome_counts  # every reference passes its own testbench
        points.append(
            {
                "workers": workers,
                "problems": len(problems),
                "seconds": round(scores.simulate_s, 2),
                "problems_per_s": round(scores.samples_per_s, 1),
            }
        )
    result = {
        "simulator": evaluate.check_simulator(),
        "network_isolated": evaluate.network_isolated(),
        "points": points,
        "pool_speedup": round(points[-1]["problems_per_s"] / points[0]["problems_per_s"], 2),
        "cpus": len(os.sched_getaffinity(0)),
        "load_average": os.getloadavg()[0],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(f"{'workers':>8} {'problems':>9} {'seconds':>8} {'problems/s':>11}")
    for p in points:
        print(f"{p['workers']:>8} {p['problems']:>9} {p['seconds']:>8} {p['problems_per_s']:>11}")
    print(
        f"pool / one at a time: {result['pool_speedup']}x (load average {result['load_average']:.1f}); wrote {args.json}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
