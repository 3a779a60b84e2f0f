"""Data pipeline speed on one core against what Gemma 4 31B consumes on v5p-8.

The host CPU of a TPU VM reads, validates, tokenises and packs while the chips train; it
must stay far ahead of them. On one pinned core (prefetch off, one tokenizer thread),
for the sample task's rows at the 31B recipe's sequence length, this measures:

* read + validate + tokenise (``prepare_examples``, from the JSONL file) in tokens/s;
* pack (Grain first-fit) or pad, then batch, over one epoch, in tokens/s;
* end to end, and the fraction of real tokens in the batches, packing against padding
  (the alternative a user would otherwise run) in the same process.

The ratio is against the tokens/s the 31B recipe consumes on v5p-8: the planner's
prediction when ``cookbook plan`` has written its output, else the paper's measured 763
(target: at least 10x). The tokenizer is the cookbook's offline byte-level BPE (1,024
tokens) with Gemma 4's template, not the released 262k-token one, whose Rust fast
tokenizer runs at a similar order of speed but is not measured here (no download).
Writes ``benchmarks/results/data_bench.json``.

    .venv/bin/python benchmarks/data_bench.py --rows 6000 --seq-len 4096
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("RAYON_NUM_THREADS", "1")  # the tokenizers library's thread pool
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=6000, help="sample-task rows (train split)")
    parser.add_argument("--seq-len", type=int, default=4096, help="tokens per row (31B recipe: 4096)")
    parser.add_argument("--batch-size", type=int, default=1, help="rows per batch (31B recipe: 1)")
    parser.add_argument("--repeats", type=int, default=3, help="best of N timings")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "data_bench.json")
    args = parser.parse_args(argv)

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    from cookbook import data, fit

    tokenizer = data.load_tokenizer("tiny")
    rows = data.generate_rows("train", n=args.rows)
    results = {
        "rows": args.rows,
        "seq_len": args.seq_len,
        "batch_size": args.batch_size,
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "tokenizer": "cookbook tiny BPE (1,024 tokens), Gemma 4 chat template",
        "modes": {},
    }
    consumed = fit.training_tokens_per_s("gemma4_31b", "v5p-8")
    with tempfile.TemporaryDirectory() as tmp:
        path = data.write_jsonl(rows, Path(tmp) / "train.jsonl")
        for packing in (True, False):
            cfg = data.DataConfig(
                seq_len=args.seq_len, batch_size=args.batch_size, packing=packing, num_packing_bins=64, prefetch=0
            )
            best = None
            for _ in range(args.repeats):
                m = data.measure_throughput(path, tokenizer, dataclasses.replace(cfg))
                best = m if best is None or m["tokens_per_s"] > best["tokens_per_s"] else best
            best["ratio_vs_31b_consumption"] = best["tokens_per_s"] / consumed["tokens_per_s"]
            results["modes"]["packing" if packing else "padding"] = best
    results["consumed_31b_v5p8_tokens_per_s"] = consumed["tokens_per_s"]
    results["consumed_basis"] = consumed["basis"]
    pack, pad = results["modes"]["packing"], results["modes"]["padding"]
    results["packing_vs_padding_real_fraction"] = pack["real_token_fraction"] / pad["real_token_fraction"]

    print(f"data pipeline, one core, {args.rows} rows, seq_len {args.seq_len}, batch {args.batch_size}")
    print(
        f"{'mode':<9} {'tokenise tok/s':>15} {'batch tok/s':>12} {'end-to-end tok/s':>17} {'real tokens':>12} {'x 31B need':>11}"
    )
    for name, m in results["modes"].items():
        print(
            f"{name:<9} {m['tokenize_tokens_per_s']:>15,.0f} {m['batch_tokens_per_s']:>12,.0f} "
            f"{m['tokens_per_s']:>17,.0f} {m['real_token_fraction']:>11.1%} {m['ratio_vs_31b_consumption']:>10.0f}x"
        )
    print(f"31B on v5p-8 consumes {consumed['tokens_per_s']:,.0f} tokens/s ({consumed['basis']})")
    print(f"packing puts {results['packing_vs_padding_real_fraction']:.0f}x more real tokens in each step than padding")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
