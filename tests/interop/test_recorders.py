"""
The recorders the interop matrix validates mcpx's frames from read every frame, however
the bytes of a stream happen to be cut.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.interop.relay import EventStream, frames_of

_STREAM = (
    b"id: 0\r\ndata:\r\n\r\n"
    b'event: message\r\nid: 1\r\ndata: {"jsonrpc": "2.0", "method": "a"}\r\n\r\n'
    b'data: {"jsonrpc": "2.0",\ndata:  "id": 1, "result": {}}\n\n'
    b'data:{"jsonrpc":"2.0","method":"b"}\r\r\n'
)
_EVENTS = [
    b'{"jsonrpc": "2.0", "method": "a"}',
    b'{"jsonrpc": "2.0",\n "id": 1, "result": {}}',
    b'{"jsonrpc":"2.0","method":"b"}',
]


class EventStreamTests(SynchronousTestCase):
    def test_every_event_with_data_whatever_the_line_ends(self) -> None:
        """Events end at a blank line after CRLF, LF or CR; a priming event yields nothing."""
        self.assertEqual(list(EventStream().feed(_STREAM)), _EVENTS)

    def test_cut_anywhere(self) -> None:
        """Fed one byte at a time (a CRLF cut in two included), the same events come out."""
        stream = EventStream()
        self.assertEqual(
            [e for i in range(len(_STREAM)) for e in stream.feed(_STREAM[i : i + 1])], _EVENTS
        )


class FramesOfTests(SynchronousTestCase):
    def test_batch_single_empty_and_garbage(self) -> None:
        """A batch gives each member; an empty body none; what is not JSON is kept as text."""
        self.assertEqual(frames_of(b'[{"id": 1}, {"id": 2}]'), [{"id": 1}, {"id": 2}])
        self.assertEqual(frames_of(b'{"id": 1}'), [{"id": 1}])
        self.assertEqual(frames_of(b" \n"), [])
        self.assertEqual(frames_of(b"not json"), ["not json"])
