# -*- test-case-name: tests.wire.test_errors -*-
"""
JSON-RPC error codes as MCP uses them, kept in one table, and the exception that carries one.

Every code mcpx may send or must recognise is listed in L{ERROR_CODES} with its name, the
message used when none is given, the revisions that may emit it, and the HTTP status a
2026-07-28 Streamable HTTP server answers with when a request fails with it.

The HTTP statuses come from the 2026-07-28 transport page: a missing method is C{404} (a
dual-era client uses that status to tell a modern server from a legacy endpoint that does not
exist); malformed or refused requests are C{400}; an internal error is C{500}.  Two codes are
not in that mapping because a 2026-07-28 server must never emit them:

  - C{-32002} (resource not found) belongs to the legacy revisions, where a JSON-RPC error
    travels in a C{200} response; 2026-07-28 answers C{-32602} instead.
  - C{-32042} (URL elicitation required) exists only in 2025-11-25.

Both map to C{200}, as does C{-32010} (upstream failed), mcpx's own code in the band
MCP leaves to implementations (-32000 to -32019) for a request the upstream server's
answer failed (its transport broke, its answer was too large or unreadable: C{/v1}'s
C{502}), so a host is not told mcpx failed inside (C{-32603}, C{500}); and so does any
code outside the table (application-defined errors such as a
user declining a sampling request): the JSON-RPC error body says what went wrong, and a
transport-level failure status would only mislead.  In particular neither may be C{404}, which
legacy clients read as "session gone".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from attrs import frozen

from mcpx.spec.revision import LEGACY_REVISIONS, Revision

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
RESOURCE_NOT_FOUND = -32002
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022
URL_ELICITATION_REQUIRED = -32042
UPSTREAM_FAILED = -32010

#: The status for a JSON-RPC error whose code has no transport meaning of its own.
DEFAULT_HTTP_STATUS = 200

_ALL: tuple[Revision, ...] = tuple(Revision)
_MODERN: tuple[Revision, ...] = (Revision.V2026_07_28,)


@frozen(slots=True)
class ErrorCode:
    """
    What one JSON-RPC error code means to mcpx.

    @ivar code: the integer on the wire.
    @ivar name: the name the specification gives it.
    @ivar message: the message used when a caller supplies none.
    @ivar http_status: the status of a 2026-07-28 Streamable HTTP reply carrying it.
    @ivar revisions: the revisions in which a sender may emit it (receivers accept every
        code from every revision).
    """

    code: int
    name: str
    message: str
    http_status: int
    revisions: tuple[Revision, ...]


ERROR_CODES: Mapping[int, ErrorCode] = {
    entry.code: entry
    for entry in (
        ErrorCode(PARSE_ERROR, "ParseError", "Parse error", 400, _ALL),
        ErrorCode(INVALID_REQUEST, "InvalidRequest", "Invalid Request", 400, _ALL),
        ErrorCode(METHOD_NOT_FOUND, "MethodNotFound", "Method not found", 404, _ALL),
        ErrorCode(INVALID_PARAMS, "InvalidParams", "Invalid params", 400, _ALL),
        ErrorCode(INTERNAL_ERROR, "InternalError", "Internal error", 500, _ALL),
        ErrorCode(
            RESOURCE_NOT_FOUND, "ResourceNotFound", "Resource not found", 200, LEGACY_REVISIONS
        ),
        ErrorCode(HEADER_MISMATCH, "HeaderMismatch", "Header mismatch", 400, _MODERN),
        ErrorCode(
            MISSING_REQUIRED_CLIENT_CAPABILITY,
            "MissingRequiredClientCapability",
            "Missing required client capability",
            400,
            _MODERN,
        ),
        ErrorCode(
            UNSUPPORTED_PROTOCOL_VERSION,
            "UnsupportedProtocolVersion",
            "Unsupported protocol version",
            400,
            _MODERN,
        ),
        ErrorCode(
            URL_ELICITATION_REQUIRED,
            "URLElicitationRequired",
            "URL elicitation required",
            200,
            (Revision.V2025_11_25,),
        ),
        ErrorCode(UPSTREAM_FAILED, "UpstreamFailed", "Upstream failed", 200, _ALL),
    )
}


def http_status_for(code: int) -> int:
    """
    The HTTP status a 2026-07-28 Streamable HTTP server answers with for an error C{code}.

    Codes outside L{ERROR_CODES} get L{DEFAULT_HTTP_STATUS}.
    """
    entry = ERROR_CODES.get(code)
    return DEFAULT_HTTP_STATUS if entry is None else entry.http_status


def may_emit(code: int, revision: Revision) -> bool:
    """
    Whether a sender speaking C{revision} may emit C{code}.

    Codes outside the table are application-defined and allowed everywhere.
    """
    entry = ERROR_CODES.get(code)
    return entry is None or revision in entry.revisions


class RpcError(Exception):
    """
    A JSON-RPC error: raised by request handlers, relayed from peers, failed into Deferreds.

    C{data} of C{None} means "no data member": JSON-RPC makes it optional and nothing in MCP
    sends an explicit C{null}.

    @ivar code: the JSON-RPC error code.
    @ivar message: a short human-readable description.
    @ivar data: extra detail for the other side, or C{None}.
    """

    code: int
    message: str
    data: Any

    def __init__(self, code: int, message: str | None = None, data: Any = None) -> None:
        if message is None:
            entry = ERROR_CODES.get(code)
            message = "Error" if entry is None else entry.message
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.data = data

    def __str__(self) -> str:
        return f"{self.message} ({self.code})"

    def __repr__(self) -> str:
        data = "" if self.data is None else f", data={self.data!r}"
        return f"{type(self).__name__}({self.code}, {self.message!r}{data})"

    @property
    def http_status(self) -> int:
        """The 2026-07-28 Streamable HTTP status for this error; see L{http_status_for}."""
        return http_status_for(self.code)

    def to_json(self) -> dict[str, Any]:
        """The JSON-RPC error object: C{{"code", "message"}} plus C{"data"} when present."""
        if self.data is None:
            return {"code": self.code, "message": self.message}
        return {"code": self.code, "message": self.message, "data": self.data}

    @classmethod
    def from_json(cls, error: Mapping[str, Any]) -> RpcError:
        """
        Rebuild an error from its JSON object, as relayed from a peer.

        The caller has checked that C{code} is an integer and C{message} a string.
        """
        return cls(error["code"], error["message"], error.get("data"))

    @classmethod
    def invalid_request(cls, detail: str | None = None) -> RpcError:
        """-32600: JSON, but not a valid JSON-RPC 2.0 message."""
        return cls(INVALID_REQUEST, _with_detail("Invalid Request", detail))

    @classmethod
    def method_not_found(cls, method: str) -> RpcError:
        """-32601: no such method (or one behind a capability that was not advertised)."""
        return cls(METHOD_NOT_FOUND, f"Method not found: {method}")

    @classmethod
    def invalid_params(cls, message: str | None = None, data: Any = None) -> RpcError:
        """-32602: the method exists but its parameters are wrong."""
        return cls(INVALID_PARAMS, message or "Invalid params", data)

    @classmethod
    def internal_error(cls, message: str | None = None) -> RpcError:
        """-32603: something failed on this side; C{message} must be safe to show the peer."""
        return cls(INTERNAL_ERROR, message or "Internal error")

    @classmethod
    def resource_not_found(cls, uri: str) -> RpcError:
        """-32002 (legacy revisions only; 2026-07-28 uses L{invalid_params} instead)."""
        return cls(RESOURCE_NOT_FOUND, f"Resource not found: {uri}", {"uri": uri})

    @classmethod
    def header_mismatch(cls, message: str | None = None) -> RpcError:
        """-32020: an HTTP header is missing or disagrees with the body."""
        return cls(HEADER_MISMATCH, message or "Header mismatch")

    @classmethod
    def missing_client_capability(cls, required: Mapping[str, Any]) -> RpcError:
        """-32021, with C{data.requiredCapabilities}."""
        return cls(
            MISSING_REQUIRED_CLIENT_CAPABILITY,
            "Missing required client capability",
            {"requiredCapabilities": dict(required)},
        )

    @classmethod
    def unsupported_version(
        cls,
        requested: object,
        supported: Iterable[str],
        *,
        code: int = UNSUPPORTED_PROTOCOL_VERSION,
    ) -> RpcError:
        """
        The requested protocol revision is not one this side speaks: C{data{supported,
        requested}}.

        @param code: -32022 on 2026-07-28; a legacy C{initialize} reports the same condition
            as -32602 (L{INVALID_PARAMS}) with the same data.
        """
        return cls(
            code,
            "Unsupported protocol version",
            {"supported": list(supported), "requested": requested},
        )


class ProtocolError(RpcError):
    """
    A message that could not be read as JSON-RPC 2.0.

    @ivar id: the offending message's id when one could be read, else C{None}; an error
        response answering it carries this id.
    @ivar about_response: the message looked like a response (it had C{result} or C{error}
        and no C{method}).  JSON-RPC never answers a response, so a receiver should not send
        an error back for it; it may fail the request the id names instead.
    """

    def __init__(
        self,
        code: int,
        message: str | None = None,
        data: Any = None,
        *,
        id: int | str | None = None,
        about_response: bool = False,
    ) -> None:
        super().__init__(code, message, data)
        self.id = id
        self.about_response = about_response


def _with_detail(base: str, detail: str | None) -> str:
    return base if not detail else f"{base}: {detail}"
