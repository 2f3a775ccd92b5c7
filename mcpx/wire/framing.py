# -*- test-case-name: tests.wire.test_framing -*-
"""
Newline-delimited JSON, the stdio framing of every MCP revision.

Each message is one line of JSON text ending in C{\\n}.  JSON text never contains a raw
newline (the encoder escapes it inside strings), so the newline is an unambiguous delimiter.

L{LineBuffer} splits a byte stream into lines with a hard cap on a line's length: a line that
grows past the cap is dropped as it arrives, never buffered whole, and reported exactly once.
L{NDJSONProtocol} is a Twisted protocol built on it.
"""

from __future__ import annotations

from typing import Final

from attrs import frozen
from twisted.internet.protocol import Protocol
from twisted.logger import Logger

#: The default largest message accepted, in bytes (not counting the newline).
DEFAULT_MAX_MESSAGE_SIZE: Final = 4 * 1024 * 1024

_NEWLINE: Final = b"\n"


@frozen(slots=True)
class LineTooLong:
    """
    In the output of L{LineBuffer.feed}: a line longer than C{limit} bytes was dropped here.
    """

    limit: int


class LineBuffer:
    """
    Collect bytes and hand back complete lines.

    C{\\r\\n} endings are accepted (the C{\\r} is removed) and blank lines are skipped.  A line
    longer than C{max_length} is not kept: its bytes are discarded up to the next newline and
    one L{LineTooLong} takes its place in the output, so a peer that never sends a newline
    costs at most C{max_length} bytes of memory.
    """

    __slots__ = ("_discarding", "_pending", "max_length")

    def __init__(self, max_length: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        if max_length < 1:
            raise ValueError(f"max_length must be positive, not {max_length}")
        self.max_length = max_length
        self._pending = bytearray()
        self._discarding = False

    @property
    def buffered(self) -> int:
        """How many bytes of an incomplete line are held."""
        return len(self._pending)

    def feed(self, data: bytes) -> list[bytes | LineTooLong]:
        """
        Add C{data}; return the lines it completed, in order, and a L{LineTooLong} for each
        line that went over the limit (reported when it goes over, not when it ends).
        """
        out: list[bytes | LineTooLong] = []
        limit = self.max_length
        pending = self._pending
        start = 0
        end = len(data)
        while start < end:
            newline = data.find(_NEWLINE, start)
            if self._discarding:
                if newline < 0:
                    break
                self._discarding = False
                start = newline + 1
                continue
            if newline < 0:
                if len(pending) + end - start > limit:
                    self._overflow(out)
                else:
                    pending += data[start:]
                break
            if pending:
                if len(pending) + newline - start > limit:
                    pending.clear()
                    out.append(LineTooLong(limit))
                    start = newline + 1
                    continue
                pending += data[start:newline]
                line = bytes(pending)
                pending.clear()
            else:
                if newline - start > limit:
                    out.append(LineTooLong(limit))
                    start = newline + 1
                    continue
                line = data[start:newline]
            start = newline + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            # isspace() stops at the first non-blank byte, so this is cheap for real messages.
            if line and not line.isspace():
                out.append(line)
        return out

    def _overflow(self, out: list[bytes | LineTooLong]) -> None:
        self._pending.clear()
        self._discarding = True
        out.append(LineTooLong(self.max_length))


def frame(payload: bytes) -> bytes:
    """
    One message as it goes on the wire: C{payload} and a newline.

    C{payload} must not contain a raw newline; encoded JSON never does, so it is not checked.
    """
    return payload + _NEWLINE


class NDJSONProtocol(Protocol):
    """
    A protocol that reads and writes newline-delimited messages.

    Subclasses implement L{message_received}, and may override L{message_too_large} (which
    logs by default).  Lines are split before any of them is delivered, so a subclass that
    reacts to one line (even by writing, or by being fed more bytes re-entrantly) never finds
    the buffer half-updated.  Delivery stops once the transport starts disconnecting.
    """

    log = Logger()

    def __init__(self, max_length: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        self._lines = LineBuffer(max_length)

    def dataReceived(self, data: bytes) -> None:
        for item in self._lines.feed(data):
            if self.transport is not None and getattr(self.transport, "disconnecting", False):
                return
            if type(item) is bytes:
                self.message_received(item)
            else:
                assert isinstance(item, LineTooLong)
                self.message_too_large(item.limit)

    def send_message(self, payload: bytes) -> None:
        """Write one message and its newline."""
        assert self.transport is not None
        # Two writes rather than a concatenation: no copy of a large payload.
        self.transport.writeSequence([payload, _NEWLINE])

    def message_received(self, line: bytes) -> None:
        """Called with each complete message, without its newline."""
        raise NotImplementedError(f"{type(self).__name__} must implement message_received")

    def message_too_large(self, limit: int) -> None:
        """Called once for each incoming message longer than C{limit} bytes, now dropped."""
        self.log.warn("dropped an incoming message longer than {limit} bytes", limit=limit)
