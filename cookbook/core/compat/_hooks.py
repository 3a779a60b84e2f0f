"""Run a function right after a module is imported (or now, if it already is): how
:func:`cookbook.core.compat.install` patches a library the moment it loads, so installing costs
no import and a process that never loads the library never pays for it.

Written by hand: the standard library has no post-import hook (PEP 369 was withdrawn). A
meta-path finder finds the module's spec with the finders after it and wraps that loader's
``exec_module``: the module executes as usual, then the hooks run.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from collections.abc import Callable

_LOCK = threading.Lock()
_PENDING: dict[str, list[Callable[[], object]]] = {}


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _PENDING:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module):
            original(module)
            with _LOCK:
                hooks = _PENDING.pop(fullname, [])
            for hook in hooks:
                hook()

        loader.exec_module = exec_module
        return spec


_FINDER = _AfterImport()


def after_import(module: str, hook: Callable[[], object]) -> None:
    """Call ``hook()`` once ``module`` is imported: now if it already is, else right after it
    executes (before whatever imported it goes on)."""
    if module in sys.modules:
        hook()
        return
    with _LOCK:
        _PENDING.setdefault(module, []).append(hook)
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)


def pending() -> dict[str, int]:
    """Modules not imported yet, and how many hooks wait for each (for the tests)."""
    with _LOCK:
        return {m: len(h) for m, h in _PENDING.items()}
