"""Tests for L{mcpx.wire.jsontext}: the strict JSON reader every entry point shares."""

from __future__ import annotations

import json
import random
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from mcpx.wire.jsontext import MAX_DEPTH, JSONRefused, _decoder, _read_standard, loads


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def mixed(depth: int) -> bytes:
    """A value nested C{depth} deep, arrays and objects in turn, with non-ASCII text inside."""
    opening = [b"[" if level % 2 == 0 else '{"é[{":'.encode() for level in range(depth)]
    closing = [b"]" if level % 2 == 0 else b"}" for level in reversed(range(depth))]
    return b"".join(opening) + '"ü{["'.encode() + b"".join(closing)


class LoadsTests(SynchronousTestCase):
    def refusal(self, data: bytes | bytearray | str) -> str:
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

    def test_depth_of_objects_and_arrays_in_every_spelling(self) -> None:
        """
        Objects and arrays in turn, as bytes, a bytearray or text: MAX_DEPTH deep is
        kept, one more refused, whatever brackets the strings hold.
        """
        for depth, kept in ((MAX_DEPTH, True), (MAX_DEPTH + 1, False)):
            text = mixed(depth)
            for spelled in (text, bytearray(text), text.decode()):
                if kept:
                    self.assertEqual(loads(spelled), json.loads(text))
                else:
                    self.assertIn(str(MAX_DEPTH), self.refusal(spelled))

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
        Whether the text is read by msgspec or, where msgspec refuses it, by the
        standard library's decoder, the value, or the refusal and its account of where,
        is the standard library decoder's with mcpx's rules.
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


#: Numbers as peers may spell them: big integers, exponents near and past a float's range,
#: negative zero, more digits than a float holds.
NUMBERS = (
    *("0", "-0", "-0.0", "1", "-1", "2.5", "1E5", "1e-5", "1.0e+2", "0.1e-400", "2.5e-324"),
    *("1.7976931348623157e308", "1.7976931348623159e308", "1e309", "-1e400", "1e99999999"),
    *("9223372036854775807", "9223372036854775808", "-9223372036854775809"),
    *("18446744073709551615", "18446744073709551616", "123456789012345678901234567890"),
    *("0.30000000000000004", "3.141592653589793238462643383279", "1" * 400, "-" + "7" * 80),
    *("01", "1.", ".5", "+1", "1e", "-", "1e+", "0x10", "NaN", "-Infinity", "Infinity"),
)

#: Strings' insides: escapes of every kind, surrogate pairs and lone halves, control
#: characters raw and escaped, non-ASCII text.
STRINGS = (
    *("", "x", "é ✓ 𝄞", "\\u00e9", "\\ud834\\udd1e", "\\ud800", "\\udc00", "\\udc00\\ud800"),
    *("\\ud800x", "\\u0000", "\\n\\t\\/\\b\\f\\r", '\\"', "\\x", "\\u12", "\x00", "\x1f", "\t"),
    *("\u2028", "\x7f", "[{", "}]"),
)


def random_value(rng: random.Random, depth: int) -> str:
    """The text of a random JSON-like value, as a peer might write it."""
    pick = rng.random()
    if depth > 4 or pick < 0.3:
        return rng.choice(NUMBERS)
    if pick < 0.5:
        return '"' + "".join(rng.choices(STRINGS, k=rng.randrange(4))) + '"'
    if pick < 0.6:
        return rng.choice(("true", "false", "null", "tru", "nul"))
    space = rng.choice(("", "", " ", "\n  ", "\t\r\n"))
    if pick < 0.8:
        items = [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
        return "[" + space + ("," + space).join(items) + space + "]"
    keys = rng.choices(("a", "a", "b", "jsonrpc", "\\u0061", "é"), k=rng.randrange(4))
    members = [f'"{key}"{space}:{space}{random_value(rng, depth + 1)}' for key in keys]
    return "{" + space + ("," + space).join(members) + space + "}"


def mutated(rng: random.Random, data: bytes) -> bytes:
    """C{data} with one mistake a peer might make, or none."""
    at = rng.randrange(len(data) + 1)
    return rng.choice(
        (
            lambda: data,
            lambda: data,
            lambda: data[:at],
            lambda: data[:at] + data[at + 1 :],
            lambda: data[:at] + bytes([rng.randrange(256)]) + data[at + 1 :],
            lambda: (
                data[:at]
                + rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xef\xbb\xbf"))
                + data[at:]
            ),
            lambda: rng.choice((b" ", b"\n", b"\xef\xbb\xbf", b"\x0c")) + data,
            lambda: data + rng.choice((b" ", b"\r\n", b" 1", b"}", b",", b"\x00")),
            lambda: b"[" * (MAX_DEPTH - 2 + at % 4) + data + b"]" * (MAX_DEPTH - 2 + at % 4),
            lambda: b'{"a":' * (1020 + at % 10) + data + b"}" * (1020 + at % 10),
        )
    )()


def outcome(read: Any, data: bytes | str) -> tuple[str, Any]:
    """What C{read} makes of C{data}: a value with its types spelled out, or a refusal."""
    try:
        return ("value", typed(read(data)))
    except JSONRefused as e:
        return ("refused", str(e))


def typed(value: Any) -> Any:
    """C{value} with each item's type beside it, and floats as repr (C{-0.0} is not C{0.0})."""
    if type(value) is dict:
        return ("dict", [(key, typed(item)) for key, item in value.items()])
    if type(value) is list:
        return ("list", [typed(item) for item in value])
    if type(value) is float:
        return ("float", repr(value))
    return (type(value).__name__, value)


class FastReaderTests(SynchronousTestCase):
    """
    L{loads} reads with msgspec first and the standard library's decoder where msgspec
    refuses: together they read every text as the standard library's decoder alone does.
    """

    def assertSameAsStandard(self, data: bytes | str) -> None:
        self.assertEqual(outcome(loads, data), outcome(_read_standard, data), repr(data[:80]))

    def test_generated_texts(self) -> None:
        """
        Twenty thousand generated texts, valid and not (numbers of every size, escapes,
        lone surrogates, invalid UTF-8, a BOM, space, duplicate keys, nesting around the
        limit and past msgspec's own), as bytes and as text: the same value of the same
        types, or the same refusal.
        """
        rng = random.Random(46)
        for _ in range(20_000):
            data = mutated(rng, random_value(rng, 0).encode("utf-8"))
            self.assertSameAsStandard(data)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            self.assertSameAsStandard(text)

    def test_floats_round_trip(self) -> None:
        """Random floats, written by Python, are read to the same float."""
        rng = random.Random(7)
        for _ in range(20_000):
            number = rng.choice(
                (
                    rng.random() * 10 ** rng.randrange(-320, 308),
                    rng.uniform(-1, 1),
                    float(rng.getrandbits(64)),
                )
            )
            for text in (repr(number), f"{number:.17e}", f"{number:.25g}", f"{number:.3e}"):
                self.assertSameAsStandard("[" + text + "]")

    def test_hot_path_messages(self) -> None:
        """A host's call, an upstream's answer and a listing: as the standard library reads them."""
        messages = [
            {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "add", "arguments": {"a": 1, "b": 2.5}},
            },
            {
                "jsonrpc": "2.0",
                "id": "x-1",
                "result": {"content": [{"type": "text", "text": "é ✓ 𝄞 \u2028"}], "isError": False},
            },
            {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "bad", "data": None}},
            {
                "jsonrpc": "2.0",
                "id": 2,
                "result": {
                    "tools": [
                        {"name": f"t{i}", "inputSchema": {"type": "object"}} for i in range(50)
                    ]
                },
            },
        ]
        for message in messages:
            for ascii_only in (True, False):
                self.assertSameAsStandard(json.dumps(message, ensure_ascii=ascii_only).encode())
