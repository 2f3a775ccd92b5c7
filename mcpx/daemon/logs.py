# -*- test-case-name: tests.daemon.test_logs -*-
"""
Where the daemon's log goes: JSON lines to a file or to stderr, never stdout.

Stdout is reserved: in stdio mode it is the MCP channel, and one stray line there
corrupts a host's session.

Every line is masked as it is written (L{MaskedStream}): an event's fields, its
formatted text and a failure's traceback may all quote what an upstream said, and
the written line is the one place they all pass.
"""

from __future__ import annotations

import os
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

from mcpx.settings.secrets import SecretMasker


class MaskedStream:
    """
    A text stream that masks the configured credentials in what is written to it.

    The JSON log observer writes one whole line per event, so a secret is never split
    across two writes.  With no secrets configured a write costs one truth test.
    """

    def __init__(self, stream: IO[Any], masker: SecretMasker) -> None:
        self.stream = stream
        self.masker = masker

    def write(self, text: str) -> int:
        if self.masker:
            text = self.masker.mask(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def log_observer(
    stream: IO[Any], level: str = "info", masker: SecretMasker | None = None
) -> ILogObserver:
    """
    An observer writing one JSON object per line to C{stream}, at C{level} and above.

    The record separator is a newline rather than RS so the file reads as plain
    JSON lines with C{jq} or C{grep}.

    @param masker: hides the configured credentials in every line written.
    """
    predicate = LogLevelFilterPredicate(defaultLogLevel=LogLevel.levelWithName(level))
    out: Any = stream if masker is None else MaskedStream(stream, masker)
    writer = jsonFileLogObserver(out, recordSeparator="")

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


def begin_logging(stream: IO[Any], level: str = "info", masker: SecretMasker | None = None) -> None:
    """Send the global log to C{stream}; standard IO is left alone, stdout stays clean."""
    globalLogBeginner.beginLoggingTo(
        [log_observer(stream, level, masker)], redirectStandardIO=False
    )
