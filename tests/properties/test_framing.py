"""Properties of L{mcpx.wire.framing.LineBuffer}: lines out, whatever the chunking."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from mcpx.wire.framing import LineBuffer, LineTooLong
from tests.properties import bounded

LIMIT = 64

#: Line contents without the newline, some longer than the limit, some blank or CR-ended.
line_bodies = st.one_of(
    st.binary(max_size=LIMIT + 20).map(lambda data: data.replace(b"\n", b"")),
    st.sampled_from([b"", b"\r", b" \t ", b"{}\r", b"x" * LIMIT, b"x" * (LIMIT + 1)]),
)


def expected(bodies: list[bytes]) -> list[bytes | LineTooLong]:
    """What a LineBuffer promises for these lines, each ended by a newline."""
    out: list[bytes | LineTooLong] = []
    for body in bodies:
        if len(body) > LIMIT:
            out.append(LineTooLong(LIMIT))
            continue
        line = body[:-1] if body.endswith(b"\r") else body
        if line and not line.isspace():
            out.append(line)
    return out


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(cut, len(data)) for cut in cuts})
    pieces = []
    start = 0
    for point in points:
        pieces.append(data[start:point])
        start = point
    pieces.append(data[start:])
    return pieces


class LineBufferProperties(SynchronousTestCase):
    @bounded(200)
    @given(st.lists(line_bodies, max_size=12), st.lists(st.integers(0, 2000), max_size=12))
    def test_lines_survive_any_chunking(self, bodies: list[bytes], cuts: list[int]) -> None:
        """
        Newline-ended lines fed in any chunks come out as the lines, CR removed, blank ones
        skipped, and each over-long one replaced by exactly one LineTooLong.
        """
        buffer = LineBuffer(LIMIT)
        out: list[bytes | LineTooLong] = []
        for piece in chunked(b"".join(body + b"\n" for body in bodies), cuts):
            out.extend(buffer.feed(piece))
        self.assertEqual(out, expected(bodies))
        self.assertEqual(buffer.buffered, 0)

    @bounded(200)
    @given(st.binary(max_size=600), st.lists(st.integers(0, 600), max_size=20))
    def test_any_bytes_bounded_and_chunking_invariant(self, data: bytes, cuts: list[int]) -> None:
        """
        Arbitrary bytes never make the buffer hold more than its limit, never yield a line
        over it, and yield the same lines however they are split.
        """
        whole = LineBuffer(LIMIT).feed(data)
        buffer = LineBuffer(LIMIT)
        out: list[bytes | LineTooLong] = []
        for piece in chunked(data, cuts):
            out.extend(buffer.feed(piece))
            self.assertLessEqual(buffer.buffered, LIMIT)
        self.assertEqual(out, whole)
        for item in out:
            if isinstance(item, bytes):
                self.assertLessEqual(len(item), LIMIT)
                self.assertNotIn(b"\n", item)
