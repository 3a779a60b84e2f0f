"""``cookbook serve`` (a vLLM server on this host, or the vLLM-TPU command for a v6e host) and
``cookbook bench`` (a load test of a running endpoint). Bad input is one line (``core.user_errors``):
the endpoint is asked for its model list before any load is sent.
"""

from __future__ import annotations

import json
import os
import shlex
import urllib.error
import urllib.parse
import urllib.request

from cookbook import core
from cookbook.serve import _bench as bench
from cookbook.serve import _bench_report as report
from cookbook.serve import _tpu as serve_tpu
from cookbook.serve._config import ServeConfig, ServeError
from cookbook.serve._server import VLLMServer


def register_cli(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a checkpoint with vLLM on 127.0.0.1 (or print the TPU command)",
        description="Serve a checkpoint with vLLM on 127.0.0.1 (OpenAI-compatible API), or print the "
        "vLLM-TPU command for a v6e host.",
    )
    p.add_argument("model_dir", help="checkpoint directory (merged, or the base with --lora)")
    p.add_argument("--name", default="model", help="served model name")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=None, help="default: a free port (8000 on TPU)")
    p.add_argument("--max-model-len", type=int, default=1024)
    p.add_argument("--lora", action="append", default=[], metavar="NAME=DIR", help="PEFT adapter")
    p.add_argument("--api-key-env", default=None, help="env var holding the API key")
    p.add_argument(
        "--reasoning-parser",
        default="gemma4",
        metavar="NAME",
        help="vLLM reasoning parser: a thought comes back as `reasoning`, apart from `content` "
        "(default gemma4; 'none': off)",
    )
    p.add_argument(
        "--tools",
        action="store_true",
        help="parse Gemma 4 tool calls into `tool_calls` (--tool-call-parser gemma4 --enable-auto-tool-choice)",
    )
    p.add_argument("--tpu", action="store_true", help="print the v6e vLLM-TPU docker command instead")
    p.add_argument("--preset", default="gemma4_31b", help="architecture (for --tpu's TP size)")
    p.add_argument("--chips", type=int, default=None, help="chips on the host (default: --slice's)")
    p.add_argument(
        "--slice", dest="slice_name", default="v6e-8", help="with --tpu: the TPU slice (v6e-1, v5e-1, v6e-8, ...)"
    )
    p.add_argument("--script", default=None, help="with --tpu: write a start script here")
    p.set_defaults(func=_cli)


@core.user_errors("serve", ServeError)
def _cli(args) -> int:
    bad = [x for x in args.lora if "=" not in x or not all(x.split("=", 1))]
    if bad:
        raise ValueError(f"--lora {bad[0]!r}: write NAME=DIR, e.g. --lora verilog=runs/adapter")
    loras = tuple(tuple(x.split("=", 1)) for x in args.lora)
    cfg = ServeConfig(
        model_dir=args.model_dir,
        served_model_name=args.name,
        host=args.host,
        port=args.port,
        max_model_len=args.max_model_len,
        lora_modules=loras,
        api_key_env=args.api_key_env,
        tool_parser="gemma4" if args.tools else None,
        reasoning_parser=None if args.reasoning_parser.lower() == "none" else args.reasoning_parser,
    )
    if args.tpu:
        s = core.get_slice(args.slice_name)
        tpu = serve_tpu.TpuServeConfig(chips=args.chips or s.num_devices)
        if args.script:
            print(serve_tpu.write_tpu_script(args.script, cfg, args.preset, tpu))
        else:
            command = shlex.join(serve_tpu.tpu_command(cfg, args.preset, tpu))
            if args.api_key_env:  # docker passes VLLM_API_KEY by name: its value must be in this shell
                command = f'export VLLM_API_KEY="${{{args.api_key_env}:?set {args.api_key_env} first}}"\n{command}'
            print("\n".join(serve_tpu.tpu_routes(args.slice_name, args.preset, args.model_dir)))
            print(command)
        return 0
    server = VLLMServer(cfg)
    server.start()
    print(
        f"serving {cfg.served_model_name!r} at {server.base_url} (started in {server.startup_s:.0f} s); "
        "Ctrl-C stops it",
        flush=True,
    )
    try:
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def check_endpoint(base_url: str, model: str, api_key: str | None = None, *, timeout_s: float = 10.0) -> list[str]:
    """The models ``base_url`` serves; raises ``ServeError`` naming the fix when the endpoint is
    unreachable, wants a key, or does not serve ``model``. Never puts the key in a message."""
    parts = urllib.parse.urlparse(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ServeError(f"--base-url {base_url!r} is not an http(s) URL: write e.g. http://127.0.0.1:8000/v1")
    request = urllib.request.Request(base_url.rstrip("/") + "/models")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as r:
            served = [m["id"] for m in json.load(r).get("data", [])]
    except urllib.error.HTTPError as e:
        if e.code == 401:
            raise ServeError(
                f"{base_url} wants an API key: pass --api-key-env NAME, the environment variable that holds it"
            ) from None
        raise ServeError(
            f"{base_url}/models answered HTTP {e.code}: is --base-url an OpenAI-compatible endpoint (ending in /v1)?"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise ServeError(
            f"cannot reach {base_url} ({reason}): start a server first (`cookbook serve "
            "MODEL_DIR` prints its URL) or fix --base-url"
        ) from None
    if model not in served:
        raise ServeError(
            f"{base_url} serves {', '.join(map(repr, served)) or 'no model'}, not {model!r}: "
            "pass one of those as --model"
        )
    return served


def register_bench_cli(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="load-test an OpenAI-compatible endpoint: TTFT, latency, throughput",
        description=bench.__doc__.splitlines()[0],
    )
    p.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", required=True, help="served model name")
    p.add_argument("--scenario", choices=["custom", "paper_burst"], default="custom")
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--num-prompts", type=int, default=64)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--request-rate", type=float, default=None, help="req/s instead of a concurrency sweep")
    p.add_argument("--vocab-size", type=int, default=262_144, help="for random token-id prompts")
    p.add_argument("--api-key-env", default=None, help="env var holding the API key")
    p.add_argument("--out", default="bench.json")
    p.set_defaults(func=_bench_cli)


@core.user_errors("bench", ServeError)
def _bench_cli(args) -> int:
    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise ValueError(
                f"--api-key-env {args.api_key_env}: that environment variable is not set; set it "
                "to the server's API key"
            )
    for flag, value in (
        ("--num-prompts", args.num_prompts),
        ("--input-len", args.input_len),
        ("--output-len", args.output_len),
        *(("--concurrency", c) for c in args.concurrency),
    ):
        if value < 1:
            raise ValueError(f"{flag} {value}: must be at least 1")
    check_endpoint(args.base_url, args.model, key)
    if args.scenario == "paper_burst":
        points = [
            bench.run_scenario(args.base_url, args.model, bench.PAPER_BURST, vocab_size=args.vocab_size, api_key=key)
        ]
    else:
        prompts = bench.random_prompts(args.vocab_size, args.num_prompts, args.input_len)
        if args.request_rate:
            points = [
                bench.run_point(
                    args.base_url, args.model, prompts, args.output_len, request_rate=args.request_rate, api_key=key
                )
            ]
        else:
            points = bench.sweep(args.base_url, args.model, prompts, args.output_len, args.concurrency, api_key=key)
    print(report.table(points))
    print(report.write_json(args.out, points))
    return 0 if all(p["num_ok"] == p["num_requests"] for p in points) else 1
