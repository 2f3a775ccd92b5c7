# -*- test-case-name: tests.wire.test_jsontext -*-
"""
The one strict JSON reader for everything a peer sends: C{/v1} bodies, C{/mcp} bodies, the MCP
socket, and upstream servers' stdout and HTTP answers.

Python's C{json} module accepts text that is not JSON and values mcpx could not pass on:

 - C{NaN}, C{Infinity} and C{-Infinity}, which no JSON peer can read back;
 - numbers too large for a float, such as C{1e400}, which become C{inf} and make the encoder
   fail later, far from the input that caused it;
 - nesting limited only by the interpreter's stack, so that a few kilobytes of C{[} end in a
   C{RecursionError} wherever the value is next walked (the decoder, a schema check, the
   encoder), at a depth that depends on how deep the stack already was.

L{loads} refuses all three with a L{JSONRefused} whose message names the problem, so every
entry point can answer a clear error instead of a crash.

msgspec's C reader reads each text first (it costs a fraction of the standard library's
decoder, which was about 3% of a pass-through call's instructions in the daemon): it refuses
every one of the three above and all that the standard library refuses, and reads what it
accepts as the standard library reads it (integers of any size as C{int}, a key twice the
last one kept).  Anything it refuses, and what it refuses that the standard library reads
(a lone surrogate escape), is read again by the standard library's decoder with the rules
above, so that each refusal keeps its one message.  The depth rule is this module's for
both: msgspec reads deeper.  msgspec is imported at the first text read (an idle daemon
reads none, and does not hold its 0.8 MB).
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import re
from collections.abc import Callable
from typing import Any, Final

#: How deep objects and arrays may nest, counting the outermost value as one level.  A
#: JSON-RPC envelope and a tool call's arguments take four; real schemas and results stay
#: well within this, and walking a value this deep never comes near Python's stack limit.
MAX_DEPTH: Final = 100


class JSONRefused(ValueError):
    """The text is not JSON mcpx accepts; the message says why, in terms a sender can act on."""


def _refuse_constant(name: str) -> Any:
    raise JSONRefused(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    # inf - inf is nan only for the infinities: a finite float never matches.
    if value - value != 0.0:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise JSONRefused(f"the number {shown} is too large to represent")
    return value


_decoder: Final = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)
#: The decoder's scanner (C, where the interpreter has it), to read one value at an offset
#: (L{read_result}'s members).
_scan: Final[Any] = json.scanner.make_scanner(_decoder)  # type: ignore[arg-type]
_scan_string: Final[Any] = json.decoder.scanstring  # type: ignore[attr-defined]

#: The start of a response as nearly every peer spells it (mcpx, the Python and TypeScript
#: SDKs): no space, these three members in this order, an integer or plain string id.
_RESPONSE_START: Final = re.compile(
    rb'\{"jsonrpc":"2\.0","id":(-?[0-9]{1,18}|"[ !#-\[\]-~]{0,64}"),"result":'
)


def _too_deep() -> JSONRefused:
    return JSONRefused(f"objects and arrays are nested deeper than {MAX_DEPTH} levels")


def _check_depth(value: Any) -> None:
    # Iterative, so that the walk itself cannot run out of stack.
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep()
        children = item.values() if type(item) is dict else item
        for child in children:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, depth + 1))


def _first_read(data: bytes | bytearray | str) -> Any:
    """
    msgspec's reader, made at the first text read and then read with: imported here, an
    idle daemon (which reads no JSON) does not hold it.
    """
    global _read_fast  # noqa: PLW0603 (read by each call of loads as a module global)
    import msgspec.json

    _read_fast = msgspec.json.Decoder().decode
    return _read_fast(data)


#: msgspec's reader, tried first by L{loads} (L{_first_read} until the first text is read).
_read_fast: Callable[[bytes | bytearray | str], Any] = _first_read

#: What L{loads} decodes from UTF-8 first, as C{isinstance} takes it (a tuple made once).
_BINARY: Final = (bytes, bytearray)


def loads(data: bytes | bytearray | str) -> Any:
    """
    Decode one JSON text strictly.

    @raise JSONRefused: if C{data} is not UTF-8, not JSON, holds C{NaN} or an infinity or a
        number too large for a float, or nests deeper than L{MAX_DEPTH}.
    """
    try:
        value = _read_fast(data)
    except Exception:  # whatever it refuses, the decoder reads again and says why
        return _read_standard(data)
    return _checked(data, value)


def _read_standard(data: bytes | bytearray | str) -> Any:
    """What L{loads} reads, read by the standard library's decoder alone."""
    try:
        text = data.decode("utf-8") if isinstance(data, _BINARY) else data
    except UnicodeDecodeError as e:
        raise JSONRefused(f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    try:
        value = _decoder.decode(text)
    except JSONRefused:
        raise
    except RecursionError:
        raise _too_deep() from None
    except ValueError as e:
        # JSONDecodeError says where; ValueError also covers integers with too many digits.
        raise JSONRefused(str(e)) from None
    return _checked(text, value)


def _checked(text: bytes | bytearray | str, value: Any) -> Any:
    """C{value}, read from C{text}, once it is known to nest no deeper than L{MAX_DEPTH}."""
    kind = type(value)
    if kind is not dict and kind is not list:
        return value
    check_depth(text, value)
    return value


def check_depth(text: bytes | bytearray | str, value: Any) -> None:
    """
    Refuse C{value} (a dict or list read from C{text}) if it nests deeper than
    L{MAX_DEPTH}, counting C{value} itself as one level.

    @raise JSONRefused: if it does.
    """
    # Counting brackets is done in C; only text with enough of them to be too deep is walked.
    if isinstance(text, str):
        brackets = text.count("[") + text.count("{")
    else:
        # Two counting passes rather than one translate, which would copy the text (a
        # whole answer, up to the message limit) only to measure it.
        brackets = text.count(b"[") + text.count(b"{")
    if brackets > MAX_DEPTH:
        _check_depth(value)


#: The shortest answer L{read_result} reads with its text: below it, encoding the result
#: again (about 6 us a kilobyte) costs less than reading it member by member does.
READ_AS_TEXT_FROM = 1024

#: Whitespace JSON allows between tokens.
_SPACE: Final = re.compile(r"[ \t\n\r]*")

#: A result's members as read: each value, and the bytes of the JSON text it was read from.
Members = dict[str, tuple[Any, bytes]]


def read_result(data: bytes) -> tuple[int | str, dict[str, Any], Members] | None:
    """
    A response spelled C{{"jsonrpc":"2.0","id":ID,"result":{...}}}, read as strictly as
    L{loads} reads it: its id, its result, and each member of the result with the bytes
    of its value as they came, which are JSON text of the same value (the text to pass it
    on as, without encoding it again).

    C{None} for anything else, for an answer shorter than L{READ_AS_TEXT_FROM} or with a
    line break inside, and for anything L{loads} would refuse or read another way (a key
    twice): the caller reads those with L{loads}, which says why.
    """
    if len(data) < READ_AS_TEXT_FROM:
        return None
    start = _RESPONSE_START.match(data)
    if start is None:
        return None
    # A line break inside (an HTTP upstream's pretty-printed answer) would break the
    # framing of a host on stdio or SSE were its text passed on: read those whole.
    ends = len(data.rstrip(b" \t\r\n"))
    if data.find(b"\n", 0, ends) >= 0 or data.find(b"\r", 0, ends) >= 0:
        return None
    compact = _compact_members(data, start.end(), ends)
    if compact is not None:
        result, members = compact
    else:
        try:
            text = data.decode("utf-8")
            found = _members(text, start.end())  # the head is ASCII: as many bytes as characters
        except (ValueError, RecursionError, StopIteration, IndexError):
            return None
        if found is None:
            return None
        result, spans, ends = found
        if text[ends:].rstrip(" \t\r\n") != "}":
            return None
        members = {}
        if len(text) == len(data):
            for key, (begins, stops) in spans.items():
                members[key] = (result[key], data[begins:stops])
        else:
            # Characters are not bytes: each value's text is encoded again, which is a copy.
            for key, (begins, stops) in spans.items():
                members[key] = (result[key], text[begins:stops].encode("utf-8"))
    try:
        # Inside the envelope, the result is its second level, as the general path counts.
        check_depth(data, (result,))
    except JSONRefused:
        return None
    head = start.group(1)
    request_id: int | str = head[1:-1].decode() if head[:1] == b'"' else int(head)
    return request_id, result, members


def _first_members_read(text: memoryview) -> Any:
    """
    L{_read_members_raw}'s reader, made at its first use (msgspec is imported then), and
    then read with.
    """
    global _read_members_raw  # noqa: PLW0603 (read by each call of _compact_members)
    import msgspec.json

    _read_members_raw = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
    return _read_members_raw(text)


#: Reads an object's members as the JSON text of each value, by msgspec in one pass
#: (L{_first_members_read} until it is first used).
_read_members_raw: Callable[[memoryview], Any] = _first_members_read


def _compact_members(data: bytes, at: int, ends: int) -> tuple[dict[str, Any], Members] | None:
    """
    The result object of C{data} from C{data[at]} to its last brace before C{ends},
    read by msgspec: its members and each value's text, when it is the whole rest of
    the response and written compactly with each key once and spelled plainly; C{None}
    otherwise (then L{_members} reads it, which finds a key twice and keeps spaces).

    Its members' values are read as L{loads} reads them; whatever msgspec refuses (a
    lone surrogate among them) is left to L{_members}.
    """
    if data[ends - 1] != _CLOSING_BRACE:
        return None
    try:
        raw = _read_members_raw(memoryview(data)[at : ends - 1])
        result = {key: _read_fast(text) for key, text in raw.items()}
    except Exception:  # what _members reads again, the way it always did
        return None
    # The text written compactly, each key once and plain, is exactly as long as its
    # members' keys (quoted, with a colon), values and commas and the two braces; a
    # space, a key twice or a key in escapes only makes it longer.
    length = 1 + len(raw) if raw else 2
    members: Members = {}
    for key, text in raw.items():
        written = bytes(text)
        members[key] = (result[key], written)
        length += len(key.encode("utf-8")) + 3 + len(written)
    if length != ends - 1 - at:
        return None
    return result, members


_CLOSING_BRACE: Final = ord("}")


def _members(text: str, at: int) -> tuple[dict[str, Any], dict[str, tuple[int, int]], int] | None:
    """
    The object at C{text[at]}: its members, where each value's text is, and where the
    object ends; C{None} if it is not an object, or names a key twice.
    """
    if text[at] != "{":
        return None
    result: dict[str, Any] = {}
    spans: dict[str, tuple[int, int]] = {}
    at = _SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
    if text[at] == "}":
        return result, spans, at + 1
    while True:
        if text[at] != '"':
            return None
        key, at = _scan_string(text, at + 1, True)
        at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
        if text[at] != ":":
            return None
        begins = _SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
        value, at = _scan(text, begins)
        if key in result:
            return None
        result[key] = value
        spans[key] = (begins, at)
        at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
        if text[at] == "}":
            return result, spans, at + 1
        if text[at] != ",":
            return None
        at = _SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
