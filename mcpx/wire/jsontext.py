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
"""

from __future__ import annotations

import json
import json.scanner
import re
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
#: The decoder's scanner (C, where the interpreter has it), to read one value at an offset.
_scan: Final[Any] = json.scanner.make_scanner(_decoder)  # type: ignore[arg-type]

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


def loads(data: bytes | bytearray | str) -> Any:
    """
    Decode one JSON text strictly.

    @raise JSONRefused: if C{data} is not UTF-8, not JSON, holds C{NaN} or an infinity or a
        number too large for a float, or nests deeper than L{MAX_DEPTH}.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
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
    kind = type(value)
    # Counting brackets is done in C; only text with enough of them to be too deep is walked.
    if (kind is dict or kind is list) and text.count("[") + text.count("{") > MAX_DEPTH:
        _check_depth(value)
    return value


def read_result(data: bytes) -> tuple[int | str, dict[str, Any], bytes] | None:
    """
    A response spelled C{{"jsonrpc":"2.0","id":ID,"result":{...}}}, read as strictly as
    L{loads} reads it: its id, its result, and the result's own bytes as they came, which
    are JSON text of the same value (the exact text to pass the result on as, without
    encoding it again).

    C{None} for anything else, and for anything L{loads} would refuse: the caller reads
    those with L{loads}, which says why.
    """
    start = _RESPONSE_START.match(data)
    if start is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    begins = start.end()  # the head is ASCII: its bytes are its characters
    try:
        result, ends = _scan(text, begins)
    except (ValueError, RecursionError, StopIteration):
        return None
    if type(result) is not dict or text[ends:].rstrip(" \t\r\n") != "}":
        return None
    # What follows the result is ASCII ("}" and spaces): as many bytes as characters.
    raw = data[begins : len(data) - (len(text) - ends)]
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
        try:
            _check_depth(result)
        except JSONRefused:
            return None
    found = start.group(1)
    request_id: int | str = found[1:-1].decode() if found[:1] == b'"' else int(found)
    return request_id, result, raw
