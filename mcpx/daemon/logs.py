# -*- test-case-name: tests.daemon.test_logs -*-
"""
Where the daemon's log goes: JSON lines to a file or to stderr, never stdout.

Stdout is reserved: in stdio mode it is the MCP channel, and one stray line there
corrupts a host's session.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any

from twisted.logger import (
    FilteringLogObserver,
    ILogObserver,
    LogLevel,
    LogLevelFilterPredicate,
    globalLogBeginner,
    jsonFileLogObserver,
)


def log_observer(stream: IO[Any], level: str = "info") -> ILogObserver:
    """
    An observer writing one JSON object per line to C{stream}, at C{level} and above.

    The record separator is a newline rather than RS so the file reads as plain
    JSON lines with C{jq} or C{grep}.
    """
    predicate = LogLevelFilterPredicate(defaultLogLevel=LogLevel.levelWithName(level))
    return FilteringLogObserver(jsonFileLogObserver(stream, recordSeparator=""), [predicate])


#: The mode a new log file is created with: the log names servers, tools and errors, which are
#: the owner's business only, whatever the umask says.
LOG_FILE_MODE = 0o600


def open_log_stream(log_file: str) -> IO[Any]:
    """
    The stream named by C{daemon.logFile}: a path to append to, or stderr when empty.

    A file that does not exist yet is created readable by its owner only (L{LOG_FILE_MODE});
    one that exists keeps the mode its owner gave it.
    """
    if not log_file or log_file == "-":
        return sys.stderr
    fd = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, LOG_FILE_MODE)
    return open(fd, "a", encoding="utf-8", buffering=1)


def begin_logging(stream: IO[Any], level: str = "info") -> None:
    """Send the global log to C{stream}; standard IO is left alone, stdout stays clean."""
    globalLogBeginner.beginLoggingTo([log_observer(stream, level)], redirectStandardIO=False)
