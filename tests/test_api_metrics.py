"""scripts/api_metrics.py: the notebook and API measures of issue 35, and its rules for the stage
packages' exports: no exported name means two things, and every export is used outside its
package."""

import ast
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import api_metrics  # noqa: E402


@pytest.fixture(scope="module")
def repo_metrics() -> dict:
    """The repository's own measures (source only, about a second)."""
    return api_metrics.api_metrics()


def _package(root: Path, name: str, init: str, modules: dict[str, str]) -> None:
    pkg = root / "cookbook" / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(init)
    for mod, text in modules.items():
        (pkg / f"{mod}.py").write_text(text)


def _tree(tmp_path: Path) -> Path:
    """A two-package cookbook: ``a.table`` and ``b.table`` are different functions, ``b.helper``
    is ``a.helper`` re-exported, ``a.inner`` is used by package ``b`` only, ``a.tested`` by tests
    only, ``a.benched`` by a benchmark and a test, ``a.scripted`` by a script. ``a.Failure`` (a
    ``ValueError``) and ``a.Refused`` (a ``Failure``, defined in another module) are exceptions
    that ``a`` raises, used by tests only; ``a.Unraised`` is an exception nothing raises."""
    _package(
        tmp_path,
        "a",
        "from cookbook.a._e import Refused, Unraised  # noqa: F401\n"
        "from cookbook.a._m import Failure, benched, helper, inner, scripted, table, tested  # noqa: F401\n",
        {
            "_m": "class Failure(ValueError): ...\n\ndef benched(): ...\ndef helper(): ...\ndef inner(): ...\n"
            "def scripted(): ...\ndef table(): ...\ndef tested():\n    raise Failure('no')\n",
            "_e": "from cookbook.a import _m\n\nclass Refused(_m.Failure): ...\nclass Unraised(Exception): ...\n\n"
            "def refuse():\n    err = Refused('kept to raise later')\n    raise err\n",
        },
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
    (tmp_path / "tests" / "test_a.py").write_text(
        "from cookbook.a import Failure, Refused, Unraised, benched, tested\n"
    )
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "a_bench.py").write_text("from cookbook import a\n\na.benched()\n")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "a_tool.py").write_text("import cookbook.a as pkg\n\npkg.scripted()\n")
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
        ("a", "benched"): "benchmarks/scripts",  # a benchmark is a user's program: it stays exported
        ("a", "scripted"): "benchmarks/scripts",
        # An exception the package raises is API a user catches, though only tests import it; one
        # nothing raises, like a function only tests call, is not.
        ("a", "Failure"): "raised by the API",
        ("a", "Refused"): "raised by the API",  # its base is the cookbook's Failure
        ("a", "Unraised"): "tests only",
        ("b", "helper"): "nothing",
        ("b", "table"): "notebook",
    }
    assert m["collisions"] == {"table": ["a", "b"]}  # helper is one function under two names
    assert m["export_totals"] == {
        "notebook": 3,
        "package": 1,
        "raised by the API": 2,
        "tests only": 2,
        "benchmarks/scripts": 2,
        "nothing": 1,
        "total": 11,
    }
    # The summary's line keeps its old total of the three and splits it; the exceptions the API
    # raises are counted apart.
    line = api_metrics.summary(m)
    assert "exception classes raised by the API (else used by tests or nothing) 2," in line
    assert "by tests/benchmarks/scripts only 4 (benchmarks/scripts 2, tests only 2)," in line
    assert "exported names: 11 (" in line


def test_the_command_line_the_docs_and_code_in_strings_are_users(tmp_path):
    """``register_<command>_cli`` is reached by name from ``harness._cli.COMMANDS``; the docs
    naming ``cookbook.<package>.<name>`` present it as API; a script in a string (run with
    ``python -c``) uses what it names; so does another package's message to the user, but not
    a docstring. What none of these nor an import uses is ``nothing``."""
    _package(
        tmp_path,
        "a",
        "from cookbook.a._m import documented, in_message, in_string, register_go_cli, unused  # noqa: F401\n",
        {
            "_m": "def documented(): ...\ndef in_message(): ...\ndef in_string(): ...\n"
            "def register_go_cli(sub): ...\ndef unused(): ...\n"
        },
    )
    harness = tmp_path / "cookbook" / "harness"
    harness.mkdir()
    (harness / "_cli.py").write_text(
        "COMMANDS: dict[str, tuple[str, str]] = {\n    'go': ('cookbook.a', 'do it'),\n}\n\n\n"
        'def go():\n    """Not cookbook.a.unused: a docstring is no use."""\n'
        "    raise SystemExit('run cookbook.a.in_message first')\n"
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "usage.md").write_text("Call `cookbook.a.documented` (not `a.missing`).\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text(
        '"""Mentions cookbook.a.unused in prose, which is no use."""\n'
        'CODE = """\nfrom cookbook import a\na.in_string()\n"""\n'
    )
    used = {r["name"]: r["used_by"] for r in api_metrics.api_metrics(tmp_path)["exports"]}
    assert used == {
        "documented": "docs",
        "in_message": "package",
        "in_string": "tests only",
        "register_go_cli": "package",
        "unused": "nothing",
    }


def test_no_exported_name_means_two_things(repo_metrics):
    """One name, one meaning across the stage packages (issue 35: make_mesh, load_tokenizer,
    abstract_lora_model, answer_budget and format_table each meant two functions)."""
    assert repo_metrics["collisions"] == {}


def test_every_export_is_used_outside_its_package(repo_metrics):
    """A package's ``__init__`` exports what a notebook, another package, the command line, the
    docs, or at least a test calls (issue 35); what only its own modules use stays private."""
    unused = sorted(
        f"cookbook.{r['package']}.{r['name']}" for r in repo_metrics["exports"] if r["used_by"] == "nothing"
    )
    assert not unused, (
        f"{len(unused)} exported name(s) that nothing outside their package uses: {', '.join(unused)}. "
        "Stop exporting each from its package's __init__ (and __all__), importing it inside the package "
        "from its private module, or use it from outside (a notebook, another package, the docs, a test)."
    )


# The packages whose ``__init__`` exports no helper that only tests use (issue 35: such a helper
# is reached in the tests through its private module, ``from cookbook.data import _pipeline``).
# All fourteen are; a new package joins when its API is curated.
CURATED = (
    "core",
    "cost",
    "data",
    "evaluate",
    "fit",
    "gpu",
    "harness",
    "lora",
    "merge",
    "mesh",
    "models",
    "rl",
    "serve",
    "train",
)


def test_curated_packages_export_nothing_only_tests_use(repo_metrics):
    """What a curated package exports a notebook, another package, the command line, the docs, a
    benchmark or a script uses; a name only ``tests/`` uses is not part of its API."""
    assert set(CURATED) <= set(api_metrics.packages())
    tests_only = sorted(
        f"cookbook.{r['package']}.{r['name']}"
        for r in repo_metrics["exports"]
        if r["package"] in CURATED and r["used_by"] == "tests only"
    )
    assert not tests_only, (
        f"{len(tests_only)} exported name(s) that only tests use: {', '.join(tests_only)}. Stop exporting "
        "each (drop it from the __init__ and its __all__) and reach it in the tests through its private "
        "module (from cookbook.<package> import _module; _module.name)."
    )


# Exceptions the cookbook raises that a user never meets, each caught inside (why), so not exported.
CAUGHT_INSIDE = {
    "cookbook.data._formats.FormatError": "to_conversation re-raises it as the exported data.RowError",
    "cookbook.harness._demo.NotebookFailed": "cookbook demo catches it and exits 1; run_demo is not exported",
    "cookbook.harness._report.ReportError": "cookbook demo catches it and exits 1; write_report is not exported",
}


def test_the_exceptions_the_cookbook_raises_are_exported(repo_metrics):
    """A user catches what a public function raises, ``except cookbook.mesh.MeshError``: each
    exception class a stage package defines and raises is in its ``__init__`` (issue 35's curation
    once made seven private), but for the few caught inside (:data:`CAUGHT_INSIDE`)."""
    exported = {(r["package"], r["name"]) for r in repo_metrics["exports"]}
    missing = []
    for module, name in sorted(api_metrics.raised_exceptions()):
        parts = module.split(".")
        if len(parts) != 3 or f"{module}.{name}" in CAUGHT_INSIDE:
            continue
        tree = ast.parse((REPO / "cookbook" / parts[1] / f"{parts[2]}.py").read_text())
        if name in {n.name for n in tree.body if isinstance(n, ast.ClassDef)} and (parts[1], name) not in exported:
            missing.append(f"{module}.{name}")
    assert not missing, f"raised but not exported by their package: {', '.join(missing)}"
    assert {f"{m}.{n}" for m, n in api_metrics.raised_exceptions()} >= set(CAUGHT_INSIDE)  # none stale


def _all_and_bound(init: Path) -> tuple[list[str] | None, set[str]]:
    """An ``__init__``'s ``__all__`` (None without one) and the public names it binds."""
    declared, bound = None, set()
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.ImportFrom | ast.Import):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == "__all__":
                    declared = list(ast.literal_eval(node.value))
                elif isinstance(target, ast.Name):
                    bound.add(target.id)
    return declared, {n for n in bound if not n.startswith("_")}


def test_an_all_lists_what_its_init_binds():
    """Where a package's ``__init__`` has ``__all__``, it names exactly the public names the
    ``__init__`` binds: none exported past it, none listed that is not there."""
    wrong = []
    for pkg in api_metrics.packages():
        declared, public = _all_and_bound(REPO / "cookbook" / pkg / "__init__.py")
        if declared is None:
            continue  # its exports are the public names it binds
        if len(declared) != len(set(declared)) or set(declared) != public:
            wrong.append(
                f"cookbook/{pkg}/__init__.py: bound but not in __all__: {sorted(public - set(declared))}; "
                f"in __all__ but not bound: {sorted(set(declared) - public)}; listed twice: "
                f"{sorted(n for n in set(declared) if declared.count(n) > 1)}"
            )
    assert not wrong, "\n".join(wrong)
