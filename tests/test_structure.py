"""The package's shape: stage packages in notebook order, no circles, no reaching into privates.

Static checks over the source (``ast``), so they hold for code paths no test runs:
- a stage package imports only itself and earlier stages (:data:`STAGES`);
- no module imports another package's private (``_``-prefixed) module or name;
- no import circle between modules, lazy (function-level) imports included;
- no module over :data:`MAX_LINES` lines (one idea per module);
- every package's ``__init__`` re-exports only names its own modules define (or ``core``'s).
"""

from __future__ import annotations

import ast
import collections
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "cookbook"
# Stage packages in notebook order; a package may import itself and the ones before it.
STAGES = (
    "core",
    "models",
    "mesh",
    "lora",
    "fit",
    "data",
    "evaluate",
    "train",
    "gpu",
    "merge",
    "serve",
    "cost",
    "rl",
    "harness",
)
MAX_LINES = 460  # "about 450": a module past it holds two ideas


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        out[name] = path
    return out


def _imports(path: Path) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every cookbook import in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "cookbook":
            for alias in node.names:
                found.append((node.module, alias.name, node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "cookbook":
                    found.append((alias.name, None, node.lineno))
    return found


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else None


def _target(module: str, name: str | None, modules: dict[str, Path]) -> str:
    """The module an import reaches: ``from cookbook.fit import _step`` -> ``cookbook.fit._step``."""
    if name and f"{module}.{name}" in modules:
        return f"{module}.{name}"
    return module


def test_every_module_is_in_a_stage_package():
    loose = [m for m in _modules() if m.count(".") == 1 and m.split(".")[1] not in STAGES + ("__main__",)]
    assert not loose, f"modules outside the stage packages: {loose}"
    assert sorted(p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").is_file()) == sorted(STAGES)


def test_stages_import_only_earlier_stages_and_no_privates():
    modules = _modules()
    problems = []
    for mod, path in modules.items():
        mine = _package(mod)
        for imported, name, line in _imports(path):
            target = _target(imported, name, modules)
            theirs = _package(target)
            where = f"{path.relative_to(PKG.parent)}:{line}"
            if mine and theirs and STAGES.index(theirs) > STAGES.index(mine):
                problems.append(f"{where}: stage {mine} imports later stage {theirs} ({target})")
            private = [p for p in target.split(".")[2:] if p.startswith("_")] or (
                [name] if name and name.startswith("_") and target == imported else []
            )
            if theirs and theirs != mine and private:
                problems.append(f"{where}: {mine or mod} imports {theirs}'s private {'.'.join(private)}")
    assert not problems, "\n".join(problems)


def test_no_import_circles():
    modules = _modules()
    graph = {m: {_target(i, n, modules) for i, n, _ in _imports(p)} & modules.keys() for m, p in modules.items()}
    # A package's __init__ imports its modules; a module importing its own __init__ would close
    # a loop through it, and that is a circle too.
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"import circles: {cycles}"


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_module_size(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(PKG.parent)} has {n} lines (> {MAX_LINES}): split it by idea"


def test_init_files_export_their_own_names():
    for pkg in STAGES:
        init = PKG / pkg / "__init__.py"
        for imported, name, line in _imports(init):
            source = _package(imported)
            assert source in (pkg, "core", "models"), f"{init}:{line}: re-exports {name} from {imported}"


def test_nothing_points_outside_the_repository():
    """No tracked file names a file outside the repository: the project's notes live in docs/."""
    import subprocess

    repo = PKG.parent
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    # Built here so that this file does not match itself.
    patterns = ("../" + "shared", "REFERENCE" + ".md")
    found = []
    for name in filter(None, listed.stdout.split("\0")):
        path = repo / name
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary
        for number, line in enumerate(text.splitlines(), 1):
            if any(p in line for p in patterns):
                found.append(f"{name}:{number}: {line.strip()[:120]}")
    assert not found, "points outside the repository (put the fact in docs/ instead):\n" + "\n".join(found)


def _heading_anchors(markdown):
    """GitHub's anchors for a markdown file's headings: lower case, punctuation dropped, spaces
    to hyphens, a repeated heading numbered."""
    import re

    seen = collections.Counter()
    anchors = set()
    fence = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fence = not fence
        match = None if fence else re.match(r"#{1,6} (.*)", line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            anchors.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
            seen[slug] += 1
    return anchors


def test_the_readme_and_docs_links_resolve():
    """Every relative link in README.md and docs/ names a file of the repository, and its #anchor a
    heading of that file: moving a section to docs/ must not leave a dead link behind."""
    import re

    repo = PKG.parent
    dead = []
    for page in [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]:
        text = page.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                dead.append(f"{page.relative_to(repo)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _heading_anchors(linked.read_text()):
                dead.append(f"{page.relative_to(repo)}: {target} (no such heading)")
    assert not dead, "dead links:\n" + "\n".join(dead)


# Private names the standard library documents as the type of a public call's result.
STDLIB_PRIVATE_TYPES = {("argparse", "_SubParsersAction")}


def test_only_core_compat_reaches_into_a_librarys_private_names():
    """A library's private module or name (``x._name``, ``from lib._src import ...``) is reached
    from ``cookbook/core/compat/`` only, where each reach is checked against the pinned versions."""
    compat = PKG / "core" / "compat"
    found = []
    for path in sorted(PKG.rglob("*.py")):
        if compat in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(PKG.parent)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                base = node.value.id if isinstance(node.value, ast.Name) else None
                if base not in ("self", "cls") and (base, node.attr) not in STDLIB_PRIVATE_TYPES:
                    found.append(f"{where}: {base or '...'}.{node.attr}")
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] != "cookbook":
                if any(p.startswith("_") and not p.startswith("__") for p in node.module.split(".")) or any(
                    a.name.startswith("_") and not a.name.startswith("__") for a in node.names
                ):
                    found.append(f"{where}: from {node.module} import {', '.join(a.name for a in node.names)}")
    assert not found, "reaches into private names outside cookbook/core/compat:\n" + "\n".join(found)
