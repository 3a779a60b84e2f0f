"""The environment files agree, and every pin says why."""

import re
from pathlib import Path

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
