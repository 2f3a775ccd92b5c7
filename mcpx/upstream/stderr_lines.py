# -*- test-case-name: tests.upstream.test_stdio -*-
"""
A stdio server's stderr as log lines, each kept to a bounded length, and the last few
of them, which the reason it exited quotes.
"""

from __future__ import annotations

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


class StderrTail:
    """
    The last few lines a child wrote on stderr, for the reason it exited: a server that
    dies saying why says it there, and the caller should read it without the log.
    """

    __slots__ = ("_lines",)

    def __init__(self) -> None:
        self._lines: deque[str] = deque(maxlen=TAIL_LINES)

    def add(self, line: str) -> None:
        """Keep C{line} (already decoded), forgetting the oldest beyond L{TAIL_LINES}."""
        self._lines.append(line.strip())

    def said(self) -> str | None:
        """
        The lines kept, joined with C{" | "} and cut to their last L{TAIL_CHARACTERS}
        characters; C{None} if the child wrote nothing on stderr.
        """
        if not self._lines:
            return None
        text = " | ".join(self._lines)
        if len(text) > TAIL_CHARACTERS:
            text = "…" + text[-(TAIL_CHARACTERS - 1) :]
        return text
