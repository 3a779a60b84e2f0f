"""scripts/setup_env.sh: where the CPU torch build comes from, decided by pip itself.

``setup_env.sh --torch-source`` runs the script's own decision and installs nothing. Here it runs
with this machine's local wheel sources masked (pip's configuration files and PIP_* source
variables out of the way), i.e. as on a machine whose pip sees only the public index; then with
a folder of wheels standing in for a mirror. The answers are what the build would do.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "setup_env.sh"
TORCH_PIN = re.search(r"^torch==(\S+)", (REPO / "requirements.txt").read_text(), re.M).group(1)
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _public_index_only(**extra: str) -> dict[str, str]:
    """The environment of a machine whose pip knows only the public index."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "COOKBOOK_TORCH", "PIP_FIND", "UV_"))}
    env["PIP_CONFIG_FILE"] = os.devnull  # no /etc/pip.conf, /etc/xdg/pip, ~/.config/pip: PyPI only
    env["COOKBOOK_PIP_PROBE_TIMEOUT"] = "10"
    return {**env, **extra}


def _decide(env: dict[str, str]) -> str:
    done = subprocess.run(["bash", str(SCRIPT), "--torch-source"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_public_index_alone_gets_pytorchs_cpu_index():
    assert _decide(_public_index_only()) == f"extra-index-url {PYTORCH_CPU_INDEX}"


def test_a_mirror_replaces_pytorchs_index():
    mirror = "https://mirror.example.invalid/pytorch/whl/cpu"
    assert _decide(_public_index_only(COOKBOOK_TORCH_INDEX=mirror)) == f"extra-index-url {mirror}"


def test_a_wheel_pip_can_already_see_adds_no_index(tmp_path):
    """A folder holding the build (find-links, as a mirror or this machine's local wheels) is
    enough: nothing is added, so no unreachable index is ever waited on."""
    wheels = sorted(p for d in os.environ.get("PIP_FIND_LINKS", "/opt/wheels").split()
                    if Path(d).is_dir() for p in Path(d).glob(f"torch-{TORCH_PIN}-cp311-*.whl"))
    if not wheels:
        pytest.skip(f"no torch-{TORCH_PIN} wheel on this machine to stand in for a mirror")
    (tmp_path / wheels[0].name).symlink_to(wheels[0])
    assert _decide(_public_index_only(PIP_FIND_LINKS=str(tmp_path))) == "configured"
    # The same folder without the build: back to PyTorch's index.
    (tmp_path / wheels[0].name).unlink()
    assert _decide(_public_index_only(PIP_FIND_LINKS=str(tmp_path))) == f"extra-index-url {PYTORCH_CPU_INDEX}"
