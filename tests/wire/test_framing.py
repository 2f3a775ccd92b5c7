"""
Tests for L{mcpx.wire.framing}.
"""

from __future__ import annotations

from twisted.internet.testing import EventLoggingObserver, StringTransport
from twisted.logger import globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from mcpx.wire.framing import (
    DEFAULT_MAX_MESSAGE_SIZE,
    LineBuffer,
    LineTooLong,
    NDJSONProtocol,
    frame,
)


def observe_log(case: SynchronousTestCase) -> EventLoggingObserver:
    """Collect every log event emitted until C{case} ends."""
    events = EventLoggingObserver()
    globalLogPublisher.addObserver(events)
    case.addCleanup(globalLogPublisher.removeObserver, events)
    return events


class LineBufferTests(SynchronousTestCase):
    """
    L{LineBuffer} splits a byte stream into lines, with a cap on their length.
    """

    def test_default_limit(self) -> None:
        """
        The default cap is 64 MiB.
        """
        self.assertEqual(DEFAULT_MAX_MESSAGE_SIZE, 64 * 1024 * 1024)
        self.assertEqual(LineBuffer().max_length, DEFAULT_MAX_MESSAGE_SIZE)

    def test_several_lines_in_one_chunk(self) -> None:
        """
        Every complete line in a chunk is returned, in order.
        """
        self.assertEqual(LineBuffer().feed(b"one\ntwo\nthree\n"), [b"one", b"two", b"three"])

    def test_line_across_chunks(self) -> None:
        """
        A line is returned only once its newline arrives, whole.
        """
        buffer = LineBuffer()
        self.assertEqual(buffer.feed(b'{"a"'), [])
        self.assertEqual(buffer.feed(b":1"), [])
        self.assertEqual(buffer.buffered, 6)
        self.assertEqual(buffer.feed(b"}\n{"), [b'{"a":1}'])
        self.assertEqual(buffer.feed(b"}\n"), [b"{}"])
        self.assertEqual(buffer.buffered, 0)

    def test_crlf(self) -> None:
        """
        A carriage return before the newline is not part of the line.
        """
        buffer = LineBuffer()
        self.assertEqual(buffer.feed(b"a\r\nb\r"), [b"a"])
        self.assertEqual(buffer.feed(b"\n"), [b"b"])

    def test_blank_lines_skipped(self) -> None:
        """
        Empty and whitespace-only lines produce nothing.
        """
        self.assertEqual(LineBuffer().feed(b"\n\r\n  \t\nx\n\n"), [b"x"])

    def test_exact_limit_accepted(self) -> None:
        """
        A line exactly as long as the limit is delivered.
        """
        buffer = LineBuffer(5)
        self.assertEqual(buffer.feed(b"12345\n"), [b"12345"])
        self.assertEqual(buffer.feed(b"123"), [])
        self.assertEqual(buffer.feed(b"45\n"), [b"12345"])

    def test_long_line_in_one_chunk(self) -> None:
        """
        A complete line over the limit is replaced by one L{LineTooLong}; the lines around it
        are delivered.
        """
        self.assertEqual(
            LineBuffer(5).feed(b"ok\n123456\nfine\n"), [b"ok", LineTooLong(5), b"fine"]
        )

    def test_long_line_completed_later(self) -> None:
        """
        A buffered line that goes over the limit when its end arrives is reported once.
        """
        buffer = LineBuffer(5)
        self.assertEqual(buffer.feed(b"123"), [])
        self.assertEqual(buffer.feed(b"456\nok\n"), [LineTooLong(5), b"ok"])
        self.assertEqual(buffer.buffered, 0)

    def test_long_line_not_buffered(self) -> None:
        """
        A line that never ends costs at most the limit in memory, is reported as soon as it
        goes over, only once, and the stream recovers after its newline.
        """
        buffer = LineBuffer(10)
        self.assertEqual(buffer.feed(b"x" * 8), [])
        self.assertEqual(buffer.feed(b"x" * 8), [LineTooLong(10)])
        for _ in range(100):
            self.assertEqual(buffer.feed(b"x" * 1000), [])
            self.assertEqual(buffer.buffered, 0)
        self.assertEqual(buffer.feed(b"xx\nnext\n"), [b"next"])

    def test_long_line_then_partial(self) -> None:
        """
        After a dropped line ends, the bytes that follow start a new line.
        """
        buffer = LineBuffer(4)
        self.assertEqual(buffer.feed(b"xxxxxxx"), [LineTooLong(4)])
        self.assertEqual(buffer.feed(b"x\nab"), [])
        self.assertEqual(buffer.feed(b"c\n"), [b"abc"])

    def test_invalid_limit(self) -> None:
        """
        A limit below one byte is refused.
        """
        self.assertRaises(ValueError, LineBuffer, 0)


class FrameTests(SynchronousTestCase):
    """
    L{frame} ends a message with its newline.
    """

    def test_frame(self) -> None:
        """
        The payload is followed by exactly one newline, and reads back as one line.
        """
        framed = frame(b'{"a":1}')
        self.assertEqual(framed, b'{"a":1}\n')
        self.assertEqual(LineBuffer().feed(framed), [b'{"a":1}'])


class RecordingProtocol(NDJSONProtocol):
    """
    Records what L{NDJSONProtocol} delivers; may disconnect on a chosen line.
    """

    def __init__(self, max_length: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        super().__init__(max_length)
        self.received: list[bytes] = []
        self.too_large: list[int] = []
        self.hang_up_on: bytes | None = None

    def message_received(self, line: bytes) -> None:
        self.received.append(line)
        if line == self.hang_up_on:
            assert self.transport is not None
            self.transport.loseConnection()

    def message_too_large(self, limit: int) -> None:
        self.too_large.append(limit)


class NDJSONProtocolTests(SynchronousTestCase):
    """
    L{NDJSONProtocol} reads and writes lines over a transport.
    """

    def connect(
        self, max_length: int = DEFAULT_MAX_MESSAGE_SIZE
    ) -> tuple[RecordingProtocol, StringTransport]:
        protocol = RecordingProtocol(max_length)
        transport = StringTransport()
        protocol.makeConnection(transport)
        return protocol, transport

    def test_delivers_lines(self) -> None:
        """
        Each complete line is passed to C{message_received} without its newline.
        """
        protocol, _ = self.connect()
        protocol.dataReceived(b'{"a":1}\n{"b"')
        protocol.dataReceived(b":2}\r\n")
        self.assertEqual(protocol.received, [b'{"a":1}', b'{"b":2}'])

    def test_too_large(self) -> None:
        """
        An oversized line is reported once with the limit, and not delivered.
        """
        protocol, _ = self.connect(max_length=4)
        protocol.dataReceived(b"12345678")
        protocol.dataReceived(b"9\nok\n")
        self.assertEqual((protocol.received, protocol.too_large), ([b"ok"], [4]))

    def test_too_large_default_logs(self) -> None:
        """
        Without an override, an oversized line is logged, not raised.
        """

        class Plain(NDJSONProtocol):
            def message_received(self, line: bytes) -> None:
                pass

        events = observe_log(self)
        protocol = Plain(max_length=2)
        protocol.makeConnection(StringTransport())
        protocol.dataReceived(b"abcdef\n")
        self.assertEqual([event.get("limit") for event in events], [2])

    def test_send_message(self) -> None:
        """
        Sending writes the payload and a newline.
        """
        protocol, transport = self.connect()
        protocol.send_message(b'{"x":1}')
        self.assertEqual(transport.value(), b'{"x":1}\n')

    def test_stops_after_disconnect(self) -> None:
        """
        Lines after the one that made the protocol hang up are not delivered.
        """
        protocol, transport = self.connect()
        protocol.hang_up_on = b"bye"
        protocol.dataReceived(b"one\nbye\nthree\n")
        self.assertEqual(protocol.received, [b"one", b"bye"])
        self.assertTrue(transport.disconnecting)
