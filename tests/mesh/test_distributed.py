"""cookbook.mesh._distributed: where process 0's coordinator listens."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cookbook.mesh import _distributed, _launch

# Needs the JAX stack only: also runs in the TPU-host environment (scripts/run_tests.sh).
pytestmark = pytest.mark.jax_only


def _listening(port: int) -> set[str]:
    """The local addresses of TCP sockets listening on ``port``, as the kernel lists them."""
    found = set()
    for table in ("tcp", "tcp6"):
        path = Path("/proc/net") / table
        if not path.is_file():
            continue
        for line in path.read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hex_port = local.split(":")
            if state != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(addr)  # 32-bit words in host (little-endian) order
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            ip = ipaddress.ip_address(raw)
            found.add(str(getattr(ip, "ipv4_mapped", None) or ip))  # gRPC's ::ffff:127.0.0.1 is 127.0.0.1
    return found


def test_a_local_launchs_coordinator_listens_on_loopback_only():
    """Process 0 of a `cookbook launch` job (its environment, from mesh._launch.process_env), started alone so
    that it waits for process 1 with its coordinator up: the kernel's socket table shows it
    listening on 127.0.0.1 only (JAX's default would be every interface, ``::``)."""
    if not Path("/proc/net/tcp").is_file():
        pytest.skip("no /proc/net/tcp (not Linux): the listening sockets cannot be read")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = _launch.process_env(
        dict(os.environ), coordinator=f"127.0.0.1:{port}", processes=2, process_id=0, devices_per_process=1
    )
    env["COOKBOOK_DISTRIBUTED_TIMEOUT"] = "60"
    proc = subprocess.Popen(
        [sys.executable, "-c", "from cookbook import mesh; mesh.initialize_distributed()"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: set[str] = set()
    try:
        deadline = time.monotonic() + 60
        while not seen and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            seen = _listening(port)
        time.sleep(0.3)  # anything else it was going to bind by now
        seen |= _listening(port)
    finally:
        proc.kill()
        out = proc.communicate(timeout=30)[0]
    assert seen == {"127.0.0.1"}, (seen, out[-2000:])
    assert "every interface" not in out  # no warning: the loopback case is the safe one


def test_the_bind_address_is_loopback_or_the_users_choice():
    assert _distributed._bind_address("127.0.0.1:8476") == "127.0.0.1:8476"
    assert _distributed._bind_address("localhost:8476") == "localhost:8476"
    assert _distributed._bind_address("[::1]:8476") == "[::1]:8476"
    # Several hosts: JAX's default (or $JAX_COORDINATOR_BIND_ADDRESS), unless the user chooses.
    assert _distributed._bind_address("10.0.0.2:8476") is None
    assert _distributed._bind_address("10.0.0.2:8476", "10.0.0.2:8476") == "10.0.0.2:8476"
