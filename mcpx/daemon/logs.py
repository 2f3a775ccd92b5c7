# -*- test-case-name: tests.daemon.test_logs -*-
"""
Where the daemon's log goes: JSON lines to a file or to stderr, never stdout.

Stdout is reserved: in stdio mode it is the MCP channel, and one stray line there
corrupts a host's session.
"""

from __future__ import annotations

import sys
from typing import IO, Any

from twisted.logger import (
    FilteringLogObserver,
    ILogObserver,
    LogEvent,
    LogLevel,
    LogLevelFilterPredicate,
    globalLogBeginner,
    jsonFileLogObserver,
)
from twisted.python.failure import Failure
from zope.interface import provider


def log_observer(stream: IO[Any], level: str = "info") -> ILogObserver:
    """
    An observer writing one JSON object per line to C{stream}, at C{level} and above.

    The record separator is a newline rather than RS so the file reads as plain
    JSON lines with C{jq} or C{grep}.
    """
    predicate = LogLevelFilterPredicate(defaultLogLevel=LogLevel.levelWithName(level))
    writer = jsonFileLogObserver(stream, recordSeparator="")

    @provider(ILogObserver)
    def write(event: LogEvent) -> None:
        failure = event.get("log_failure")
        if isinstance(failure, Failure):
            # JSON keeps only what it can encode of a failure; its exception object is
            # written as "unpersistable", so the message and traceback go as text.
            event = dict(event)
            event["error"] = f"{type(failure.value).__name__}: {failure.getErrorMessage()}"
            event["traceback"] = failure.getTraceback()
        writer(event)

    return FilteringLogObserver(write, [predicate])


def open_log_stream(log_file: str) -> IO[Any]:
    """The stream named by C{daemon.logFile}: a path to append to, or stderr when empty."""
    if not log_file or log_file == "-":
        return sys.stderr
    return open(log_file, "a", encoding="utf-8", buffering=1)


def begin_logging(stream: IO[Any], level: str = "info") -> None:
    """Send the global log to C{stream}; standard IO is left alone, stdout stays clean."""
    globalLogBeginner.beginLoggingTo([log_observer(stream, level)], redirectStandardIO=False)
