# -*- test-case-name: tests.upstream.test_http -*-
"""
The Streamable HTTP channel: one POST per message to an upstream server's MCP endpoint.

Every revision from 2025-03-26 on speaks Streamable HTTP, in two shapes that this one
channel covers, switching on L{Negotiated.modern}:

  - legacy (2025-03-26 to 2025-11-25): the server may give a session id in answer to
    C{initialize}, which every later request carries; from 2025-06-18 every request after
    C{initialize} names the revision in C{MCP-Protocol-Version}; an SSE response may carry
    requests and notifications from the server besides the answer, and resumes with a
    C{GET} carrying C{Last-Event-ID} if it breaks; a standalone C{GET} stream carries
    what the server starts on its own; giving up on a request is a
    C{notifications/cancelled}; the session ends with a C{DELETE}.
  - modern (2026-07-28): no session and no C{GET}; every request names its revision,
    method and target in headers (C{Mcp-Method}, C{Mcp-Name}, C{Mcp-Param-*}); giving up
    on a request is closing its response stream.

Every message that arrives, whichever stream it arrives on, goes to the attached
L{RpcPeer}; a request whose answer cannot arrive (an HTTP error, a dropped connection,
a stream that ends without it) is failed through L{RpcPeer.fail_outgoing}.

The channel keeps the session and the headers; each POST and its answer is an
L{mcpx.upstream.http_exchange.Exchange}, the legacy C{GET} stream a
L{mcpx.upstream.http_listen.ListenStream}, the headers' spelling is in
L{mcpx.upstream.http_headers}, and the HTTP plumbing both HTTP channels share in
L{mcpx.upstream.http_client}.
"""

from __future__ import annotations

import re
from typing import Any, Final, Unpack

from hyperlink import EncodedURL
from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IResponse

from mcpx.once import Once
from mcpx.settings.servers import RemoteServer
from mcpx.spec.revision import NEWEST, Revision
from mcpx.upstream.channel import ChannelClosed
from mcpx.upstream.endpoints import IReactorHTTP
from mcpx.upstream.http_client import (
    ACCEPT_BOTH,
    DEFAULT_HTTP_CONNECTIONS,
    ERROR_BODY_LIMIT,
    EVENT_STREAM,
    JSON,
    Credentials,
    HTTPChannelBase,
    HTTPChannelOptions,
    as_headers,
    explain,
    read_body,
)
from mcpx.upstream.http_exchange import Exchange
from mcpx.upstream.http_headers import modern_request_headers
from mcpx.upstream.http_listen import ListenStream
from mcpx.wire.messages import Request, RequestId

log = Logger()

_SESSION_ID: Final = re.compile(r"[\x21-\x7e]+")


class NoToken(ConnectionError):
    """A request was not sent: no token could be had for it (the message says why)."""

    #: Nothing reached the server.
    started = False


class StreamableHTTPChannel(HTTPChannelBase):
    """
    A L{mcpx.upstream.channel.Channel} to a server at a Streamable HTTP endpoint.

    The channel owns its HTTP client and connection pool unless given one.

    @ivar max_message_size: the largest JSON body or SSE event accepted, in bytes.
    @ivar resume_attempts: how many times in a row a legacy response stream is resumed
        with C{Last-Event-ID} without receiving anything before its request is failed.
    @ivar resume_delay_ms: how long to wait before resuming when the server gave no
        C{retry}.
    @ivar reconnect_attempts: how many times in a row the GET stream is reopened without
        receiving anything before mcpx stops reopening it.
    @ivar reconnect_delay: the first delay before reopening the GET stream, in seconds,
        doubled each attempt (the server's C{retry} wins when it gave one).
    """

    def __init__(
        self,
        name: str,
        server: RemoteServer,
        reactor: IReactorHTTP,
        *,
        close_timeout: float = 5.0,
        resume_attempts: int = 3,
        resume_delay_ms: int = 1000,
        reconnect_attempts: int = 5,
        reconnect_delay: float = 1.0,
        http_connections: int = DEFAULT_HTTP_CONNECTIONS,
        credentials: Credentials | None = None,
        **options: Unpack[HTTPChannelOptions],
    ) -> None:
        """
        @param credentials: where the C{Authorization} header of an OAuth server comes
            from; fetched (and refreshed when due) each time the channel starts.
        @param http_connections: the idle connections kept for reuse (with no C{pool}).
        @param options: the clock (which schedules resumptions, reconnections and
            timeouts), the HTTP client and the rest L{HTTPChannelOptions} names.
        """
        super().__init__(name, server, reactor, keep=http_connections, **options)
        # Parsed once: treq would parse a string on every request.
        self.target = EncodedURL.from_text(self.url)
        self.close_timeout = close_timeout
        self.resume_attempts = resume_attempts
        self.resume_delay_ms = resume_delay_ms
        self.reconnect_attempts = reconnect_attempts
        self.reconnect_delay = reconnect_delay
        self._base_headers = {
            **server.request_headers(),
            "Accept": ACCEPT_BOTH,
            "Content-Type": JSON,
        }
        self.credentials = credentials
        self._auth_headers: dict[str, str] = {}
        self._session_id: str | None = None
        self._exchanges: set[Exchange] = set()
        self._by_id: dict[RequestId, Exchange] = {}
        self._listen: ListenStream | None = None
        self._unacknowledged: list[Deferred[Any]] = []
        #: Fails with L{ChannelClosed} once L{close} has released everything.
        self._lost: Once[Failure] = Once()

    # Channel

    @property
    def cancels_with_notification(self) -> bool:
        """Legacy requests are cancelled with a notification, modern ones by closing."""
        return not self.negotiated.modern

    @property
    def closed(self) -> bool:
        return self._closing is not None

    @property
    def closed_peer(self) -> bool:
        return self._peer is None or self._peer.closed

    @property
    def session_id(self) -> str | None:
        """The session id the server gave in answer to C{initialize}, if any."""
        return self._session_id

    def start(self) -> Deferred[None]:
        # Nothing to open: every message makes its own request.
        if self.closed:
            return fail(ChannelClosed(f"the channel to {self.shown_url} is closed"))
        if self.credentials is None:
            return succeed(None)
        return Deferred.fromCoroutine(self.credentials.authorization()).addCallback(
            self._authorized
        )

    def _authorized(self, value: str) -> None:
        self._auth_headers = {"Authorization": value}
        self._base_headers["Authorization"] = value

    def send(self, data: bytes) -> None:
        self._post(data, None)

    def send_request(self, data: bytes, request: Request) -> None:
        self._post(data, request)

    def abandon(self, request_id: RequestId) -> None:
        """
        Close the request's connection.  Modern: that is how 2026-07-28 cancels.
        Legacy: the peer has sent C{notifications/cancelled} already, but a server may
        ignore it and keep the stream open (or drip its body) for as long as it likes;
        the connection must not outlive the caller's interest.
        """
        exchange = self._by_id.get(request_id)
        if exchange is not None:
            exchange.abort()

    def initialized(self) -> Deferred[None] | None:
        if self.closed or self.negotiated.modern:
            return None
        if self._listen is not None:
            self._listen.stop()
        listen = self._listen = ListenStream(self)
        if self._unacknowledged:
            # After notifications/initialized has reached the server.
            gate = DeferredList(list(self._unacknowledged), consumeErrors=True)
            gate.addCallback(lambda _: listen.open())
        else:
            listen.open()
        return listen.when_answered()

    def reset_session(self) -> None:
        self._session_id = None
        if self._listen is not None:
            self._listen.stop()
            self._listen = None

    def when_lost(self) -> Deferred[Failure]:
        """
        A fresh Deferred that fails with L{ChannelClosed} once the channel is closed (a
        Deferred given a L{Failure} runs its errbacks).  HTTP has no connection to lose
        otherwise: each request fails on its own.
        """
        return self._lost.wait()

    # Inside

    def _request_headers(self, request: Request | None) -> dict[str, str]:
        headers = dict(self._base_headers)
        negotiated = self.negotiated
        if negotiated.modern:
            revision = negotiated.revision
            headers["MCP-Protocol-Version"] = (revision or NEWEST).value
            if request is not None:
                headers.update(modern_request_headers(request, negotiated))
        elif request is None or request.method != "initialize":
            self._legacy_headers(headers)
        return headers

    def _legacy_headers(self, headers: dict[str, str]) -> None:
        revision = self.negotiated.revision
        if revision is not None and revision >= Revision.V2025_06_18:
            headers["MCP-Protocol-Version"] = revision.value
        if self._session_id is not None:
            headers["Mcp-Session-Id"] = self._session_id

    def open_stream(self, last_event_id: str) -> Deferred[Any]:
        """
        A legacy C{GET}: the standalone stream, or the resumption of a stream from the
        last event id it gave (when there is one).
        """
        headers = self.server.request_headers()
        headers.update(self._auth_headers)
        headers["Accept"] = EVENT_STREAM
        self._legacy_headers(headers)
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        return self.http.request(
            "GET",
            self.target,
            headers=as_headers(headers),
            unbuffered=True,
            allow_redirects=False,
        )

    def capture_session(self, response: IResponse) -> None:
        values = response.headers.getRawHeaders(b"mcp-session-id")
        if not values:
            return
        value = values[-1].decode("latin-1")
        if _SESSION_ID.fullmatch(value) is None:
            log.warn(
                "{url} gave a session id with characters outside visible ASCII; ignored",
                url=self.shown_url,
            )
            return
        self._session_id = value

    def _post(self, data: bytes, request: Request | None) -> None:
        if self.closed:
            if request is not None:
                raise ChannelClosed(f"the channel to {self.shown_url} is closed")
            return
        exchange = Exchange(self, data, request, self._request_headers(request))
        self._exchanges.add(exchange)
        if request is not None:
            self._by_id[request.id] = exchange
        # A notification POSTed just before (notifications/initialized above all) must
        # reach the server first: wait until the server has answered those POSTs.
        waiting = list(self._unacknowledged)
        if request is None:
            exchange.acknowledged = Deferred()
            self._unacknowledged.append(exchange.acknowledged)
        if self.credentials is not None:
            renewing = self._authorize(exchange)
            if exchange.done:
                return
            if renewing is not None:
                waiting.insert(0, renewing)
        if waiting:
            gate = DeferredList(waiting, consumeErrors=True)
            gate.addCallback(lambda _: None if exchange.done else exchange.start())
        else:
            exchange.start()

    def _authorize(self, exchange: Exchange) -> Deferred[None] | None:
        """
        The token for this request, asked of the credentials each time: the one held
        while it is fresh (at once, with no I/O), a refreshed one when it is about to
        expire or the server refused it.  C{None} when the header was set at once; a
        Deferred while a refresh runs.  A request that cannot get a token fails with
        the reason (which names the sign-in command).
        """
        assert self.credentials is not None
        renewing = Deferred.fromCoroutine(self.credentials.authorization())

        def renewed(value: str) -> None:
            self._authorized(value)
            exchange.headers["Authorization"] = value

        def refused(failure: Failure) -> None:
            exchange.fail(NoToken(failure.getErrorMessage()))

        settled: Deferred[None] = renewing.addCallbacks(renewed, refused)
        return None if settled.called else settled

    def exchange_acknowledged(self, exchange: Exchange) -> None:
        waiter = exchange.acknowledged
        if waiter is None:
            return
        exchange.acknowledged = None
        if waiter in self._unacknowledged:
            self._unacknowledged.remove(waiter)
        waiter.callback(None)

    def forget_exchange(self, exchange: Exchange) -> None:
        self._exchanges.discard(exchange)
        if exchange.request_id is not None and self._by_id.get(exchange.request_id) is exchange:
            del self._by_id[exchange.request_id]

    async def _close(self) -> None:
        lost = Failure(ChannelClosed(f"the channel to {self.shown_url} was closed"))
        waiting: list[Deferred[Any]] = []
        if self._listen is not None:
            waiting.append(self._listen.stop())
            self._listen = None
        for exchange in list(self._exchanges):
            exchange.abort(lost.value)
            waiting.append(exchange.finished)
        if waiting:
            await DeferredList(waiting, consumeErrors=True)
        if self._session_id is not None and not self.negotiated.modern:
            await self._delete_session()
        if self._pool is not None:
            await self._pool.closeCachedConnections()  # type: ignore[no-untyped-call]
        self._lost.fire(lost)

    async def _delete_session(self) -> None:
        headers = self.server.request_headers()
        headers.update(self._auth_headers)
        self._legacy_headers(headers)
        self._session_id = None
        try:
            response = await self.http.request(
                "DELETE",
                self.target,
                headers=as_headers(headers),
                unbuffered=True,
                allow_redirects=False,
            ).addTimeout(self.close_timeout, self.clock)
            await read_body(response, self.reactor, ERROR_BODY_LIMIT, truncate=True)
        except Exception:
            log.info(
                "ending the session at {url} failed: {reason}",
                url=self.shown_url,
                reason=explain(Failure()),
            )
            return
        if response.code >= 300 and response.code != 405:
            log.info(
                "{url} answered HTTP {code} to ending the session",
                url=self.shown_url,
                code=response.code,
            )
