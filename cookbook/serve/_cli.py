"""``cookbook serve``: a vLLM server on this host, or the vLLM-TPU command for a v6e host."""

from __future__ import annotations

import shlex
import sys

from cookbook.serve import _tpu as serve_tpu
from cookbook.serve._server import ServeConfig, ServeError, VLLMServer


def register_cli(sub) -> None:
    p = sub.add_parser("serve", help="serve a checkpoint with vLLM on 127.0.0.1 (or print the TPU command)",
                       description="Serve a checkpoint with vLLM on 127.0.0.1 (OpenAI-compatible API), or print the "
                                   "vLLM-TPU command for a v6e host.")
    p.add_argument("model_dir", help="checkpoint directory (merged, or the base with --lora)")
    p.add_argument("--name", default="model", help="served model name")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=None, help="default: a free port (8000 on TPU)")
    p.add_argument("--max-model-len", type=int, default=1024)
    p.add_argument("--lora", action="append", default=[], metavar="NAME=DIR", help="PEFT adapter")
    p.add_argument("--api-key-env", default=None, help="env var holding the API key")
    p.add_argument("--tpu", action="store_true", help="print the v6e vLLM-TPU docker command instead")
    p.add_argument("--preset", default="gemma4_31b", help="architecture (for --tpu's TP size)")
    p.add_argument("--chips", type=int, default=8)
    p.add_argument("--script", default=None, help="with --tpu: write a start script here")
    p.set_defaults(func=_cli)


def _cli(args) -> int:
    loras = tuple(tuple(x.split("=", 1)) for x in args.lora)
    cfg = ServeConfig(model_dir=args.model_dir, served_model_name=args.name, host=args.host,
                      port=args.port, max_model_len=args.max_model_len, lora_modules=loras,
                      api_key_env=args.api_key_env)
    if args.tpu:
        tpu = serve_tpu.TpuServeConfig(chips=args.chips)
        if args.script:
            print(serve_tpu.write_tpu_script(args.script, cfg, args.preset, tpu))
        else:
            print(shlex.join(serve_tpu.tpu_command(cfg, args.preset, tpu)))
        return 0
    server = VLLMServer(cfg)
    try:
        server.start()
    except ServeError as e:
        print(f"cookbook serve: {e}", file=sys.stderr)
        return 1
    print(f"serving {cfg.served_model_name!r} at {server.base_url} (started in {server.startup_s:.0f} s); "
          "Ctrl-C stops it", flush=True)
    try:
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
