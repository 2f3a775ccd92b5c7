# -*- test-case-name: tests.demo.test_demo -*-
"""
C{python -m mcpx.demo}: serve the demo on stdin and stdout until stdin closes.

stdout carries protocol bytes and nothing else, so logs go to stderr, and anything else
that writes to C{sys.stdout} is turned into log events instead of corrupting the stream.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    """Run the demo server; it takes no arguments."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args:
        sys.stderr.write(
            "usage: python -m mcpx.demo\n"
            "Serves the mcpx demo MCP server on stdin/stdout; it takes no arguments.\n"
        )
        raise SystemExit(2)

    from twisted.internet.task import react
    from twisted.logger import (
        FilteringLogObserver,
        LogLevel,
        LogLevelFilterPredicate,
        globalLogBeginner,
        textFileLogObserver,
    )

    from mcpx.demo.stdio import run

    observer = FilteringLogObserver(
        textFileLogObserver(sys.stderr),
        [LogLevelFilterPredicate(defaultLogLevel=LogLevel.info)],
    )
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=True)
    react(run)


if __name__ == "__main__":
    main()
