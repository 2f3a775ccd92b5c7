# -*- test-case-name: tests.upstream.test_session -*-
"""
What a session needs from a transport: a L{Channel}.

A channel carries JSON-RPC messages between mcpx and one upstream server.  The
session owns an L{RpcPeer} and attaches it to the channel: the peer hands the
channel encoded messages to send, the channel hands the peer every message that
arrives and fails the requests its transport could not deliver.

Transports differ in how a request travels, and the channel hides that:

    =====================  ===============================  ==============================
    transport              a request                        giving up on a request
    =====================  ===============================  ==============================
    stdio                  one line on the child's stdin    C{notifications/cancelled}
    Streamable HTTP        one POST; the answer is its      legacy: C{notifications/cancelled};
                           JSON body or SSE stream          modern: close the response stream
    HTTP+SSE (2024-11-05)  one POST to the endpoint; the    C{notifications/cancelled}
                           answer arrives on the GET stream
    =====================  ===============================  ==============================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from mcpx.settings.secrets import excerpt
from mcpx.spec.revision import Revision
from mcpx.wire.messages import Request, RequestId
from mcpx.wire.peer import RpcPeer


class ChannelClosed(ConnectionError):
    """The channel is gone: the process exited, or the server dropped the session."""


class MessageTooLarge(Exception):
    """
    The server answered a request with a message longer than mcpx reads.

    @ivar limit: the limit, in bytes (C{transport.maxMessageSize}).
    """

    def __init__(self, label: str, limit: int) -> None:
        self.limit = limit
        super().__init__(
            f"{label} answered with a message longer than {limit} bytes, the limit "
            "transport.maxMessageSize sets"
        )


class SessionExpired(ConnectionError):
    """
    A Streamable HTTP server no longer knows the session a request carried (HTTP 404,
    or a 400 whose body says the session is unknown): the client must initialise again.

    @ivar started: the server had accepted the request before it forgot the session
        (the 404 answered resuming its stream), so it may have run it; such a request
        is not sent again unless it is safe to repeat.
    """

    def __init__(self, message: str, *, started: bool = False) -> None:
        super().__init__(message)
        self.started = started


class TransportRefused(ConnectionError):
    """
    An HTTP server refused a request at the transport level (a status without a
    JSON-RPC body), which the era probe reads as "not this era or transport".

    @ivar status: the HTTP status code.
    @ivar body: the start of the response body, for the error message.
    @ivar retry_after: the seconds the server asked to wait (C{Retry-After}), if any.
    @ivar hint: what the status means for the user (credentials wanted, the wrong
        content type, a redirect to follow by hand), or empty.
    """

    started: bool = False

    def __init__(
        self,
        status: int,
        body: bytes = b"",
        url: str = "",
        *,
        retry_after: float | None = None,
        hint: str = "",
    ) -> None:
        self.status = status
        self.body = body
        self.url = url
        self.retry_after = retry_after
        self.hint = hint
        text = excerpt(body, 200).strip()
        message = f"HTTP {status} from {url or 'the server'}"
        if hint:
            message += f" ({hint})"
        if text:
            message += f": {text}"
        super().__init__(message)


@define
class Negotiated:
    """
    What the session has agreed with the server, which an HTTP channel turns into
    headers on every request.

    @ivar revision: the revision in force (C{MCP-Protocol-Version} from 2025-06-18,
        and on every modern request).
    @ivar modern: requests are 2026-07-28 requests (C{Mcp-Method}, C{Mcp-Name}, no
        session).
    @ivar param_headers: extra C{Mcp-Param-*} headers for a request, from the input
        schema of the tool it calls; set by a modern session that knows its tools.
    """

    revision: Revision | None = None
    modern: bool = False
    param_headers: Mapping[str, Mapping[str, str]] = field(factory=dict)


class Channel(Protocol):
    """A connection to one upstream server, carrying JSON-RPC messages."""

    negotiated: Negotiated

    @property
    def cancels_with_notification(self) -> bool:
        """
        Whether giving up on a request is said with C{notifications/cancelled};
        C{False} where the transport cancels by closing the request's own stream.
        """

    def attach(self, peer: RpcPeer) -> None:
        """
        Deliver every arriving message to C{peer} (C{receive} / C{receive_message}),
        and fail requests the transport could not deliver with C{peer.fail_outgoing}.
        Called once, before anything is sent.
        """

    def start(self) -> Deferred[None]:
        """Open the transport (spawn the process, open the SSE stream); fires when usable."""

    def send(self, data: bytes) -> None:
        """Send a notification or a response to a server request."""

    def send_request(self, data: bytes, request: Request) -> None:
        """Send a request; its answer (or failure) reaches the attached peer."""

    def abandon(self, request_id: RequestId) -> None:
        """The session gave up on a request: close its stream where that is how to cancel."""

    def initialized(self) -> Deferred[None] | None:
        """
        The legacy handshake is done: open what the transport offers for messages the
        server starts (the Streamable HTTP GET stream; a 405 there is fine).

        @return: C{None}, or a Deferred that fires once that channel is open (or known
            not to be offered), so a session does not send its first request before the
            server has somewhere to put what it starts on its own.
        """

    def reset_session(self) -> None:
        """Forget the server's session id (after L{SessionExpired}), before initialising again."""

    def when_lost(self) -> Deferred[Failure]:
        """
        A fresh Deferred that I{fails} with the reason once the channel has died (a
        Deferred cannot succeed with a Failure); use C{addErrback} or C{try}/C{await}.
        """

    def close(self) -> Deferred[None]:
        """Close the transport gracefully and release everything it holds."""

    def describe(self) -> str:
        """A short label for logs and errors: the command, or the URL without secrets."""
