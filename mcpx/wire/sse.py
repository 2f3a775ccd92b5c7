# -*- test-case-name: tests.wire.test_sse -*-
"""
Server-Sent Events (the C{text/event-stream} format), both ways.

L{SSEDecoder} turns the bytes of a stream, in whatever chunks they arrive, into
L{Event}s, following the parsing rules of the HTML standard: lines end with
C{\\r\\n}, C{\\n} or C{\\r}; a line starting with C{:} is a comment; C{data} lines
accumulate; a blank line dispatches the event; an event without any C{data} line is not
dispatched, although an C{id} or C{retry} it carried still counts.  An event still
incomplete when the stream ends is discarded, as the standard says.

An event is held in memory until its blank line arrives, so the decoder caps its size
and raises L{EventTooLarge} past the cap instead of buffering without bound.

L{encode_event} and L{comment} write the format, for mcpx's own SSE responses.
"""

from __future__ import annotations

import codecs
import re
from typing import Final

from attrs import frozen

from mcpx.wire.framing import DEFAULT_MAX_MESSAGE_SIZE

#: The event type of an event that names none.
MESSAGE: Final = "message"

#: How much longer than C{max_event_size} a line may be: room for its field name.
_FIELD_ROOM: Final = 64

_LINE_END: Final = re.compile(r"\r\n|\r|\n")
_LINE_END_BYTES: Final = re.compile(rb"\r\n|\r|\n")


@frozen(slots=True)
class Event:
    """
    One dispatched event.

    @ivar event: its type; C{"message"} unless an C{event} field named another.
    @ivar data: its C{data} lines joined with C{\\n}.
    @ivar id: the value of the C{id} field given within this event, or C{None} if it gave
        none (L{SSEDecoder.last_event_id} is the id in force for the stream).
    @ivar retry: the reconnection time in milliseconds given within this event, if any.
    """

    event: str = MESSAGE
    data: str = ""
    id: str | None = None
    retry: int | None = None


class EventTooLarge(ValueError):
    """
    An event (or a single line of one) grew past the decoder's size limit; the stream
    cannot be read any further.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(f"server-sent event larger than {limit} characters; stream dropped")
        self.limit = limit


class SSEDecoder:
    """
    An incremental C{text/event-stream} parser for one stream.

    @ivar last_event_id: the stream's last event id: the most recent C{id} field, kept
        across events as the standard says; what a client sends as C{Last-Event-ID} when
        it reconnects.  Empty until the server sends one.
    @ivar retry: the most recent reconnection time the server asked for, in
        milliseconds, or C{None}.
    @ivar max_event_size: the largest event accepted, in characters of its C{data}
        (and the longest single line).
    """

    __slots__ = (
        "_broken",
        "_data",
        "_decoder",
        "_event_id",
        "_event_retry",
        "_event_type",
        "_partial",
        "_size",
        "_skip_lf",
        "_started",
        "last_event_id",
        "max_event_size",
        "retry",
    )

    def __init__(self, max_event_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        if max_event_size < 1:
            raise ValueError(f"max_event_size must be positive, not {max_event_size}")
        self.max_event_size = max_event_size
        self.last_event_id = ""
        self.retry: int | None = None
        # The standard decodes the stream as UTF-8, replacing what is not.
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._partial = ""
        self._skip_lf = False
        self._started = False
        self._broken: EventTooLarge | None = None
        self._reset_event()

    def _reset_event(self) -> None:
        self._data: list[str] = []
        self._size = 0
        self._event_type = ""
        self._event_id: str | None = None
        self._event_retry: int | None = None

    def feed(self, data: bytes) -> list[Event]:
        """
        Read the next chunk of the stream.

        @return: the events completed by this chunk, in order.
        @raise EventTooLarge: if an event or a line grows past C{max_event_size}; every
            later call raises it again.
        """
        if self._broken is not None:
            raise self._broken
        text = self._decoder.decode(data)
        if not text:
            return []
        if not self._started:
            self._started = True
            if text[0] == "\ufeff":
                text = text[1:]
        if self._skip_lf:
            # The previous chunk ended in CR; an LF starting this one belongs to it.
            self._skip_lf = False
            if text[0] == "\n":
                text = text[1:]
        if not text:
            return []
        if self._partial:
            text = self._partial + text
        lines = _LINE_END.split(text)
        self._partial = lines.pop()
        self._skip_lf = text[-1] == "\r"
        if len(self._partial) > self.max_event_size + _FIELD_ROOM:
            self._fail()
        events: list[Event] = []
        for line in lines:
            if not line:
                event = self._dispatch()
                if event is not None:
                    events.append(event)
            elif line[0] != ":":
                self._field(line)
        return events

    def _fail(self) -> None:
        self._broken = EventTooLarge(self.max_event_size)
        self._partial = ""
        self._reset_event()
        raise self._broken

    def _field(self, line: str) -> None:
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._size += len(value) + 1
            if self._size > self.max_event_size + 1:
                self._fail()
            self._data.append(value)
        elif name == "event":
            self._event_type = value
        elif name == "id":
            if "\0" not in value:
                self.last_event_id = value
                self._event_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry = self._event_retry = int(value)
        # Any other field is ignored, as the standard says.

    def _dispatch(self) -> Event | None:
        if not self._data:
            self._reset_event()
            return None
        event = Event(
            self._event_type or MESSAGE,
            "\n".join(self._data),
            self._event_id,
            self._event_retry,
        )
        self._reset_event()
        return event


def encode_event(
    data: bytes | str,
    event: str | None = None,
    id: str | None = None,
    retry: int | None = None,
) -> bytes:
    """
    One event in C{text/event-stream} form, ending with the blank line that dispatches it.

    Each line of C{data} becomes its own C{data:} line, so the receiver gets C{data} back
    exactly (with C{\\r\\n} and C{\\r} read as C{\\n}).  JSON text from
    L{mcpx.wire.messages.encode} has no line breaks and takes the short path.

    @param event: the event type; omitted means C{"message"}.
    @param id: the event id a client may resume from.
    @param retry: the reconnection time to ask for, in milliseconds.
    @raise ValueError: if C{event} or C{id} contains a line break, or C{id} a NUL, which
        the format cannot carry.
    """
    raw = data.encode("utf-8") if isinstance(data, str) else data
    parts: list[bytes] = []
    if event is not None:
        parts.append(b"event: " + _single_line(event, "event") + b"\n")
    if id is not None:
        if "\0" in id:
            raise ValueError("an SSE event id cannot contain NUL")
        parts.append(b"id: " + _single_line(id, "id") + b"\n")
    if retry is not None:
        if retry < 0:
            raise ValueError(f"retry must not be negative, not {retry}")
        parts.append(b"retry: %d\n" % retry)
    if b"\n" in raw or b"\r" in raw:
        for line in _LINE_END_BYTES.split(raw):
            parts.append(b"data: " + line + b"\n")
    else:
        parts.append(b"data: " + raw + b"\n")
    parts.append(b"\n")
    return b"".join(parts)


def comment(text: str = "") -> bytes:
    """
    A comment: lines a receiver ignores, used as a keep-alive on quiet streams.

    A comment dispatches nothing, so it may be written between events at any time.
    """
    return b"".join(b":" + (b" " + line if line else b"") + b"\n" for line in _lines(text))


def _lines(text: str) -> list[bytes]:
    return _LINE_END_BYTES.split(text.encode("utf-8"))


def _single_line(value: str, what: str) -> bytes:
    if "\n" in value or "\r" in value:
        raise ValueError(f"an SSE {what} cannot contain a line break")
    return value.encode("utf-8")
