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
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "setup_env.sh"
TORCH_PIN = re.search(r"^torch==(\S+)", (REPO / "requirements.txt").read_text(), re.M).group(1)
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _public_index_only(**extra: str) -> dict[str, str]:
    """The environment of a machine whose pip knows only the public index."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "COOKBOOK_TORCH", "PIP_FIND", "UV_"))}
    env["PIP_CONFIG_FILE"] = os.devnull  # no /etc/pip.conf, /etc/xdg/pip, ~/.config/pip: PyPI only
    env["COOKBOOK_PIP_PROBE_TIMEOUT"] = "10"
    return {**env, **extra}


def _decide(env: dict[str, str]) -> str:
    done = subprocess.run(["bash", str(SCRIPT), "--torch-source"], env=env, capture_output=True, text=True, timeout=120)
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
    wheels = sorted(
        p
        for d in os.environ.get("PIP_FIND_LINKS", "/opt/wheels").split()
        if Path(d).is_dir()
        for p in Path(d).glob(f"torch-{TORCH_PIN}-cp311-*.whl")
    )
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
    found = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import cookbook, sys; print(cookbook.__file__, sys.prefix)"],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        cwd=tmp_path,
        timeout=120,
    )
    assert found.stdout.split() == [str(REPO / "cookbook" / "__init__.py"), str(venv)], found.stderr
    assert not list((built / "lib/python3.11/site-packages").glob("__editable__*"))  # the build holds no checkout
    # Idempotent: a second call finds its stamp and returns at once.
    again = subprocess.run(["bash", str(SCRIPT)], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout == ""


# --- Under CI, an environment that could not be built fails the run; elsewhere it is said plainly.
# Each check runs the real script (or pytest) with a PATH holding everything this machine's PATH
# holds except the tool in question, with CI=true as CI sets it, and without CI.
_LEFT_OUT = ("chromium", "chromium-browser", "python3.12", "python3.13", "pyenv")


@pytest.fixture(scope="module")
def path_without_tools(tmp_path_factory) -> str:
    """A PATH of one folder linking every command on this PATH but Chromium, Python 3.12/3.13 and pyenv."""
    bin_dir = tmp_path_factory.mktemp("bin")
    for d in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(d):
            continue
        for entry in os.scandir(d):
            name = entry.name
            if name.startswith(_LEFT_OUT) or (bin_dir / name).exists() or not os.access(entry.path, os.X_OK):
                continue
            (bin_dir / name).symlink_to(entry.path)
    return str(bin_dir)


def _env_lacking_tools(path: str, tmp_path: Path, *, ci: bool, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYENV_VERSION")}
    env.update(PATH=path, HOME=str(tmp_path / "home"), **extra)  # no ~/.pyenv
    if ci:
        env["CI"] = "true"
    return env


def _run(argv: list[str], env: dict[str, str], timeout_s: float = 120) -> tuple[int, str]:
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("ci", [True, False], ids=["ci", "not-ci"])
def test_no_python_for_the_tpu_host_pass(path_without_tools, tmp_path, ci):
    link = tmp_path / "venv-tpuhost"
    code, out = _run(
        ["bash", str(SCRIPT), "--tpu-host"],
        _env_lacking_tools(path_without_tools, tmp_path, ci=ci, COOKBOOK_TPU_HOST_VENV=str(link)),
    )
    assert out.count("\n") == 1 and "Python 3.12 or 3.13" in out and "pyenv install 3.13" in out, out
    if ci:
        assert code == 1 and "CI (CI=true) must run" in out
    else:
        assert code == 0 and "TPU-host test pass NOT RUN" in out
    assert not link.exists()


@pytest.mark.parametrize("ci", [True, False], ids=["ci", "not-ci"])
def test_no_tpu_host_environment_for_the_test_runner(path_without_tools, tmp_path, ci):
    env = _env_lacking_tools(path_without_tools, tmp_path, ci=ci, COOKBOOK_TPU_HOST_VENV=str(tmp_path / "absent"))
    code, out = _run(["bash", str(REPO / "scripts" / "run_tests.sh"), "--tpu-host"], env)
    assert out.count("\n") == 1 and "scripts/setup_env.sh --tpu-host" in out, out
    assert (code, "must run the TPU-host pass" in out) == (1, True) if ci else (code, "NOT RUN" in out) == (0, True)


@pytest.mark.parametrize("ci", [True, False], ids=["ci", "not-ci"])
def test_no_chromium_for_the_browser_tests(path_without_tools, tmp_path, ci):
    env = _env_lacking_tools(path_without_tools, tmp_path, ci=ci, COOKBOOK_NO_APT="1")  # apt-get is not to be used
    code, out = _run(["bash", str(SCRIPT), "--system", "chromium"], env)
    assert out.count("\n") == 1 and "chromium not installed" in out, out
    assert (code, "apt-get install chromium" in out) == (1, True) if ci else (code, "NOT RUN" in out) == (0, True)
    # The browser tests themselves, on that PATH: every one fails under CI, and is skipped, saying
    # why, elsewhere. (A reused demo run: make demo is never started here, whatever happens.)
    env["COOKBOOK_TEST_DEMO_RUN"] = str(tmp_path / "no-demo")
    code, out = _run(
        [sys.executable, "-m", "pytest", "tests/harness/test_browser.py", "-p", "no:cacheprovider", "-q"],
        env,
        timeout_s=300,
    )
    assert "Chromium is not installed" in out and "setup_env.sh --system chromium" in out, out[-3000:]
    if ci:
        assert code == 1 and "2 errors" in out and "must run in CI" in out, out[-3000:]
    else:
        assert code == 0 and "2 skipped" in out and "browser tests NOT RUN" in out, out[-3000:]
