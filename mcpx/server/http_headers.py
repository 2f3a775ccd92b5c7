# -*- test-case-name: tests.server.test_http -*-
"""
The request-metadata headers of a 2026-07-28 POST to C{/mcp}, against its body.

C{MCP-Protocol-Version}, C{Mcp-Method} and, for the methods that name a target,
C{Mcp-Name} are required and must agree with the body; values are compared after
trimming whitespace, and C{=?base64?...?=} values are decoded.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

from twisted.web.iweb import IRequest

from mcpx.server.http_exchange import header
from mcpx.spec.meta_keys import PROTOCOL_VERSION_KEY
from mcpx.upstream.http_headers import NAME_FIELDS
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import Batch, Message, Notification, Request

MISSING: Final[Any] = object()


_SENTINEL_START: Final = "=?base64?"
_SENTINEL_END: Final = "?="


def decode_header_value(value: str) -> str:
    """
    An C{Mcp-Name} (or C{Mcp-Param-*}) value as its sender meant it: C{=?base64?...?=}
    decoded, anything else as it is.  A malformed encoded value is returned unchanged, so
    it fails the comparison with the body.
    """
    if value.startswith(_SENTINEL_START) and value.endswith(_SENTINEL_END):
        encoded = value[len(_SENTINEL_START) : -len(_SENTINEL_END)]
        try:
            return base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return value
    return value


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
    if decode_header_value(name) != target:
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
