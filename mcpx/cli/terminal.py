# -*- test-case-name: tests.cli.test_quick -*-
"""
The terminal the command runs in: whether a person is there, and printing a line as
C{click.echo} does, without importing click.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def isatty(stream: Any) -> bool:
    """Whether C{stream} is a terminal; C{False} for one that cannot say."""
    try:
        return bool(stream.isatty())
    except Exception:
        return False


def on_terminal() -> bool:
    """
    Whether a person can be asked, in the terminal, what the server asks during a call:
    standard input and standard error are both terminals.
    """
    return isatty(sys.stdin) and isatty(sys.stderr)


def echo(message: str, *, err: bool = False) -> None:
    """
    Print C{message} and a newline on stdout (stderr with C{err}) as C{click.echo} prints
    text: ANSI escape sequences removed unless the stream is a terminal, and flushed.
    """
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    out = message + "\n"
    if "\x1b" in out and not isatty(stream):
        import re

        # click's own pattern for the sequences it removes.
        out = re.sub(r"\033\[[0-?]*[ -/]*[@-~]", "", out)
    stream.write(out)
    stream.flush()
