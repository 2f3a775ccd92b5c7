# -*- test-case-name: tests.server.test_http -*-
"""
A message to C{/mcp} outside any session: the connection of its own it is served on,
and the identity it counts as (L{identity_of}).  Both eras have them: every 2026-07-28
request, and a legacy POST sent without C{initialize}.
"""

from __future__ import annotations

from typing import Final

from twisted.web.iweb import IRequest

from mcpx.auth.caller import request_subject, subject_identity
from mcpx.server.conn import Conn
from mcpx.server.mcp_socket import McpCore
from mcpx.spec.revision import UNDECLARED, Revision
from mcpx.wire.messages import Notification

#: The identity of requests that belong to no session (sessionless legacy POSTs); each
#: 2026-07-28 request gets a scope of its own under it (see the server core).
HTTP_IDENTITY: Final = "http"


def identity_of(subject: str | None) -> str:
    """
    The identity of a request outside any session: L{HTTP_IDENTITY}, or one of the access
    token's subject's own, so what one subject's requests leave behind (a C{client}-scoped
    instance, an extension task, an artifact) is not another's.
    """
    return HTTP_IDENTITY if subject is None else subject_identity(subject)


def open_alone(core: McpCore, request: IRequest, transport: str, revision: Revision) -> Conn:
    """The connection of one message outside any session: its caller is the token's."""
    subject = request_subject(request)
    return core.open(
        Conn(transport, identity_of(subject), default_revision=revision, subject=subject)
    )


def notification_alone(
    core: McpCore,
    message: Notification,
    transport: str,
    request: IRequest,
    revision: Revision | None = None,
) -> None:
    """A notification outside any session, on a connection of its own."""
    conn = open_alone(core, request, transport, revision or UNDECLARED)
    try:
        core.notification(conn, message)
    finally:
        core.close(conn)
