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
from cookbook.core import _runtime

# Needs the JAX stack only: also runs in the TPU-host environment (scripts/run_tests.sh).
pytestmark = pytest.mark.jax_only

REPO = Path(__file__).resolve().parents[2]


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("COOKBOOK_CACHE", str(tmp_path / "c"))
    assert core.cache_root() == tmp_path / "c"
    monkeypatch.delenv("COOKBOOK_CACHE")
    assert core.cache_root() == Path.home() / ".cache" / "gemma4-cookbook" == _runtime.DEFAULT_CACHE


def test_repo_paths_point_into_this_checkout():
    assert core.REPO_ROOT == REPO
    assert (core.REPO_ROOT / "notebooks").is_dir() and (core.REPO_ROOT / "cookbook").is_dir()
    assert core.RESULTS_DIR.is_dir() and core.RESULTS_DIR == REPO / "benchmarks" / "results"


def _env_after_setup(**env) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "VLLM_TARGET_DEVICE")}
    clean.update(env, PYTHONPATH=str(REPO))
    code = (
        "import json, os; from cookbook import core; core.setup_runtime_env(); "
        "print(json.dumps({k: os.environ.get(k) for k in ('JAX_PLATFORMS', 'VLLM_TARGET_DEVICE')}))"
    )
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
        "JAX_PLATFORMS": "tpu",
        "VLLM_TARGET_DEVICE": "tpu",
    }


_GC_AFTER_SETUP = """
import gc, json, sys
from cookbook import core
if sys.argv[1:]:
    gc.set_threshold(*map(int, sys.argv[1:]))  # the program's own choice, before the setup
core.setup_runtime_env()
print(json.dumps(gc.get_threshold()))
"""


def _gc_after_setup(*chosen: int, **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k != "COOKBOOK_GC_THRESHOLD"} | env | {"PYTHONPATH": str(REPO)}
    code = [sys.executable, "-c", _GC_AFTER_SETUP, *map(str, chosen)]
    return subprocess.run(code, env=clean, capture_output=True, text=True, timeout=60)


def _thresholds(done: subprocess.CompletedProcess) -> list[int]:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_setup_runtime_env_collects_young_garbage_less_often_unless_told():
    fresh = subprocess.run(
        [sys.executable, "-c", "import gc; print(*gc.get_threshold())"], capture_output=True, text=True
    )
    young, *older = map(int, fresh.stdout.split())
    assert young == (700 if sys.version_info < (3, 13) else 2000) < core.GC_YOUNG_THRESHOLD  # CPython's, raised
    assert _thresholds(_gc_after_setup()) == [core.GC_YOUNG_THRESHOLD, *older]  # older generations' ratios kept
    assert _thresholds(_gc_after_setup(500, 5, 5)) == [500, 5, 5]  # a program's own threshold is kept
    asked = _gc_after_setup(COOKBOOK_GC_THRESHOLD=str(young))
    assert _thresholds(asked) == [young, *older]  # CPython's default, asked for
    bad = _gc_after_setup(COOKBOOK_GC_THRESHOLD="lots")
    assert bad.returncode != 0
    assert "COOKBOOK_GC_THRESHOLD='lots' is not a whole number" in bad.stderr and "unset it" in bad.stderr


# A process that calls setup_runtime_env, then asks glibc's dynamic loader which tunables its
# own children get: glibc ignores a tunable it does not know without a word, so only ld.so can
# say whether the setting takes effect.
_CHILD_TUNABLES = """
import subprocess, sys
from cookbook import core
core.setup_runtime_env()
print(subprocess.run([sys.argv[1], "--list-tunables"], capture_output=True, text=True, check=True).stdout)
"""


def _glibc_tunables_of_children(**env) -> dict[str, str]:
    loader = next(  # this Python's dynamic loader, from its memory map
        line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "/ld-linux" in line
    )
    clean = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "JAX_PLATFORMS")}
    clean.update(env, PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "-c", _CHILD_TUNABLES, loader], env=clean, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return dict(line.split(": ")[:2] for line in out.stdout.splitlines() if ": " in line)


def test_processes_started_on_a_cpu_host_run_malloc_on_huge_pages():
    assert not core.on_tpu_host()
    assert _glibc_tunables_of_children()["glibc.malloc.hugetlb"].startswith("0x1 ")
    # A user's own GLIBC_TUNABLES is kept as it is.
    kept = _glibc_tunables_of_children(GLIBC_TUNABLES="glibc.malloc.arena_max=2")
    assert kept["glibc.malloc.hugetlb"].startswith("0x0 ") and kept["glibc.malloc.arena_max"].startswith("0x2 ")


# A child that compiles one small function under the cookbook's defaults and says what JAX did
# with it: the cache directory JAX was given, and the persistent-cache hits it counted.
_COMPILE_ONCE = """
import json, sys
import jax
import jax.numpy as jnp
from cookbook import core
hits = []
jax.monitoring.register_event_listener(lambda name, **kw: hits.append(name))
core.setup_runtime_env()  # after JAX was imported, as in a notebook that imported it first
def count():
    return hits.count("/jax/compilation_cache/cache_hits")
@jax.jit
def before(x):
    return jnp.sin(x).sum()
@jax.jit
def f(x):
    return (x @ x.T).sum()
@jax.jit
def after(x):
    return jnp.cos(x).sum()
x = jnp.ones((64, 64))
before(x).block_until_ready()  # the process has used the cache before the block below
start = count()
if sys.argv[1] == "off":
    with core.compile_cache_off():
        f(x).block_until_ready()
else:
    f(x).block_until_ready()
inside = count() - start
after(x).block_until_ready()  # and uses it again after
print(json.dumps({"dir": jax.config.jax_compilation_cache_dir, "hits": inside}))
"""


def _compile_once(tmp_path, mode="on", **env):
    # None of the test session's cache settings: what setup_runtime_env chooses is under test
    # (including that a millisecond compile is kept: JAX's default keeps only those over 1 s).
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))}
    clean.update(env, PYTHONPATH=str(REPO), COOKBOOK_CACHE=str(tmp_path / "c"))
    out = subprocess.run(
        [sys.executable, "-c", _COMPILE_ONCE, mode], env=clean, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.slow  # over ~30 s in the profile (tests/profile.json): make test only
def test_compiled_functions_persist_across_processes_under_the_cache_root(tmp_path):
    where = tmp_path / "c" / "jax-compile"

    def names():
        return {p.name.split("-")[0] for p in where.iterdir()} if where.is_dir() else set()

    assert _compile_once(tmp_path, "off") == {"dir": str(where), "hits": 0}
    # Where the compile itself is measured (or is a deviceless TPU compile): nothing written, even
    # in a process that used the cache before; and it is used again after the block.
    assert {"jit_before", "jit_after"} <= names() and "jit_f" not in names()
    assert _compile_once(tmp_path, "off")["hits"] == 0 and "jit_f" not in names()
    assert _compile_once(tmp_path)["hits"] == 0 and "jit_f" in names()  # compiled, and written
    assert _compile_once(tmp_path)["hits"] == 1  # a second process loads it instead of compiling
    assert _compile_once(tmp_path, "off")["hits"] == 0  # and inside the block does not read it
    # The user's choice is kept: another directory, or none at all (an empty value).
    assert _compile_once(tmp_path, JAX_COMPILATION_CACHE_DIR=str(tmp_path / "mine"))["dir"] == str(tmp_path / "mine")
    assert any((tmp_path / "mine").iterdir())
    assert _compile_once(tmp_path / "off", JAX_COMPILATION_CACHE_DIR="")["dir"] == ""
    assert not (tmp_path / "off" / "c").exists()


def test_compile_cache_dir_names_where_it_is(monkeypatch, tmp_path):
    monkeypatch.setenv("COOKBOOK_CACHE", str(tmp_path / "c"))
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    assert _runtime.compile_cache_dir() == tmp_path / "c" / "jax-compile"
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "mine"))
    assert _runtime.compile_cache_dir() == tmp_path / "mine"
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "")
    assert _runtime.compile_cache_dir() is None


class _Result:
    def __init__(self, **values):
        self.values = values

    def to_dict(self):
        return dict(self.values)


def test_to_jsonable_converts_what_notebooks_record(tmp_path):
    value = {
        "f32": np.float32(1.5),
        "i64": np.int64(3),
        "flag": np.bool_(True),
        "array": np.arange(6, dtype=np.int32).reshape(2, 3),
        "path": tmp_path / "x.json",
        "nan": float("nan"),
        "inf": np.float64("inf"),
        "neg_inf": -math.inf,
        "nan_array": np.array([1.0, np.nan]),
        "nested": {1: (np.float64(0.25), [np.int8(-2)]), "obj": _Result(loss=np.float32(0.5), step=2)},
        "plain": ["a", 1, 2.5, None, False],
    }
    got = core.to_jsonable(value)
    assert got == {
        "f32": 1.5,
        "i64": 3,
        "flag": True,
        "array": [[0, 1, 2], [3, 4, 5]],
        "path": str(tmp_path / "x.json"),
        "nan": "nan",
        "inf": "inf",
        "neg_inf": "-inf",
        "nan_array": [1.0, "nan"],
        "nested": {"1": [0.25, [-2]], "obj": {"loss": 0.5, "step": 2}},
        "plain": ["a", 1, 2.5, None, False],
    }
    assert type(got["f32"]) is float and type(got["i64"]) is int and type(got["flag"]) is bool
    assert json.loads(json.dumps(got, allow_nan=False)) == got  # strict JSON, no NaN literals


def test_to_jsonable_converts_jax_scalars():
    import jax.numpy as jnp

    got = core.to_jsonable({"loss": jnp.float32(0.75), "step": jnp.int32(7)})
    assert got == {"loss": 0.75, "step": 7} and type(got["step"]) is int


@pytest.mark.parametrize(
    "value,name",
    [({1, 2}, "set"), (object(), "object"), (b"raw", "bytes"), ({"deep": [1, {"x": frozenset()}]}, "frozenset")],
)
def test_to_jsonable_refuses_what_it_cannot_store(value, name):
    with pytest.raises(TypeError, match=rf"cannot store a {name} as JSON"):
        core.to_jsonable(value)


def test_to_jsonable_takes_jax_arrays_of_any_rank():
    import jax.numpy as jnp

    from cookbook import core

    assert core.to_jsonable({"j": jnp.arange(3), "m": jnp.ones((1, 2)), "s": jnp.float32(2.5)}) == {
        "j": [0, 1, 2],
        "m": [[1.0, 1.0]],
        "s": 2.5,
    }


@pytest.mark.torch
def test_to_jsonable_takes_torch_tensors():
    import torch

    from cookbook import core

    assert core.to_jsonable({"t": torch.tensor([[1.5, 2.0]]), "s": torch.tensor(3)}) == {"t": [[1.5, 2.0]], "s": 3}


def test_the_compile_cache_is_pruned_oldest_first_once_per_process_not_on_every_write(tmp_path, monkeypatch):
    """JAX's own eviction lists every entry on each write (quadratic in the entries): it stays
    off (max size -1), and setup_runtime_env prunes the oldest-written entries to 80% of the cap."""
    import time

    d = tmp_path / "jax-compile"
    d.mkdir()
    now = time.time()
    for i in range(10):  # 10 entries of 100 bytes, entry 0 the oldest
        (d / f"k{i}-cache").write_bytes(b"x" * 100)
        (d / f"k{i}-atime").write_bytes(b"t" * 8)
        os.utime(d / f"k{i}-cache", (now - 100 + i, now - 100 + i))
    assert _runtime.prune_compile_cache(d, max_bytes=1000) == 0  # at the cap: nothing goes
    assert _runtime.prune_compile_cache(d, max_bytes=500) == 600  # down to 80% of 500: the 6 oldest
    assert sorted(p.name for p in d.iterdir()) == sorted(f"k{i}-{s}" for i in range(6, 10) for s in ("cache", "atime"))
    monkeypatch.delenv("JAX_COMPILATION_CACHE_MAX_SIZE", raising=False)
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(d))
    monkeypatch.setattr(_runtime.prune_compile_cache, "__defaults__", (300,))  # a cap of 300 bytes
    core.setup_runtime_env()
    assert os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] == "-1"
    assert sorted(p.name for p in d.glob("*-cache")) == ["k8-cache", "k9-cache"]
    # A size the user chose is theirs: JAX evicts, nothing is pruned here.
    monkeypatch.setenv("JAX_COMPILATION_CACHE_MAX_SIZE", "100")
    core.setup_runtime_env()
    assert sorted(p.name for p in d.glob("*-cache")) == ["k8-cache", "k9-cache"]


_DESCRIBE = """
import os, sys
from cookbook import core
from jax.experimental import topologies
quiet = sys.argv[1] == "quiet"
with (core.libtpu_first_load_quiet() if quiet else open(os.devnull)):
    os.write(2, b"kept: a line of our own\\n")
    topologies.get_topology_desc(platform="tpu", topology_name="v5p:2x2x1")
print(len(topologies.get_topology_desc(platform="tpu", topology_name="v6e:2x4").devices))
"""


@pytest.mark.parametrize("mode", ["quiet", "plain"])
def test_libtpu_first_load_drops_its_no_chips_noise_only(mode):
    # The plain load is the control: this libtpu does print the noise (if a release stops, this
    # case fails and the filter can go); the quiet one keeps every other line.
    env = {k: v for k, v in os.environ.items() if k != "ALLOW_MULTIPLE_LIBTPU_LOAD"}
    env.update(JAX_PLATFORMS="cpu", ALLOW_MULTIPLE_LIBTPU_LOAD="1", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", _DESCRIBE, mode], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["8"]
    assert "kept: a line of our own" in done.stderr
    noisy = [n for n in _runtime.LIBTPU_NO_CHIPS_NOISE if n in done.stderr]
    if mode == "quiet":
        assert noisy == [] and "E0000" not in done.stderr, done.stderr
    else:
        assert "unexpected worker hostname" in done.stderr and len(noisy) >= 3, done.stderr
