# -*- test-case-name: tests.wire.test_framing -*-
"""
Newline-delimited JSON, the stdio framing of every MCP revision.

Each message is one line of JSON text ending in C{\\n}.  JSON text never contains a raw
newline (the encoder escapes it inside strings), so the newline is an unambiguous delimiter.

L{LineBuffer} splits a byte stream into lines with a hard cap on a line's length: a line that
grows past the cap is dropped as it arrives, never buffered whole, and reported exactly once.
Buffering is linear: each chunk is searched once for a newline and appended once to a
C{bytearray}, so a 64 MiB line read 8 KiB at a time costs one copy, not thousands.
L{NDJSONProtocol} is a Twisted protocol built on it.

A reader that must say which request a dropped line answered (the stdio channel) keeps
its two ends (C{ends}) and finds the id there with L{oversized_response_id}.
"""

from __future__ import annotations

import json
import re
from typing import Final

from attrs import frozen
from twisted.internet.protocol import Protocol
from twisted.logger import Logger

from mcpx.wire.prompt_write import write_now

#: The default largest message accepted, in bytes (not counting the newline).  Real servers
#: answer with whole files, images and query results, often twice over (in C{content} and
#: C{structuredContent}); 64 MiB lets those through.
DEFAULT_MAX_MESSAGE_SIZE: Final = 64 * 1024 * 1024

_NEWLINE: Final = b"\n"


@frozen(slots=True)
class LineTooLong:
    """
    In the output of L{LineBuffer.feed}: a line longer than C{limit} bytes was dropped here.

    @ivar head: its first bytes, when the buffer keeps the ends of long lines.
    @ivar tail: its last bytes, likewise.
    """

    limit: int
    head: bytes = b""
    tail: bytes = b""


class LineBuffer:
    """
    Collect bytes and hand back complete lines.

    C{\\r\\n} endings are accepted (the C{\\r} is removed) and blank lines are skipped.  A line
    longer than C{max_length} is not kept: its bytes are discarded up to the next newline and
    one L{LineTooLong} takes its place in the output, so a peer that never sends a newline
    costs at most C{max_length} bytes of memory.

    With C{ends}, the first and last C{ends} bytes of a long line are kept, and its
    L{LineTooLong} (carrying them) comes when the line ends rather than when it goes over.
    """

    __slots__ = ("_discarding", "_ends", "_head", "_pending", "_tail", "max_length")

    def __init__(self, max_length: int = DEFAULT_MAX_MESSAGE_SIZE, ends: int = 0) -> None:
        if max_length < 1:
            raise ValueError(f"max_length must be positive, not {max_length}")
        self.max_length = max_length
        self._ends = ends
        self._pending = bytearray()
        self._discarding = False
        self._head = b""
        self._tail = bytearray()

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
                stop = end if newline < 0 else newline
                self._keep_tail(data, start, stop)
                if newline < 0:
                    break
                self._discarding = False
                if self._ends:
                    out.append(self._too_long())
                start = newline + 1
                continue
            if newline < 0:
                if len(pending) + end - start > limit:
                    self._overflow(out, data, start, end)
                else:
                    pending += data[start:]
                break
            if len(pending) + newline - start > limit:
                # The whole line is here: its ends are what is buffered and this chunk.
                self._overflow(out, data, start, newline)
                self._discarding = False
                if self._ends:
                    out.append(self._too_long())
                start = newline + 1
                continue
            if pending:
                pending += data[start:newline]
                line = bytes(pending)
                pending.clear()
            else:
                line = data[start:newline]
            start = newline + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            # isspace() stops at the first non-blank byte, so this is cheap for real messages.
            if line and not line.isspace():
                out.append(line)
        return out

    def _overflow(self, out: list[bytes | LineTooLong], data: bytes, start: int, stop: int) -> None:
        """The line held in C{pending} and C{data[start:stop]} went over the limit."""
        ends = self._ends
        if ends:
            head = bytes(self._pending[:ends])
            if len(head) < ends:
                head += data[start : start + ends - len(head)]
            self._head = head
            self._tail = bytearray(self._pending[-ends:])
            self._keep_tail(data, start, stop)
        else:
            out.append(LineTooLong(self.max_length))
        self._pending.clear()
        self._discarding = True

    def _keep_tail(self, data: bytes, start: int, stop: int) -> None:
        ends = self._ends
        if ends:
            tail = self._tail
            tail += data[max(start, stop - ends) : stop]
            del tail[:-ends]

    def _too_long(self) -> LineTooLong:
        report = LineTooLong(self.max_length, self._head, bytes(self._tail).rstrip(b"\r"))
        self._head = b""
        self._tail.clear()
        return report


#: The end of a response whose C{id} comes last, as the TypeScript SDK writes it:
#: C{...,"jsonrpc":"2.0","id":7}.  The quote before C{id} follows a comma, so it cannot
#: be inside a string: in a well-formed line this is the top-level object's own key.
_TAIL_ID: Final = re.compile(
    rb'[{,]\s*"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*'
    rb'(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?\}\s*$'
)
_DECODER: Final = json.JSONDecoder()
_BLANKS: Final = " \t\r\n"


def oversized_response_id(head: bytes, tail: bytes) -> int | str | None:
    """
    The id of the response a dropped line carried, found in its two ends; C{None}
    unless the line is certainly a response (a top-level C{result} or C{error} and no
    C{method}) and its id is certain.
    """
    keys, found = _top_level_keys(head.decode("utf-8", "replace"))
    if "method" in keys or not ({"result", "error"} & keys):
        return None
    if found is not None:
        return found
    match = _TAIL_ID.search(tail)
    if match is None:
        return None
    value = json.loads(match.group(1))
    return value if type(value) in (int, str) else None


def _top_level_keys(text: str) -> tuple[set[str], int | str | None]:
    """
    The keys of the top-level object that C{text} (the head of a line) shows, up to the
    first value it cuts off, and the C{id} if one of those values is it.
    """
    keys: set[str] = set()
    found: int | str | None = None
    index = _skip(text, 0)
    if not text.startswith("{", index):
        return keys, None
    index += 1
    while True:
        index = _skip(text, index)
        if not text.startswith('"', index):
            return keys, found
        try:
            key, index = _DECODER.raw_decode(text, index)
        except ValueError:
            return keys, found
        index = _skip(text, index)
        if not text.startswith(":", index):
            return keys, found
        keys.add(key)
        index = _skip(text, index + 1)
        try:
            value, index = _DECODER.raw_decode(text, index)
        except ValueError:
            return keys, found
        if key == "id" and type(value) in (int, str):
            found = value
        index = _skip(text, index)
        if not text.startswith(",", index):
            return keys, found
        index += 1


def _skip(text: str, index: int) -> int:
    while index < len(text) and text[index] in _BLANKS:
        index += 1
    return index


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
        """
        Write one message and its newline, sent now when nothing is queued on the
        connection (L{write_now}: without waiting for the reactor's next pass).  The
        joined copy costs nothing more: Twisted joins what it buffers before sending.
        """
        assert self.transport is not None
        write_now(self.transport, payload + _NEWLINE)

    def message_received(self, line: bytes) -> None:
        """Called with each complete message, without its newline."""
        raise NotImplementedError(f"{type(self).__name__} must implement message_received")

    def message_too_large(self, limit: int) -> None:
        """Called once for each incoming message longer than C{limit} bytes, now dropped."""
        self.log.warn("dropped an incoming message longer than {limit} bytes", limit=limit)
