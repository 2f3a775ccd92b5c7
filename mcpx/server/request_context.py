# -*- test-case-name: tests.server.test_dispatch -*-
"""
What one request is served with: its revision, its caller and what it declared.

Which revision a request is served in
=====================================

  - A request whose C{_meta} names C{io.modelcontextprotocol/protocolVersion} says so
    itself.  2026-07-28 is served statelessly: its C{_meta} must also hold
    C{clientCapabilities}, and nothing the connection agreed earlier applies.  A
    version mcpx does not speak is C{-32022} with C{data.supported} and
    C{data.requested}.
  - A request that looks modern (on a 2026-07-28 HTTP request, or with other
    C{io.modelcontextprotocol/} keys in its C{_meta}) without naming a version is
    C{-32602}.
  - Any other request is legacy: the revision its connection's C{initialize} agreed,
    or, when nothing was agreed, the connection's default (2024-11-05, or 2025-03-26
    for a Streamable HTTP request without a version header).

Identity
========

The caller a request counts as (the scope of a C{client}-scoped upstream server) is
C{_meta["dev.mcpx/session"]} when the client names one; otherwise the connection's
identity for a legacy request, and a scope of its own for each 2026-07-28 request
(see C{spec/identity.md}).  Behind an access token (C{daemon.auth} C{oauth}) a named
session is the token subject's: the same name under another subject is another session.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any, Final

from mcpx.auth.caller import subject_identity
from mcpx.server.conn import HTTP_MODERN, Conn, Context, Reply
from mcpx.spec.meta_keys import (
    CLIENT_CAPABILITIES_KEY,
    CLIENT_INFO_KEY,
    LOG_LEVEL_KEY,
    PROTOCOL_VERSION_KEY,
)
from mcpx.spec.revision import NEWEST, NEWEST_FIRST, Revision
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import Request, RequestId

#: The key in which a client names the session it belongs to (spec/identity.md).
SESSION_KEY: Final = "dev.mcpx/session"

_MODERN_KEYS: Final = (
    PROTOCOL_VERSION_KEY,
    CLIENT_CAPABILITIES_KEY,
    CLIENT_INFO_KEY,
    LOG_LEVEL_KEY,
)

#: The one revision served statelessly, and its name (the common case, read without
#: L{Revision.find}).
_MODERN: Final = Revision.V2026_07_28
_MODERN_VALUE: Final = _MODERN.value

#: Every revision mcpx speaks, newest first, as C{supportedVersions} and C{data.supported}.
SUPPORTED_VERSIONS: Final[tuple[str, ...]] = tuple(rev.value for rev in NEWEST_FIRST)

#: The levels of C{logging/setLevel} (RFC 5424 severities, as every revision names them).
LOG_LEVELS: Final = frozenset(
    ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
)


_MISSING: Final[Any] = object()


def subject_session(subject: str, name: str) -> str:
    """
    The caller identity of the session C{name} named by a request with C{subject}'s
    token: under the subject's own identity, so another subject naming it reaches
    another session.
    """
    return f"{subject_identity(subject)}/{name}"


def params_of(request: Request) -> dict[str, Any]:
    params = request.params
    if params is None:
        return {}
    if type(params) is not dict:
        raise RpcError.invalid_params("params must be an object")
    return params


def _legacy(
    conn: Conn,
    revision: Revision,
    named_session: str | None,
    meta: Mapping[str, Any] | None,
    *,
    request_id: RequestId,
    reply: Reply | None,
) -> Context:
    """A legacy request's context: what its connection's handshake set."""
    # Positional, as L{Context.with_call}: the keywords cost a third of the construction.
    return Context(
        revision,
        named_session or conn.identity,
        conn.client_capabilities,
        False,
        _token(meta) if meta is not None else None,
        conn.log_level,
        None,
        None,
        None,
        conn.subject,
        request_id,
        None,
        reply,
    )


def _token(meta: Mapping[str, Any]) -> str | int | None:
    token = meta.get("progressToken")
    return token if type(token) is str or type(token) is int else None


class Envelopes:
    """Reads the context of each request one MCP server answers."""

    def __init__(self) -> None:
        #: Numbers the scope of each 2026-07-28 request that names no session.
        self._scopes = itertools.count(1)

    def context(self, conn: Conn, request: Request, reply: Reply | None = None) -> Context:
        """
        What C{request} is served with.

        @param reply: the stream it is answered on, where the transport handed one over.


        @raise RpcError: -32602 for a modern request without a usable C{_meta};
            -32022 for a protocol version mcpx does not speak.
        """
        params = request.params
        if type(params) is not dict:
            params = params_of(request)
        raw_meta = params.get("_meta", _MISSING)
        if raw_meta is _MISSING:
            meta: dict[str, Any] | None = None
        elif type(raw_meta) is dict:
            meta = raw_meta
        else:
            raise RpcError.invalid_params("params._meta must be an object")
        if meta is None:
            if conn.transport != HTTP_MODERN:
                return _legacy(
                    conn,
                    conn.revision or conn.default_revision,
                    None,
                    None,
                    request_id=request.id,
                    reply=reply,
                )
            raise RpcError.invalid_params(
                f"a {NEWEST} request carries params._meta with {PROTOCOL_VERSION_KEY} and "
                f"{CLIENT_CAPABILITIES_KEY}"
            )
        session = meta.get(SESSION_KEY)
        named_session = session if isinstance(session, str) and session else None
        if named_session is not None and conn.subject is not None:
            named_session = subject_session(conn.subject, named_session)
        version = meta.get(PROTOCOL_VERSION_KEY, _MISSING)
        if version is _MISSING:
            if conn.transport != HTTP_MODERN and meta.keys().isdisjoint(_MODERN_KEYS):
                return _legacy(
                    conn,
                    conn.revision or conn.default_revision,
                    named_session,
                    meta,
                    request_id=request.id,
                    reply=reply,
                )
            raise RpcError.invalid_params(f"params._meta has no {PROTOCOL_VERSION_KEY}")
        if version != _MODERN_VALUE:
            named = Revision.find(version)
            if named is None:
                raise RpcError.unsupported_version(version, SUPPORTED_VERSIONS)
            if not named.is_modern:
                # A legacy client restating its revision: the handshake still governs.
                return _legacy(
                    conn,
                    conn.revision or named,
                    named_session,
                    meta,
                    request_id=request.id,
                    reply=reply,
                )
        capabilities = meta.get(CLIENT_CAPABILITIES_KEY)
        if type(capabilities) is not dict:
            raise RpcError.invalid_params(
                f"params._meta has no {CLIENT_CAPABILITIES_KEY} object ({{}} declares none)"
            )
        level = meta.get(LOG_LEVEL_KEY)
        # Checked as a string first: an array or an object cannot be looked up in a set.
        if level is not None and (type(level) is not str or level not in LOG_LEVELS):
            raise RpcError.invalid_params(f"{LOG_LEVEL_KEY} {level!r} is not a logging level")
        token = meta.get("progressToken")
        return Context(
            _MODERN,
            named_session or f"{conn.identity}/request-{next(self._scopes)}",
            capabilities,
            True,
            token if type(token) is str or type(token) is int else None,
            level,
            None,
            None,
            named_session or conn.identity,
            conn.subject,
            None,
            conn.headers,
            reply,
        )
