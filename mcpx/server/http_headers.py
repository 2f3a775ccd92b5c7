# -*- test-case-name: tests.server.test_http -*-
"""
The request-metadata headers of a 2026-07-28 POST to C{/mcp}, against its body.

C{MCP-Protocol-Version}, C{Mcp-Method} and, for the methods that name a target,
C{Mcp-Name} are required and must agree with the body; values are compared after
trimming whitespace, and C{=?base64?...?=} values are decoded.
"""

from __future__ import annotations

from typing import Any, Final

from twisted.web.iweb import IRequest

from mcpx.server.http_exchange import header
from mcpx.spec.meta_keys import PROTOCOL_VERSION_KEY
from mcpx.wire.errors import RpcError
from mcpx.wire.http_common import NAME_FIELDS, decode_header_value
from mcpx.wire.messages import Batch, Message, Notification, Request

MISSING: Final[Any] = object()


def check_headers(
    request: IRequest, message: Message, version: str | None, meta_version: Any
) -> None:
    """
    The 2026-07-28 request-metadata headers against the body.

    @raise RpcError: C{-32020} for one missing or disagreeing.
    """
    if version is None:
        raise RpcError.header_mismatch("the MCP-Protocol-Version header is required")
    if meta_version is not MISSING and meta_version != version:
        raise RpcError.header_mismatch(
            f"MCP-Protocol-Version {version!r} disagrees with params._meta "
            f"{PROTOCOL_VERSION_KEY} {meta_version!r}"
        )
    assert isinstance(message, Request | Notification)
    method = header(request, b"mcp-method")
    if method is None:
        if isinstance(message, Request):
            raise RpcError.header_mismatch("the Mcp-Method header is required")
    elif method != message.method:
        raise RpcError.header_mismatch(
            f"Mcp-Method {method!r} disagrees with the body's method {message.method!r}"
        )
    field = NAME_FIELDS.get(message.method)
    if field is None or not isinstance(message, Request):
        return
    params = message.params
    target = params.get(field) if type(params) is dict else None
    if not isinstance(target, str):
        # The method's own validation says what is wrong with the body.
        return
    name = header(request, b"mcp-name")
    if name is None:
        raise RpcError.header_mismatch(f"the Mcp-Name header is required for {message.method}")
    try:
        said = decode_header_value(name)
    except ValueError:
        # A malformed encoded value is taken as it is, and so fails the comparison.
        said = name
    if said != target:
        raise RpcError.header_mismatch(
            f"Mcp-Name {name!r} disagrees with the body's params.{field} {target!r}"
        )


def meta_version_of(message: Message | Batch) -> Any:
    """The C{_meta} protocol version of a single request or notification, or L{MISSING}."""
    if not isinstance(message, Request | Notification):
        return MISSING
    params = message.params
    if type(params) is not dict:
        return MISSING
    meta = params.get("_meta")
    if type(meta) is not dict:
        return MISSING
    return meta.get(PROTOCOL_VERSION_KEY, MISSING)
