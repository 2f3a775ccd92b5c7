# -*- test-case-name: tests.upstream.test_stdio -*-
"""
A stdio server's stderr as log lines, each kept to a bounded length, and the last few
of them, which the reason it exited quotes.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Final

_NEWLINE: Final = b"\n"


class StderrLines:
    """
    Splits stderr into lines, keeping at most C{limit} bytes of each: a longer line is
    cut off there and the rest of it skipped, so a child that never writes a newline
    costs a bounded amount of memory.
    """

    __slots__ = ("_pending", "_skipping", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._pending = bytearray()
        self._skipping = False

    def feed(self, data: bytes) -> list[tuple[bytes, bool]]:
        """The lines C{data} completes, each with whether it was cut off."""
        out: list[tuple[bytes, bool]] = []
        pending = self._pending
        start, end = 0, len(data)
        while start < end:
            newline = data.find(_NEWLINE, start)
            stop = end if newline < 0 else newline
            if self._skipping:
                if newline < 0:
                    break
                self._skipping = False
            else:
                room = self.limit - len(pending)
                if stop - start > room:
                    pending += data[start : start + room]
                    out.append((bytes(pending), True))
                    pending.clear()
                    self._skipping = newline < 0
                else:
                    pending += data[start:stop]
                    if newline < 0:
                        break
                    out.append((bytes(pending), False))
                    pending.clear()
            if newline < 0:
                break
            start = newline + 1
        return out

    def flush(self) -> list[tuple[bytes, bool]]:
        """The last line, if the stream ended without a newline."""
        self._skipping = False
        if not self._pending:
            return []
        line = bytes(self._pending)
        self._pending.clear()
        return [(line, False)]


#: How many of the last stderr lines an exit's reason quotes, and at most how many
#: characters of them: enough for the error a server dies with, never its whole log.
TAIL_LINES: Final = 5
TAIL_CHARACTERS: Final = 500


#: At most how many characters of the line that says why are kept when the quote is cut.
WHY_CHARACTERS: Final = 200

#: How many lines are looked at to find the one that says what failed (a stack trace
#: printed after it pushes it out of the last L{TAIL_LINES}).
LOOKED_AT: Final = 40

#: A line of a stack trace or of its decoration, which says where, not what.
_FRAME: Final = re.compile(r'^(at |File "|\^+$|~+$|[{}\[\]]$|\.\.\.|Node\.js v)')

#: A line that says what failed (an error's message, in any of the usual spellings).
_SAYS_WHY: Final = re.compile(
    r"(?i)\b(error|exception|fatal|panic|cannot|can't|could not|not found|no such|denied|"
    r"refused|invalid|missing|failed)\b"
)


class StderrTail:
    """
    The last few lines a child wrote on stderr, for the reason it exited: a server that
    dies saying why says it there, and the caller should read it without the log. Stack
    frames are left out, and the last line that says what failed is kept even when a
    trace printed after it (node's C{Error: Cannot find module ...} before its frames and
    C{code: 'MODULE_NOT_FOUND'}) would push it out of the last few.
    """

    __slots__ = ("_lines",)

    def __init__(self) -> None:
        self._lines: deque[str] = deque(maxlen=LOOKED_AT)

    def add(self, line: str) -> None:
        """Keep C{line} (already decoded), forgetting the oldest beyond L{LOOKED_AT}."""
        self._lines.append(line.strip())

    def said(self) -> str | None:
        """
        At most L{TAIL_LINES} of the lines kept, joined with C{" | "} and cut to
        L{TAIL_CHARACTERS} characters: the last ones that are not stack frames, with the
        last line that says what failed among them; C{None} if the child wrote nothing.
        """
        lines = [line for line in self._lines if line and not _FRAME.match(line)]
        if not lines:
            lines = [line for line in self._lines if line]
        if not lines:
            return None
        shown = lines[-TAIL_LINES:]
        why = next((line for line in reversed(lines) if _SAYS_WHY.search(line)), None)
        if why is not None and why not in shown:
            shown = [why, *shown[1:]]
        text = " | ".join(shown)
        if len(text) <= TAIL_CHARACTERS:
            return text
        # The newest characters, as ever; but never at the cost of the line that says why.
        text = "…" + text[-(TAIL_CHARACTERS - 1) :]
        if why is not None and why[:WHY_CHARACTERS] not in text:
            head = why[:WHY_CHARACTERS] + " | …"
            rest = " | ".join(line for line in shown if line is not why)
            text = head + rest[-(TAIL_CHARACTERS - len(head)) :]
        return text
