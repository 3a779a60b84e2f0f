"""Multi-host start-up on JAX's own multi-controller runtime, and a check that a global mesh works.

:func:`initialize_distributed` wraps ``jax.distributed.initialize`` (a TPU VM pod finds its
coordinator itself; elsewhere give it, or the ``COOKBOOK_*`` variables);
:func:`run_local_multiprocess` runs the same check in several local processes with fake CPU
devices, as a multi-host slice would.

Exposure: process 0's coordinator is a gRPC service that every process must reach. A coordinator
on a loopback address (``127.0.0.1:PORT``, what ``cookbook launch`` and
:func:`run_local_multiprocess` use) listens on loopback only; for several hosts, JAX listens on
every interface at the coordinator's port unless you choose the bind address
(``coordinator_bind_address`` or ``$JAX_COORDINATOR_BIND_ADDRESS``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import sys
from typing import Any

from cookbook import core
from cookbook.mesh._mesh import make_mesh


@dataclasses.dataclass(frozen=True, kw_only=True)
class DistributedInfo:
    initialized: bool  # jax.distributed.initialize was called (by this or an earlier call)
    mode: str  # "single-host" | "explicit" | "tpu-pod"
    process_count: int
    process_index: int


def _tpu_pod_env() -> bool:
    """Environment variables that GKE / multislice set on multi-host TPU jobs."""
    hosts = os.environ.get("TPU_WORKER_HOSTNAMES", "")
    return len([h for h in hosts.split(",") if h.strip()]) > 1 or bool(os.environ.get("MEGASCALE_COORDINATOR_ADDRESS"))


def _on_tpu_host() -> bool:
    """TPU chips attached and JAX not pinned to CPU."""
    return core.on_tpu_host() and os.environ.get("JAX_PLATFORMS", "") != "cpu"


_LISTENS = (
    "process 0 listens where its coordinator_bind_address or $JAX_COORDINATOR_BIND_ADDRESS says; "
    "a 127.0.0.1 coordinator, on its own host only"
)


def _is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _bind_address(coordinator: str, bind: str | None = None) -> str | None:
    """Where process 0's coordinator listens: ``bind`` if given; the coordinator's own address
    when that is a loopback one (every process is on this host, so nothing else need reach it);
    otherwise None, which leaves it to JAX: ``$JAX_COORDINATOR_BIND_ADDRESS``, else every
    interface at the coordinator's port."""
    if bind:
        return bind
    host, _, port = coordinator.rpartition(":")
    return coordinator if host and port.isdigit() and _is_loopback(host) else None


def initialize_distributed(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    local_device_ids: list[int] | None = None,
    timeout_s: int | None = None,
    coordinator_bind_address: str | None = None,
) -> DistributedInfo:
    """Join a multi-host JAX job; a no-op on one host. Call before anything touches devices.

    * ``num_processes > 1``: explicit, e.g. ``initialize_distributed("10.0.0.2:8476", 4, i)``
      (also from ``COOKBOOK_COORDINATOR``, ``COOKBOOK_NUM_PROCESSES``, ``COOKBOOK_PROCESS_ID``).
    * On a TPU host (or with GKE's ``TPU_WORKER_HOSTNAMES`` listing several hosts):
      ``jax.distributed.initialize()`` with no arguments; JAX discovers the coordinator and
      process ids from the environment or the Cloud TPU metadata server (a single-host
      slice joins as 1 process of 1).
    * Otherwise (CPU, GPU without arguments) nothing happens.

    Every host runs the same program; afterwards ``jax.devices()`` lists all chips of the
    slice and a mesh built from them is global. ``timeout_s`` (default
    ``$COOKBOOK_DISTRIBUTED_TIMEOUT`` or 300) bounds the wait for the other processes; a
    coordinator that cannot be reached in that time is an error naming it.

    What listens: process 0 runs the coordinator, and every process must reach it at
    ``coordinator`` (TCP, that port). A loopback coordinator (``127.0.0.1:PORT``: all processes
    on this host) listens on loopback only. For several hosts you choose the bind address:
    ``coordinator_bind_address="10.0.0.2:8476"`` (or ``$JAX_COORDINATOR_BIND_ADDRESS``), the
    interface the other hosts reach; without one, JAX listens on every interface at that port
    (a line on stderr says so), so let a firewall admit only the job's hosts to it.
    """
    import jax

    coordinator = coordinator or os.environ.get("COOKBOOK_COORDINATOR")
    if num_processes is None and os.environ.get("COOKBOOK_NUM_PROCESSES"):
        num_processes = int(os.environ["COOKBOOK_NUM_PROCESSES"])
    if process_id is None and os.environ.get("COOKBOOK_PROCESS_ID"):
        process_id = int(os.environ["COOKBOOK_PROCESS_ID"])

    if jax.distributed.is_initialized():
        return DistributedInfo(
            initialized=True,
            mode="already",
            process_count=jax.process_count(),
            process_index=jax.process_index(),
        )
    if num_processes is not None and num_processes > 1:
        if coordinator is None or process_id is None:
            raise ValueError(
                f"num_processes={num_processes} needs coordinator='HOST:PORT' (process 0's address) "
                f"and this process's process_id in [0, {num_processes}); got coordinator="
                f"{coordinator!r}, process_id={process_id!r}"
            )
        if not 0 <= process_id < num_processes:
            raise ValueError(f"process_id={process_id} is outside [0, {num_processes})")
        timeout_s = int(timeout_s or os.environ.get("COOKBOOK_DISTRIBUTED_TIMEOUT", 300))
        if process_id != 0:
            # JAX's client aborts the whole process (no Python exception) when it cannot reach
            # the coordinator: check first, so the error can say what to fix.
            _wait_for_coordinator(coordinator, timeout_s, process_id, num_processes)
        bind = _bind_address(coordinator, coordinator_bind_address)
        if process_id == 0 and bind is None and not os.environ.get("JAX_COORDINATOR_BIND_ADDRESS"):
            print(
                f"cookbook: the coordinator listens on every interface at port {coordinator.rpartition(':')[2]} "
                "(JAX's default): pass coordinator_bind_address='ADDR:PORT' or set JAX_COORDINATOR_BIND_ADDRESS "
                "to the interface the other hosts reach, and let only them reach that port",
                file=sys.stderr,
            )
        try:
            jax.distributed.initialize(
                coordinator_address=coordinator,
                num_processes=num_processes,
                process_id=process_id,
                local_device_ids=local_device_ids,
                initialization_timeout=timeout_s,
                coordinator_bind_address=bind,
            )
        except Exception as e:  # jax raises XlaRuntimeError / RuntimeError with a long log
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            raise RuntimeError(
                f"process {process_id} of {num_processes} could not join the job at {coordinator} within "
                f"{timeout_s} s ({reason}). Check that process 0 runs, that HOST:PORT is its address and "
                f"reachable from here ({_LISTENS}), and that every process was started with the same "
                "--num-processes."
            ) from None
        mode = "explicit"
    elif _tpu_pod_env() or _on_tpu_host():
        # JAX finds the pod's coordinator and this host's id itself (GKE environment
        # variables, or the Cloud TPU VM metadata server); a single-host VM joins as 1 of 1.
        try:
            jax.distributed.initialize(coordinator_bind_address=coordinator_bind_address)
        except ValueError:
            if _tpu_pod_env():
                raise
            # no cluster detected (e.g. a notebook runtime without TPU metadata): one host
            return DistributedInfo(initialized=False, mode="single-host", process_count=1, process_index=0)
        mode = "tpu-pod"
    else:
        return DistributedInfo(initialized=False, mode="single-host", process_count=1, process_index=0)
    return DistributedInfo(
        initialized=True,
        mode=mode,
        process_count=jax.process_count(),
        process_index=jax.process_index(),
    )


def _wait_for_coordinator(address: str, timeout_s: float, process_id: int, num_processes: int) -> None:
    """Wait until something accepts TCP connections at ``address`` (process 0's coordinator)."""
    import socket
    import time

    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"coordinator {address!r}: write HOST:PORT, e.g. 10.0.0.2:8476")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=min(5.0, timeout_s)):
                return
        except OSError as e:
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"process {process_id} of {num_processes} could not join the job at {address} within "
                    f"{timeout_s:g} s ({e.strerror or e}). Check that process 0 runs, that HOST:PORT is its "
                    f"address and reachable from here ({_LISTENS}), and that every process was started with the "
                    "same --num-processes."
                ) from None
            time.sleep(0.5)


def check_same_everywhere(payload: str, what: str = "config") -> None:
    """Raise on every process unless all processes hold the same ``payload`` (e.g. a config).

    A multi-process job where hosts run different settings (another flag, another data
    file) fails in confusing ways deep inside a collective; this compares a hash first.
    """
    import hashlib

    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    if jax.process_count() == 1:
        return
    digest = np.frombuffer(hashlib.sha256(payload.encode()).digest()[:8], dtype=np.int64).copy()
    everyone = np.asarray(multihost_utils.process_allgather(digest)).reshape(jax.process_count())
    differ = [i for i, d in enumerate(everyone) if d != everyone[0]]
    if differ:
        raise ValueError(
            f"the processes disagree on the {what}: processes {differ} differ from process 0. "
            "Start every process with the same command and data (cookbook launch does)."
        )


def sharded_checksum(mesh, size: int = 1024) -> dict[str, Any]:
    """A jitted computation over a global array sharded on ``mesh``, from each process's part.

    Each process contributes the rows of a known matrix that its devices hold; the result
    (a sum of squares and a matrix product reduced over fsdp) must be the same number on
    every process and equal to the closed form. Used to check a multi-host mesh.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    rows = int(mesh.shape["fsdp"]) * 8
    cols = int(mesh.shape["tp"]) * 4
    full = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) / size
    sharding = NamedSharding(mesh, P("fsdp", "tp"))
    x = jax.make_array_from_callback(full.shape, sharding, lambda idx: full[idx])

    @jax.jit
    def f(a):
        gram = a.T @ a  # contracts over the fsdp-sharded rows: a cross-process all-reduce
        return jnp.sum(a * a), jnp.trace(gram)

    total, trace = f(x)
    return {
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "global_devices": len(mesh.devices.flat),
        "local_devices": len(mesh.local_devices),
        "sum_sq": float(total),
        "trace": float(trace),
        "expected": float(np.sum(full.astype(np.float64) ** 2)),
        # Any summation order on any mesh is within this of the exact value (numerics).
        "bound": core.summation_bound(full.size, float(np.sum(full.astype(np.float64) ** 2))),
    }


def _worker(argv: list[str]) -> int:
    """``python -m cookbook.mesh._distributed COORD NUM_PROCESSES PROCESS_ID FSDP TP``: one process of a check."""
    coordinator, num, pid, fsdp, tp = argv
    info = initialize_distributed(coordinator, int(num), int(pid))
    m = make_mesh(int(fsdp), int(tp))
    out = sharded_checksum(m)
    out["mode"] = info.mode
    print("RESULT " + json.dumps(out), flush=True)
    import jax

    jax.distributed.shutdown()
    return 0


def run_local_multiprocess(
    num_processes: int = 2,
    devices_per_process: int = 4,
    fsdp: int | None = None,
    tp: int = 2,
    timeout_s: float = 120.0,
) -> list[dict[str, Any]]:
    """Simulate a multi-host slice on this machine: N CPU processes on 127.0.0.1.

    Each process gets ``devices_per_process`` fake CPU devices, joins through
    :func:`initialize_distributed`, builds one global (fsdp, tp) mesh and runs
    :func:`sharded_checksum`. Returns each process's result (they must agree).
    """
    import socket
    import subprocess

    total = num_processes * devices_per_process
    fsdp = fsdp or total // tp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices_per_process}"
    env["JAX_PLATFORMS"] = "cpu"
    for k in (
        "COOKBOOK_COORDINATOR",
        "COOKBOOK_NUM_PROCESSES",
        "COOKBOOK_PROCESS_ID",
        "TPU_WORKER_HOSTNAMES",
    ):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "cookbook.mesh._distributed", f"127.0.0.1:{port}", str(num_processes)]
    procs = [
        subprocess.Popen(
            [*cmd, str(i), str(fsdp), str(tp)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(num_processes)
    ]
    results, logs = [], []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=timeout_s)
            logs.append(out)
            line = next((ln for ln in out.splitlines() if ln.startswith("RESULT ")), None)
            if proc.returncode != 0 or line is None:
                raise RuntimeError(
                    f"process {len(results)} of the local multi-host check failed (exit {proc.returncode}):\n"
                    + out[-3000:]
                )
            results.append(json.loads(line[len("RESULT ") :]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1:]))
