"""
Tests for L{mcpx.wire.messages}.
"""

from __future__ import annotations

import json
import random
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from mcpx.wire import jsontext, messages
from mcpx.wire.errors import ProtocolError, RpcError
from mcpx.wire.messages import (
    Batch,
    EncodedList,
    EncodedResult,
    EncodedTail,
    ErrorResponse,
    IdSequence,
    Message,
    Notification,
    ReadResult,
    Request,
    Response,
    encode,
    encode_json,
    encode_request,
    parse,
    parse_object,
    spelled_as_read,
    utf8_json,
)
from tests.wire.test_jsontext import mutated, random_value, typed


class ParseTests(SynchronousTestCase):
    """
    L{parse} recognises the four kinds of message.
    """

    def test_request(self) -> None:
        """
        A message with C{id} and C{method} is a request.
        """
        self.assertEqual(
            parse(b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"c"}}'),
            Request(1, "tools/list", {"cursor": "c"}),
        )

    def test_request_string_id_without_params(self) -> None:
        """
        String ids are kept as strings; absent params are C{None}.
        """
        self.assertEqual(
            parse('{"jsonrpc":"2.0","id":"a-1","method":"ping"}'), Request("a-1", "ping")
        )

    def test_array_params(self) -> None:
        """
        JSON-RPC allows positional params; the envelope check accepts them.
        """
        self.assertEqual(
            parse(b'{"jsonrpc":"2.0","id":2,"method":"m","params":[1,2]}'),
            Request(2, "m", [1, 2]),
        )

    def test_notification(self) -> None:
        """
        A message with C{method} and no C{id} is a notification.
        """
        self.assertEqual(
            parse(b'{"jsonrpc":"2.0","method":"notifications/initialized"}'),
            Notification("notifications/initialized"),
        )

    def test_response(self) -> None:
        """
        A message with C{result} is a response, even when the result is C{null}.
        """
        self.assertEqual(parse(b'{"jsonrpc":"2.0","id":-3,"result":{}}'), Response(-3, {}))
        self.assertEqual(parse(b'{"jsonrpc":"2.0","id":4,"result":null}'), Response(4, None))

    def test_error_response(self) -> None:
        """
        A message with C{error} is an error response whose error is an L{RpcError}.
        """
        message = parse(
            b'{"jsonrpc":"2.0","id":5,"error":{"code":-32601,"message":"no","data":{"m":1}}}'
        )
        assert isinstance(message, ErrorResponse)
        self.assertEqual(message.id, 5)
        self.assertIsInstance(message.error, RpcError)
        self.assertEqual(
            message.error.to_json(), {"code": -32601, "message": "no", "data": {"m": 1}}
        )

    def test_error_response_null_id(self) -> None:
        """
        An error response may answer a message whose id could not be read.
        """
        message = parse(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}')
        self.assertEqual(message, ErrorResponse(None, RpcError(-32700, "x")))

    def test_unknown_members_ignored(self) -> None:
        """
        Members JSON-RPC does not define do not make a message invalid.
        """
        self.assertEqual(
            parse(b'{"jsonrpc":"2.0","id":1,"method":"m","extra":true}'), Request(1, "m")
        )

    def test_parse_object(self) -> None:
        """
        An already-decoded object is checked the same way.
        """
        self.assertEqual(parse_object({"jsonrpc": "2.0", "method": "m"}), Notification("m"))
        error = self.assertRaises(ProtocolError, parse_object, {"jsonrpc": "2.0", "id": 3})
        self.assertEqual((error.code, error.id), (-32600, 3))


#: Members a peer might write in a message, each as JSON text: JSON-RPC's own with
#: good and bad values, and one it does not define.
_MEMBERS: dict[str, tuple[str, ...]] = {
    "jsonrpc": ('"2.0"', '"2.0"', '"2.0"', '"1.0"', "2.0", "null", '"2.\\u0030"'),
    "id": (
        "1",
        "-7",
        "0",
        '"a"',
        '"\u00e9"',
        '"\\ud800"',
        "null",
        "true",
        "1.0",
        "1e400",
        "123456789012345678901234567890",
        "[1]",
        "{}",
    ),
    "method": ('"tools/call"', '"m"', '"\\ud83d"', "1", "null", "[]"),
    "params": ("{}", "[]", "null", "1", '"s"', '{"a":[1,{"b":null}],"a":2}'),
    "result": ("{}", "null", "1", '"s"', "[]", '{"content":[{"type":"text","text":"x"}]}'),
    "error": (
        '{"code":-32602,"message":"bad"}',
        '{"code":1.5,"message":"m"}',
        "null",
        "1",
        '{"code":-1,"message":"m","data":{"a":1}}',
    ),
    "extra": ("true", "{}", '"\\ud800"'),
}


def random_message(rng: random.Random) -> bytes:
    """The text of a JSON-RPC message as a peer might write it, right or wrong."""
    if rng.random() < 0.5:
        # The shape of a request, a notification or an answer, with any values.
        names = ["jsonrpc", "id", rng.choice(("method", "result", "error"))]
        if rng.random() < 0.5:
            names.append("params")
        if rng.random() < 0.2:
            names.remove("id")
        rng.shuffle(names)
    else:
        names = rng.sample(list(_MEMBERS), rng.randrange(1, 5))
    if rng.random() < 0.1:
        names.append(rng.choice(names))  # a key given twice
    members = []
    for name in names:
        value = rng.choice(_MEMBERS[name])
        if rng.random() < 0.1:
            value = random_value(rng, 1)
        members.append(f'"{name}":{value}')
    text = "{" + ",".join(members) + "}"
    if rng.random() < 0.05:
        deep = rng.randrange(95, 102)
        text = text[:-1] + (',"params":' if "params" not in names else ',"result":')
        text += "[" * deep + "]" * deep + "}"
    return mutated(rng, text.encode("utf-8")) if rng.random() < 0.2 else text.encode("utf-8")


def parsed(data: bytes | str) -> Any:
    """What L{parse} makes of C{data}: a message with its values' types, or the error."""
    try:
        message = parse(data)
    except ProtocolError as e:
        return ("refused", e.code, str(e), e.data, e.id, type(e.id), e.about_response)
    if type(message) is ErrorResponse:
        error = message.error
        return ("error", message.id, type(message.id), error.code, str(error), typed(error.data))
    fields = [(name, typed(value)) for name, value in vars_of(message)]
    return (type(message).__name__, fields)


def vars_of(message: Any) -> list[tuple[str, Any]]:
    return [(name, getattr(message, name)) for name in type(message).__slots__ if name[0] != "_"]


class PlainReadTests(SynchronousTestCase):
    """
    L{parse} reads a plain request, notification or response in one pass into its
    members (L{messages._read_plain}), and every other message the general way: the
    same message of the same values, or the same refusal, as the general way alone.
    """

    def assertSameAsGeneral(self, data: bytes | str) -> None:
        read = parsed(data)
        # Each text is read both ways: the one-pass reader is set aside for the second.
        one_pass = messages._read_plain
        messages._read_plain = lambda data: None
        try:
            general = parsed(data)
        finally:
            messages._read_plain = one_pass
        self.assertEqual(read, general, repr(data[:120]))

    def test_generated_messages(self) -> None:
        """
        Twenty thousand generated messages (every member of JSON-RPC with good and bad
        values, a member it does not define, a key twice, nesting about the limit, the
        mistakes of L{mutated}), as bytes and as text.
        """
        rng = random.Random(46)
        for _ in range(20_000):
            data = random_message(rng)
            self.assertSameAsGeneral(data)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            self.assertSameAsGeneral(text)

    def test_plain_messages_read_in_one_pass(self) -> None:
        """
        A host's request, an upstream's answer and a notification are read by the
        one-pass reader; an error response and a message with a member JSON-RPC does
        not define are left to the general way, which reads them.
        """
        plain = [
            b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"e"}}',
            b'{"jsonrpc":"2.0","id":"x","result":{"content":[]}}',
            b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}',
        ]
        for data in plain:
            self.assertEqual(messages._read_plain(data), parse(data))
        general = [
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"m"}}',
            b'{"jsonrpc":"2.0","id":1,"result":{},"extra":1}',
            b'{"jsonrpc":"2.0","id":1,"result":' + b"[" * 100 + b"]" * 100 + b"}",
        ]
        for data in general:
            self.assertIsNone(messages._read_plain(data))
        self.assertIsInstance(parse(general[0]), ErrorResponse)
        self.assertEqual(parse(general[1]), Response(1, {}))
        self.assertRaises(ProtocolError, parse, general[2])


class ParseErrorTests(SynchronousTestCase):
    """
    L{parse} refuses what is not JSON with -32700 and what is not JSON-RPC with -32600.
    """

    def assert_refused(
        self, data: bytes, code: int, id: int | str | None = None, about_response: bool = False
    ) -> ProtocolError:
        error: ProtocolError = self.assertRaises(ProtocolError, parse, data)
        self.assertEqual(
            (error.code, error.id, error.about_response), (code, id, about_response), data
        )
        return error

    def test_not_json(self) -> None:
        """
        Broken JSON is a parse error with no id.
        """
        self.assert_refused(b'{"jsonrpc":"2.0","id":1,', -32700)
        self.assert_refused(b"", -32700)
        self.assert_refused(b'{"a":1} trailing', -32700)

    def test_not_utf8(self) -> None:
        """
        Bytes that are not UTF-8 are a parse error.
        """
        self.assert_refused(b'{"jsonrpc":"2.0","method":"\xff"}', -32700)

    def test_not_a_number(self) -> None:
        """
        C{NaN} and C{Infinity} are not JSON, whatever Python's decoder would accept.  In a
        request the parse error has no id, as JSON-RPC says; in a response it carries the id
        and is marked about a response, so the request it answers can fail at once.
        """
        self.assert_refused(b'{"jsonrpc":"2.0","id":1,"method":"m","params":[NaN]}', -32700)
        self.assert_refused(
            b'{"jsonrpc":"2.0","id":1,"result":NaN}', -32700, id=1, about_response=True
        )
        self.assert_refused(
            b'{"jsonrpc":"2.0","id":"a","error":{"code":1,"message":"m","data":-Infinity}}',
            -32700,
            id="a",
            about_response=True,
        )
        self.assert_refused(b'{"jsonrpc":"2.0","id":1.5,"result":NaN}', -32700)

    def test_too_deep(self) -> None:
        """
        Absurdly deep nesting is refused as a parse error instead of crashing.
        """
        self.assert_refused(b"[" * 200000 + b"]" * 200000, -32700)

    def test_depth_limit_of_each_way_of_reading(self) -> None:
        """
        A response nested MAX_DEPTH deep, counting its envelope, is read, and one more
        level fails its request, whether it is short or long enough to be read with its
        text; a request the same (answered with a parse error).
        """
        from tests.wire.test_jsontext import mixed

        limit = jsontext.MAX_DEPTH
        for padding in (b"", b"x" * 2000):
            for depth, kept in ((limit, True), (limit + 1, False)):
                value = mixed(depth - 2)
                answer = b'{"jsonrpc":"2.0","id":7,"result":{"pad":"%b","v":%b}}' % (padding, value)
                request = b'{"jsonrpc":"2.0","id":8,"method":"m","params":{"p":"%b","v":%b}}' % (
                    padding,
                    value,
                )
                if kept:
                    read = parse(answer)
                    assert isinstance(read, Response)
                    self.assertEqual(read.result["v"], json.loads(value))
                    self.assertEqual(read.result["pad"], padding.decode())
                    self.assertEqual(type(read.result) is ReadResult, bool(padding))
                    self.assertEqual(encode(read), answer)
                    self.assertEqual(parse(request), Request(8, "m", json.loads(request)["params"]))
                else:
                    self.assert_refused(answer, -32700, 7, about_response=True)
                    self.assert_refused(mixed(limit + 1), -32700)
                    self.assert_refused(request, -32700)

    def test_not_an_object(self) -> None:
        """
        JSON values other than objects and arrays are invalid requests.
        """
        for data in (b"42", b'"x"', b"null", b"true"):
            self.assert_refused(data, -32600)

    def test_wrong_version(self) -> None:
        """
        A missing or different C{jsonrpc} member is refused, carrying the id.
        """
        self.assert_refused(b'{"id":7,"method":"m"}', -32600, 7)
        self.assert_refused(b'{"jsonrpc":"1.0","id":"x","method":"m"}', -32600, "x")
        self.assert_refused(b'{"jsonrpc":2.0,"id":1,"result":{}}', -32600, 1, True)

    def test_method_not_string(self) -> None:
        """
        A non-string method is refused, carrying the id.
        """
        self.assert_refused(b'{"jsonrpc":"2.0","id":8,"method":5}', -32600, 8)
        self.assert_refused(b'{"jsonrpc":"2.0","method":null}', -32600)

    def test_bad_request_ids(self) -> None:
        """
        Booleans, floats, objects, arrays and C{null} are not request ids; the error has none.
        """
        for raw in (b"true", b"1.5", b"1.0", b'{"a":1}', b"[1]", b"null"):
            self.assert_refused(b'{"jsonrpc":"2.0","method":"m","id":' + raw + b"}", -32600)

    def test_bad_params(self) -> None:
        """
        Params that are neither an object nor an array are refused.
        """
        self.assert_refused(b'{"jsonrpc":"2.0","id":1,"method":"m","params":"x"}', -32600, 1)
        self.assert_refused(b'{"jsonrpc":"2.0","method":"m","params":3}', -32600)

    def test_request_with_result(self) -> None:
        """
        A message cannot be both a request and a response.
        """
        self.assert_refused(b'{"jsonrpc":"2.0","id":1,"method":"m","result":1}', -32600, 1)

    def test_result_and_error(self) -> None:
        """
        A response with both C{result} and C{error} is refused and flagged as a response.
        """
        self.assert_refused(
            b'{"jsonrpc":"2.0","id":2,"result":1,"error":{"code":1,"message":"m"}}',
            -32600,
            2,
            True,
        )

    def test_neither_method_result_nor_error(self) -> None:
        """
        An object with only an id is refused.
        """
        self.assert_refused(b'{"jsonrpc":"2.0","id":2}', -32600, 2)

    def test_response_bad_id(self) -> None:
        """
        A success response needs a string or integer id.
        """
        self.assert_refused(b'{"jsonrpc":"2.0","id":null,"result":1}', -32600, None, True)
        self.assert_refused(
            b'{"jsonrpc":"2.0","id":1.5,"error":{"code":1,"message":"m"}}', -32600, None, True
        )

    def test_malformed_error(self) -> None:
        """
        The error member must be an object with an integer code and a string message.
        """
        for error in (
            b'"x"',
            b'{"code":"1","message":"m"}',
            b'{"code":1}',
            b'{"code":true,"message":"m"}',
        ):
            self.assert_refused(b'{"jsonrpc":"2.0","id":3,"error":' + error + b"}", -32600, 3, True)


class BatchTests(SynchronousTestCase):
    """
    JSON arrays: batches, allowed only when the caller says so.
    """

    def test_refused_by_default(self) -> None:
        """
        Without C{allow_batch}, an array is refused with a message naming batches.
        """
        error = self.assertRaises(ProtocolError, parse, b'[{"jsonrpc":"2.0","method":"m"}]')
        self.assertEqual((error.code, error.id), (-32600, None))
        self.assertIn("batches are not allowed", error.message)

    def test_empty(self) -> None:
        """
        An empty batch is an invalid request.
        """
        error = self.assertRaises(ProtocolError, parse, b"[]", allow_batch=True)
        self.assertEqual(error.code, -32600)

    def test_elements(self) -> None:
        """
        Valid elements become messages in order; each invalid one becomes its own error.
        """
        batch = parse(
            b'[{"jsonrpc":"2.0","id":1,"method":"a"},'
            b'{"jsonrpc":"2.0","method":7,"id":2},'
            b'{"jsonrpc":"2.0","method":"n"},'
            b"[1],"
            b'{"jsonrpc":"2.0","id":3,"result":{}}]',
            allow_batch=True,
        )
        assert isinstance(batch, Batch)
        self.assertEqual(batch.messages, (Request(1, "a"), Notification("n"), Response(3, {})))
        self.assertEqual([(e.code, e.id) for e in batch.invalid], [(-32600, 2), (-32600, None)])


class EncodeTests(SynchronousTestCase):
    """
    L{encode} writes compact UTF-8 JSON that L{parse} reads back.
    """

    def test_round_trip(self) -> None:
        """
        Every kind of message survives encoding and parsing.
        """
        messages: list[Message] = [
            Request(1, "tools/call", {"name": "x", "arguments": {"a": [1, None]}}),
            Request("s", "ping"),
            Notification("notifications/progress", {"progress": 0.5}),
            Notification("n"),
            Response(-1, {"content": []}),
            ErrorResponse(9, RpcError(-32602, "bad", {"why": "x"})),
            ErrorResponse(None, RpcError(-32700, "Parse error")),
        ]
        for message in messages:
            self.assertEqual(parse(encode(message)), message)

    def test_compact_and_utf8(self) -> None:
        """
        No spaces after separators, and non-ASCII text is written as UTF-8, not escaped.
        """
        data = encode(Notification("m", {"text": "héllo ✓"}))
        self.assertEqual(
            data, '{"jsonrpc":"2.0","method":"m","params":{"text":"héllo ✓"}}'.encode()
        )

    def test_absent_params_omitted(self) -> None:
        """
        A request without params has no C{params} member.
        """
        self.assertEqual(
            json.loads(encode(Request(1, "ping"))), {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        )

    def test_no_newline(self) -> None:
        """
        Newlines inside strings are escaped, so the text is safe to frame by lines.
        """
        self.assertNotIn(b"\n", encode(Response(1, {"text": "a\nb\r\n"})))

    def test_lone_surrogate(self) -> None:
        """
        A lone surrogate (which a peer can send as an escape) is written back escaped.
        """
        message = parse(b'{"jsonrpc":"2.0","id":1,"result":"\\ud800x\xc3\xa9"}')
        data = encode(message)
        self.assertEqual(data, b'{"jsonrpc":"2.0","id":1,"result":"\\ud800x\\u00e9"}')
        self.assertEqual(parse(data), message)

    def test_nan_refused(self) -> None:
        """
        Encoding NaN raises instead of writing something that is not JSON.
        """
        self.assertRaises(ValueError, encode, Response(1, float("nan")))

    def test_unencodable(self) -> None:
        """
        Values JSON cannot represent raise C{TypeError}.
        """
        self.assertRaises(TypeError, encode, Response(1, object()))

    def test_batch(self) -> None:
        """
        A batch encodes as a JSON array.
        """
        data = encode(Batch((Response(1, 1), Notification("n"))))
        self.assertEqual(
            data, b'[{"jsonrpc":"2.0","id":1,"result":1},{"jsonrpc":"2.0","method":"n"}]'
        )

    def test_encode_json(self) -> None:
        """
        Any JSON value can be encoded the same way.
        """
        value: Any = {"a": [1, "é"]}
        self.assertEqual(encode_json(value), '{"a":[1,"é"]}'.encode())

    def test_encode_json_as_json_writes(self) -> None:
        """
        L{encode_json} writes what C{json.JSONEncoder(ensure_ascii=False,
        separators=(",", ":"), allow_nan=False)} writes, byte for byte, in UTF-8 (and
        with ASCII escapes when a lone surrogate is in the value), and refuses what it
        refuses with the same errors.
        """
        plain = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        escaped = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)
        values: list[Any] = [
            'é\u2028\x00"\\/',
            "\ud800xé",
            {"a": [1, -0.0, 1e300, 2**80, True, False, None, 0.1]},
            {"nested": {"é": ["\U0001f600", {"k": {}}], "": []}, "n": 3.0},
            [],
            12,
            None,
            {"key \ud800": 1},
        ]
        for value in values:
            try:
                expected = plain.encode(value).encode("utf-8")
            except UnicodeEncodeError:
                expected = escaped.encode(value).encode("ascii")
            self.assertEqual(encode_json(value), expected, value)
        for refused in (float("nan"), {"x": [float("inf")]}, {"x": object()}, {1.5j: 1}):
            with self.assertRaises((TypeError, ValueError)) as caught:
                plain.encode(refused)
            with self.assertRaises(type(caught.exception)) as ours:
                encode_json(refused)
            self.assertEqual(str(ours.exception), str(caught.exception))

    def test_keys_as_json_writes(self) -> None:
        """
        A result's keys written by mcpx (messages._key_text) are the encoder's text for
        them: 100,000 random keys of control characters, quotes, backslashes, DEL,
        non-ASCII and lone surrogates among printable ASCII.
        """
        rng = random.Random(46)
        characters = [chr(code) for code in range(160)] + ["\u2028", "\ud800", "é", "𝄞"]
        for _ in range(100_000):
            key = "".join(rng.choices(characters, k=rng.randrange(6)))
            self.assertEqual(messages._key_text(key), utf8_json(key), repr(key))

    def test_envelope_as_json_writes(self) -> None:
        """
        A request and a response are written as the encoder writes their whole
        C{to_json} (C{encode} writes their envelope itself): integer and string ids,
        no, object and array params, non-ASCII text, and in ASCII escapes where a lone
        surrogate is anywhere in the message.
        """
        values: list[Any] = [
            None,
            {"name": "é", "arguments": {"n": [1, 2.5, None, True]}},
            [1, "x"],
            {"text": "\ud800"},
            "\u2028",
            {},
        ]
        messages: list[Message] = []
        for request_id in (1, -7, 2**70, "a-b", "é", "\ud800"):
            for value in values:
                messages.append(Response(request_id, value))
                params = value if value is None or isinstance(value, dict | list) else None
                for method in ("tools/call", "é", "\udc00"):
                    messages.append(Request(request_id, method, params))
        for message in messages:
            self.assertEqual(encode(message), encode_json(message.to_json()), message)
            if type(message) is Request:
                self.assertEqual(encode_request(message), encode(message), message)

    def test_encoded_tail_as_json_writes(self) -> None:
        """
        A request whose params end with an L{EncodedTail} C{_meta} (a 2026-07-28
        session's revision, capabilities and identity, written once) is written as the
        encoder writes its whole C{to_json}: with and without members of the caller's
        own before the tail, with the C{_meta} elsewhere than last, with non-ASCII text,
        and in ASCII escapes where a lone surrogate is anywhere in the message.
        """
        lasts: list[dict[str, Any]] = [
            {"v": "2026-07-28", "caps": {"roots": {}}, "info": {"name": "é", "version": "1"}},
            {"v": "x"},
        ]
        heads: list[dict[str, Any]] = [{}, {"progressToken": 7}, {"k": "é", "n": [1, None]}]
        for last in lasts:
            tail = messages.tail_of(last)
            assert tail is not None
            for head in heads:
                for before, after in (({"name": "echo"}, {}), ({}, {}), ({}, {"after": 1})):
                    for extra in ({"text": "ü"}, {"text": "\ud800"}):
                        params: dict[str, Any] = {
                            **before,
                            **extra,
                            "_meta": EncodedTail(head, last, tail),
                        }
                        params.update(after)
                        for request_id in (3, "r-1", "é"):
                            message = Request(request_id, "tools/call", params)
                            written = encode_request(message)
                            self.assertEqual(written, encode_json(message.to_json()), message)
                            self.assertEqual(encode(message), written)

    def test_error_response_equality(self) -> None:
        """
        Error responses compare by what their errors say, not by exception identity.
        """
        self.assertEqual(ErrorResponse(1, RpcError(-1, "m")), ErrorResponse(1, RpcError(-1, "m")))
        self.assertNotEqual(
            ErrorResponse(1, RpcError(-1, "m")), ErrorResponse(1, RpcError(-2, "m"))
        )


class EncodedValuesTests(SynchronousTestCase):
    """L{encode} of a result with encoded values is L{encode_json} of the message."""

    def assertSameEncoding(self, result: dict[str, Any]) -> None:
        for request_id in (7, "a-b", "é"):
            message = Response(request_id, result)
            self.assertEqual(encode(message), encode_json(message.to_json()))

    def test_values(self) -> None:
        """Encoded lists and objects in a result are written as they are encoded."""
        items = [{"type": "text", "text": 'a "b" é'}]
        structured = {"tools": [{"name": "x", "n": 1.5, "none": None}]}
        self.assertSameEncoding(
            {
                "content": EncodedList(items, utf8_json(items) or b""),
                "structuredContent": EncodedResult(structured),
                "isError": False,
                "_meta": {"k": "v"},
            }
        )

    def test_long_way(self) -> None:
        """A lone surrogate anywhere, or a key JSON writes as text, takes the long way."""
        self.assertSameEncoding(
            {"structuredContent": EncodedResult({"a": "\udc00"}), "isError": False}
        )
        self.assertSameEncoding({"structuredContent": EncodedResult({}), "other": "\ud800"})
        self.assertSameEncoding({"structuredContent": EncodedResult({}), 3: True})  # type: ignore[dict-item]


class EncodedIdTests(SynchronousTestCase):
    """
    A response whose result is kept encoded (L{EncodedResult}, L{ReadResult}) is written
    with its id spelled as the JSON encoder spells it, whatever the id.
    """

    IDS: tuple[int | str, ...] = (
        0,
        7,
        -1,
        -(2**63),
        2**64 + 5,
        10**40,
        "a-b",
        "",
        'q"\\\n',
        "é",
        "\u2028",
    )

    def test_encoded_result(self) -> None:
        """An L{EncodedResult} (a cached listing): the bytes of the whole message encoded."""
        result = EncodedResult({"tools": [{"name": "é", "n": 1}]})
        for request_id in self.IDS:
            message = Response(request_id, result)
            self.assertEqual(encode(message), encode_json(message.to_json()), request_id)

    def test_read_result(self) -> None:
        """A L{ReadResult} (an upstream's answer passed on): the same."""
        self.patch(jsontext, "READ_AS_TEXT_FROM", 0)
        read = parse(b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}}')
        assert isinstance(read, Response)
        self.assertIs(type(read.result), ReadResult)
        for request_id in self.IDS:
            message = Response(request_id, read.result)
            self.assertEqual(encode(message), encode_json(message.to_json()), request_id)

    def test_bool_is_not_an_int(self) -> None:
        """C{True} is not written as C{1}: a bool is no id, but it is written as JSON's."""
        message = Response(True, EncodedResult({}))
        self.assertEqual(encode(message), b'{"jsonrpc":"2.0","id":true,"result":{}}')


class IdSequenceTests(SynchronousTestCase):
    """
    L{IdSequence} hands out the ids of one direction.
    """

    def test_positive(self) -> None:
        """
        By default ids count up from 1.
        """
        ids = IdSequence()
        self.assertEqual([next(ids) for _ in range(3)], [1, 2, 3])

    def test_negative(self) -> None:
        """
        Negative sequences count down from -1, so they never meet a client's own ids.
        """
        ids = IdSequence(negative=True)
        self.assertEqual([next(ids) for _ in range(3)], [-1, -2, -3])

    def test_independent(self) -> None:
        """
        Two sequences do not share a counter.
        """
        first, second = IdSequence(), IdSequence()
        next(first)
        self.assertEqual(next(second), 1)


COMPACT_MEMBERS = jsontext._compact_members


def random_answer(rng: random.Random) -> bytes:
    """An answer whose result an upstream might spell any way, right or wrong."""
    space = rng.choice(("", "", "", " "))
    keys = rng.choices(("a", "b", "content", "\u00e9", "\\u0061", 'a\\"b'), k=rng.randrange(5))
    members = [f'"{key}"{space}:{space}{random_value(rng, 1)}' for key in keys]
    if rng.random() < 0.5:
        # Values written as mcpx and the SDKs write them.
        members = [
            f'"{key}":' + json.dumps(rng.choice(VALUES), separators=(",", ":"), ensure_ascii=False)
            for key in dict.fromkeys(keys)
        ]
    text = '{"jsonrpc":"2.0","id":7,"result":{' + ",".join(members) + "}}" + space
    return text.encode("utf-8", "surrogatepass")


#: Values of every JSON kind, as a result holds them.
VALUES: list[Any] = [
    [{"type": "text", "text": "é ✓ 𝄞 \u2028 \x00"}],
    {"n": 1.5, "m": -0.0, "big": 2**80, "e": 1e-7, "t": True, "f": None},
    "\ud800 lone",
    [[[[]]], {}],
    12345678901234567890,
]


def read_with_text(data: bytes) -> Any:
    """What L{jsontext.read_result} makes of C{data}, with the value types spelled out."""
    found = jsontext.read_result(data)
    if found is None:
        return None
    request_id, result, members = found
    kept = {key: (typed(value), text) for key, (value, text) in members.items()}
    return request_id, typed(result), kept, all(members[k][0] is result[k] for k in result)


class ReadResultTests(SynchronousTestCase):
    """An upstream's answer read with its text (L{ReadResult}), and passed on as it came."""

    def setUp(self) -> None:
        # Every answer here is short: read with its text all the same.
        self.patch(jsontext, "READ_AS_TEXT_FROM", 0)

    def test_short_answer_read_whole(self) -> None:
        """An answer shorter than READ_AS_TEXT_FROM is read whole, as any other."""
        self.patch(jsontext, "READ_AS_TEXT_FROM", 100)
        short = parse(b'{"jsonrpc":"2.0","id":1,"result":{"a":1}}')
        long = parse(b'{"jsonrpc":"2.0","id":1,"result":{"a":"' + b"x" * 100 + b'"}}')
        assert isinstance(short, Response) and isinstance(long, Response)
        self.assertEqual((type(short.result), type(long.result)), (dict, ReadResult))

    def test_read_with_its_text(self) -> None:
        """
        An answer in the usual spelling keeps the text of its result's members, even
        spelled with spaces around them, and encoding it again writes those texts with
        only the id changed.
        """
        line = (
            b'{"jsonrpc":"2.0","id":7,"result":{ "content" : [{"type":"text","text":"\xc3\xa9"}],'
            b'"n":1.50}}'
        )
        message = parse(line)
        assert isinstance(message, Response)
        self.assertIs(type(message.result), ReadResult)
        self.assertEqual(message.result, {"content": [{"type": "text", "text": "é"}], "n": 1.5})
        self.assertEqual(
            encode(Response("a", message.result)),
            b'{"jsonrpc":"2.0","id":"a","result":{"content":[{"type":"text","text":"\xc3\xa9"}],'
            b'"n":1.50}}',
        )

    def test_other_spellings_read_whole(self) -> None:
        """
        Another order of members, a member more, a key twice, a duplicate result, a line
        break inside (which a host's stdio or SSE framing cannot carry), an escaped id:
        read whole, as before; refused where strict reading refuses.
        """
        for line in (
            b'{"id":7,"jsonrpc":"2.0","result":{}}',
            b'{"jsonrpc":"2.0","id":7,"result":{"a":1},"extra":1}',
            b'{"jsonrpc":"2.0","id":7,"result":{"a":1},"result":{"b":2}}',
            b'{"jsonrpc":"2.0","id":7,"result":{"a":1,"a":2}}',
            b'{"jsonrpc":"2.0","id":7,"result":{"a":[\n1\n]}}',
            b'{"jsonrpc":"2.0","id":7,"result":{"a":[\r1]}}',
            b'{"jsonrpc":"2.0","id":"a\\"b","result":{}}',
        ):
            message = parse(line)
            assert isinstance(message, Response)
            self.assertIs(type(message.result), dict, line)
        for line in (
            b'{"jsonrpc":"2.0","id":7,"result":{"a":NaN}}',
            b'{"jsonrpc":"2.0","id":7,"result":{"a":1e400}}',
            b'{"jsonrpc":"2.0","id":7,"result":{"a":' + b"[" * 100 + b"]" * 100 + b"}}",
        ):
            with self.assertRaises(ProtocolError):
                parse(line)

    def test_compact_answers_read_in_one_pass(self) -> None:
        """
        Twenty thousand generated answers (keys once or twice, plain or in escapes,
        values of every kind, compact or with spaces, lone surrogates, non-ASCII): read
        with the same result, the same value types and the same text for each member
        whether msgspec reads them in one pass (jsontext._compact_members) or member by
        member as before; and the compact ones are read in one pass.
        """
        rng = random.Random(46)
        in_one_pass = 0
        for _ in range(20_000):
            data = random_answer(rng)
            read = read_with_text(data)
            self.patch(jsontext, "_compact_members", lambda data, at, ends: None)
            before = read_with_text(data)
            self.patch(jsontext, "_compact_members", COMPACT_MEMBERS)
            self.assertEqual(read, before, data)
            ends = len(data.rstrip())
            if COMPACT_MEMBERS(data, data.index(b'"result":') + 9, ends) is not None:
                in_one_pass += 1
        self.assertGreater(in_one_pass, 5_000)

    def test_members_replaced_or_added_encoded(self) -> None:
        """Members added or replaced after reading are encoded; the others keep their text."""
        message = parse(b'{"jsonrpc":"2.0","id":1,"result":{"a": [1], "b": 2}}')
        assert isinstance(message, Response)
        result = message.result
        result["b"] = 3
        result.setdefault("resultType", "complete")
        self.assertEqual(
            encode(Response(1, result)),
            b'{"jsonrpc":"2.0","id":1,"result":{"a":[1],"b":3,"resultType":"complete"}}',
        )

    def test_spelled_as_read(self) -> None:
        """A spelling keeps the text of the members it kept, and encodes the others."""
        message = parse(b'{"jsonrpc":"2.0","id":1,"result":{"a":[1.0],"_meta":{"x":1}}}')
        assert isinstance(message, Response)
        result = message.result
        spelled = spelled_as_read(result, {"a": result["a"], "_meta": {"x": 1, "y": 2}})
        self.assertEqual(
            encode(Response(1, spelled)),
            b'{"jsonrpc":"2.0","id":1,"result":{"a":[1.0],"_meta":{"x":1,"y":2}}}',
        )
        self.assertIs(spelled_as_read({"a": 1}, {"a": 1, "b": 2}).__class__, dict)
