"""scripts/api_metrics.py: the notebook and API measures of issue 35, and the rule that no
exported name means two things."""

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import api_metrics  # noqa: E402


def _package(root: Path, name: str, init: str, modules: dict[str, str]) -> None:
    pkg = root / "cookbook" / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(init)
    for mod, text in modules.items():
        (pkg / f"{mod}.py").write_text(text)


def _tree(tmp_path: Path) -> Path:
    """A two-package cookbook: ``a.table`` and ``b.table`` are different functions, ``b.helper``
    is ``a.helper`` re-exported, ``a.inner`` is used by package ``b`` only, ``a.tested`` by tests
    only."""
    _package(
        tmp_path,
        "a",
        "from cookbook.a._m import helper, inner, table, tested  # noqa: F401\n",
        {"_m": "def helper(): ...\ndef inner(): ...\ndef table(): ...\ndef tested(): ...\n"},
    )
    _package(
        tmp_path,
        "b",
        "from cookbook.a import helper  # noqa: F401\nfrom cookbook.b._n import table  # noqa: F401\n",
        {"_n": "from cookbook import a\n\ndef table():\n    return a.inner()\n"},
    )
    cells = [
        "import os\n!pip install x",
        "from cookbook import a, b\nfrom cookbook.harness import record",
        "N = 3  # a parameter\nNAMES = ('x', 'y')",
        "t = a.table()\nb.table()\nt.sort()",  # a method of what a package call returned: a call
        "rows = [a.helper() for _ in range(N)]\nfor r in rows:\n    print(r)",
        "print(t)\nrecord('nb', t=t)",
        "t",
    ]
    nb = {"cells": [{"cell_type": "code", "source": c} for c in cells] + [{"cell_type": "markdown", "source": "x"}]}
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "00_quickstart.ipynb").write_text(json.dumps(nb))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("from cookbook.a import tested\n")
    return tmp_path


def test_counts_statements_uses_and_collisions_on_a_known_tree(tmp_path):
    m = api_metrics.api_metrics(_tree(tmp_path))
    nb = m["notebooks"]["00_quickstart"]
    assert nb["lines"] == {"setup": 4, "parameter": 2, "call": 3, "logic": 3, "display": 2, "record": 1}
    assert nb["logic_lines"] == 3 and nb["record_calls"] == 1 and nb["code_lines"] == 15
    assert nb["uses"] == ["a.helper", "a.table", "b.table"]
    used = {(r["package"], r["name"]): r["used_by"] for r in m["exports"]}
    assert used == {
        ("a", "helper"): "notebook",
        ("a", "table"): "notebook",
        ("a", "inner"): "package",
        ("a", "tested"): "tests only",
        ("b", "helper"): "nothing",
        ("b", "table"): "notebook",
    }
    assert m["collisions"] == {"table": ["a", "b"]}  # helper is one function under two names


def test_no_exported_name_means_two_things():
    """One name, one meaning across the stage packages (issue 35: make_mesh, load_tokenizer,
    abstract_lora_model, answer_budget and format_table each meant two functions)."""
    assert api_metrics.api_metrics()["collisions"] == {}
