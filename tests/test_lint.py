"""The package, tests, benchmarks and notebooks pass ruff, and notebooks are committed clean."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_ruff_is_clean():
    ruff = Path(sys.executable).with_name("ruff")
    out = subprocess.run(
        [str(ruff), "check", "cookbook", "tests", "benchmarks", "notebooks", "scripts"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format_is_applied():
    """One formatter and one line length (pyproject.toml) for the whole tree, notebooks included."""
    ruff = Path(sys.executable).with_name("ruff")
    out = subprocess.run(
        [str(ruff), "format", "--check", "cookbook", "tests", "benchmarks", "notebooks", "scripts"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_notebooks_follow_the_skeleton():
    """Valid nbformat with an id on every cell, one `parameters` cell, no committed outputs, the
    common sections."""
    import nbformat

    notebooks = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert len(notebooks) == 11
    for path in notebooks:
        nb = json.loads(path.read_text())
        cells = nb["cells"]
        ids = [c.get("id") for c in cells]
        assert None not in ids and len(set(ids)) == len(ids), f"{path.name}: cells without a unique id"
        nbformat.validate(nbformat.reads(path.read_text(), as_version=4))
        tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
        assert len(tagged) == 1, f"{path.name}: {len(tagged)} parameters cells"
        assert all(not c.get("outputs") for c in cells if c["cell_type"] == "code"), path.name
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        assert text.lstrip().startswith("# "), path.name
        for heading in ("## Setup", "## Parameters", "## Next"):
            assert heading in text, f"{path.name} lacks {heading}"
        params = "".join(tagged[0]["source"]).splitlines()
        for line in params:
            if line.strip() and not line.lstrip().startswith("#"):
                name = line.split("=", 1)[0].strip()
                assert name.isupper(), f"{path.name}: parameter {name!r} is not ALL_CAPS"
                assert "#" in line, f"{path.name}: parameter {name!r} has no comment"
