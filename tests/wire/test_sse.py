"""
Tests for L{mcpx.wire.sse}: decoding server-sent events chunk by chunk, and writing them.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from mcpx.wire.sse import Event, EventTooLarge, SSEDecoder, comment, encode_event


def feed_bytewise(decoder: SSEDecoder, data: bytes) -> list[Event]:
    """Feed C{data} one byte at a time, collecting every event."""
    events: list[Event] = []
    for i in range(len(data)):
        events.extend(decoder.feed(data[i : i + 1]))
    return events


class SSEDecoderTests(SynchronousTestCase):
    """
    L{SSEDecoder} follows the event-stream parsing rules whatever the chunking.
    """

    def test_single_event(self) -> None:
        """
        A C{data} line followed by a blank line is one C{message} event.
        """
        self.assertEqual(SSEDecoder().feed(b"data: hello\n\n"), [Event("message", "hello")])

    def test_several_events_in_one_chunk(self) -> None:
        """
        Every event a chunk completes comes back, in order, with its type and id.
        """
        events = SSEDecoder().feed(
            b"event: endpoint\ndata: /messages?s=1\n\nid: 7\ndata: {}\n\ndata: x\n\n"
        )
        self.assertEqual(
            events,
            [
                Event("endpoint", "/messages?s=1"),
                Event("message", "{}", "7"),
                Event("message", "x"),
            ],
        )

    def test_every_line_ending(self) -> None:
        """
        CRLF, LF and lone CR all end lines, mixed in one stream.
        """
        stream = b"data: a\r\n\r\ndata: b\n\ndata: c\r\rdata: d\r\n\n"
        expected = [Event(data="a"), Event(data="b"), Event(data="c"), Event(data="d")]
        self.assertEqual(SSEDecoder().feed(stream), expected)
        self.assertEqual(feed_bytewise(SSEDecoder(), stream), expected)

    def test_crlf_split_across_chunks(self) -> None:
        """
        A CR ending one chunk and the LF starting the next are one line ending, not two:
        no empty event is dispatched between them and the event is not cut short.
        """
        decoder = SSEDecoder()
        self.assertEqual(decoder.feed(b"data: a\r"), [])
        self.assertEqual(decoder.feed(b"\ndata: b\r"), [])
        self.assertEqual(decoder.feed(b"\n\r\n"), [Event(data="a\nb")])

    def test_event_split_anywhere(self) -> None:
        """
        Byte-at-a-time delivery, including inside a multi-byte UTF-8 character, gives the
        same events as one chunk.
        """
        stream = "event: note\nid: é1\ndata: héllo 世界\ndata: two\n\n".encode()
        whole = SSEDecoder().feed(stream)
        self.assertEqual(whole, [Event("note", "héllo 世界\ntwo", "é1")])
        self.assertEqual(feed_bytewise(SSEDecoder(), stream), whole)

    def test_multiline_data(self) -> None:
        """
        Several C{data} lines join with newlines; an empty C{data} line adds an empty line.
        """
        events = SSEDecoder().feed(b"data: one\ndata:\ndata:three\n\n")
        self.assertEqual(events, [Event(data="one\n\nthree")])

    def test_only_one_leading_space_removed(self) -> None:
        """
        One space after the colon is dropped; further spaces are part of the value.
        """
        self.assertEqual(SSEDecoder().feed(b"data:   x \n\n"), [Event(data="  x ")])

    def test_comments_ignored(self) -> None:
        """
        Lines starting with a colon (keep-alives) carry nothing and dispatch nothing.
        """
        decoder = SSEDecoder()
        self.assertEqual(decoder.feed(b":\r\n: keep-alive\n\n"), [])
        self.assertEqual(decoder.feed(b"data: a\n: inside\ndata: b\n\n"), [Event(data="a\nb")])

    def test_unknown_fields_ignored(self) -> None:
        """
        Fields the format does not define are ignored, as is a field line with no colon
        other than C{data}.
        """
        events = SSEDecoder().feed(b"foo: bar\nevent\ndata\n\n")
        self.assertEqual(events, [Event(data="")])

    def test_event_without_data_not_dispatched(self) -> None:
        """
        An event with no C{data} line is not dispatched, but its id becomes the stream's
        last event id and its retry the stream's retry (a priming event).
        """
        decoder = SSEDecoder()
        self.assertEqual(decoder.feed(b"id: prime-1\nretry: 250\n\n"), [])
        self.assertEqual(decoder.last_event_id, "prime-1")
        self.assertEqual(decoder.retry, 250)

    def test_priming_event_with_empty_data(self) -> None:
        """
        An event with an empty C{data} line is dispatched with empty data.
        """
        decoder = SSEDecoder()
        self.assertEqual(decoder.feed(b"id: 0\ndata:\n\n"), [Event(data="", id="0")])

    def test_last_event_id_persists(self) -> None:
        """
        The last event id stays in force across later events that carry none; an event
        reports only the id it carried itself.
        """
        decoder = SSEDecoder()
        events = decoder.feed(b"id: 5\ndata: a\n\ndata: b\n\n")
        self.assertEqual(events, [Event(data="a", id="5"), Event(data="b")])
        self.assertEqual(decoder.last_event_id, "5")

    def test_id_with_nul_ignored(self) -> None:
        """
        An C{id} field containing NUL is ignored.
        """
        decoder = SSEDecoder()
        events = decoder.feed(b"id: 1\n\nid: a\x00b\ndata: x\n\n")
        self.assertEqual(events, [Event(data="x")])
        self.assertEqual(decoder.last_event_id, "1")

    def test_retry_must_be_digits(self) -> None:
        """
        C{retry} is read only when it is all ASCII digits, and is reported on its event.
        """
        decoder = SSEDecoder()
        events = decoder.feed(b"retry: 1.5\ndata: a\n\nretry: 3000\ndata: b\n\n")
        self.assertEqual(events, [Event(data="a"), Event(data="b", retry=3000)])
        self.assertEqual(decoder.retry, 3000)

    def test_byte_order_mark_skipped(self) -> None:
        """
        A UTF-8 byte order mark starting the stream is not part of the first line.
        """
        events = SSEDecoder().feed(b"\xef\xbb\xbfdata: a\n\n")
        self.assertEqual(events, [Event(data="a")])

    def test_invalid_utf8_replaced(self) -> None:
        """
        Bytes that are not UTF-8 become replacement characters rather than errors.
        """
        self.assertEqual(SSEDecoder().feed(b"data: \xff\n\n"), [Event(data="\ufffd")])

    def test_incomplete_event_is_held(self) -> None:
        """
        An event without its blank line yet is not dispatched.
        """
        decoder = SSEDecoder()
        self.assertEqual(decoder.feed(b"data: a\n"), [])
        self.assertEqual(decoder.feed(b"\n"), [Event(data="a")])

    def test_event_too_large(self) -> None:
        """
        Data lines adding up to more than the limit raise L{EventTooLarge} naming it, and
        the decoder refuses anything more.
        """
        decoder = SSEDecoder(max_event_size=10)
        self.assertEqual(decoder.feed(b"data: 12345\n"), [])
        with self.assertRaises(EventTooLarge) as caught:
            decoder.feed(b"data: 67890\n")
        self.assertIn("10", str(caught.exception))
        self.assertRaises(EventTooLarge, decoder.feed, b"\n")

    def test_event_at_limit_accepted(self) -> None:
        """
        Data of exactly the limit (counting the newlines joining lines) is accepted.
        """
        decoder = SSEDecoder(max_event_size=11)
        self.assertEqual(
            decoder.feed(b"data: 12345\ndata: 67890\n\n"), [Event(data="12345\n67890")]
        )

    def test_endless_line_too_large(self) -> None:
        """
        A line that never ends is refused once it is past the limit, without waiting for
        its end.
        """
        decoder = SSEDecoder(max_event_size=100)
        self.assertEqual(decoder.feed(b"data: " + b"x" * 100), [])
        self.assertRaises(EventTooLarge, decoder.feed, b"x" * 100)

    def test_limit_must_be_positive(self) -> None:
        """
        A limit below one is a programming error.
        """
        self.assertRaises(ValueError, SSEDecoder, 0)


class EncodeTests(SynchronousTestCase):
    """
    L{encode_event} and L{comment} write what L{SSEDecoder} reads back.
    """

    def test_message(self) -> None:
        """
        Plain data becomes one C{data:} line and a blank line.
        """
        self.assertEqual(encode_event(b'{"a":1}'), b'data: {"a":1}\n\n')

    def test_all_fields(self) -> None:
        """
        The type, id and retry are written before the data.
        """
        self.assertEqual(
            encode_event("x", event="endpoint", id="42", retry=500),
            b"event: endpoint\nid: 42\nretry: 500\ndata: x\n\n",
        )

    def test_round_trip(self) -> None:
        """
        Multi-line data, a type and an id survive encoding then decoding.
        """
        data = "line one\nline two\r\nline three\n"
        decoded = SSEDecoder().feed(encode_event(data, event="e", id="i-1"))
        self.assertEqual(decoded, [Event("e", "line one\nline two\nline three\n", "i-1")])

    def test_line_breaks_refused_in_fields(self) -> None:
        """
        An event type or id with a line break, or an id with NUL, cannot be written.
        """
        self.assertRaises(ValueError, encode_event, "x", event="a\nb")
        self.assertRaises(ValueError, encode_event, "x", id="a\rb")
        self.assertRaises(ValueError, encode_event, "x", id="a\0b")
        self.assertRaises(ValueError, encode_event, "x", retry=-1)

    def test_comment(self) -> None:
        """
        A comment is a colon line the decoder ignores; an empty one is a bare colon.
        """
        self.assertEqual(comment(), b":\n")
        self.assertEqual(comment("ping"), b": ping\n")
        self.assertEqual(comment("a\nb"), b": a\n: b\n")
        decoder = SSEDecoder()
        self.assertEqual(decoder.feed(comment("a\nb") + encode_event("d")), [Event(data="d")])
