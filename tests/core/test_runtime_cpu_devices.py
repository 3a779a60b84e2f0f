"""core.setup_runtime_env(cpu_devices=N): a CPU host's JAX really starts with N devices; a choice
already made is kept, and a TPU host's devices stay its chips."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cookbook import core

REPO = Path(__file__).resolve().parents[2]

_DEVICES = """
import json, os, sys
from cookbook import core
core.setup_runtime_env(cpu_devices=int(sys.argv[1]))
flags = os.environ.get("XLA_FLAGS")
if os.environ.get("JAX_PLATFORMS") == "cpu":
    import jax
    print(json.dumps({"devices": jax.device_count(), "platform": jax.default_backend(), "flags": flags}))
else:  # never starts a TPU backend here: what the setup left for it is the answer
    print(json.dumps({"devices": None, "platform": os.environ["JAX_PLATFORMS"], "flags": flags}))
"""


def _after_setup(count: int, **env: str) -> dict:
    keep = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    done = subprocess.run(
        [sys.executable, "-c", _DEVICES, str(count)],
        env=keep | env | {"PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(core.on_tpu_host(), reason="a TPU host's JAX platform is its chips")
def test_a_cpu_host_starts_jax_with_the_devices_asked_for():
    assert _after_setup(8) == {"devices": 8, "platform": "cpu", "flags": "--xla_force_host_platform_device_count=8"}
    assert _after_setup(3)["devices"] == 3


def test_devices_chosen_already_and_a_tpu_platform_are_kept():
    chosen = "--xla_force_host_platform_device_count=2"
    assert _after_setup(8, JAX_PLATFORMS="cpu", XLA_FLAGS=chosen) == {"devices": 2, "platform": "cpu", "flags": chosen}
    assert _after_setup(8, JAX_PLATFORMS="tpu") == {"devices": None, "platform": "tpu", "flags": None}


def test_no_devices_is_refused():
    with pytest.raises(ValueError, match=r"cpu_devices=0"):
        core.setup_runtime_env(cpu_devices=0)
