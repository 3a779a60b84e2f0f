"""cookbook.core runtime: the cache root, the checkout's paths, the CPU default, JSON values."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cookbook import core

# Needs the JAX stack only: also runs in the TPU-host environment (scripts/run_tests.sh).
pytestmark = pytest.mark.jax_only

REPO = Path(__file__).resolve().parents[2]


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("COOKBOOK_CACHE", str(tmp_path / "c"))
    assert core.cache_root() == tmp_path / "c"
    monkeypatch.delenv("COOKBOOK_CACHE")
    assert core.cache_root() == Path.home() / ".cache" / "gemma4-cookbook" == core.DEFAULT_CACHE


def test_repo_paths_point_into_this_checkout():
    assert core.REPO_ROOT == REPO
    assert (core.REPO_ROOT / "notebooks").is_dir() and (core.REPO_ROOT / "cookbook").is_dir()
    assert core.RESULTS_DIR.is_dir() and core.RESULTS_DIR == REPO / "benchmarks" / "results"


def _env_after_setup(**env) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "VLLM_TARGET_DEVICE")}
    clean.update(env, PYTHONPATH=str(REPO))
    code = ("import json, os; from cookbook import core; core.setup_runtime_env(); "
            "print(json.dumps({k: os.environ.get(k) for k in ('JAX_PLATFORMS', 'VLLM_TARGET_DEVICE')}))")
    out = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_setup_runtime_env_defaults_to_cpu_without_tpu_chips():
    chips = Path("/dev/accel0").exists() or Path("/dev/vfio/0").exists()
    assert core.on_tpu_host() == chips
    default = None if chips else "cpu"  # a TPU host picks its backend itself
    assert _env_after_setup() == {"JAX_PLATFORMS": default, "VLLM_TARGET_DEVICE": default}
    # A choice already made is kept.
    assert _env_after_setup(JAX_PLATFORMS="tpu", VLLM_TARGET_DEVICE="tpu") == {
        "JAX_PLATFORMS": "tpu", "VLLM_TARGET_DEVICE": "tpu"}


class _Result:
    def __init__(self, **values):
        self.values = values

    def to_dict(self):
        return dict(self.values)


def test_to_jsonable_converts_what_notebooks_record(tmp_path):
    value = {
        "f32": np.float32(1.5), "i64": np.int64(3), "flag": np.bool_(True),
        "array": np.arange(6, dtype=np.int32).reshape(2, 3), "path": tmp_path / "x.json",
        "nan": float("nan"), "inf": np.float64("inf"), "neg_inf": -math.inf, "nan_array": np.array([1.0, np.nan]),
        "nested": {1: (np.float64(0.25), [np.int8(-2)]), "obj": _Result(loss=np.float32(0.5), step=2)},
        "plain": ["a", 1, 2.5, None, False],
    }
    got = core.to_jsonable(value)
    assert got == {
        "f32": 1.5, "i64": 3, "flag": True, "array": [[0, 1, 2], [3, 4, 5]], "path": str(tmp_path / "x.json"),
        "nan": "nan", "inf": "inf", "neg_inf": "-inf", "nan_array": [1.0, "nan"],
        "nested": {"1": [0.25, [-2]], "obj": {"loss": 0.5, "step": 2}},
        "plain": ["a", 1, 2.5, None, False],
    }
    assert type(got["f32"]) is float and type(got["i64"]) is int and type(got["flag"]) is bool
    assert json.loads(json.dumps(got, allow_nan=False)) == got  # strict JSON, no NaN literals


def test_to_jsonable_converts_jax_scalars():
    import jax.numpy as jnp

    got = core.to_jsonable({"loss": jnp.float32(0.75), "step": jnp.int32(7)})
    assert got == {"loss": 0.75, "step": 7} and type(got["step"]) is int


@pytest.mark.parametrize("value,name", [({1, 2}, "set"), (object(), "object"), (b"raw", "bytes"),
                                        ({"deep": [1, {"x": frozenset()}]}, "frozenset")])
def test_to_jsonable_refuses_what_it_cannot_store(value, name):
    with pytest.raises(TypeError, match=rf"cannot store a {name} as JSON"):
        core.to_jsonable(value)


def test_to_jsonable_takes_jax_arrays_of_any_rank():
    import jax.numpy as jnp

    from cookbook import core

    assert core.to_jsonable({"j": jnp.arange(3), "m": jnp.ones((1, 2)), "s": jnp.float32(2.5)}) == {
        "j": [0, 1, 2], "m": [[1.0, 1.0]], "s": 2.5}


@pytest.mark.torch
def test_to_jsonable_takes_torch_tensors():
    import torch

    from cookbook import core

    assert core.to_jsonable({"t": torch.tensor([[1.5, 2.0]]), "s": torch.tensor(3)}) == {"t": [[1.5, 2.0]], "s": 3}
