"""The test session's vLLM server: tiny base + the trained run's PEFT adapter, behind an API key.

It is started by an owner process, and released by SIGKILLing that owner (no atexit runs,
as when a notebook kernel is killed): every server process must then exit on its own, which
:func:`release` asserts. A vLLM start costs 30-100 s on 2 cores, so one server serves
tests/serve/test_serve.py, tests/serve/test_bench.py and tests/evaluate/test_generators.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import types

_OWNER_CODE = """
import json, sys
from cookbook import serve
from cookbook.serve import _server
kw = json.loads(sys.argv[1]); kw['lora_modules'] = tuple(map(tuple, kw['lora_modules']))
s = _server.start_server(serve.ServeConfig(**kw))
print(json.dumps({'port': s.port, 'pids': s.process_ids(), 'startup_s': s.startup_s}), flush=True)
sys.stdin.read()
"""
_STATE: dict = {}


def start_lora_server() -> types.SimpleNamespace:
    import userenv
    from openai import OpenAI

    from cookbook import merge, serve, train

    run_dir = userenv.tiny_run()  # notebook 06's run, shared with the demo and tests/evaluate
    base_text = merge.ensure_text_only_base(train.resolve_base_dir(train.config_of_run(run_dir)), "tiny")
    adapter = merge.ensure_peft(run_dir, layout="text")
    key = "test-key-not-secret"
    config = serve.ServeConfig(
        model_dir=str(base_text),
        served_model_name="tiny-base",
        max_model_len=512,
        lora_modules=(("verilog", str(adapter)), ("base", str(serve.zero_adapter(adapter)))),
        api_key_env="COOKBOOK_TEST_VLLM_KEY",
        startup_timeout_s=600,
        # Runtime adapter loading: the thinking run's adapter joins only when its test runs
        # (tests/evaluate/test_generators.py), so no other user trains that run.
        runtime_lora=True,
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER_CODE, json.dumps(dataclasses.asdict(config))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "COOKBOOK_TEST_VLLM_KEY": key},
    )
    line = owner.stdout.readline()
    if not line:
        owner.kill()
        raise RuntimeError("the vLLM owner process failed to start a server (see the captured stderr)")
    info = json.loads(line)
    _STATE.update(owner=owner, pids=info["pids"])
    server = types.SimpleNamespace(
        config=config,
        port=info["port"],
        pids=info["pids"],
        startup_s=info["startup_s"],
        base_url=f"http://127.0.0.1:{info['port']}/v1",
        api_key=key,
        run_dir=run_dir,
        adapter_dir=adapter,
    )
    server.client = lambda: OpenAI(base_url=server.base_url, api_key=key)
    return server


def release() -> None:
    """SIGKILL the owner; assert that all server processes go away by themselves."""
    from cookbook.serve import _process

    owner = _STATE.pop("owner", None)
    if owner is None:
        return
    pids = _STATE.pop("pids")
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    deadline = time.monotonic() + 60
    while any(_process.pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [p for p in pids if _process.pid_alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left, f"vLLM processes {left} outlived their SIGKILLed owner"
