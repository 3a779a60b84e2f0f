"""``cookbook launch``: several local JAX processes of one cookbook command, as a multi-host slice runs it.

Each process gets its own fake CPU devices (``--devices-per-process``) and joins the job
through JAX's multi-controller runtime with a coordinator on 127.0.0.1 (the
``COOKBOOK_COORDINATOR`` / ``COOKBOOK_NUM_PROCESSES`` / ``COOKBOOK_PROCESS_ID`` variables
that ``cookbook train`` reads), which listens on loopback only: nothing off this host can
reach the job. Output is streamed with a ``[pN]`` prefix. If any process
dies, the others are stopped (a collective would otherwise wait for it forever) and the
launcher exits non-zero naming the process and its last lines; the whole job has a
wall-clock limit. On a real pod none of this is needed: every host runs the command and JAX
finds the coordinator itself (``cookbook train --print-pod-command``); there process 0's
coordinator port must be reachable from every host, and where it listens is the user's choice
(``$JAX_COORDINATOR_BIND_ADDRESS``; see ``cookbook.mesh.initialize_distributed``).

Written here: process management only (start, stream, stop); JAX does the distribution.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

LAST_LINES = 15


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def process_env(
    base: dict[str, str], *, coordinator: str, processes: int, process_id: int, devices_per_process: int
) -> dict[str, str]:
    """The environment of process ``process_id``: the job's coordinates and its own devices."""
    env = dict(base)
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", "")).strip()
    env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices_per_process}".strip()
    env["JAX_PLATFORMS"] = "cpu"
    env.update(
        COOKBOOK_COORDINATOR=coordinator, COOKBOOK_NUM_PROCESSES=str(processes), COOKBOOK_PROCESS_ID=str(process_id)
    )
    return env


def _stop(procs: list[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM every live process group, then SIGKILL what is left after ``grace_s``."""
    for p in procs:
        if p.poll() is None:
            with _quiet():
                os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with _quiet():
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        return kind is not None and issubclass(kind, ProcessLookupError | PermissionError)


def launch_local(
    command: Sequence[str],
    *,
    processes: int = 2,
    devices_per_process: int = 4,
    timeout_s: float = 1800.0,
    grace_s: float = 10.0,
    out=None,
) -> int:
    """Run ``cookbook <command>`` in ``processes`` local JAX processes; their exit status.

    Returns 0 when every process exits 0; otherwise the first failing process's code (or 1
    on the wall-clock limit), after stopping the rest and printing which one failed and its
    last lines.
    """
    if processes < 1 or devices_per_process < 1:
        raise ValueError(f"--processes {processes} and --devices-per-process {devices_per_process} must be >= 1")
    if not command:
        raise ValueError("nothing to launch: give a cookbook command after --, e.g. -- train --preset tiny ...")
    out = out or sys.stdout
    coordinator = f"127.0.0.1:{_free_port()}"
    base = dict(os.environ)
    base.setdefault("COOKBOOK_DISTRIBUTED_TIMEOUT", str(int(min(timeout_s, 300))))
    tails = [collections.deque(maxlen=LAST_LINES) for _ in range(processes)]
    lock = threading.Lock()
    procs = []
    for i in range(processes):
        env = process_env(
            base, coordinator=coordinator, processes=processes, process_id=i, devices_per_process=devices_per_process
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "cookbook", *command],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
        with lock:
            print(f"[launch] process {i} of {processes}: pid {procs[-1].pid}", file=out, flush=True)

    def pump(i: int, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            tails[i].append(line.rstrip("\n"))
            with lock:
                print(f"[p{i}] {line}", end="", file=out, flush=True)

    readers = [threading.Thread(target=pump, args=(i, p), daemon=True) for i, p in enumerate(procs)]
    for t in readers:
        t.start()
    deadline = time.monotonic() + timeout_s
    failed, code, timed_out = None, 0, False
    try:
        while True:
            codes = [p.poll() for p in procs]
            bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                failed, code = bad[0]
                break
            if all(c == 0 for c in codes):
                break
            if time.monotonic() > deadline:
                failed, code, timed_out = next(i for i, c in enumerate(codes) if c is None), 1, True
                break
            time.sleep(0.2)
    finally:
        _stop(procs, grace_s)
        for t in readers:
            t.join(timeout=5)
    if failed is None:
        return 0
    why = f"was still running after the {timeout_s:.0f} s limit" if timed_out else f"exited with code {code}"
    last = "\n".join(f"    {ln}" for ln in tails[failed]) or "    (no output)"
    print(f"[launch] process {failed} {why}; stopped the others. Its last lines:\n{last}", file=out, flush=True)
    return code if code > 0 else 1  # killed by a signal: negative returncode


def register_cli(sub) -> None:
    p = sub.add_parser(
        "launch",
        help="run a cookbook command in several local JAX processes (a multi-host slice on one machine)",
        description="Start N local processes of `cookbook COMMAND ...` with fake CPU devices and a coordinator on "
        "127.0.0.1 (listening on loopback only), stream their output, and stop them all if one fails. "
        "Several hosts: run the command on each with --coordinator HOST:PORT (process 0's address, "
        "reachable from every host) and set JAX_COORDINATOR_BIND_ADDRESS on process 0 to the "
        "interface they reach; otherwise it listens on every interface. Example: cookbook launch "
        "--processes 2 --devices-per-process 4 -- train --preset tiny --mesh 4x2 --out runs/two-hosts",
    )
    p.add_argument("--processes", type=int, default=2, help="JAX processes (hosts) to start")
    p.add_argument("--devices-per-process", type=int, default=4, help="fake CPU devices per process")
    p.add_argument("--timeout", type=float, default=1800.0, help="wall-clock limit for the whole job, seconds")
    p.add_argument("cookbook_command", nargs="+", metavar="-- COMMAND", help="the cookbook command to run")
    p.set_defaults(func=_cli)


def _cli(args) -> int:
    command = [a for a in args.cookbook_command if a != "--"]
    try:
        return launch_local(
            command, processes=args.processes, devices_per_process=args.devices_per_process, timeout_s=args.timeout
        )
    except ValueError as e:
        print(f"cookbook launch: {e}", file=sys.stderr)
        return 2
