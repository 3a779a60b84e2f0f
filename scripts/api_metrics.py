"""How thin the notebooks are and how curated the package API is: the numbers issue 35 tracks.

Reads the source only (``ast``; nothing is imported or run):

* **notebooks**: each code cell's top-level statements, classed as ``setup`` (imports, the Colab
  cell, magics), ``parameter`` (a name bound to a literal), ``call`` (one call into a
  ``cookbook`` package or a method of what such a call returned, its arguments plain
  expressions), ``display`` (``print``, ``display``,
  a DataFrame or plot, a bare expression shown as the cell's value), ``record`` (a ``record()``
  call) and ``logic`` (everything else: loops, conditions, functions, comprehensions, values
  computed in the notebook). Lines are source lines that are neither blank nor comments.
  ``own stage`` is the share of the package names a notebook uses that come from its own stage
  package (:data:`STAGE`).
* **exports**: the public names each ``cookbook/<package>/__init__.py`` binds (``__all__`` where
  it has one), and who uses each from outside its package: a notebook, the package's other
  users (other packages, a name included that another package's message tells the user to use,
  ``cookbook.models.CHAT_TEMPLATE_FILE`` in data's; the command line: ``register_<command>_cli``
  of each package in ``harness._cli.COMMANDS``, which it reaches by name), the docs (``README.md`` and
  ``docs/*.md`` naming ``cookbook.<package>.<name>``), the benchmarks and scripts
  (``benchmarks/*.py``, ``scripts/*.py``: programs a user runs, so what they call stays
  exported), or only tests (``tests/``: a helper only tests use stays private, reached in the
  tests through its module). Code in a string (a script a test or a module runs in a
  subprocess) counts as its file's. An exported exception class (defined in the cookbook, its
  bases followed through the cookbook's own classes reaching a builtin exception) that the
  cookbook raises is ``raised by the API`` where it would otherwise count as used by tests only
  or by nothing: a user catches it, ``except cookbook.mesh.MeshError``, without importing it
  first. An export that nothing outside its package uses is one to stop exporting.
* **collisions**: one exported name bound to different objects in different packages.
* ``--train-resolutions DIR`` (runs code): one ``cookbook train --max-steps 2 --out DIR`` in this
  process, counting how often it builds a ``TrainConfig`` (construction and validation, each
  ``replace`` included), calls ``models.get_preset`` (and how often with a name, a lookup), and reads ``recipe.json``; twice,
  a fresh run and then its resume.

Written by hand: no linter counts these. ``--json`` writes the whole record; the default prints
the summary table.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Each notebook's own stage package.
STAGE = {
    "00_quickstart": "models",
    "01_mesh_setup": "mesh",
    "02_lora_naming": "lora",
    "03_sharding_fixes": "fit",
    "04_remat": "fit",
    "05_data_pipeline": "data",
    "06_train": "train",
    "07_merge": "merge",
    "08_serving": "serve",
    "09_cost_comparison": "cost",
    "10_rl": "rl",
}
DISPLAY_CALLS = {"print", "display", "Markdown", "HTML", "Image"}
DISPLAY_ROOTS = {"pd", "plt", "np"}  # a DataFrame, a plot or an array shown as the cell's value
KINDS = ("setup", "parameter", "call", "display", "record", "logic")


def packages(repo: Path = REPO) -> list[str]:
    return sorted(p.parent.name for p in (repo / "cookbook").glob("*/__init__.py"))


# ------------------------------------------------------------------------------------------
# Who refers to which package name


class _Uses(ast.NodeVisitor):
    """``(package, name)`` pairs a module uses: ``pkg.name`` through an alias of ``cookbook.pkg``,
    and names imported ``from cookbook.pkg import name``."""

    def __init__(self, pkgs: set[str]):
        self.pkgs = pkgs
        self.alias: dict[str, str] = {}  # local name -> package
        self.direct: dict[str, tuple[str, str]] = {}  # local name -> (package, name)
        self.uses: Counter = Counter()

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        if mod == "cookbook":
            for a in node.names:
                if a.name in self.pkgs:
                    self.alias[a.asname or a.name] = a.name
        elif mod.startswith("cookbook.") and mod.split(".")[1] in self.pkgs and len(mod.split(".")) == 2:
            for a in node.names:
                self.direct[a.asname or a.name] = (mod.split(".")[1], a.name)
                self.uses[(mod.split(".")[1], a.name)] += 1

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            parts = a.name.split(".")
            if parts[0] == "cookbook" and len(parts) == 2 and parts[1] in self.pkgs and a.asname:
                self.alias[a.asname] = parts[1]

    def visit_Attribute(self, node: ast.Attribute) -> None:
        base = node.value
        if isinstance(base, ast.Name) and base.id in self.alias:
            self.uses[(self.alias[base.id], node.attr)] += 1
        elif (  # cookbook.pkg.name
            isinstance(base, ast.Attribute)
            and isinstance(base.value, ast.Name)
            and base.value.id == "cookbook"
            and base.attr in self.pkgs
        ):
            self.uses[(base.attr, node.attr)] += 1
        self.generic_visit(node)


def _parse(source: str) -> ast.Module:
    """A code cell or module; IPython magics and shell lines become ``pass``."""
    lines = [re.sub(r"^(\s*)[!%].*$", r"\1pass", line) for line in source.splitlines()]
    return ast.parse("\n".join(lines))


def notebook_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


# ------------------------------------------------------------------------------------------
# Notebook statements


def _root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
        return True
    except ValueError:
        return False


def _plain(node: ast.AST) -> bool:
    """No comprehension, lambda or conditional expression inside."""
    banned = (ast.ListComp, ast.DictComp, ast.SetComp, ast.GeneratorExp, ast.Lambda, ast.IfExp)
    return not any(isinstance(n, banned) for n in ast.walk(node))


def classify(stmt: ast.stmt, package_names: set[str], is_last: bool) -> str:
    """One of :data:`KINDS` for a notebook cell's top-level statement."""
    if isinstance(stmt, ast.Import | ast.ImportFrom | ast.Pass):
        return "setup"
    value = stmt.value if isinstance(stmt, ast.Expr | ast.Assign | ast.AnnAssign | ast.AugAssign) else None
    if value is None:
        return "logic"
    if isinstance(stmt, ast.Assign | ast.AnnAssign) and _is_literal(value):
        return "parameter"
    root = _root(value)
    if isinstance(value, ast.Call):
        if root == "record":
            return "record"
        if isinstance(stmt, ast.Expr) and (root in DISPLAY_CALLS or root in DISPLAY_ROOTS):
            return "display"
    if isinstance(value, ast.Call | ast.Subscript | ast.Attribute) and root in package_names and _plain(value):
        return "call"  # a package function, or a method of what one returned (``server.stop()``)
    if isinstance(stmt, ast.Expr) and is_last and _plain(value):
        return "display"  # the cell's value, shown
    return "logic"


def _code_lines(source_lines: list[str], stmt: ast.stmt) -> int:
    span = source_lines[stmt.lineno - 1 : stmt.end_lineno]
    return sum(1 for line in span if line.strip() and not line.strip().startswith("#"))


def notebook_metrics(path: Path, pkgs: set[str]) -> dict:
    kinds: Counter = Counter()
    uses = _Uses(pkgs)
    logic_examples: list[str] = []
    returned: set[str] = set()  # names bound to what a package call returned
    for cell in notebook_cells(path):
        colab = "google.colab" in cell
        tree = _parse(cell)
        uses.visit(tree)
        lines = cell.splitlines()
        package_names = set(uses.alias) | set(uses.direct) | {"cookbook"} | returned
        for i, stmt in enumerate(tree.body):
            kind = "setup" if colab else classify(stmt, package_names, i == len(tree.body) - 1)
            if kind == "call" and isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                returned |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
                package_names |= returned
            n = _code_lines(lines, stmt)
            kinds[kind] += n
            if kind == "logic":
                logic_examples.append(lines[stmt.lineno - 1].strip())
    own = STAGE.get(path.stem)
    names = {pn for pn in uses.uses}
    own_share = sum(1 for p, _ in names if p == own) / len(names) if names else 0.0
    return {
        "lines": dict(kinds),
        "code_lines": sum(kinds.values()),
        "logic_lines": kinds["logic"],
        "record_calls": sum(cell.count("record(") for cell in notebook_cells(path)),
        "stage": own,
        "package_names": len(names),
        "own_stage_share": round(own_share, 3),
        "uses": sorted(f"{p}.{n}" for p, n in names),
        "logic_statements": logic_examples,
    }


# ------------------------------------------------------------------------------------------
# Exports, their users, collisions


def exports(pkg: str, repo: Path = REPO) -> dict[str, tuple[str, str]]:
    """Public name -> where it is defined (module, name), for ``cookbook/<pkg>/__init__.py``."""
    tree = ast.parse((repo / "cookbook" / pkg / "__init__.py").read_text())
    bound: dict[str, tuple[str, str]] = {}
    declared: list[str] | None = None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("cookbook"):
            for a in node.names:
                bound[a.asname or a.name] = (node.module, a.name)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound[node.name] = (f"cookbook.{pkg}", node.name)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name) and t.id == "__all__":
                    declared = list(ast.literal_eval(node.value))
                elif isinstance(t, ast.Name):
                    bound[t.id] = (f"cookbook.{pkg}", t.id)
    names = declared if declared is not None else [n for n in bound if not n.startswith("_")]
    return {n: bound.get(n, (f"cookbook.{pkg}", n)) for n in names}


def _origin(module: str, name: str, table: dict[str, dict[str, tuple[str, str]]]) -> tuple[str, str]:
    """Follow re-exports through package ``__init__``s to where ``name`` is defined."""
    seen = set()
    while module.count(".") == 1 and module.split(".")[1] in table and (module, name) not in seen:
        seen.add((module, name))
        nxt = table[module.split(".")[1]].get(name)
        if nxt is None or nxt == (module, name):
            break
        module, name = nxt
    return module, name


def _module_uses(tree: ast.Module, pkgs: set[str]) -> Counter:
    """What a module uses, the code in its strings included (``python -c`` scripts a test or a
    module runs in a subprocess); a string that is not code is skipped."""
    v = _Uses(pkgs)
    v.visit(tree)
    uses = Counter(v.uses)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "cookbook" in node.value:
            try:
                inner = _parse(node.value)
            except (SyntaxError, ValueError):
                continue
            sv = _Uses(pkgs)
            sv.visit(inner)
            uses.update(sv.uses)
    return uses


def _message_uses(tree: ast.Module, pkgs: set[str]) -> Counter:
    """``cookbook.<package>.<name>`` named in a module's strings that are neither code nor a
    docstring: a message that tells the user to call or read that name (``render with Gemma 4's
    current template (cookbook.models.CHAT_TEMPLATE_FILE)``)."""
    pattern = re.compile(r"(?<![\w.])cookbook\.(" + "|".join(sorted(pkgs)) + r")\.(\w+)")
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    uses: Counter = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            uses.update(pattern.findall(node.value))
    return uses


def _uses_in(paths: list[Path], pkgs: set[str], *, messages: bool = False) -> dict[Path, Counter]:
    """What each module uses; with ``messages``, the names its messages give the user too."""
    out = {}
    for path in paths:
        try:
            tree = _parse(path.read_text())
        except SyntaxError:
            continue
        out[path] = _module_uses(tree, pkgs)
        if messages:
            out[path].update(_message_uses(tree, pkgs))
    return out


def _command_line_uses(repo: Path, pkgs: set[str]) -> Counter:
    """``register_<command>_cli`` of each command's package in ``harness._cli.COMMANDS``: the
    command line reaches each by name (``getattr``), which no import shows."""
    path = repo / "cookbook" / "harness" / "_cli.py"
    uses: Counter = Counter()
    if not path.is_file():
        return uses
    for node in ast.parse(path.read_text()).body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == "COMMANDS" and node.value is not None:
            for command, (module, _help) in ast.literal_eval(node.value).items():
                pkg = module.split(".")[-1]
                if pkg in pkgs:
                    uses[(pkg, f"register_{command.replace('-', '_')}_cli")] += 1
    return uses


def _doc_uses(repo: Path, pkgs: set[str]) -> Counter:
    """``cookbook.<package>.<name>`` (or ``<package>.<name>``) named in ``README.md`` and
    ``docs/*.md``: what the docs present as the package's API."""
    pattern = re.compile(r"(?<![\w.])(?:cookbook\.)?(" + "|".join(sorted(pkgs)) + r")\.(\w+)")
    uses: Counter = Counter()
    for path in [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]:
        if path.is_file():
            uses.update(pattern.findall(path.read_text()))
    return uses


BUILTIN_EXCEPTIONS = frozenset(
    n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)
)


def _module_name(repo: Path, path: Path) -> str:
    parts = path.relative_to(repo).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def raised_exceptions(repo: Path = REPO) -> set[tuple[str, str]]:
    """``(module, name)`` of each class defined in the cookbook that is an exception (its bases,
    followed through the cookbook's own classes and imports, reach a builtin exception:
    ``Exception``, ``ValueError``, ...) and that the cookbook raises or builds (``raise X(...)``,
    ``raise X``, or ``X(...)`` kept to raise later), plus each name importing one of them."""
    classes: dict[str, dict[str, list[ast.expr]]] = {}  # module -> class -> bases
    imports: dict[str, dict[str, tuple[str, str]]] = {}  # module -> local name -> (module, name)
    built: set[str] = set()  # names raised or called anywhere in the cookbook
    for path in sorted((repo / "cookbook").rglob("*.py")):
        try:
            tree = ast.parse(path.read_text())
        except SyntaxError:
            continue
        module = _module_name(repo, path)
        classes[module] = {n.name: n.bases for n in tree.body if isinstance(n, ast.ClassDef)}
        imports[module] = {
            a.asname or a.name: (node.module, a.name)
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cookbook")
            for a in node.names
        }
        for node in ast.walk(tree):
            target = node.exc if isinstance(node, ast.Raise) else node.func if isinstance(node, ast.Call) else None
            if isinstance(target, ast.Call):
                target = target.func
            if isinstance(target, ast.Name):
                built.add(target.id)
            elif isinstance(target, ast.Attribute):
                built.add(target.attr)

    def resolve(module: str, name: str, seen: frozenset = frozenset()) -> tuple[str, str] | None:
        """Where ``name`` seen from ``module`` is defined as a class, following imports."""
        while (module, name) not in seen:
            seen |= {(module, name)}
            if name in classes.get(module, {}):
                return module, name
            if name not in imports.get(module, {}):
                return None
            module, name = imports[module][name]
            if f"{module}.{name}" in classes:  # ``from cookbook.lora import _config``: a module
                return None
        return None

    def is_exception(module: str, name: str, seen: frozenset = frozenset()) -> bool:
        where = resolve(module, name)
        if where is None or where in seen:
            return False
        for base in classes[where[0]][where[1]]:
            if isinstance(base, ast.Name):
                if resolve(where[0], base.id) is not None:
                    if is_exception(where[0], base.id, seen | {where}):
                        return True
                elif base.id in BUILTIN_EXCEPTIONS:
                    return True
            elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
                mod = imports[where[0]].get(base.value.id)  # ``_config.LoraError``
                if mod and f"{mod[0]}.{mod[1]}" in classes:
                    if is_exception(f"{mod[0]}.{mod[1]}", base.attr, seen | {where}):
                        return True
                elif base.value.id == "builtins" and base.attr in BUILTIN_EXCEPTIONS:
                    return True
        return False

    return {
        (module, name)
        for module in classes
        for name in {*classes[module], *imports[module]}
        if name in built or (resolve(module, name) or ("", ""))[1] in built
        if is_exception(module, name)
    }


def api_metrics(repo: Path = REPO) -> dict:
    pkgs = packages(repo)
    pset = set(pkgs)
    table = {p: exports(p, repo) for p in pkgs}
    notebooks = sorted((repo / "notebooks").glob("[0-9]*.ipynb"))
    nb_uses: Counter = Counter()
    for nb in notebooks:
        v = _Uses(pset)
        for cell in notebook_cells(nb):
            v.visit(_parse(cell))
        nb_uses.update(v.uses)
    package_uses: dict[str, Counter] = defaultdict(Counter)  # user package -> uses
    for path, uses in _uses_in(sorted((repo / "cookbook").rglob("*.py")), pset, messages=True).items():
        rel = path.relative_to(repo / "cookbook").parts
        user = rel[0] if len(rel) > 1 else "cookbook"
        package_uses[user].update(uses)
    package_uses["command line"].update(_command_line_uses(repo, pset))
    doc_uses = _doc_uses(repo, pset)
    test_uses: Counter = Counter()  # tests/: what stays private, reached through its module
    program_uses: Counter = Counter()  # benchmarks/ and scripts/: user-facing programs' calls
    for folder, into in (("tests", test_uses), ("benchmarks", program_uses), ("scripts", program_uses)):
        for uses in _uses_in(sorted((repo / folder).rglob("*.py")), pset).values():
            into.update(uses)
    exceptions = raised_exceptions(repo)
    rows = []
    for pkg, names in table.items():
        for name, defined in names.items():
            key = (pkg, name)
            by_other = any(key in u for user, u in package_uses.items() if user != pkg)
            if key in nb_uses:
                who = "notebook"
            elif by_other:
                who = "package"
            elif key in doc_uses:
                who = "docs"
            elif key in program_uses:
                who = "benchmarks/scripts"
            elif defined in exceptions:
                who = "raised by the API"  # caught by a user: ``except cookbook.<package>.<Error>``
            elif key in test_uses:
                who = "tests only"
            else:
                who = "nothing"
            rows.append({"package": pkg, "name": name, "used_by": who})
    origins: dict[str, set] = defaultdict(set)
    where: dict[str, list[str]] = defaultdict(list)
    for pkg, names in table.items():
        for name, (module, orig) in names.items():
            origins[name].add(_origin(module, orig, table))
            where[name].append(pkg)
    collisions = {n: sorted(where[n]) for n, o in sorted(origins.items()) if len(o) > 1}
    nbs = {nb.stem: notebook_metrics(nb, pset) for nb in notebooks}
    return {
        "notebooks": nbs,
        "notebook_totals": {
            "code_lines": sum(m["code_lines"] for m in nbs.values()),
            "logic_lines": sum(m["logic_lines"] for m in nbs.values()),
            "record_calls": sum(m["record_calls"] for m in nbs.values()),
        },
        "exports": rows,
        "export_totals": dict(Counter(r["used_by"] for r in rows), total=len(rows)),
        "collisions": collisions,
    }


def train_resolutions(run_dir: Path) -> dict[str, dict[str, int]]:
    """How often one ``cookbook train`` resolves its config: a fresh 2-step run, then its resume."""
    import pathlib

    from cookbook import core

    core.setup_runtime_env()
    from cookbook import harness, models, train

    counts: Counter = Counter()
    post_init = train.TrainConfig.__post_init__
    presets = models._presets.get_preset  # the one lookup every module calls through models
    read_text = pathlib.Path.read_text

    def counting_post_init(self):
        counts["TrainConfig built and validated"] += 1
        return post_init(self)

    def counting_get_preset(name):
        counts["models.get_preset called"] += 1
        if isinstance(name, str):
            counts["model preset looked up by name"] += 1
        return presets(name)

    def counting_read_text(self, *a, **k):
        if self.name == "recipe.json":
            counts["recipe.json read"] += 1
        return read_text(self, *a, **k)

    out = {}
    saved = (train.TrainConfig.__post_init__, models.get_preset, models._presets.get_preset, pathlib.Path.read_text)
    train.TrainConfig.__post_init__ = counting_post_init
    models.get_preset = models._presets.get_preset = counting_get_preset
    pathlib.Path.read_text = counting_read_text
    try:
        for label in ("fresh run", "resume"):
            counts.clear()
            code = harness.main(["train", "--out", str(run_dir), "--max-steps", "2", "--warmup-steps", "1"])
            if code != 0:
                raise SystemExit(f"cookbook train exited {code}")
            out[label] = dict(counts)
    finally:
        (train.TrainConfig.__post_init__, models.get_preset, models._presets.get_preset, pathlib.Path.read_text) = saved
    return out


def summary(m: dict) -> str:
    out = ["notebook            code  logic  record  own-stage share (of names used)"]
    for stem, n in m["notebooks"].items():
        out.append(
            f"{stem:<19} {n['code_lines']:>4}  {n['logic_lines']:>5}  {n['record_calls']:>6}  "
            f"{n['own_stage_share']:.0%} of {n['package_names']} ({n['stage']})"
        )
    t = m["notebook_totals"]
    out.append(f"{'all':<19} {t['code_lines']:>4}  {t['logic_lines']:>5}  {t['record_calls']:>6}")
    e = m["export_totals"]
    out.append(
        f"exported names: {e['total']} (used by a notebook {e.get('notebook', 0)}, by another package or the "
        f"command line only {e.get('package', 0)}, named in README/docs only {e.get('docs', 0)}, "
        f"exception classes raised by the API (else used by tests or nothing) {e.get('raised by the API', 0)}, "
        f"by tests/benchmarks/scripts only {e.get('tests only', 0) + e.get('benchmarks/scripts', 0)} "
        f"(benchmarks/scripts {e.get('benchmarks/scripts', 0)}, tests only {e.get('tests only', 0)}), "
        f"by nothing outside their package {e.get('nothing', 0)})"
    )
    c = m["collisions"]
    out.append(f"collisions: {len(c)}" + "".join(f"\n  {n}: {', '.join(p)}" for n, p in c.items()))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="write the whole record here")
    ap.add_argument("--logic", action="store_true", help="list each notebook's logic statements")
    ap.add_argument("--train-resolutions", type=Path, metavar="DIR", help="count one cookbook train's config work")
    args = ap.parse_args(argv)
    m = api_metrics()
    if args.train_resolutions:
        m["train_resolutions"] = train_resolutions(args.train_resolutions)
    print(summary(m))
    for label, counts in m.get("train_resolutions", {}).items():
        print(f"cookbook train, {label}: " + ", ".join(f"{k} {v}x" for k, v in counts.items()))
    if args.logic:
        for stem, n in m["notebooks"].items():
            print(f"\n{stem}:" + "".join(f"\n  {s}" for s in n["logic_statements"]))
    if args.json:
        args.json.write_text(json.dumps(m, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
