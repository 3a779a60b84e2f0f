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


def test_a_new_checkouts_venv_is_a_linked_copy_of_the_machines_build(tmp_path):
    """`make setup` on a fresh clone: .venv is a hard-linked copy of the build kept per machine
    (made by this session's own `make setup`), with its own paths, this checkout installed
    editable, and the build left as it was."""
    import time

    venv = tmp_path / "v"
    env = {**os.environ, "COOKBOOK_VENV": str(venv)}
    t0 = time.perf_counter()
    done = subprocess.run(["bash", str(SCRIPT)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - t0
    assert done.returncode == 0, done.stdout + done.stderr
    built = Path(re.search(r"a copy of (\S+)", done.stdout).group(1))
    assert built.name.startswith("main-") and (built / ".cookbook-stamp").is_file()
    assert "building" not in done.stdout and seconds < 120, (seconds, done.stdout)  # no pip build: a copy
    # Shared files, not copies; the scripts name the new directory, the build's still name the build.
    jax_init = "lib/python3.11/site-packages/jax/__init__.py"
    assert (venv / jax_init).stat().st_ino == (built / jax_init).stat().st_ino
    assert (venv / "bin" / "pytest").read_text().splitlines()[0] == f"#!{venv}/bin/python"
    assert (built / "bin" / "pytest").read_text().splitlines()[0] == f"#!{built}/bin/python"
    found = subprocess.run([str(venv / "bin" / "python"), "-c", "import cookbook, sys; print(cookbook.__file__, sys.prefix)"],
                           capture_output=True, text=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                           cwd=tmp_path, timeout=120)
    assert found.stdout.split() == [str(REPO / "cookbook" / "__init__.py"), str(venv)], found.stderr
    assert not list((built / "lib/python3.11/site-packages").glob("__editable__*"))  # the build holds no checkout
    # Idempotent: a second call finds its stamp and returns at once.
    again = subprocess.run(["bash", str(SCRIPT)], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout == ""
