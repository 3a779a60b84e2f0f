"""Where this process runs and where the cookbook keeps its artefacts: one home for each.

Every entry point (CLI, notebooks, benchmarks, test helpers) asks these instead of
checking ``/dev/accel0`` or reading ``COOKBOOK_CACHE`` on its own.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

# The checkout this package runs from (notebooks/, benchmarks/results/ beside cookbook/).
REPO_ROOT = Path(__file__).resolve().parents[2]
# Committed measurements and compiled plans that the package reads (the planner's
# recommended layouts, merge and serving benchmarks).
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"

# The cache root when $COOKBOOK_CACHE is not set: base checkpoints, training runs, merged
# models, compiled plans, all under one directory.
DEFAULT_CACHE = Path.home() / ".cache" / "gemma4-cookbook"


def cache_root() -> Path:
    """Where built artefacts are cached: ``$COOKBOOK_CACHE`` or ``~/.cache/gemma4-cookbook``."""
    return Path(os.environ.get("COOKBOOK_CACHE", DEFAULT_CACHE))


def on_tpu_host() -> bool:
    """True on a TPU VM: TPU chips are attached (``/dev/accel*`` or VFIO devices).

    A host with ``libtpu`` installed but no chips (this project's CI, for deviceless
    compilation) is not a TPU host.
    """
    return os.path.exists("/dev/accel0") or os.path.exists("/dev/vfio/0")


def compile_cache_dir() -> Path | None:
    """JAX's persistent compilation cache: ``<cache root>/jax-compile`` unless
    ``$JAX_COMPILATION_CACHE_DIR`` names another; None when that is empty (the cache is off)."""
    chosen = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    if chosen is None:
        return cache_root() / "jax-compile"
    return Path(chosen) if chosen else None


# The compilation cache's cap; a tiny train step is ~0.6 MB, a 31B one on a TPU slice some
# hundreds of MB. Kept by prune_compile_cache at each process start, not by JAX: JAX's own
# eviction (JAX_COMPILATION_CACHE_MAX_SIZE) lists every entry and reads its access time under a
# file lock on each write, quadratic in the entries; with the short compiles below kept, the test
# suite writes ~5,000 of them.
COMPILE_CACHE_MAX_BYTES = 8 * 2**30
# Compiles kept however short they were (JAX's default keeps only those over 1 s). Applying LoRA
# runs the model once eagerly, and every op on sharded arrays is its own small compile: a
# 4-step tiny run compiled 324 of them (0.13 s each, 42 of its 47 CPU-seconds) in every new
# process, a notebook kernel or a `cookbook train`, none of them cached. Kept, the same run took
# 29.5 CPU-seconds instead of 47 (measured 2026-12-02, 2-core host; ~640 entries, +4 MB).
COMPILE_CACHE_MIN_SECONDS = 0.0
# glibc's malloc on transparent huge pages, for the processes this one starts on a CPU host.
# XLA's CPU runtime allocates each execution's buffers afresh; above glibc's mmap threshold
# (at most 32 MiB) each one is a new mapping whose 4 KiB pages fault in as the kernels first write
# them, and go back to the system when the step ends: a 200-step tiny training run took 14.6
# million page faults (31 of its 137 CPU-seconds in the kernel). With this tunable glibc asks for
# huge pages (madvise) on those mappings: 27x fewer faults, the same losses bit for bit, and 0.87x
# the CPU time of an 80-step run, start-up included (benchmarks/malloc_bench.py, 2026-12-05). glibc reads it once, when a process
# starts, so it reaches children only; the Makefile exports it for the top-level processes. A
# tunable glibc does not know is ignored without a word; tests/core/test_runtime.py asks ld.so.
CPU_GLIBC_TUNABLES = "glibc.malloc.hugetlb=1"
# Python's cyclic garbage collector, for JAX programs. CPython starts a young-generation collection
# every 700 net allocations of container objects (2,000 from Python 3.13). Tracing and lowering a
# model, Qwix's LoRA pass and Tunix's per-step Python allocate millions: the collector took ~6% of
# a 48-step tiny `cookbook train`'s perf samples, more in a test process's larger heap. At 10,000,
# pinned to one core (benchmarks/gc_bench.py, 2026-12-06, medians of 3 interleaved runs): that
# `cookbook train` 0.96x the CPU time, losses bit for bit; a pytest run of two in-process model
# test files 0.88x (50,000 saved no more). The older generations keep CPython's ratios (10, 10): a
# cycle still goes within a few young collections, and garbage waits for at most ~10,000 more
# allocations. ``COOKBOOK_GC_THRESHOLD`` sets the young threshold (CPython's default: 700, or 2,000
# from 3.13); a threshold the program set itself is kept.
GC_YOUNG_THRESHOLD = 10_000
_CPYTHON_GC_YOUNG = 700 if sys.version_info < (3, 13) else 2000


def tune_gc() -> tuple[int, int, int]:
    """Raise the young generation's collection threshold to :data:`GC_YOUNG_THRESHOLD` (or
    ``$COOKBOOK_GC_THRESHOLD``), unless the program has chosen one. Returns the thresholds now."""
    chosen = os.environ.get("COOKBOOK_GC_THRESHOLD", "").strip()
    young, *older = gc.get_threshold()
    if chosen:
        try:
            young = int(chosen)
        except ValueError:
            raise ValueError(
                f"COOKBOOK_GC_THRESHOLD={chosen!r} is not a whole number; set it to the young "
                f"generation's threshold (CPython's default here: {_CPYTHON_GC_YOUNG}) or unset it"
            ) from None
    elif young == _CPYTHON_GC_YOUNG:
        young = GC_YOUNG_THRESHOLD
    gc.set_threshold(young, *older)
    return gc.get_threshold()


_JAX_CACHE_SUFFIX = "-cache"  # jax._src.lru_cache's file names: <key>-cache (and <key>-atime)


def prune_oldest(
    directory: str | Path,
    pattern: str,
    max_bytes: int,
    *,
    down_to: float = 1.0,
    siblings: Callable[[Path], Iterable[Path]] = lambda path: (),
) -> int:
    """Remove the files matching ``pattern`` in ``directory``, oldest modified first, until what is
    left holds at most ``down_to * max_bytes`` (nothing when it holds no more than ``max_bytes``),
    each with its ``siblings``. Returns the bytes removed. One pass over the entries; a file another
    process is reading when it goes costs that reader a miss."""
    entries = []
    for path in Path(directory).glob(pattern):
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        entries.append((st.st_mtime, st.st_size, path))
    total = sum(size for _, size, _ in entries)
    if total <= max_bytes:
        return 0
    removed = 0
    for _, size, path in sorted(entries):
        if total - removed <= down_to * max_bytes:
            break
        for stale in (path, *siblings(path)):
            stale.unlink(missing_ok=True)
        removed += size
    return removed


def prune_compile_cache(directory: str | Path, max_bytes: int = COMPILE_CACHE_MAX_BYTES) -> int:
    """Remove the oldest-written entries of JAX's compilation cache in ``directory`` until what is
    left holds at most 80% of ``max_bytes`` (nothing when it holds no more than ``max_bytes``).
    Returns the bytes removed (JAX treats an entry removed while read as a miss)."""
    return prune_oldest(
        directory,
        f"*{_JAX_CACHE_SUFFIX}",
        max_bytes,
        down_to=0.8,
        siblings=lambda path: [path.with_name(path.name.removesuffix(_JAX_CACHE_SUFFIX) + "-atime")],
    )


def setup_runtime_env(*, cpu_devices: int | None = None) -> None:
    """Defaults every entry point needs before JAX or vLLM is imported.

    On a host without TPU chips, libtpu being installed (for deviceless compilation)
    must not make JAX or vLLM pick the TPU backend. And JAX's persistent compilation cache
    is on, under the cache root: a rerun of a notebook, `cookbook train` or a resume loads
    the compiled step instead of compiling it again (a 4-step tiny run here: 77 s against
    98 s; on a TPU a 31B step's compile takes minutes). Set ``JAX_COMPILATION_CACHE_DIR``
    to move it, or to an empty value to turn it off; a choice already made is kept. On a
    CPU host, the processes it starts (notebook kernels, training processes, vLLM servers) run
    glibc's malloc on huge pages (:data:`CPU_GLIBC_TUNABLES`) unless ``GLIBC_TUNABLES`` is set.
    Python's garbage collector runs less often (:func:`tune_gc`).

    ``cpu_devices``: on a CPU host (``JAX_PLATFORMS=cpu``, as set here where there are no TPU
    chips) split the host into that many fake devices, so that a mesh over them is real (XLA's
    ``--xla_force_host_platform_device_count``, read only before JAX starts its CPU backend: call
    this first). ``XLA_FLAGS`` set already (a test or a user chose the devices) is kept, and a
    TPU's devices are its chips. None leaves the device count to XLA (one CPU device).
    """
    if cpu_devices is not None and cpu_devices < 1:
        raise ValueError(f"setup_runtime_env(cpu_devices={cpu_devices}): ask for 1 or more devices, or None")
    tune_gc()
    if not on_tpu_host():
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        os.environ.setdefault("GLIBC_TUNABLES", CPU_GLIBC_TUNABLES)  # for the processes it starts
    if cpu_devices is not None and os.environ.get("JAX_PLATFORMS") == "cpu":
        os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={cpu_devices}")
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        os.environ["JAX_COMPILATION_CACHE_DIR"] = str(compile_cache_dir())
    if "JAX_COMPILATION_CACHE_MAX_SIZE" not in os.environ:  # else JAX evicts, as the user asked
        os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] = "-1"  # JAX's eviction off: pruned here instead
        if os.environ["JAX_COMPILATION_CACHE_DIR"]:
            prune_compile_cache(os.environ["JAX_COMPILATION_CACHE_DIR"])
    from cookbook.core import compat

    compat.install()  # the library patches, each as its library loads; tensorboardX without torch now
    min_seconds_chosen = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" in os.environ
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", str(COMPILE_CACHE_MIN_SECONDS))
    if "jax" in sys.modules:  # imported already (it reads the environment once): tell it directly
        import jax

        if jax.config.jax_compilation_cache_dir is None:
            jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
            jax.config.update("jax_compilation_cache_max_size", int(os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"]))
        if not min_seconds_chosen:
            jax.config.update("jax_persistent_cache_min_compile_time_secs", COMPILE_CACHE_MIN_SECONDS)


# What libtpu prints on stderr when it first loads on a host with no TPU chips (deviceless
# compiles): it asks for a metadata server that is not there, finds no worker hostnames and no
# accelerator type, and says so as an "E0000 ... INVALID_ARGUMENT" record, then describes the
# requested topology correctly anyway. Seen with libtpu 0.0.42.1 and 0.0.50.1; a line not listed
# here is written back as it came.
LIBTPU_NO_CHIPS_NOISE = (
    "WARNING: Logging before InitGoogle() is written to STDERR",
    "Failed to find host bounds for accelerator type: WARNING: could not determine TPU accelerator type",
    "unexpected worker hostname 'WARNING: could not determine TPU worker hostnames",
    "=== Source Location Trace: ===",
    "libtpu_init_utils.cc:",
)
_libtpu_loaded = False


@contextlib.contextmanager
def libtpu_first_load_quiet() -> Iterator[None]:
    """Drop libtpu's no-chips noise (:data:`LIBTPU_NO_CHIPS_NOISE`) while it first loads in this
    process; everything else it or anything else writes to stderr meanwhile is kept.

    libtpu writes from C++ to file descriptor 2, so ``sys.stderr`` cannot catch it: the descriptor
    is pointed at a temporary file for the block and the kept lines are written back after. On a
    TPU host, or once libtpu has loaded, the block runs as it is.
    """
    global _libtpu_loaded
    if _libtpu_loaded or on_tpu_host():
        yield
        return
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
            _libtpu_loaded = True
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            text = caught.read().decode(errors="replace")
            kept = [
                line
                for line in text.splitlines(keepends=True)
                if not any(noise in line for noise in LIBTPU_NO_CHIPS_NOISE)
            ]
            if kept:
                os.write(2, "".join(kept).encode())


@contextlib.contextmanager
def compile_cache_off() -> Iterator[None]:
    """JAX's persistent compilation cache off inside the block: where a compile's own time is
    what is measured, and for deviceless TPU compiles (the planner caches what it measured;
    the executables, hundreds of MB for 31B, would only fill the cache)."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    # JAX decides once per process, at its first compile, whether the cache is used, and keeps
    # that answer: the flag alone would not stop a process that compiled anything before.
    was = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", was)
        compilation_cache.reset_cache()


def commit_arrays(tree: Any, sharding: Any) -> Any:
    """``tree`` with every array not yet committed to a device put on ``sharding``: a NumPy
    array, or a JAX array made outside any sharding (``jax.random``, ``jnp.zeros``: optax's step
    counts, Qwix's fresh adapters). Committed arrays, tracers and other leaves are left as they are.

    A jitted function is compiled for its arguments' shardings, and an uncommitted argument counts
    as another sharding than the committed array the same function returns: a step fed its own
    outputs compiled twice, once for its first call and again for every later one (a tiny
    ``cookbook train`` step ~4.5 s each on this 2-core host). With its state committed from the
    start, one compile serves the whole run. Values are not changed.
    """
    import jax

    def put(x):
        if isinstance(x, np.ndarray) or (
            isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer) and not x.committed
        ):
            return jax.device_put(x, sharding)
        return x

    return jax.tree.map(put, tree)


def variable_spec(var) -> tuple:
    """The partition spec an ``nnx.Variable`` carries (its ``out_sharding`` metadata), one entry per axis."""
    meta = var.get_metadata()
    spec = tuple(meta.get("out_sharding") or meta.get("sharding_names") or meta.get("sharding") or ())
    return spec + (None,) * (len(var.get_value().shape) - len(spec))


def divisible_spec(spec: tuple, shape: tuple[int, ...], mesh: Any) -> tuple:
    """``spec`` with each mesh axis that does not divide its dimension dropped (that dimension
    replicated): JAX refuses an argument sharded unevenly.

    Qwix's quantization scales carry their weight's spec, over tiles instead of the tiled axis:
    12B's ``kv_einsum`` is (2, 8, 3840, 256), its nf4 scale at tile 128 is (2, 8, 30, 256), and
    30 tiles do not split over fsdp = 8. The scale is 1/64 of the codes; only it is replicated.
    """
    out = []
    for axis, dim in zip(spec, shape, strict=True):
        names = axis if isinstance(axis, tuple) else (axis,) if axis else ()
        out.append(axis if dim % math.prod(mesh.shape[n] for n in names) == 0 else None)
    return tuple(out)


def to_jsonable(value: Any) -> Any:
    """``value`` with numpy/JAX/torch scalars and arrays, paths and non-finite floats made JSON."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if hasattr(value, "dtype") and hasattr(value, "shape") and hasattr(value, "__array__"):
        # a JAX or torch array or scalar (torch: detached, on the host)
        arr = np.asarray(value.detach().cpu() if hasattr(value, "detach") else value)
        return to_jsonable(arr.item() if arr.shape == () else arr.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if hasattr(value, "to_dict") and callable(value.to_dict):
        return to_jsonable(value.to_dict())
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    raise TypeError(f"cannot store a {type(value).__name__} as JSON; convert it first")
