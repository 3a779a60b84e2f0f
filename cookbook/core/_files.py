"""Directories that several processes fill at once: one fills, the others wait and reuse it.

A cache directory (a base checkpoint, a training run, a merged model) is written to a
temporary sibling and renamed into place; that alone keeps a half-written one from looking
finished, but two processes on a cold cache would each build it, and the second to finish
would replace (delete) the first's finished directory while a reader may be using it. An
exclusive ``fcntl.flock`` on a sibling ``.NAME.lock`` file makes the second wait and then find
the directory complete. Written by hand: the standard library has the lock, not the pattern.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path


def lock_path(target: str | Path) -> Path:
    """The lock file that guards ``target``: ``.NAME.lock`` beside it."""
    target = Path(target)
    return target.with_name(f".{target.name}.lock")


@contextlib.contextmanager
def sibling_lock(target: str | Path) -> Iterator[None]:
    """Hold the exclusive lock that guards ``target`` (blocks while another process holds it).

    The lock is the open file's (``flock``), so two holders in one process exclude each other
    too, and it goes with the process if that is killed: no stale lock is left behind.
    """
    import fcntl

    path = lock_path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def fill_once(target: str | Path, is_complete: Callable[[Path], bool], fill: Callable[[], object]) -> Path:
    """``target``, calling ``fill()`` to build it only if no one has: the first caller fills,
    a concurrent one waits for it and reuses what it built."""
    target = Path(target)
    if not is_complete(target):
        with sibling_lock(target):
            if not is_complete(target):
                fill()
    return target
