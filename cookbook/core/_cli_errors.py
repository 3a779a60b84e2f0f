"""How every ``cookbook`` subcommand answers bad input: one line that names the fix, no traceback.

A stage package's ``_cli`` wraps its work in :func:`user_errors` with the exception types that
mean "the input was wrong" (a missing file, an unknown preset, an unreachable server); those
become ``cookbook COMMAND: message`` on stderr and a non-zero exit status. Anything else is a
bug and keeps its traceback; ``COOKBOOK_TRACEBACK=1`` shows the traceback of a one-line error
too. The argparse errors of every subcommand go through :class:`OneLineParser` the same way.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

# What every subcommand treats as the user's input being wrong, besides its own error types.
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, FileExistsError,
                                                NotADirectoryError, IsADirectoryError, PermissionError)


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (whitespace runs, newlines included, become a space)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def user_errors(command: str, *errors: type[BaseException], code: int = 1) -> Callable:
    """Decorate a subcommand's ``_cli(args) -> int``: ``errors`` (and :data:`USER_ERRORS`)
    print ``cookbook COMMAND: message`` on stderr and return ``code``."""
    caught = tuple(dict.fromkeys(USER_ERRORS + errors))

    def wrap(fn: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> int:
            try:
                return fn(*args, **kwargs)
            except caught as e:
                if os.environ.get("COOKBOOK_TRACEBACK"):  # for whoever debugs the cookbook itself
                    raise
                print(f"cookbook {command}: {one_line(e)}", file=sys.stderr)
                return code

        return run

    return wrap


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line that points at ``--help`` (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {one_line(ValueError(message))} (see `{self.prog} --help`)\n")
