"""Test session setup: 8 fake CPU devices before JAX starts, a shared artefact cache."""

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).parent))  # the suite's helper modules (userenv, nbutil, twins, ...)
from userenv import COLLECTIVE_TIMEOUT_FLAG  # noqa: E402

# Must happen before anything imports JAX: the suite runs on a fake 8-device CPU host so
# that sharding is really exercised (4 x 2 fsdp x tp meshes).
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count=8 {COLLECTIVE_TIMEOUT_FLAG}"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Built artefacts (the tiny base checkpoint, ...) are deterministic; reuse them across runs.
os.environ.setdefault("COOKBOOK_CACHE", str(REPO / ".cache" / "cookbook"))
# What every entry point sets (the CPU backend, JAX's persistent compilation cache under the
# cache root, shared by the suite's processes: a tiny train step compiled once is loaded after).
from cookbook import core  # noqa: E402

core.setup_runtime_env()


def pytest_configure(config):
    import profiling  # per-test wall and CPU seconds when COOKBOOK_TEST_PROFILE is set

    profiling.pytest_configure(config)


@pytest.fixture(scope="session")
def tiny_base() -> Path:
    """The tiny random base checkpoint (released multimodal layout, 2 shards)."""
    from cookbook import models

    return models.ensure_base("tiny")


@pytest.fixture(scope="session")
def tiny_e2b_base() -> Path:
    """The E2B-shaped random twin's base (per-layer inputs, KV-shared layers)."""
    from cookbook import models

    return models.ensure_base("tiny_e2b")


@pytest.fixture(scope="session")
def tiny_12b_base() -> Path:
    """The 12B-shaped random twin's base (released gemma4_unified layout; one global KV head)."""
    from cookbook import models

    return models.ensure_base("tiny_12b")


@pytest.fixture(scope="session")
def tiny_26b_a4b_base() -> Path:
    """The 26B-A4B-shaped random twin's base (experts beside the dense MLP)."""
    from cookbook import models

    return models.ensure_base("tiny_26b_a4b")


@pytest.fixture(scope="session")
def iverilog() -> str:
    """The simulator. Missing on Debian (CI installs it, and so should a developer): a failure
    naming the package, not a skip that would hide every functional test (tests/evaluate, tests/train's scores)."""
    import shutil

    from cookbook import evaluate
    from cookbook.evaluate import _simulate

    if shutil.which("iverilog") and shutil.which("vvp"):
        return evaluate.check_simulator()
    if Path("/etc/debian_version").is_file():
        pytest.fail(_simulate.INSTALL_HINT)
    pytest.skip(_simulate.INSTALL_HINT)


@pytest.fixture(scope="session")
def twin_run():
    """``twin_run(name)``: the twin's short trained run (tests/twins.py), trained once per cache."""
    import twins

    return twins.run


@pytest.fixture(scope="session")
def mesh_4x2():
    """A 4 (fsdp) x 2 (tp) mesh over the 8 fake CPU devices."""
    from cookbook import mesh

    return mesh.make_mesh(4, 2)


@pytest.fixture(scope="session")
def vllm_lora_server():
    """One vLLM server (helper F; see tests/vllm_fixture.py) for tests/serve/test_bench.py,
    tests/serve/test_serve.py and tests/evaluate/test_generators.py. Its users run one after
    another (hook below), and it is stopped right after the last of them, not at session end, so
    ~3 GB are not held while the notebooks run."""
    import vllm_fixture

    server = vllm_fixture.start_lora_server()
    yield server
    vllm_fixture.release()


def pytest_collection_modifyitems(session, config, items):
    """Run the vLLM server's users one after another (where the last of them was), so the
    server is not held from the first user (tests/evaluate) through everything in between."""
    users = [i for i in items if "vllm_lora_server" in getattr(i, "fixturenames", ())]
    if len(users) < 2:
        return
    last = items.index(users[-1])
    theirs = {id(i) for i in users}
    items[:] = [i for i in items[:last] if id(i) not in theirs] + users + items[last + 1 :]


def pytest_runtest_teardown(item, nextitem):
    if "vllm_lora_server" not in getattr(item, "fixturenames", ()):
        return
    items = item.session.items
    later = items[items.index(nextitem) :] if nextitem is not None else []
    if not any("vllm_lora_server" in getattr(i, "fixturenames", ()) for i in later):
        import vllm_fixture

        vllm_fixture.release()
