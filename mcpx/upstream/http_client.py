# -*- test-case-name: tests.upstream.test_http -*-
"""
The HTTP plumbing both HTTP channels share: their common part (L{HTTPChannelBase}:
the server, the clock, the peer, closing once), the client and connection pool a channel
owns, request bodies, response bodies read with a cap and cut off on demand, the
one-line reason for a failed request, and handing what a server sent to the peer.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol, TypedDict

from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.interfaces import (
    IConsumer,
    IDelayedCall,
    IReactorTime,
)
from twisted.internet.protocol import Protocol as StreamProtocol
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.client import Agent, HTTPConnectionPool, ResponseDone
from twisted.web.http import PotentialDataLoss
from twisted.web.http_headers import Headers
from twisted.web.iweb import IBodyProducer, IResponse
from zope.interface import implementer

from mcpx.settings.servers import RemoteServer, redact_url
from mcpx.spec.revision import Revision
from mcpx.upstream.channel import Negotiated
from mcpx.upstream.endpoints import IReactorHTTP, UpstreamEndpoints
from mcpx.wire.errors import ProtocolError
from mcpx.wire.framing import DEFAULT_MAX_MESSAGE_SIZE
from mcpx.wire.messages import Batch, ErrorResponse, Message, RequestId, Response, parse
from mcpx.wire.peer import RpcPeer
from mcpx.wire.twisted_private import http11_client_factory

if TYPE_CHECKING:
    from treq.client import HTTPClient

log = Logger()

JSON: Final = "application/json"
EVENT_STREAM: Final = "text/event-stream"
ACCEPT_BOTH: Final = f"{JSON}, {EVENT_STREAM}"

#: How much of an error response is read, for the error message and a JSON-RPC error.
ERROR_BODY_LIMIT: Final = 64 * 1024


class Credentials(Protocol):
    """
    Where a channel to an OAuth server gets its C{Authorization} header
    (L{mcpx.auth.signin.ServerCredentials}).
    """

    async def authorization(self) -> str:
        """The header value; fails with a message naming the sign-in command if none."""

    def unauthorized(self, www_authenticate: list[str], revision: Revision | None = None) -> str:
        """
        The server (speaking C{revision}, if known) refused the token (401 or 403):
        the hint for the error.
        """


class RequestFailed(ConnectionError):
    """
    An HTTP request to the server could not be made or was cut off: the server could
    not be reached, or the connection broke before the answer arrived.

    @ivar started: the request may have reached the server (anything but a failure to
        connect), so the server may have acted on it.
    """

    def __init__(self, message: str, *, started: bool = True) -> None:
        super().__init__(message)
        self.started = started


class BodyTooLarge(ValueError):
    """A response body was longer than the channel accepts."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"response body larger than {limit} bytes")
        self.limit = limit


def as_headers(headers: Mapping[str, str]) -> Headers:
    """C{headers} as Twisted's L{Headers}."""
    return Headers({name: [value] for name, value in headers.items()})


def media_type(response: IResponse) -> str:
    """The response's C{Content-Type} without parameters, lower case; empty if none."""
    values = response.headers.getRawHeaders(b"content-type")
    if not values:
        return ""
    kind: bytes = values[-1].split(b";", 1)[0].strip().lower()
    return kind.decode("latin-1")


def explain(failure: Failure) -> str:
    """A one-line reason for a failed HTTP request, unwrapping Twisted's wrappers."""
    value = failure.value
    reasons = getattr(value, "reasons", None)
    if reasons:
        first = reasons[0]
        value = first.value if isinstance(first, Failure) else first
    if isinstance(value, CancelledError):
        return "cancelled"
    text = str(value).strip()
    shown = f"{type(value).__name__}: {text}" if text else type(value).__name__
    if "certificate verify failed" in text:
        shown += (
            "; the server's certificate is not signed by an authority mcpx trusts: if it "
            "uses a private CA, set tls.ca for this server to that CA's PEM file"
        )
    elif type(value).__name__ == "VerificationError":
        shown += (
            "; the certificate is for another name: use the name it carries in the URL, "
            "or set tls.serverName for this server"
        )
    return shown


@implementer(IBodyProducer)
class BytesBody:
    """
    A request body already in memory, written at once.

    treq would wrap bytes in a C{FileBodyProducer}, which writes from the cooperator a
    reactor turn later; a JSON-RPC message is small and written whole.
    """

    def __init__(self, data: bytes) -> None:
        self._data = data
        self.length = len(data)

    def startProducing(self, consumer: IConsumer) -> Deferred[None]:
        consumer.write(self._data)
        return succeed(None)

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        pass


class BodyReader(StreamProtocol):
    """
    Receives a response body chunk by chunk and can cut it off.

    Like C{treq.collect}, but the reader can close the connection from outside (to
    cancel a request by closing its stream, or when the channel closes), and caps the
    body.

    @ivar done: fires with C{None} when the body ended normally, or fails with why it
        did not (the connection broke, C{on_data} raised, or L{abort} was called).
    """

    def __init__(
        self, on_data: Callable[[bytes], None], reactor: IReactorTime, limit: int | None = None
    ) -> None:
        self._on_data = on_data
        self._reactor = reactor
        self._limit = limit
        self._received = 0
        self._aborted: BaseException | None = None
        self._closing: IDelayedCall | None = None
        self.done: Deferred[None] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        if self._aborted is not None:
            return
        self._received += len(data)
        try:
            if self._limit is not None and self._received > self._limit:
                raise BodyTooLarge(self._limit)
            self._on_data(data)
        except Exception as e:
            self._aborted = e
            # Not at once: if this chunk also ends the response, the client hands the
            # connection back to its pool right after this call, and closing it now
            # would give the next request a connection that is going away.  A turn
            # later the response has either ended (nothing to close) or not.
            self._closing = self._reactor.callLater(0, self._close)

    def abort(self, reason: BaseException | None = None) -> None:
        """Close the connection; L{done} fails with C{reason} (C{CancelledError} if none)."""
        if self._aborted is not None or self.done.called:
            return
        self._aborted = reason if reason is not None else CancelledError()
        self._close()

    def _close(self) -> None:
        self._closing = None
        if not self.done.called and self.transport is not None:
            self.transport.loseConnection()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._closing is not None:
            self._closing.cancel()
            self._closing = None
        if self.done.called:
            return
        if self._aborted is not None:
            self.done.errback(Failure(self._aborted))
        elif reason.check(ResponseDone, PotentialDataLoss):
            self.done.callback(None)
        else:
            self.done.errback(reason)


def read_body(
    response: IResponse,
    reactor: IReactorTime,
    limit: int,
    truncate: bool = False,
    keep_reader: Callable[[BodyReader], None] | None = None,
) -> Deferred[bytes]:
    """
    The whole body of C{response}, up to C{limit} bytes.

    @param truncate: keep the first C{limit} bytes of a longer body and close the
        connection, instead of failing with L{BodyTooLarge}.
    @param keep_reader: given the reader, so that whoever waits can cut the body off.
    """
    parts: list[bytes] = []
    kept = [0]

    def keep(data: bytes) -> None:
        room = limit - kept[0]
        if len(data) > room:
            if not truncate:
                raise BodyTooLarge(limit)
            parts.append(data[:room])
            kept[0] = limit
            raise _Enough()
        parts.append(data)
        kept[0] += len(data)

    reader = BodyReader(keep, reactor)
    if response.length == 0:
        return succeed(b"")
    if keep_reader is not None:
        keep_reader(reader)
    response.deliverBody(reader)

    def collected(result: object) -> bytes:
        if isinstance(result, Failure) and not result.check(_Enough):
            result.raiseException()
        return b"".join(parts)

    return reader.done.addBoth(collected)


class _Enough(Exception):
    """Raised to stop reading a body once enough of it is kept."""


def deliver(
    peer: RpcPeer,
    raw: bytes | str,
    request_id: RequestId | None = None,
    *,
    lines: bool = False,
) -> bool:
    """
    Hand one JSON-RPC message (or batch) from the server to C{peer}, parsing it once.

    @param raw: the message: a body, or the data of an SSE event (already text).
    @param request_id: the request whose POST or stream carried it, if any.
    @param lines: C{raw} is an C{application/json} body, which may hold several
        newline-delimited messages (L{delimited}).
    @return: whether it answered C{request_id}.
    """
    try:
        message = parse(raw, allow_batch=peer.allow_batches)
    except ProtocolError as e:
        several = delimited(raw, peer.allow_batches) if lines else None
        if several is not None:
            answered = False
            for one in several:
                peer.receive_message(one, carried_by=request_id)
                answered = answered or (request_id is not None and answers_request(one, request_id))
            return answered
        # The peer answers or logs an unreadable message the way it does on any transport.
        peer.receive(raw.encode("utf-8") if isinstance(raw, str) else raw)
        return request_id is not None and e.about_response and e.id == request_id
    peer.receive_message(message, carried_by=request_id)
    return request_id is not None and answers_request(message, request_id)


def delimited(raw: bytes | str, allow_batch: bool) -> list[Message | Batch] | None:
    """
    The messages of a JSON body that holds several, one per line (as the conformance
    suite's reference server writes a notification and then the result of a streaming
    tool in one C{application/json} answer); C{None} unless every non-blank line is a
    message and there are at least two.  Tried only once the body failed to parse as
    one message, so a usual answer is parsed once.
    """
    data = raw.encode("utf-8") if isinstance(raw, str) else raw
    parts = [line for line in data.split(b"\n") if line.strip()]
    if len(parts) < 2:
        return None
    try:
        return [parse(part, allow_batch=allow_batch) for part in parts]
    except ProtocolError:
        return None


def answers_request(message: Message | Batch, request_id: RequestId) -> bool:
    """Whether C{message} (or a part of a batch) is the answer to C{request_id}."""
    if isinstance(message, Response | ErrorResponse):
        return message.id == request_id
    if isinstance(message, Batch):
        return any(answers_request(part, request_id) for part in message.messages)
    return False


def discard_body(response: IResponse, reactor: IReactorTime) -> None:
    """Read and drop a body nobody needs, so its connection can be reused."""
    if response.length != 0:
        read_body(response, reactor, ERROR_BODY_LIMIT, truncate=True).addErrback(lambda _: None)


def close_once(closing: Coroutine[Any, Any, None], shown_url: str) -> Deferred[None]:
    """A channel's one closing run; a failure is logged, never raised at whoever closes."""
    closed = Deferred.fromCoroutine(closing)
    closed.addErrback(
        lambda failure: log.failure("closing the channel to {url} failed", failure, url=shown_url)
    )
    return closed


def waiter_on(closing: Deferred[None]) -> Deferred[None]:
    """A fresh Deferred for one caller of C{close()}, firing when C{closing} has."""
    done: Deferred[None] = Deferred()
    closing.addBoth(lambda _: done.callback(None))
    return done


class _QuietClientFactory(http11_client_factory()):  # type: ignore[misc]
    """The pool's connection factory, without a "Starting factory" line per connection."""

    noisy = False


#: How many idle connections to one server are kept open for reuse, by default.
DEFAULT_HTTP_CONNECTIONS: Final = 16


#: Seconds an idle connection is kept for reuse.  Node's http server and uvicorn, behind
#: most MCP servers, close a connection idle for 5 s: one kept longer (Twisted's default
#: is 240 s) is sooner or later reused at the moment the server closes it, and a POST
#: lost that way cannot be sent again safely.  So mcpx lets go first.
IDLE_CONNECTION_TIMEOUT: Final = 4


def connection_pool(
    reactor: IReactorHTTP, keep: int = DEFAULT_HTTP_CONNECTIONS
) -> HTTPConnectionPool:
    """
    A persistent connection pool keeping up to C{keep} idle connections per server,
    so that a burst of calls reuses the connections the last burst opened.
    """
    pool = HTTPConnectionPool(reactor)  # type: ignore[no-untyped-call]
    pool.maxPersistentPerHost = keep
    pool.cachedConnectionTimeout = IDLE_CONNECTION_TIMEOUT
    pool._factory = _QuietClientFactory
    return pool


def owned_client(
    reactor: IReactorHTTP,
    connect_timeout: float,
    http: HTTPClient | None = None,
    pool: HTTPConnectionPool | None = None,
    *,
    keep: int = DEFAULT_HTTP_CONNECTIONS,
    server: RemoteServer | None = None,
) -> tuple[HTTPClient, HTTPConnectionPool | None]:
    """
    The channel's own HTTP client and connection pool, unless the caller gave them
    (tests inject a client).  The channel closes the pool it owns when it closes.

    @param keep: the idle connections the pool keeps per server.
    @param server: whose C{tls} settings apply.
    @raise mcpx.upstream.tls.TlsFileError: a file its C{tls} names cannot be used.
    """
    if http is not None:
        return http, pool
    if pool is None:
        pool = connection_pool(reactor, keep)
    policy = None
    if server is not None and server.tls is not None:
        # Deferred to a server with tls settings: they need pyOpenSSL (lean_start).
        from mcpx.upstream.tls import ServerTlsPolicy

        policy = ServerTlsPolicy(server.name, server.tls)
    # Deferred for idle memory: treq (with multipart, mimetypes and its cookie handling)
    # loads with the first client made, for an HTTP server or a sign-in
    # (mcpx.upstream.first_use).
    from treq.client import HTTPClient

    endpoints = UpstreamEndpoints(reactor, connect_timeout, policy)
    agent = Agent.usingEndpointFactory(reactor, endpoints, pool=pool)  # type: ignore[no-untyped-call]
    return HTTPClient(agent), pool


class HTTPChannelOptions(TypedDict, total=False):
    """
    What either HTTP channel may be given besides its server (L{HTTPChannelBase}).

    @ivar clock: schedules the channel's timeouts and retries; its reactor if not given.
    @ivar http: the HTTP client to use instead of one of the channel's own.
    @ivar pool: the connection pool closed by C{close}; with no C{http}, the client is
        built on it.
    @ivar connect_timeout: how long a connection to the server may take, in seconds.
    @ivar max_message_size: the largest JSON body or SSE event accepted, in bytes.
    """

    clock: IReactorTime | None
    http: HTTPClient | None
    pool: HTTPConnectionPool | None
    connect_timeout: float
    max_message_size: int


class HTTPChannelBase:
    """
    What both HTTP channels keep and do alike: the server and its URLs, the clock, the
    HTTP client (and the pool it owns), the attached peer, and one closing run however
    often C{close} is called.  A subclass says what closing does (L{_close}).

    @ivar shown_url: the server's URL with its secrets hidden, for logs and errors.
    """

    def __init__(
        self,
        name: str,
        server: RemoteServer,
        reactor: IReactorHTTP,
        *,
        clock: IReactorTime | None = None,
        http: HTTPClient | None = None,
        pool: HTTPConnectionPool | None = None,
        connect_timeout: float = 10.0,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        keep: int = DEFAULT_HTTP_CONNECTIONS,
    ) -> None:
        """
        @param name: the server's name, for logs.
        @param reactor: makes the connections.
        @param keep: the idle connections kept for reuse (with no C{pool}).
        """
        self.name = name
        self.server = server
        self.negotiated = Negotiated()
        self.url = server.request_url()
        self.shown_url = redact_url(server.url)
        self.reactor = reactor
        self.clock: IReactorTime = clock if clock is not None else reactor
        self.http, self._pool = owned_client(
            reactor, connect_timeout, http, pool, keep=keep, server=server
        )
        self.max_message_size = max_message_size
        self._peer: RpcPeer | None = None
        self._closing: Deferred[None] | None = None

    @property
    def peer(self) -> RpcPeer:
        if self._peer is None:
            raise RuntimeError("attach a peer to the channel before using it")
        return self._peer

    def attach(self, peer: RpcPeer) -> None:
        self._peer = peer

    def close(self) -> Deferred[None]:
        if self._closing is None:
            self._closing = close_once(self._close(), self.shown_url)
        return waiter_on(self._closing)

    async def _close(self) -> None:
        """Release what the channel holds; run once, by the first L{close}."""
        raise NotImplementedError

    def describe(self) -> str:
        return self.shown_url
