# -*- test-case-name: tests.wire.test_messages -*-
"""
JSON-RPC 2.0 messages: parsing them once, checking their shape, and encoding them compactly.

L{parse} decodes the bytes with a single JSON decode and then checks only the envelope
(C{jsonrpc}, C{id}, C{method}, C{params}, C{result}, C{error}); what is inside C{params} and
C{result} is the business of the layers above.  Encoding does no checking at all beyond what
the C{json} encoder does while it writes.

Ids: JSON-RPC allows strings, numbers and C{null}; MCP narrows requests to strings and
integers, so a float, boolean, object, array or C{null} request id is refused.  An error
response may carry a C{null} id (it answers a message whose id could not be read).
"""

from __future__ import annotations

import _json
import itertools
import json
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeGuard

from attrs import define, field, frozen

from mcpx.wire import jsontext
from mcpx.wire.errors import INVALID_REQUEST, PARSE_ERROR, ProtocolError, RpcError
from mcpx.wire.jsontext import JSONRefused, Members

RequestId: TypeAlias = int | str
Params: TypeAlias = dict[str, Any] | list[Any] | None

JSONRPC_VERSION: Final = "2.0"

if TYPE_CHECKING:
    from attrs import frozen as made_once
else:
    #: A class whose instances are not changed once made: frozen to the type checker,
    #: which refuses any assignment to their fields, and at run time a plain slotted
    #: class with a frozen one's equality and hash, for it costs a frozen class an
    #: C{object.__setattr__} for each field to make one (a message is made for every
    #: request and answer read or written, a L{mcpx.server.conn.Context} more than once
    #: for every request).
    made_once = define(unsafe_hash=True)


@made_once
class Request:
    """A call that expects an answer carrying the same C{id}."""

    id: RequestId
    method: str
    params: Params = None

    def to_json(self) -> dict[str, Any]:
        if self.params is None:
            return {"jsonrpc": "2.0", "id": self.id, "method": self.method}
        return {"jsonrpc": "2.0", "id": self.id, "method": self.method, "params": self.params}


@made_once
class Notification:
    """A one-way message: nothing answers it."""

    method: str
    params: Params = None

    def to_json(self) -> dict[str, Any]:
        if self.params is None:
            return {"jsonrpc": "2.0", "method": self.method}
        return {"jsonrpc": "2.0", "method": self.method, "params": self.params}


@made_once
class Response:
    """A successful answer to the request with the same C{id}."""

    id: RequestId
    result: Any

    def to_json(self) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": self.id, "result": self.result}


@made_once
class ErrorResponse:
    """
    A failed answer.  C{id} is C{None} when the failed message's id could not be read.

    The error is the L{RpcError} itself, so a receiver can fail a Deferred with it as is.
    """

    id: RequestId | None
    # Exceptions compare by identity; two responses are the same if their errors say the same.
    error: RpcError = field(eq=lambda error: (error.code, error.message, error.data))

    def to_json(self) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": self.id, "error": self.error.to_json()}


Message: TypeAlias = Request | Notification | Response | ErrorResponse


@frozen(slots=True)
class Batch:
    """
    A JSON array of messages (allowed by 2025-03-26 only).

    @ivar messages: the elements that were valid, in order.
    @ivar invalid: one L{ProtocolError} per element that was not; JSON-RPC answers each of
        them with its own error response instead of refusing the whole batch.
    """

    messages: tuple[Message, ...]
    invalid: tuple[ProtocolError, ...] = ()

    def to_json(self) -> list[dict[str, Any]]:
        return [message.to_json() for message in self.messages]


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Final = _Missing()


#: Writes a JSON value as the pieces of its compact text.
Chunks: TypeAlias = Callable[[Any, int], "list[str] | tuple[str, ...]"]


def _chunks(ensure_ascii: bool) -> Chunks:
    """
    What C{json.JSONEncoder(ensure_ascii=..., separators=(",", ":"), allow_nan=False,
    check_circular=False).encode} runs, made once: C{encode} makes this C encoder again on
    every call (in C{iterencode}, with a closure of its own), about a fifth of encoding a
    request.  No circularity check: it costs a dict insert per container on every message,
    and a circular value (always a bug) still fails, with RecursionError.
    """
    quote = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    chunks: Chunks = _json.make_encoder(
        None, json.JSONEncoder().default, quote, None, ":", ",", False, False, False
    )
    return chunks


_encoder = _chunks(ensure_ascii=False)
_ascii_encoder = _chunks(ensure_ascii=True)


def parse(data: bytes | str, *, allow_batch: bool = False) -> Message | Batch:
    """
    Read one framed JSON-RPC message (or batch).

    @param allow_batch: whether a JSON array is acceptable; only 2025-03-26 allows batches,
        so the caller decides by revision.  Refused batches raise -32600.
    @raise ProtocolError: -32700 (id C{None}) if C{data} is not UTF-8 JSON; -32600 with the
        offending id, when one can be read, if it is JSON but not a JSON-RPC 2.0 message.
    """
    if type(data) is bytes and len(data) >= jsontext.READ_AS_TEXT_FROM:
        # A response in the usual spelling: its result keeps the bytes it came in, which
        # L{encode} passes on as they are (L{EncodedResult}).
        found = jsontext.read_result(data)
        if found is not None:
            request_id, result, members = found
            return Response(request_id, ReadResult(result, members))
    plain = _read_plain(data)
    if plain is not None:
        return plain
    try:
        decoded = jsontext.loads(data)
    except JSONRefused as e:
        answered = _answered_id(data)
        raise ProtocolError(
            PARSE_ERROR,
            f"Parse error: {e}",
            {"detail": str(e)},
            id=answered,
            about_response=answered is not None,
        ) from None
    if type(decoded) is list:
        return _parse_batch(decoded, allow_batch)
    return parse_object(decoded)


def _read_plain(data: bytes | str) -> Message | None:
    """
    The request, notification or response C{data} holds, read in one pass by msgspec
    into the envelope's members (L{_plain_reader}) and checked here; C{None} for
    anything else (a batch, an error response, a member that is not JSON-RPC's, a
    message L{parse_object} would refuse, text msgspec refuses or nesting too deep),
    which the general path reads and answers as before.

    The same messages of the same values as that path: the members are read by the
    same reader (msgspec's, as L{jsontext.loads} reads them), an unknown member sends
    the message the general way, and a key given twice keeps its last value as a
    dict would.
    """
    try:
        read = _read_members(data)
    except Exception:  # what the general path reads again, and says why it refuses
        return None
    if read.jsonrpc != JSONRPC_VERSION or read.error is not _UNSET:
        return None
    request_id = read.id
    id_type = type(request_id)
    method = read.method
    message: Message
    if method is _UNSET:
        value = read.result
        if value is _UNSET or (id_type is not int and id_type is not str):
            return None
        message = Response(request_id, value)
    else:
        value = read.params
        if (
            type(method) is not str
            or read.result is not _UNSET
            or (value is not None and type(value) is not dict and type(value) is not list)
        ):
            return None
        if request_id is _UNSET:
            message = Notification(method, value)
        elif id_type is int or id_type is str:
            message = Request(request_id, method, value)
        else:
            return None
    try:
        # Inside the envelope, its values are its second level (a response may carry
        # params too, which nothing reads but which nest all the same).
        jsontext.check_depth(data, (read.params, read.result))
    except JSONRefused:
        return None
    return message


def _first_members(data: bytes | str) -> Any:
    """
    L{_read_members}'s reader, made at the first message read (msgspec is imported then,
    as L{jsontext} imports it), and then read with.
    """
    global _read_members, _UNSET  # noqa: PLW0603 (read by each call of _read_plain)
    import msgspec.json

    class Envelope(msgspec.Struct, forbid_unknown_fields=True):
        """A JSON-RPC message's members; an unknown one is refused."""

        jsonrpc: Any = msgspec.UNSET
        id: Any = msgspec.UNSET
        method: Any = msgspec.UNSET
        params: Any = None
        result: Any = msgspec.UNSET
        error: Any = msgspec.UNSET

    _UNSET = msgspec.UNSET
    _read_members = msgspec.json.Decoder(Envelope).decode
    return _read_members(data)


#: Reads a message's envelope members (L{_first_members} until the first message is read).
_read_members: Callable[[bytes | str], Any] = _first_members
#: msgspec's mark of a member not given (a stand-in until msgspec is imported).
_UNSET: object = _MISSING


def _answered_id(data: bytes | str) -> RequestId | None:
    """
    The id of a response that strict reading refused but Python's lenient decoder reads (it
    holds C{NaN}, C{1e400} or deep nesting), so that the request it answers fails now, with
    the reason, instead of waiting for its deadline.  C{None} for anything else.

    Only reached on the failure path; a request keeps the C{null} id JSON-RPC gives a parse
    error.
    """
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if type(value) is not dict or "method" in value:
        return None
    if "result" not in value and "error" not in value:
        return None
    found = value.get("id")
    return found if type(found) is int or type(found) is str else None


def parse_object(obj: object) -> Message:
    """
    Check an already-decoded JSON value and build the message it describes.

    @raise ProtocolError: -32600 if C{obj} is not a JSON-RPC 2.0 message.
    """
    if type(obj) is not dict:
        raise ProtocolError(INVALID_REQUEST, "Invalid Request: a message must be a JSON object")
    raw_id = obj.get("id", _MISSING)
    id_type = type(raw_id)
    readable_id: RequestId | None = raw_id if id_type is int or id_type is str else None
    if obj.get("jsonrpc") != JSONRPC_VERSION:
        raise ProtocolError(
            INVALID_REQUEST,
            'Invalid Request: "jsonrpc" must be "2.0"',
            id=readable_id,
            about_response="method" not in obj and ("result" in obj or "error" in obj),
        )
    method = obj.get("method", _MISSING)
    if method is not _MISSING:
        if type(method) is not str:
            raise ProtocolError(
                INVALID_REQUEST, 'Invalid Request: "method" must be a string', id=readable_id
            )
        if "result" in obj or "error" in obj:
            raise ProtocolError(
                INVALID_REQUEST,
                'Invalid Request: a request cannot carry "result" or "error"',
                id=readable_id,
            )
        params = obj.get("params")
        if params is not None and type(params) is not dict and type(params) is not list:
            raise ProtocolError(
                INVALID_REQUEST,
                'Invalid Request: "params" must be an object or an array',
                id=readable_id,
            )
        if raw_id is _MISSING:
            return Notification(method, params)
        if readable_id is None:
            raise ProtocolError(
                INVALID_REQUEST, 'Invalid Request: "id" must be a string or an integer'
            )
        return Request(readable_id, method, params)
    return _parse_response(obj, raw_id, readable_id)


def _parse_response(
    obj: dict[str, Any], raw_id: object, readable_id: RequestId | None
) -> Response | ErrorResponse:
    has_result = "result" in obj
    error = obj.get("error", _MISSING)
    if has_result == (error is not _MISSING):
        raise ProtocolError(
            INVALID_REQUEST,
            'Invalid Request: a message needs "method", or exactly one of "result" and "error"',
            id=readable_id,
            about_response=has_result,
        )
    if has_result:
        if readable_id is None:
            raise ProtocolError(
                INVALID_REQUEST,
                'Invalid Request: a response "id" must be a string or an integer',
                about_response=True,
            )
        return Response(readable_id, obj["result"])
    if readable_id is None and raw_id is not None:
        raise ProtocolError(
            INVALID_REQUEST,
            'Invalid Request: an error response "id" must be a string, an integer or null',
            about_response=True,
        )
    if (
        type(error) is not dict
        or type(error.get("code")) is not int
        or type(error.get("message")) is not str
    ):
        raise ProtocolError(
            INVALID_REQUEST,
            'Invalid Request: "error" must be an object with an integer "code" and a string '
            '"message"',
            id=readable_id,
            about_response=True,
        )
    return ErrorResponse(readable_id, RpcError.from_json(error))


def _parse_batch(items: list[Any], allow_batch: bool) -> Batch:
    if not allow_batch:
        raise ProtocolError(
            INVALID_REQUEST, "Invalid Request: batches are not allowed on this protocol revision"
        )
    if not items:
        raise ProtocolError(INVALID_REQUEST, "Invalid Request: empty batch")
    messages: list[Message] = []
    invalid: list[ProtocolError] = []
    for item in items:
        try:
            messages.append(parse_object(item))
        except ProtocolError as e:
            invalid.append(e)
    return Batch(tuple(messages), tuple(invalid))


def is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    """
    C{isinstance(value, Mapping)}, without the ABC's check (a Python-level call) for the
    common cases on the hot path: a dict, or nothing.
    """
    return type(value) is dict or (value is not None and isinstance(value, Mapping))


def without_member(message: Mapping[str, Any], field: str, key: str) -> dict[str, Any]:
    """
    A copy of C{message} whose object C{field} (present) lacks C{key}; C{field} itself goes
    when that leaves it empty, as a field nobody would send empty.
    """
    rest = {name: value for name, value in message[field].items() if name != key}
    shown = dict(message)
    if rest:
        shown[field] = rest
    else:
        del shown[field]
    return shown


def encode_json(value: Any) -> bytes:
    """
    Encode any JSON value compactly as UTF-8.

    Strings holding lone surrogates (which a peer can smuggle in with C{\\ud800} escapes) cannot
    be written as UTF-8; those values are written with ASCII escapes instead, which is still
    valid JSON and costs nothing on the usual path.

    @raise TypeError: for values JSON cannot represent.
    @raise ValueError: for NaN and infinities.
    @raise RecursionError: for circular structures.
    """
    text = "".join(_encoder(value, 0))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(_ascii_encoder(value, 0)).encode("ascii")


def utf8_json(value: Any) -> bytes | None:
    """
    L{encode_json} of C{value} when it can be written as UTF-8, else C{None} (a lone
    surrogate in it would put the whole message it is part of into ASCII escapes).
    """
    try:
        return "".join(_encoder(value, 0)).encode("utf-8")
    except UnicodeEncodeError:
        return None


def _key_text(key: str) -> bytes | None:
    """
    L{utf8_json} of a member's key: written here when it needs no escape (printable
    ASCII without a quote or a backslash, as nearly every key is), which is the
    encoder's own text for it without the encoder's set-up for one string.
    """
    if key.isascii() and key.isprintable() and '"' not in key and "\\" not in key:
        return b'"%b"' % key.encode("ascii")
    return utf8_json(key)


class EncodedResult(dict[str, Any]):
    """
    A result together with its own encoding (L{encode_json} of the same value), for a
    result answered many times over unchanged (the server's cached lists).  It is the
    result itself, so anything may read it as one; L{encode} writes the encoding in
    place of encoding it again, which gives the same bytes.  Never modify one.

    It may also be one value of a result (L{encode} writes it in place there too).

    @ivar json: the encoding.
    @ivar escaped: whether the encoding is in ASCII escapes (C{result} holds a lone
        surrogate), which only a whole message may be.
    """

    __slots__ = ("escaped", "json")

    def __init__(self, result: Mapping[str, Any], json: bytes | None = None) -> None:
        """
        @param json: the encoding, when the caller wrote it (it must be L{utf8_json} of
            C{result}); by default it is written here.
        """
        super().__init__(result)
        written = utf8_json(result) if json is None else json
        self.escaped = written is None
        self.json = encode_json(result) if written is None else written


class ReadResult(dict[str, Any]):
    """
    An upstream's result together with the JSON text of each of its members' values as
    they were read (L{parse}), so that passing it on writes that text instead of encoding
    the values again: the same bytes wherever the upstream writes compact UTF-8 JSON, as
    mcpx and the SDKs do, and the same value whatever its spelling.

    A member is written from its text while it holds the very value read; one replaced
    or added since (C{resultType}, which the upstream session gives every result, the
    2026-07-28 envelope's C{_meta}) is encoded.  The values themselves are never
    modified: a downgrade or a rewrite makes new objects.

    @ivar read: the members as read, by key: the value, and the text it was read from.
    """

    __slots__ = ("read",)

    def __init__(self, result: Mapping[str, Any], read: Members) -> None:
        super().__init__(result)
        self.read = read

    def encoded(self) -> bytes | None:
        """
        The result's JSON text: each member's text as read where it holds the value read,
        and encoded where not; C{None} when one of those cannot be written as UTF-8
        (then the whole message is encoded, in ASCII escapes).
        """
        read = self.read
        pieces = [b"{"]
        for key, value in self.items():
            found = read.get(key)
            written = found[1] if found is not None and found[0] is value else utf8_json(value)
            key_json = _key_text(key)
            if written is None or key_json is None:
                return None
            pieces += (key_json, b":", written, b",")
        if len(pieces) == 1:
            return b"{}"
        pieces[-1] = b"}"
        return b"".join(pieces)


def spelled_as_read(result: Mapping[str, Any], spelled: Mapping[str, Any]) -> Mapping[str, Any]:
    """
    C{spelled}, a result as a revision spells C{result}, with the text C{result}'s members
    were read from (a L{ReadResult}): the members the spelling kept as they were are
    written from it, those it replaced or added are encoded.
    """
    if type(result) is not ReadResult or spelled is result:
        return spelled
    return ReadResult(spelled, result.read)


class EncodedList(list[Any]):
    """
    A list with its own encoding, L{utf8_json} of the same list, written in its place when
    it is one value of a result (a tool result's C{content}).  Never modify one.

    @ivar json: the encoding.
    """

    __slots__ = ("json",)

    def __init__(self, items: list[Any], json: bytes) -> None:
        super().__init__(items)
        self.json = json


class EncodedTail(dict[str, Any]):
    """
    An object whose last members come with their encoding, for a request's C{_meta}
    that ends with the same members request after request (a 2026-07-28 session's
    revision, capabilities and identity): L{encode} writes that encoding in place of
    encoding them again, which gives the same bytes, where it is its params' last
    member.  Never modify one.

    @ivar head: the members before them, as an object of their own.
    @ivar tail: the text of the last members, C{"key":value,...}, as L{utf8_json}
        writes them.
    """

    __slots__ = ("head", "tail")

    def __init__(self, head: dict[str, Any], last: Mapping[str, Any], tail: bytes) -> None:
        """
        @param last: the last members, none of them named in C{head}.
        @param tail: L{tail_of} C{last}.
        """
        dict.__init__(self, head)  # as super() would, without making a super object
        self.update(last)
        self.head = head
        self.tail = tail


def tail_of(members: Mapping[str, Any]) -> bytes | None:
    """
    The text C{members} are written as inside an object (an L{EncodedTail}'s C{tail}),
    C{None} when they cannot be written as UTF-8.
    """
    written = utf8_json(members)
    return None if written is None else written[1:-1]


_ENCODED_VALUES: Final = frozenset((EncodedResult, EncodedList))


def _result_pieces(result: dict[str, Any]) -> list[bytes] | None:
    """
    L{encode_json} of C{result}, whose values include encoded ones, as pieces to join,
    with their encoding written in place (each big value is copied once, into the
    message); C{None} when the message must go in ASCII escapes instead.
    """
    pieces = [b"{"]
    for key, value in result.items():
        if type(value) in _ENCODED_VALUES:
            if getattr(value, "escaped", False):
                return None
            written: bytes | None = value.json
        else:
            written = utf8_json(value)
        key_json = _key_text(key) if type(key) is str else None
        if key_json is None or written is None:
            return None
        pieces += (key_json, b":", written, b",")
    pieces[-1] = b"}"
    return pieces


def encode(message: Message | Batch) -> bytes:
    """
    The compact UTF-8 JSON text of C{message}, without a trailing newline.

    Nothing is validated or copied: the params and results are written as they are.
    """
    if type(message) is Response:
        request_id = message.id
        result = message.result
        # An id that would force the whole message into ASCII escapes takes the long way.
        if type(request_id) is int or (type(request_id) is str and request_id.isascii()):
            pieces: list[bytes] | None = None
            if type(result) is EncodedResult:
                pieces = [result.json]
            elif type(result) is ReadResult:
                written = result.encoded()
                if written is not None:
                    pieces = [written]
            elif type(result) is dict and not _ENCODED_VALUES.isdisjoint(
                map(type, result.values())
            ):
                pieces = _result_pieces(result)
            else:
                # The envelope written here, the result alone by the encoder: its three
                # members cost the encoder about as much as the result's first three.
                written = utf8_json(result)
                if written is not None:
                    pieces = [written]
            if pieces is not None:
                return b"".join(
                    (
                        b'{"jsonrpc":"2.0","id":',
                        # An integer as the encoder writes it (its repr), without the
                        # encoder's set-up for a value that is not a string.
                        b"%d" % request_id if type(request_id) is int else encode_json(request_id),
                        b',"result":',
                        *pieces,
                        b"}",
                    )
                )
    elif type(message) is Request:
        return encode_request(message)
    return encode_json(message.to_json())


#: A JSON string's text, as the encoder writes one (it is the function the encoder calls).
_quoted: Final[Callable[[str], str]] = json.encoder.encode_basestring


def encode_request(message: Request) -> bytes:
    """
    L{encode} of a request: its envelope written here and only its params by the
    encoder, the same bytes, with the encoding of an L{EncodedTail} C{_meta} that is
    their last member written in place of its last members'; the whole message by the
    encoder when it must go in ASCII escapes (or its method is not a string).
    """
    request_id = message.id
    if type(request_id) is int:
        written_id = b"%d" % request_id
    elif type(request_id) is str and request_id.isascii():
        written_id = encode_json(request_id)
    else:
        return encode_json(message.to_json())
    try:
        method = _quoted(message.method).encode("utf-8")
    except (TypeError, UnicodeEncodeError):
        return encode_json(message.to_json())
    params = message.params
    if params is None:
        return b"".join((b'{"jsonrpc":"2.0","id":', written_id, b',"method":', method, b"}"))
    meta = params.get("_meta") if type(params) is dict else None
    if type(meta) is EncodedTail and type(params) is dict and next(reversed(params)) == "_meta":
        # The same params with the _meta's head alone, in the same place: their text
        # ends with that head's closing brace and the params' own.
        written = utf8_json({**params, "_meta": meta.head})
        if written is not None:
            written = b"".join((written[:-2], b"," if meta.head else b"", meta.tail, b"}}"))
    else:
        written = utf8_json(params)
    if written is None:
        return encode_json(message.to_json())
    return b"".join(
        (b'{"jsonrpc":"2.0","id":', written_id, b',"method":', method, b',"params":', written, b"}")
    )


class IdSequence:
    """
    Request ids for one direction of one connection.

    mcpx as a server originates negative ids (-1, -2, ...): JSON-RPC only needs ids unique
    per direction, but some clients key a single table by id and would confuse mcpx's
    requests with their own.  mcpx as a client uses positive ids (1, 2, ...).
    """

    __slots__ = ("negative", "take")

    def __init__(self, negative: bool = False) -> None:
        self.negative = negative
        #: The next id, called without a Python-level C{__next__} (C{itertools.count}'s own).
        self.take: Callable[[], int] = (
            itertools.count(-1, -1) if negative else itertools.count(1)
        ).__next__

    def __iter__(self) -> Iterator[int]:
        return self

    def __next__(self) -> int:
        return self.take()
