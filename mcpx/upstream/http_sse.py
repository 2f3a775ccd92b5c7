# -*- test-case-name: tests.upstream.test_http_sse -*-
"""
The HTTP+SSE channel of revision 2024-11-05, for servers that predate Streamable HTTP.

The client opens one long C{GET} at the server's URL; the server's first event, of type
C{endpoint}, names the URL (usually relative, often carrying a session key in its query)
to which the client POSTs each of its messages.  Everything the server says (answers,
its own requests, notifications) arrives as C{message} events on the C{GET} stream, so
that stream is the connection: when it ends, the channel is lost.
"""

from __future__ import annotations

from typing import Any, Unpack
from urllib.parse import urlencode, urljoin, urlsplit, urlunsplit

from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IResponse

from mcpx.once import Once
from mcpx.settings.servers import RemoteServer, redact_url
from mcpx.upstream.channel import ChannelClosed, TransportRefused
from mcpx.upstream.endpoints import IReactorHTTP
from mcpx.upstream.http_client import (
    ERROR_BODY_LIMIT,
    EVENT_STREAM,
    JSON,
    BodyReader,
    BytesBody,
    HTTPChannelBase,
    HTTPChannelOptions,
    RequestFailed,
    as_headers,
    deliver,
    discard_body,
    explain,
    media_type,
    read_body,
)
from mcpx.wire.messages import Request, RequestId
from mcpx.wire.sse import MESSAGE, SSEDecoder

log = Logger()

#: The event type that names the POST endpoint.
ENDPOINT: str = "endpoint"


class EndpointRefused(ConnectionError):
    """The server's C{endpoint} event named a URL mcpx will not POST to."""


class HTTPSSEChannel(HTTPChannelBase):
    """
    A L{mcpx.upstream.channel.Channel} to a 2024-11-05 server over HTTP+SSE.

    POSTs are sent one at a time, each after the server has answered the one before,
    so the server reads the messages in the order the session sent them.

    @ivar endpoint: the resolved URL messages are POSTed to, once the server named it.
    """

    #: This transport gives up on a request only with C{notifications/cancelled}.
    cancels_with_notification: bool = True

    def __init__(
        self,
        name: str,
        server: RemoteServer,
        reactor: IReactorHTTP,
        *,
        endpoint_timeout: float = 10.0,
        post_timeout: float = 30.0,
        **options: Unpack[HTTPChannelOptions],
    ) -> None:
        """
        @param endpoint_timeout: how long L{start} waits for the C{endpoint} event.
        @param post_timeout: how long a POST may take to be answered (the answer to the
            message itself arrives on the stream, so the POST's own reply is quick).
        @param options: the clock (which times the wait for the C{endpoint} event and
            each POST), the HTTP client and the rest L{HTTPChannelOptions} names.
        """
        super().__init__(name, server, reactor, **options)
        self.endpoint_timeout = endpoint_timeout
        self.post_timeout = post_timeout
        self.endpoint: str | None = None
        self._decoder = SSEDecoder(self.max_message_size)
        self._stream: BodyReader | None = None
        self._opening: Deferred[Any] | None = None
        self._started: Deferred[None] | None = None
        self._start_timer: IDelayedCall | None = None
        self._last_post: Deferred[None] = succeed(None)
        self._posts: set[Deferred[Any]] = set()
        #: Why the stream is gone, from the moment L{_lose} begins.
        self._lost: Failure | None = None
        #: Tells L{when_lost} waiters, once L{_lose} has failed the start and the peer.
        self._loss: Once[Failure] = Once()

    # Channel

    def start(self) -> Deferred[None]:
        """
        Open the event stream; fires once the server has named its POST endpoint.

        @return: fails with L{TransportRefused} if the C{GET} is refused or answered
            with something else than an event stream, with L{RequestFailed} if the
            server cannot be reached or names no endpoint in time, and with
            L{EndpointRefused} if the endpoint is on another origin.
        """
        if self._closing is not None or self._lost is not None:
            return fail(ChannelClosed(f"the channel to {self.shown_url} is closed"))
        if self._started is not None:
            raise RuntimeError("start() may be called only once")
        self._started = Deferred()
        headers = self.server.request_headers()
        headers["Accept"] = EVENT_STREAM
        self._opening = self.http.request(
            "GET", self.url, headers=as_headers(headers), unbuffered=True, allow_redirects=False
        )
        self._opening.addCallbacks(self._opened, self._unreachable).addErrback(self._bug)
        self._start_timer = self.clock.callLater(self.endpoint_timeout, self._no_endpoint)
        return self._started

    def send(self, data: bytes) -> None:
        self._post(data, None)

    def send_request(self, data: bytes, request: Request) -> None:
        self._post(data, request.id)

    def abandon(self, request_id: RequestId) -> None:
        """Nothing to close: the peer's C{notifications/cancelled} is the cancellation."""

    def initialized(self) -> None:
        """Nothing to open: the one stream is already open."""

    def reset_session(self) -> None:
        """No session id to forget: the endpoint URL is the session."""

    def when_lost(self) -> Deferred[Failure]:
        """
        A fresh Deferred that fails with the reason (a L{ChannelClosed}, or the error
        that kept L{start} from succeeding) once the event stream is gone.
        """
        return self._loss.wait()

    # The stream

    def _bug(self, failure: Failure) -> None:
        log.failure("{url}: reading the event stream failed", failure, url=self.shown_url)
        self._lose(f"reading the event stream from {self.shown_url} failed")

    def _opened(self, response: IResponse) -> None:
        self._opening = None
        if self._lost is not None:
            discard_body(response, self.reactor)
            return
        if not (200 <= response.code < 300 and media_type(response) == EVENT_STREAM):
            code = response.code

            def refuse(body: bytes | Failure) -> None:
                raw = body if isinstance(body, bytes) else b""
                self._lose(TransportRefused(code, raw, self.shown_url))

            read_body(response, self.reactor, ERROR_BODY_LIMIT, truncate=True).addBoth(
                refuse
            ).addErrback(self._bug)
            return
        self._stream = BodyReader(self._data, self.reactor)
        response.deliverBody(self._stream)
        self._stream.done.addBoth(self._ended).addErrback(self._bug)

    def _unreachable(self, failure: Failure) -> None:
        self._opening = None
        self._lose(
            RequestFailed(
                f"opening the event stream at {self.shown_url} failed: {explain(failure)}"
            )
        )

    def _no_endpoint(self) -> None:
        self._start_timer = None
        self._lose(
            RequestFailed(
                f"{self.shown_url} sent no endpoint event within {self.endpoint_timeout}s; "
                "it does not look like an HTTP+SSE server"
            )
        )

    def _data(self, data: bytes) -> None:
        for event in self._decoder.feed(data):
            if self._lost is not None:
                return
            if event.event == ENDPOINT:
                self._endpoint(event.data)
            elif event.event != MESSAGE or not event.data:
                continue
            elif self.endpoint is None:
                log.warn(
                    "{url} sent a message before its endpoint event; dropped", url=self.shown_url
                )
            else:
                deliver(self.peer, event.data)

    def _endpoint(self, given: str) -> None:
        if self.endpoint is not None:
            log.info("{url} named its endpoint again; kept the first", url=self.shown_url)
            return
        resolved = urljoin(self.url, given.strip())
        base, target = urlsplit(self.server.url), urlsplit(resolved)
        if (base.scheme, base.hostname, base.port) != (target.scheme, target.hostname, target.port):
            # The credentials sent with every POST are meant for this server only.
            self._lose(
                EndpointRefused(
                    f"{self.shown_url} named an endpoint on another origin "
                    f"({redact_url(resolved)}); refused"
                )
            )
            return
        auth = self.server.auth
        params = auth.query_params() if auth is not None else {}
        if params:
            query = "&".join(item for item in (target.query, urlencode(params)) if item)
            resolved = urlunsplit(target._replace(query=query, fragment=""))
        self.endpoint = resolved
        log.debug(
            "{url} takes messages at {endpoint}", url=self.shown_url, endpoint=redact_url(resolved)
        )
        if self._start_timer is not None:
            self._start_timer.cancel()
            self._start_timer = None
        if self._started is not None and not self._started.called:
            self._started.callback(None)

    def _ended(self, result: object) -> None:
        self._stream = None
        if isinstance(result, Failure):
            reason = f"the event stream from {self.shown_url} broke: {explain(result)}"
        else:
            reason = f"the event stream from {self.shown_url} ended"
        self._lose(reason)

    def _lose(self, reason: str | BaseException) -> None:
        """The channel is gone: fail the start, the peer and whoever waits for it."""
        if self._lost is not None:
            return
        error = ChannelClosed(reason) if isinstance(reason, str) else reason
        self._lost = lost = Failure(error)
        if self._start_timer is not None:
            self._start_timer.cancel()
            self._start_timer = None
        if self._opening is not None:
            opening, self._opening = self._opening, None
            opening.cancel()
        if self._stream is not None:
            self._stream.abort()
        if self._started is not None and not self._started.called:
            self._started.errback(lost)
        if self._peer is not None:
            self._peer.close(
                error if isinstance(error, ChannelClosed) else ChannelClosed(str(error))
            )
        self._loss.fire(lost)

    # Messages

    def _post(self, data: bytes, request_id: RequestId | None) -> None:
        if self._lost is not None or self._closing is not None:
            if request_id is not None:
                raise ChannelClosed(f"the channel to {self.shown_url} is closed")
            return
        if self.endpoint is None:
            raise RuntimeError("nothing can be sent before start() has fired")
        previous = self._last_post
        answered: Deferred[None] = Deferred()
        self._last_post = answered
        previous.addBoth(lambda _: self._send(data, request_id, answered))

    def _send(self, data: bytes, request_id: RequestId | None, answered: Deferred[None]) -> None:
        if self._lost is not None or self.endpoint is None:
            answered.callback(None)
            return
        headers = self.server.request_headers()
        headers["Content-Type"] = JSON
        posting = self.http.request(
            "POST",
            self.endpoint,
            headers=as_headers(headers),
            data=BytesBody(data),
            unbuffered=True,
            allow_redirects=False,
        ).addTimeout(self.post_timeout, self.clock)
        self._posts.add(posting)

        def result(response: IResponse) -> Deferred[Any] | None:
            if 200 <= response.code < 300:
                discard_body(response, self.reactor)
                return None
            code = response.code
            return read_body(response, self.reactor, ERROR_BODY_LIMIT, truncate=True).addBoth(
                lambda body: self._refused(request_id, code, body)
            )

        def failed(failure: Failure) -> None:
            if self._lost is not None:
                return
            error = RequestFailed(f"POST to {self.shown_url} failed: {explain(failure)}")
            if request_id is not None and self._peer is not None:
                self._peer.fail_outgoing(request_id, error)
            else:
                log.warn("{error}", error=error)

        def settle(outcome: object) -> None:
            self._posts.discard(posting)
            if not answered.called:
                answered.callback(None)
            if isinstance(outcome, Failure):
                log.failure("{url}: handling a POST failed", outcome, url=self.shown_url)

        posting.addCallbacks(result, failed).addBoth(settle)

    def _refused(self, request_id: RequestId | None, code: int, body: bytes | Failure) -> None:
        raw = body if isinstance(body, bytes) else b""
        error = TransportRefused(code, raw, self.shown_url)
        if request_id is not None and self._peer is not None:
            self._peer.fail_outgoing(request_id, error)
        else:
            log.warn("{url} refused a message: {error}", url=self.shown_url, error=error)

    async def _close(self) -> None:
        """
        Close the stream (which fails every request still waiting, with
        L{ChannelClosed}) and release the connection pool.
        """
        self._lose(f"the channel to {self.shown_url} was closed")
        stream = self._stream
        waiting: list[Deferred[Any]] = list(self._posts)
        if stream is not None:
            waiting.append(stream.done)
        for posting in list(self._posts):
            posting.cancel()
        if waiting:
            await DeferredList(waiting, consumeErrors=True)
        if self._pool is not None:
            await self._pool.closeCachedConnections()  # type: ignore[no-untyped-call]
