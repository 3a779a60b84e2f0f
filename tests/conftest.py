"""Test session setup: 8 fake CPU devices before JAX starts, a shared artefact cache."""

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Must happen before anything imports JAX: the suite runs on a fake 8-device CPU host so
# that sharding is really exercised (4 x 2 fsdp x tp meshes).
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Built artefacts (the tiny base checkpoint, ...) are deterministic; reuse them across runs.
os.environ.setdefault("COOKBOOK_CACHE", str(REPO / ".cache" / "cookbook"))
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def tiny_base() -> Path:
    """The tiny random base checkpoint (released multimodal layout, 2 shards)."""
    from cookbook import base

    return base.ensure_base("tiny")


@pytest.fixture(scope="session")
def mesh_4x2():
    """A 4 (fsdp) x 2 (tp) mesh over the 8 fake CPU devices."""
    from cookbook import mesh

    return mesh.make_mesh(4, 2)


@pytest.fixture(scope="session")
def vllm_lora_server():
    """One vLLM server for the session (helper F): the tiny text-only base with the trained
    run's PEFT adapter ("verilog") and its all-zero copy ("base"), behind an API key.

    Shared by tests/test_serve.py and tests/test_bench.py (a vLLM start costs 30-100 s here).
    It is started by an owner process, which teardown kills with SIGKILL (no atexit, as when
    a notebook kernel is killed): every server process must then go away on its own.
    """
    import json
    import signal
    import subprocess
    import time
    import types

    from cookbook import merge, serve, train

    run_dir = train.ensure_trained(train.train_preset("tiny"))
    base_text = merge.ensure_text_only_base(train.resolve_base_dir(train.config_of_run(run_dir)), "tiny")
    adapter = merge.ensure_peft(run_dir, layout="text")
    key_env = {"COOKBOOK_TEST_VLLM_KEY": "test-key-not-secret"}
    config = serve.ServeConfig(
        model_dir=str(base_text), served_model_name="tiny-base", max_model_len=512,
        lora_modules=(("verilog", str(adapter)), ("base", str(serve.zero_adapter(adapter)))),
        api_key_env="COOKBOOK_TEST_VLLM_KEY", startup_timeout_s=600)
    owner_code = (
        "import json, sys\n"
        "from cookbook import serve\n"
        "kw = json.loads(sys.argv[1]); kw['lora_modules'] = tuple(map(tuple, kw['lora_modules']))\n"
        "s = serve.start_server(serve.ServeConfig(**kw))\n"
        "print(json.dumps({'port': s.port, 'pids': s.process_ids(), 'startup_s': s.startup_s}), flush=True)\n"
        "sys.stdin.read()\n"
    )
    import dataclasses

    owner = subprocess.Popen([sys.executable, "-c", owner_code, json.dumps(dataclasses.asdict(config))],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, **key_env})
    line = owner.stdout.readline()
    if not line:
        owner.kill()
        pytest.fail("the vLLM owner process failed to start a server (see the captured stderr)")
    info = json.loads(line)
    port = info["port"]
    server = types.SimpleNamespace(
        config=config, port=port, pids=info["pids"], startup_s=info["startup_s"],
        base_url=f"http://127.0.0.1:{port}/v1", api_key=key_env["COOKBOOK_TEST_VLLM_KEY"],
        run_dir=run_dir, adapter_dir=adapter)
    from openai import OpenAI

    server.client = lambda: OpenAI(base_url=server.base_url, api_key=server.api_key)
    yield server
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    deadline = time.monotonic() + 60
    while any(serve._alive(p) for p in info["pids"]) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [p for p in info["pids"] if serve._alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left, f"vLLM processes {left} outlived their SIGKILLed owner"
