# -*- test-case-name: tests.upstream.test_http -*-
"""
What Streamable HTTP says in headers: the 2026-07-28 request-metadata headers
(C{Mcp-Method}, C{Mcp-Name}, C{Mcp-Param-*}) and their value encoding, and how a
refusal is read (C{Retry-After}, C{WWW-Authenticate}, a session the server forgot, a
redirect to another origin).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Final

from hyperlink import EncodedURL
from twisted.web.iweb import IResponse

from mcpx.settings.servers import redact_url
from mcpx.upstream.channel import Negotiated
from mcpx.upstream.http_client import ERROR_BODY_LIMIT
from mcpx.wire.messages import Request

#: The methods whose C{Mcp-Name} header mirrors a field of their params (2026-07-28).
NAME_FIELDS: Final[Mapping[str, str]] = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    # The tasks extension.
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}


# Visible ASCII with inner spaces; anything else (non-ASCII, control characters tab
# included, whitespace at either end) travels base64-encoded (2026-07-28 "Value Encoding").
_HEADER_SAFE: Final = re.compile(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?")
_SENTINEL_START: Final = "=?base64?"
_SENTINEL_END: Final = "?="


def header_value(value: str) -> str:
    """
    A string as an C{Mcp-Name} or C{Mcp-Param-*} header value: as it is when it is
    plain header-safe ASCII, otherwise C{=?base64?...?=} around the Base64 of its UTF-8
    (also for plain values that look like that form, so they cannot be misread).
    """
    if value == "" or (
        _HEADER_SAFE.fullmatch(value) is not None
        and not (value.startswith(_SENTINEL_START) and value.endswith(_SENTINEL_END))
    ):
        return value
    encoded = base64.b64encode(value.encode("utf-8", "surrogatepass")).decode("ascii")
    return f"{_SENTINEL_START}{encoded}{_SENTINEL_END}"


def modern_request_headers(request: Request, negotiated: Negotiated) -> dict[str, str]:
    """
    The request-metadata headers of a 2026-07-28 request besides C{MCP-Protocol-Version}:
    C{Mcp-Method}, C{Mcp-Name} for the methods that name a target, and, for a
    C{tools/call}, the C{Mcp-Param-*} headers L{Negotiated.param_headers} gives for its
    tool (header name suffix to the argument's value as text), encoded as
    L{header_value} says.
    """
    headers = {"Mcp-Method": request.method}
    params = request.params
    name_field = NAME_FIELDS.get(request.method)
    if name_field is not None and isinstance(params, dict):
        name = params.get(name_field)
        if isinstance(name, str):
            headers["Mcp-Name"] = header_value(name)
            if request.method == "tools/call":
                extra = negotiated.param_headers.get(name)
                if extra:
                    for suffix, value in extra.items():
                        headers[f"Mcp-Param-{suffix}"] = header_value(value)
    return headers


MAX_RETRY_AFTER: Final = 60.0

#: How many same-origin redirects one request follows.
MAX_REDIRECTS: Final = 5

# What TypeScript SDK servers (and others) say in a 400 to a session they do not know.
_UNKNOWN_SESSION: Final = re.compile(
    rb"session[^\n]{0,40}?(not found|unknown|invalid|expired|no longer)"
    rb"|(unknown|invalid|expired|no valid)[^\n]{0,20}?session",
    re.IGNORECASE,
)


def retry_after(response: IResponse, now: float) -> float | None:
    """
    The seconds C{Retry-After} asks to wait (delta-seconds or an HTTP date), at most
    L{MAX_RETRY_AFTER}; C{None} without a readable one.
    """
    values = response.headers.getRawHeaders(b"retry-after")
    if not values:
        return None
    text = values[-1].decode("latin-1").strip()
    seconds: float
    if text.isdigit():
        seconds = float(text)
    else:
        try:
            seconds = parsedate_to_datetime(text).timestamp() - now
        except (TypeError, ValueError, IndexError):
            return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def authentication_hint(response: IResponse) -> str:
    """What a 401 says: the server wants credentials, and which (C{WWW-Authenticate})."""
    values = response.headers.getRawHeaders(b"www-authenticate")
    if not values:
        return "the server wants credentials; set auth or headers for this server"
    challenge = values[-1].decode("latin-1").strip()
    scheme = challenge.split(None, 1)[0] if challenge else ""
    realm = re.search(r'realm="([^"]*)"', challenge)
    wants = f"{scheme} credentials" if scheme else "credentials"
    if realm is not None:
        wants += f" for realm {realm.group(1)!r}"
    return f"the server wants {wants}; set auth or headers for this server"


def says_unknown_session(body: bytes) -> bool:
    """Whether an error body says the session is unknown, expired or invalid."""
    return _UNKNOWN_SESSION.search(body[:ERROR_BODY_LIMIT]) is not None


def same_origin(a: EncodedURL, b: EncodedURL) -> bool:
    """Whether two absolute URLs share scheme, host and port."""
    return (a.scheme, a.host, a.port) == (b.scheme, b.host, b.port)


def refusal_hint(response: IResponse, target: EncodedURL) -> str:
    """What an error status means for the user, beyond its number; empty if nothing."""
    code = response.code
    if code == 401:
        return authentication_hint(response)
    if code == 403:
        return "the server refused these credentials"
    if 300 <= code < 400:
        location = response.headers.getRawHeaders(b"location")
        if not location:
            return "a redirect without a Location"
        shown = redact_url(location[-1].decode("latin-1"))
        try:
            elsewhere = not same_origin(
                target, target.click(EncodedURL.from_text(location[-1].decode("latin-1")))
            )
        except (ValueError, UnicodeDecodeError):
            elsewhere = True
        if elsewhere:
            return (
                f"redirected to {shown}, another origin, which credentials are not sent to; "
                "configure that URL for this server if you trust it"
            )
        return f"redirected to {shown}; configure that URL for this server"
    return ""
