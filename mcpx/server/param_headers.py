# -*- test-case-name: tests.server.test_param_headers -*-
"""
SEP-2243 C{Mcp-Param-*} headers on C{/mcp}, checked for the tools mcpx passes through.

A tool's C{inputSchema} may annotate an argument with C{x-mcp-header: Name}; a
2026-07-28 client calling it over Streamable HTTP then mirrors the argument's value in
an C{Mcp-Param-Name} header, so that what sits between it and the server can route on
it.  mcpx reads the body, so it must refuse a call whose headers do not tell the same
story, before anything is forwarded: with HTTP 400 and C{-32020} (C{HeaderMismatch}),
when

  - an annotated argument has a value and its header is missing;
  - a header is there but the argument has no value (null counts as none);
  - a header holds something other than visible ASCII, space and tab, or a
    C{=?base64?...?=} value whose Base64 is malformed (padding included) or not UTF-8;
  - the (decoded) header disagrees with the argument: strings compare as they are,
    integers as numbers (C{42.0} is C{42}), booleans as C{true}/C{false}.

Only pass-through tools are checked: the gateway's own tools annotate nothing.  The
annotations are read with the rules both directions share
(L{mcpx.wire.http_common.param_header_paths}, the one place that knows them); a tool
whose annotations break those rules is checked for none.  Which headers each tool
wants is derived once per catalogue the pool lists
(L{mcpx.server.passthrough_routes.Routes.param_headers}), so a call costs a dict
lookup and one header read per annotated argument; the pipeline checks each call
with L{check_headers} once it has the call's route (L{mcpx.server.calling}).

The transport hands the request's headers over with the request, and they travel in
its L{mcpx.server.conn.Context} (C{headers}) to the pipeline (L{mcpx.server.calling});
where none were handed over (stdio, legacy HTTP) there is nothing to check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from twisted.logger import Logger

from mcpx.server.conn import HeaderSource
from mcpx.wire.errors import RpcError
from mcpx.wire.http_common import PARAM_HEADER_PREFIX as PREFIX
from mcpx.wire.http_common import InvalidParamHeader, decode_header_value, param_header_paths

log = Logger()

#: Argument path to the C{x-mcp-header} name it is mirrored under.
HeaderPaths = Mapping[tuple[str, ...], str]

#: What a tool that annotates nothing asks for.
NO_HEADERS: Final[HeaderPaths] = {}


def tool_header_paths(tools: list[dict[str, Any]]) -> dict[str, HeaderPaths]:
    """
    The C{Mcp-Param-*} headers each tool of a catalogue asks for, by tool name; tools
    that ask for none, or whose annotations are invalid, are left out.
    """
    found: dict[str, HeaderPaths] = {}
    for tool in tools:
        if type(tool) is not dict:
            continue
        name = tool.get("name")
        if not isinstance(name, str):
            continue
        try:
            paths = param_header_paths(tool)
        except InvalidParamHeader as e:
            log.debug(
                "tool {tool!r}: its x-mcp-header annotations are ignored: {why}",
                tool=name,
                why=str(e),
            )
            continue
        if paths:
            found[name] = paths
    return found


def _visible(value: str) -> bool:
    # RFC 9110 field content as 2026-07-28 narrows it: visible ASCII, space, tab.
    return all(" " <= c <= "~" or c == "\t" for c in value)


def decode_param(header: str, value: str) -> str:
    """
    What an C{Mcp-Param-*} value says: a C{=?base64?...?=} value decoded, anything else
    as it is.

    @raise RpcError: C{-32020} for characters a header value may not hold, or an
        encoded value that is not valid, padded Base64 of UTF-8 text.
    """
    if not _visible(value):
        raise RpcError.header_mismatch(f"{PREFIX}{header} holds characters a header may not")
    try:
        return decode_header_value(value)
    except ValueError:
        raise RpcError.header_mismatch(
            f"{PREFIX}{header} is not valid =?base64?...?= (Base64 of UTF-8, padded)"
        ) from None


def _agrees(said: str, value: object) -> bool:
    if isinstance(value, bool):
        return said == ("true" if value else "false")
    if isinstance(value, int | float):
        try:
            return float(said) == value
        except ValueError:
            return False
    if isinstance(value, str):
        return said == value
    return False


def _at(arguments: object, path: tuple[str, ...]) -> object:
    value = arguments
    for key in path:
        if type(value) is not dict:
            return None
        value = value.get(key)
    return value


def check_headers(wanted: HeaderPaths, arguments: object, headers: HeaderSource) -> None:
    """
    Check a call's C{Mcp-Param-*} headers against its arguments.

    @param wanted: the tool's annotated argument paths and their header names.
    @param arguments: the call's C{params.arguments}.
    @param headers: the request's headers.
    @raise RpcError: C{-32020}, naming the header, for the first one missing, malformed
        or disagreeing with the arguments.
    """
    for path, header in wanted.items():
        value = _at(arguments, path)
        given = headers(PREFIX + header)
        where = "arguments." + ".".join(path)
        if value is None:
            if given is not None:
                raise RpcError.header_mismatch(f"{PREFIX}{header} is sent but {where} has no value")
            continue
        if given is None:
            raise RpcError.header_mismatch(
                f"the {PREFIX}{header} header is required: {where} has a value"
            )
        if not _agrees(decode_param(header, given), value):
            raise RpcError.header_mismatch(
                f"{PREFIX}{header} {given!r} disagrees with {where} {value!r}"
            )
