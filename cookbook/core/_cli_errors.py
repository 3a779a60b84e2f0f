"""How every ``cookbook`` subcommand answers bad input: one line that names the fix, no traceback.

A stage package's ``_cli`` wraps its work in :func:`user_errors` with the exception types that
mean "the input was wrong" (a missing file, an unknown preset, an unreachable server); those
become ``cookbook COMMAND: message`` on stderr and a non-zero exit status. What the system
refuses (a full disk, a file it may not write: any other ``OSError``) is one line too, naming
the path and what to do (:func:`os_error_line`), from every subcommand (:func:`os_errors`, which
``cookbook`` wraps around each). Anything else is a bug and keeps its traceback;
``COOKBOOK_TRACEBACK=1`` shows the traceback of a one-line error too. The argparse errors of
every subcommand go through :class:`OneLineParser` the same way.
"""

from __future__ import annotations

import argparse
import errno
import functools
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

# What every subcommand treats as the user's input being wrong, besides its own error types.
USER_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    FileNotFoundError,
    FileExistsError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
)


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (whitespace runs, newlines included, become a space)."""
    return " ".join(str(exc).split()) or type(exc).__name__


# What to do about an error the system raised, by its errno.
_OS_FIXES = {
    errno.ENOSPC: "free space on that disk (or point the output or COOKBOOK_CACHE at another) and run it again",
    errno.EDQUOT: "free space within your quota (or write elsewhere) and run it again",
    errno.EACCES: "check the permissions of that path (or write elsewhere) and run it again",
    errno.EPERM: "check the permissions of that path (or write elsewhere) and run it again",
    errno.EROFS: "that file system is read-only: write elsewhere (another --out or COOKBOOK_CACHE)",
}


def os_error_line(exc: OSError) -> str:
    """An ``OSError`` as one line: what failed, on which path, and what to do about it."""
    what = exc.strerror or one_line(exc)
    paths = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
    fix = _OS_FIXES.get(exc.errno, "check that path and the disk it is on, and run it again")
    return f"{what}{f': {paths}' if paths else ''}; {fix}"


def _answer(command: str, code: int, line_of: Callable[[Exception], str | None]) -> Callable:
    """Decorate a subcommand: an exception ``line_of`` has a line for is printed as
    ``cookbook COMMAND: line`` on stderr and the subcommand returns ``code``; others propagate."""

    def wrap(fn: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> int:
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                line = None if os.environ.get("COOKBOOK_TRACEBACK") else line_of(e)  # for whoever debugs the cookbook
                if line is None:
                    raise
                print(f"cookbook {command}: {line}", file=sys.stderr)
                return code

        return run

    return wrap


def os_errors(command: str, code: int = 1) -> Callable:
    """Decorate a subcommand: an ``OSError`` on a file or disk that it did not answer itself
    prints ``cookbook COMMAND: what: path; fix`` on stderr and returns ``code``. One with neither
    a path nor a disk's errno (a refused connection) is not about the user's files: a traceback."""
    return _answer(
        command,
        code,
        lambda e: (
            os_error_line(e) if isinstance(e, OSError) and (e.filename is not None or e.errno in _OS_FIXES) else None
        ),
    )


def user_errors(command: str, *errors: type[BaseException], code: int = 1) -> Callable:
    """Decorate a subcommand's ``_cli(args) -> int``: ``errors`` (and :data:`USER_ERRORS`)
    print ``cookbook COMMAND: message`` on stderr and return ``code``."""
    caught = tuple(dict.fromkeys(USER_ERRORS + errors))

    def line_of(e: Exception) -> str | None:
        if not isinstance(e, caught):
            return None
        # The system's own refusal (errno set) says what to do; a message of ours already does.
        return os_error_line(e) if isinstance(e, OSError) and e.errno in _OS_FIXES else one_line(e)

    return _answer(command, code, line_of)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line that points at ``--help`` (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {one_line(ValueError(message))} (see `{self.prog} --help`)\n")
