# -*- test-case-name: tests.daemon.test_logs -*-
"""
Where the daemon's log goes and how it reads: text lines for a person at a terminal,
JSON lines for programs (C{daemon.logFormat}), to a file or to stderr, never stdout.

Stdout is reserved: in stdio mode it is the MCP channel, and one stray line there
corrupts a host's session.

Every line is masked as it is written (L{MaskedStream}): an event's fields, its
formatted text and a failure's traceback may all quote what an upstream said, and
the written line is the one place they all pass.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime
from typing import IO, Any

from twisted.logger import (
    FilteringLogObserver,
    ILogObserver,
    LogEvent,
    LogLevel,
    LogLevelFilterPredicate,
    formatEvent,
    globalLogBeginner,
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


# Event keys that are Twisted's bookkeeping or already rendered into "message"; every
# other key is the event's own field and is written as one.
_BOOKKEEPING = frozenset({"format", "message", "time", "isError", "why", "failure", "system"})


def choose_format(name: str, stream: IO[Any]) -> str:
    """
    The format C{daemon.logFormat} C{name} means for C{stream}: C{auto} is C{text} on a
    terminal and C{json} anywhere else (a file, a pipe, journald).
    """
    if name != "auto":
        return name
    try:
        return "text" if stream.isatty() else "json"
    except (AttributeError, ValueError, OSError):
        return "json"


def _failure_of(event: LogEvent) -> Failure | None:
    failure = event.get("log_failure")
    return failure if isinstance(failure, Failure) else None


def _level_name(event: LogEvent) -> str:
    return str(getattr(event.get("log_level"), "name", "info"))


def _component(event: LogEvent) -> str:
    namespace = str(event.get("log_namespace") or "-")
    if namespace == "log_legacy":
        # Twisted's older modules say where they speak from in "system".
        namespace = str(event.get("system") or "-")
        namespace = "twisted" if namespace == "-" else namespace
    return namespace.removeprefix("mcpx.")


def _message(event: LogEvent) -> str:
    text = formatEvent(event)
    if not text and _failure_of(event) is None:
        message = event.get("message")
        if isinstance(message, tuple):
            text = " ".join(map(str, message))
    return text


def _error_text(failure: Failure) -> str:
    return f"{type(failure.value).__name__}: {failure.getErrorMessage()}"


def text_line(event: LogEvent) -> str:
    """
    One event as a person reads it: local time, level, component and message, then the
    traceback of a failure, indented, on the lines after.
    """
    when = event.get("log_time")
    stamp = "-"
    if isinstance(when, int | float):
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
        stamp += f".{int(when * 1000) % 1000:03d}"
    line = f"{stamp} {_level_name(event).upper():<5} {_component(event)}: {_message(event)}"
    failure = _failure_of(event)
    if failure is not None:
        trace = failure.getTraceback().rstrip("\n")
        line += "\n" + "\n".join("    " + part for part in trace.splitlines())
    return line + "\n"


def _plain(value: object) -> object:
    # json.dumps calls this only for what it cannot encode itself.
    return str(value)


def json_line(event: LogEvent) -> str:
    """
    One event as a JSON object of plain values: C{time} (UTC, ISO 8601), C{level},
    C{component}, C{message}, the event's own fields, and for a failure C{error}
    (type and message), C{error_type} and C{traceback} as text.
    """
    record: dict[str, object] = {}
    when = event.get("log_time")
    if isinstance(when, int | float):
        stamp = datetime.fromtimestamp(when, UTC).isoformat(timespec="milliseconds")
        record["time"] = stamp.replace("+00:00", "Z")
    record["level"] = _level_name(event)
    record["component"] = _component(event)
    record["message"] = _message(event)
    for key, value in event.items():
        if not key.startswith("log_") and key not in _BOOKKEEPING and key not in record:
            record[key] = value
    failure = _failure_of(event)
    if failure is not None:
        record["error"] = _error_text(failure)
        record["error_type"] = type(failure.value).__name__
        record["traceback"] = failure.getTraceback()
    try:
        return json.dumps(record, default=_plain, ensure_ascii=False) + "\n"
    except (TypeError, ValueError):
        # A field that refers to itself, or keys that are not strings: all of it as text.
        return json.dumps({key: str(value) for key, value in record.items()}) + "\n"


def log_observer(
    stream: IO[Any],
    level: str = "info",
    masker: SecretMasker | None = None,
    log_format: str = "json",
) -> ILogObserver:
    """
    An observer writing each event at C{level} and above to C{stream} as one line of
    C{log_format} (L{text_line} or L{json_line}; C{auto} chooses by L{choose_format}).

    The JSON record separator is a newline rather than RS so the file reads as plain
    JSON lines with C{jq} or C{grep}.

    @param masker: hides the configured credentials in every line written.
    """
    predicate = LogLevelFilterPredicate(defaultLogLevel=LogLevel.levelWithName(level))
    out: Any = stream if masker is None else MaskedStream(stream, masker)
    render = text_line if choose_format(log_format, stream) == "text" else json_line

    @provider(ILogObserver)
    def write(event: LogEvent) -> None:
        out.write(render(event))
        out.flush()

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


def begin_logging(observer: ILogObserver) -> None:
    """
    Send the global log to C{observer} (L{log_observer}); standard IO is left alone,
    stdout stays clean.
    """
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)
