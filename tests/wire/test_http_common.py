"""
Tests for L{mcpx.wire.http_common}: the value encoding of C{Mcp-Name} and C{Mcp-Param-*}
headers, written by the upstream side and read by the server side.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from mcpx.wire.http_common import decode_header_value, encode_header_value


class HeaderValueTests(SynchronousTestCase):
    """
    The 2026-07-28 value encoding of C{Mcp-Name} and C{Mcp-Param-*} headers.
    """

    def test_plain_ascii_as_is(self) -> None:
        """
        Header-safe ASCII, inner spaces included, is sent as it is.
        """
        self.assertEqual(encode_header_value("us-west1"), "us-west1")
        self.assertEqual(encode_header_value("a b"), "a b")
        self.assertEqual(encode_header_value("file:///x.json"), "file:///x.json")

    def test_encoded_when_unsafe(self) -> None:
        """
        Non-ASCII text, surrounding spaces, control characters, and plain values that look
        like the encoded form are all Base64-encoded in the sentinel form, as the
        specification's examples show.
        """
        self.assertEqual(encode_header_value("Hello, 世界"), "=?base64?SGVsbG8sIOS4lueVjA==?=")
        self.assertEqual(encode_header_value(" padded "), "=?base64?IHBhZGRlZCA=?=")
        self.assertEqual(encode_header_value("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=")
        self.assertEqual(encode_header_value("a\tb"), "=?base64?YQli?=")
        self.assertEqual(
            encode_header_value("=?base64?literal?="), "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="
        )

    def test_decoded(self) -> None:
        """
        An encoded value is decoded; anything else, C{=?base64?=} among them (too short
        to hold the form), is read as it is.
        """
        self.assertEqual(decode_header_value("=?base64?aMOp?="), "hé")
        self.assertEqual(decode_header_value("=?base64??="), "")
        self.assertEqual(decode_header_value("plain"), "plain")
        # The form elsewhere than at the start is no encoding.
        self.assertEqual(decode_header_value("x=?base64?aMOp?="), "x=?base64?aMOp?=")
        self.assertEqual(decode_header_value(" =?base64?aMOp?="), " =?base64?aMOp?=")
        self.assertEqual(decode_header_value("=?base64?="), "=?base64?=")

    def test_malformed_refused(self) -> None:
        """
        An encoded value that is not padded Base64, or not Base64 of UTF-8, is a
        C{ValueError}, for each side to answer in its own way.
        """
        for value in ("=?base64?***?=", "=?base64?aGk?=", "=?base64?/w==?="):
            with self.assertRaises(ValueError, msg=value):
                decode_header_value(value)

    def test_round_trip(self) -> None:
        """What the client side writes, the server side reads back as it was."""
        for value in (
            "us-west1",
            "a b",
            " padded ",
            "Hello, 世界",
            "a\tb",
            "=?base64?literal?=",
            "=?base64?=",
            "",
        ):
            self.assertEqual(decode_header_value(encode_header_value(value)), value)
