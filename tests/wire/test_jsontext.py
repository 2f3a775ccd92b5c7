"""Tests for L{mcpx.wire.jsontext}: the strict JSON reader every entry point shares."""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from mcpx.wire.jsontext import MAX_DEPTH, JSONRefused, _decoder, loads


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


class LoadsTests(SynchronousTestCase):
    def refusal(self, data: bytes | str) -> str:
        return str(self.assertRaises(JSONRefused, loads, data))

    def test_plain_json(self) -> None:
        """Ordinary JSON decodes as the standard library decodes it."""
        self.assertEqual(
            loads(b'{"a":[1,2.5,-3e10,"x",null,true],"b":{}}'),
            {"a": [1, 2.5, -3e10, "x", None, True], "b": {}},
        )

    def test_non_finite_constants_refused(self) -> None:
        """NaN, Infinity and -Infinity are refused by name."""
        for name in ("NaN", "Infinity", "-Infinity"):
            self.assertIn(name, self.refusal('{"a":[' + name + "]}"))

    def test_overflowing_number_refused(self) -> None:
        """1e400, which a float cannot hold, is refused instead of becoming inf."""
        self.assertIn("1e400", self.refusal(b'{"a":1e400}'))
        self.assertIn("-1E+999", self.refusal(b"[-1E+999]"))

    def test_largest_finite_float_kept(self) -> None:
        """A number just inside the float range is a number."""
        self.assertEqual(loads(b"[1.7976931348623157e308]"), [1.7976931348623157e308])

    def test_nesting_at_the_limit_kept(self) -> None:
        """Objects and arrays nested exactly MAX_DEPTH deep decode."""
        value = loads(nested(MAX_DEPTH))
        for _ in range(MAX_DEPTH - 1):
            value = value[0]
        self.assertEqual(value, [])

    def test_nesting_past_the_limit_refused(self) -> None:
        """One level more, or a thousand, is refused with the limit in the message."""
        for depth in (MAX_DEPTH + 1, 1000, 100_000):
            self.assertIn(str(MAX_DEPTH), self.refusal(nested(depth)))
        self.assertIn("nested", self.refusal(b'{"a":' * 500 + b"1" + b"}" * 500))

    def test_many_shallow_containers_kept(self) -> None:
        """Many brackets side by side are not depth: a wide array decodes."""
        self.assertEqual(len(loads(b"[" + b",".join([b"[{}]"] * 5000) + b"]")), 5000)

    def test_brackets_in_strings_are_not_depth(self) -> None:
        """Brackets inside strings count for nothing."""
        self.assertEqual(loads(b'["' + b"[" * 5000 + b'"]'), ["[" * 5000])

    def test_not_utf8_refused(self) -> None:
        """Bytes that are not UTF-8 are refused, saying so."""
        self.assertIn("UTF-8", self.refusal(b'{"a":"\xff"}'))

    def test_malformed_refused_with_position(self) -> None:
        """Malformed text is refused with the decoder's account of where."""
        self.assertIn("char 5", self.refusal(b'{"a":}'))

    def test_too_many_digits_refused(self) -> None:
        """An integer longer than Python converts is refused, not raised as a bare ValueError."""
        self.assertIsInstance(self.refusal(b"[" + b"9" * 5000 + b"]"), str)

    def test_same_as_the_decoder(self) -> None:
        """
        Whether the text is read by the scanner alone (one value, nothing around it) or
        by the decoder (space around it, or more after it), the value, or the refusal
        and its account of where, is the standard library decoder's with mcpx's rules.
        """
        texts = [
            '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}',
            ' {"a":1}',
            '{"a":1} ',
            '\n\t{"a":"é ✓ 𝄞 \\u2028"}\r\n',
            "[1,2]",
            '"x"',
            "3",
            " 3 ",
            "1.5e3",
            "null",
            '{"a":1}{"b":2}',
            '{"a":1} x',
            "[1] [2]",
            "",
            "   ",
            "}",
            '{"a":}',
            '{"a":1',
            '{"a" 1}',
            "[1,]",
            '"unterminated',
            "tru",
            '{"a":NaN}',
            " Infinity",
            '{"a":1e400}',
            "[" + "9" * 5000 + "]",
            " [" + "9" * 5000 + "]",
            "[" * 5000 + "]" * 5000,
        ]

        def reference(text: str) -> tuple[str, Any]:
            # What loads read before the scanner alone read the usual text.
            try:
                value = _decoder.decode(text)
            except JSONRefused as e:
                return ("refused", str(e))
            except RecursionError:
                return ("refused", "deep")
            except ValueError as e:
                return ("refused", str(e))
            return ("value", value)

        for text in texts:
            try:
                found: tuple[str, Any] = ("value", loads(text))
            except JSONRefused as e:
                found = ("refused", "deep" if "nested deeper" in str(e) else str(e))
            self.assertEqual(found, reference(text), text[:40])
