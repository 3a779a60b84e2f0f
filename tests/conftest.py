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

    Shared by tests/test_serve.py and tests/test_bench.py: a vLLM start costs 30-100 s here.
    At teardown it checks that stopping left none of the server's processes behind.
    """
    from cookbook import merge, serve, train

    run_dir = train.ensure_trained(train.train_preset("tiny"))
    base_text = merge.ensure_text_only_base(train.resolve_base_dir(train.config_of_run(run_dir)), "tiny")
    adapter = merge.ensure_peft(run_dir, layout="text")
    os.environ["COOKBOOK_TEST_VLLM_KEY"] = "test-key-not-secret"
    config = serve.ServeConfig(
        model_dir=str(base_text), served_model_name="tiny-base", max_model_len=512,
        lora_modules=(("verilog", str(adapter)), ("base", str(serve.zero_adapter(adapter)))),
        api_key_env="COOKBOOK_TEST_VLLM_KEY", startup_timeout_s=600)
    server = serve.start_server(config)
    server.run_dir, server.adapter_dir = run_dir, adapter
    pids = server.process_ids()
    yield server
    server.stop()
    assert not [p for p in pids if serve._alive(p)], "vLLM processes left after stop()"
