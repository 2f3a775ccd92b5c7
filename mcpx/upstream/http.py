# -*- test-case-name: tests.upstream.test_http,tests.upstream.test_remote_faults -*-
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

The channel (L{StreamableHTTPChannel}) keeps the session and writes the headers
(L{modern_request_headers}, spelled as L{mcpx.wire.http_common} says for both
directions); each POST and everything that answers it (a JSON body, or an SSE stream and
its resumptions, same-origin redirects, and the refusals read by L{refusal_hint} and
L{retry_after}) is a L{Post}; the legacy C{GET} stream is a L{ListenStream}.  The
HTTP plumbing both HTTP channels share is in L{mcpx.upstream.http_client}.
"""

from __future__ import annotations

import re
from email.utils import parsedate_to_datetime
from functools import partial
from typing import Any, Final, Unpack

from hyperlink import EncodedURL
from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.internet.error import ConnectError
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IResponse

from mcpx.once import Once
from mcpx.settings.secrets import excerpt
from mcpx.settings.servers import RemoteServer, redact_url
from mcpx.spec.methods import LISTEN
from mcpx.spec.revision import NEWEST, Revision
from mcpx.upstream.channel import (
    ChannelClosed,
    MessageTooLarge,
    Negotiated,
    SessionExpired,
    TransportRefused,
)
from mcpx.upstream.endpoints import IReactorHTTP
from mcpx.upstream.http_client import (
    ACCEPT_BOTH,
    DEFAULT_HTTP_CONNECTIONS,
    ERROR_BODY_LIMIT,
    EVENT_STREAM,
    JSON,
    BodyReader,
    BodyTooLarge,
    BytesBody,
    Credentials,
    HTTPChannelBase,
    HTTPChannelOptions,
    RequestFailed,
    answers_request,
    as_headers,
    deliver,
    discard_body,
    explain,
    media_type,
    read_body,
)
from mcpx.wire.errors import ProtocolError
from mcpx.wire.http_common import (
    METHOD_HEADER,
    NAME_FIELDS,
    NAME_HEADER,
    PARAM_HEADER_PREFIX,
    PROTOCOL_VERSION_HEADER,
    SESSION_ID_HEADER,
    encode_header_value,
)
from mcpx.wire.messages import Batch, ErrorResponse, Message, Request, RequestId, parse
from mcpx.wire.sse import MESSAGE, EventTooLarge, SSEDecoder
from mcpx.wire.twisted_private import request_not_sent

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
        self._exchanges: set[Post] = set()
        self._by_id: dict[RequestId, Post] = {}
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
            headers[PROTOCOL_VERSION_HEADER] = (revision or NEWEST).value
            if request is not None:
                headers.update(modern_request_headers(request, negotiated))
        elif request is None or request.method != "initialize":
            self._legacy_headers(headers)
        return headers

    def _legacy_headers(self, headers: dict[str, str]) -> None:
        revision = self.negotiated.revision
        if revision is not None and revision >= Revision.V2025_06_18:
            headers[PROTOCOL_VERSION_HEADER] = revision.value
        if self._session_id is not None:
            headers[SESSION_ID_HEADER] = self._session_id

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
        exchange = Post(self, data, request, self._request_headers(request))
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

    def _authorize(self, exchange: Post) -> Deferred[None] | None:
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

    def exchange_acknowledged(self, exchange: Post) -> None:
        waiter = exchange.acknowledged
        if waiter is None:
            return
        exchange.acknowledged = None
        if waiter in self._unacknowledged:
            self._unacknowledged.remove(waiter)
        waiter.callback(None)

    def forget_exchange(self, exchange: Post) -> None:
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


class AnswerMissing(ConnectionError):
    """
    The server answered a request's POST but its response (a JSON body, an SSE stream
    and any resumptions of it) ended without the JSON-RPC answer to that request.
    """

    #: The server accepted the request, so it may have acted on it.
    started = True


class Post:
    """
    One POST and everything that answers it: a JSON body, or an SSE stream and its
    resumptions.

    @ivar request_id: the id of the request it carries; C{None} for a notification or
        a response.
    @ivar finished: fires once nothing of the exchange is left open.
    """

    def __init__(
        self,
        channel: StreamableHTTPChannel,
        data: bytes,
        request: Request | None,
        headers: dict[str, str],
    ) -> None:
        self.channel = channel
        self.data = data
        self.request = request
        self.request_id = request.id if request is not None else None
        self.headers = headers
        self.sent_session = SESSION_ID_HEADER in headers
        self.modern = channel.negotiated.modern
        self.answered = False
        self.done = False
        self.pending: Deferred[Any] | None = None
        self.reader: BodyReader | None = None
        self.decoder: SSEDecoder | None = None
        self.timer: IDelayedCall | None = None
        self.idle_resumes = 0
        self.resumed_from = ""
        self.acknowledged: Deferred[None] | None = None
        self.finished: Deferred[None] = Deferred()
        self.target = channel.target
        self.redirects = 0

    @property
    def what(self) -> str:
        if self.request is None:
            return "a message"
        return f"{self.request.method} (id {self.request_id!r})"

    def start(self) -> None:
        channel = self.channel
        self.pending = pending = channel.http.request(
            "POST",
            self.target,
            headers=as_headers(self.headers),
            data=BytesBody(self.data),
            unbuffered=True,
            allow_redirects=False,
        )
        # Chained on the local name: a request that fails at once runs _unreachable
        # inside addCallbacks, which clears self.pending.
        pending.addCallbacks(self._response, self._unreachable).addErrback(self._bug)

    def _bug(self, failure: Failure) -> None:
        log.failure(
            "{url}: handling the answer to {what} failed",
            failure,
            url=self.channel.shown_url,
            what=self.what,
        )
        self._end(RequestFailed(f"handling the answer from {self.channel.shown_url} failed"))

    def _response(self, response: IResponse) -> None:
        self.pending = None
        channel = self.channel
        channel.exchange_acknowledged(self)
        if self.done:
            discard_body(response, self.channel.reactor)
            return
        code = response.code
        if code in (307, 308) and self._redirect(response):
            return
        if self.request is not None and self.request.method == "initialize" and not self.modern:
            channel.capture_session(response)
        if 200 <= code < 300:
            kind = media_type(response)
            if kind == EVENT_STREAM:
                self._read_stream(response, SSEDecoder(channel.max_message_size))
            elif (kind == JSON or kind.endswith("+json")) and self._listening():
                self._read_lines(response)
            elif kind == JSON or kind.endswith("+json"):
                read_body(
                    response,
                    self.channel.reactor,
                    channel.max_message_size,
                    keep_reader=self._keep_reader,
                ).addCallbacks(self._json_body, self._body_failed).addErrback(self._bug)
            elif self.request_id is None:
                discard_body(response, self.channel.reactor)
                self._end()
            else:
                hint = (
                    f"its Content-Type was {kind or 'missing'}, not {JSON} or {EVENT_STREAM}, "
                    "so it is not an MCP endpoint answer"
                )
                read_body(response, self.channel.reactor, ERROR_BODY_LIMIT, truncate=True).addBoth(
                    self._unanswered, code, hint
                ).addErrback(self._bug)
        else:
            read_body(response, self.channel.reactor, ERROR_BODY_LIMIT, truncate=True).addBoth(
                self._refused, code, response
            ).addErrback(self._bug)

    def _keep_reader(self, reader: BodyReader) -> None:
        self.reader = reader
        reader.done.addBoth(self._reader_done, reader)

    def _reader_done(self, result: object, reader: BodyReader) -> object:
        if self.reader is reader:
            self.reader = None
        return result

    def _redirect(self, response: IResponse) -> bool:
        """
        Follow a 307/308 to the same origin with the same method and body, and keep
        the new URL for later requests; C{False} when it is not to be followed (the
        refusal then says where it pointed).
        """
        location = response.headers.getRawHeaders(b"location")
        if not location or self.redirects >= MAX_REDIRECTS:
            return False
        try:
            target = self.target.click(EncodedURL.from_text(location[-1].decode("latin-1")))
        except (ValueError, UnicodeDecodeError):
            return False
        if not same_origin(target, self.target):
            return False
        discard_body(response, self.channel.reactor)
        self.redirects += 1
        channel = self.channel
        if channel.target == self.target and channel.target != target:
            log.info(
                "{url} redirects to {target}; using it from now on",
                url=channel.shown_url,
                target=redact_url(target.to_text()),
            )
            channel.target = target
        self.target = target
        self.start()
        return True

    def _unreachable(self, failure: Failure, started: bool = False) -> None:
        self.pending = None
        self.channel.exchange_acknowledged(self)
        if self.done:
            return
        verb = "resuming the stream of" if started else "POST of"
        self._end(
            RequestFailed(
                f"{verb} {self.what} to {self.channel.shown_url} failed: {explain(failure)}",
                # Could it have reached the server?  Not if no connection was made.
                started=started or failure.check(ConnectError, request_not_sent()) is None,
            )
        )

    def _json_body(self, body: bytes) -> None:
        if self.done:
            return
        if self.request_id is not None:
            if body.strip():
                self._deliver(body, lines=True)
        else:
            # A body in reply to a notification or a response is unexpected; pass on
            # only real messages, rather than answering the server's noise with errors.
            message = _json_rpc(body, self.channel.peer.allow_batches)
            if message is not None and not self.channel.closed:
                self.channel.peer.receive_message(message)
        self._end()

    def _body_failed(self, failure: Failure) -> None:
        if self.done:
            return
        if failure.check(BodyTooLarge):
            self._end(MessageTooLarge(self.channel.shown_url, self.channel.max_message_size))
            return
        self._end(
            RequestFailed(
                f"reading the answer to {self.what} from {self.channel.shown_url} failed: "
                f"{explain(failure)}"
            )
        )

    def _unanswered(self, body: bytes | Failure, code: int, hint: str) -> None:
        """A 2xx without JSON or SSE to a request: the server did not answer it."""
        if self.done:
            return
        self._end(
            TransportRefused(
                code, body if isinstance(body, bytes) else b"", self.channel.shown_url, hint=hint
            )
        )

    def _refused(
        self, body: bytes | Failure, code: int, response: IResponse, started: bool = False
    ) -> None:
        """
        An error status: a JSON-RPC error in the body answers the request; else fail it.

        @param started: the status answered resuming the request's stream, so the
            server had already accepted the request.
        """
        if self.done:
            return
        channel = self.channel
        raw = body if isinstance(body, bytes) else b""
        if self.sent_session and (code == 404 or (code == 400 and says_unknown_session(raw))):
            if self.request_id is None:
                log.warn(
                    "{url} no longer knows the session (HTTP {code})",
                    url=channel.shown_url,
                    code=code,
                )
            self._end(
                SessionExpired(
                    f"{channel.shown_url} no longer knows the session (HTTP {code} to "
                    f"{'resuming ' if started else ''}{self.what}); initialize again",
                    started=started,
                )
            )
            return
        message = _json_rpc(raw, channel.peer.allow_batches)
        if message is not None:
            if (
                isinstance(message, ErrorResponse)
                and message.id is None
                and self.request_id is not None
            ):
                # An id-less error in the reply to one request can only be about it.
                message = ErrorResponse(self.request_id, message.error)
            if self.request_id is not None and answers_request(message, self.request_id):
                self.answered = True
            channel.peer.receive_message(message)
        if self.request_id is None:
            log.warn(
                "{url} refused {what} with HTTP {code}: {body}",
                url=channel.shown_url,
                what=self.what,
                code=code,
                body=excerpt(raw, 200),
            )
        self._end(
            TransportRefused(
                code,
                raw,
                channel.shown_url,
                retry_after=retry_after(response, channel.clock.seconds())
                if code in (429, 503)
                else None,
                hint=self._hint(channel, response, code),
            )
        )

    def _hint(self, channel: StreamableHTTPChannel, response: IResponse, code: int) -> str:
        if channel.credentials is not None and code in (401, 403):
            challenge = response.headers.getRawHeaders(b"www-authenticate", [])
            return channel.credentials.unauthorized(
                [v.decode("latin-1") for v in challenge], channel.negotiated.revision
            )
        return refusal_hint(response, self.target)

    def _read_stream(self, response: IResponse, decoder: SSEDecoder) -> None:
        self.decoder = decoder
        reader = BodyReader(self._stream_data, self.channel.reactor)
        self.reader = reader
        response.deliverBody(reader)
        reader.done.addBoth(self._stream_ended).addErrback(self._bug)

    def _stream_data(self, data: bytes) -> None:
        assert self.decoder is not None
        for event in self.decoder.feed(data):
            self.idle_resumes = 0
            if event.event == MESSAGE and event.data and not self.done:
                self._deliver(event.data)

    def _listening(self) -> bool:
        """Whether this is a C{subscriptions/listen}, whose answer stays open."""
        return self.request is not None and self.request.method == LISTEN

    def _read_lines(self, response: IResponse) -> None:
        """
        A listen answered with C{application/json} that stays open, one message per
        line (the conformance suite's reference server): each line is delivered as it
        arrives, not once the body ends, which a listen's never does.
        """
        lines = JsonLines(self.channel.max_message_size)
        reader = BodyReader(partial(self._line_data, lines), self.channel.reactor)
        self.reader = reader
        response.deliverBody(reader)
        reader.done.addBoth(self._lines_ended, lines).addErrback(self._bug)

    def _line_data(self, lines: JsonLines, data: bytes) -> None:
        for line in lines.feed(data):
            if not self.done:
                self._deliver(line)

    def _lines_ended(self, result: object, lines: JsonLines) -> None:
        self.reader = None
        if self.done:
            return
        rest = lines.rest()
        if rest:
            self._deliver(rest, lines=True)
        if isinstance(result, Failure) and result.check(EventTooLarge):
            self._end(MessageTooLarge(self.channel.shown_url, self.channel.max_message_size))
        elif self.answered:
            self._end()
        elif isinstance(result, Failure):
            self._end(
                AnswerMissing(
                    f"no answer to {self.what}: its answer from {self.channel.shown_url} "
                    f"broke: {explain(result)}"
                )
            )
        else:
            self._end(
                AnswerMissing(
                    f"no answer to {self.what}: its answer from {self.channel.shown_url} "
                    "ended without it"
                )
            )

    def _deliver(self, raw: bytes | str, *, lines: bool = False) -> None:
        channel = self.channel
        if channel.closed:
            return
        if deliver(channel.peer, raw, self.request_id, lines=lines):
            self.answered = True

    def _stream_ended(self, result: object) -> None:
        self.reader = None
        if self.done:
            return
        channel = self.channel
        if isinstance(result, Failure) and result.check(EventTooLarge):
            self._end(MessageTooLarge(channel.shown_url, channel.max_message_size))
            return
        if self.request_id is None or self.answered:
            self._end()
            return
        decoder = self.decoder
        assert decoder is not None
        if decoder.last_event_id != self.resumed_from:
            # The stream moved on (2025-11-25 servers close it after each event and let
            # the client poll): only resumptions that bring nothing count against it.
            self.idle_resumes = 0
        if (
            not self.modern
            and decoder.last_event_id
            and self.idle_resumes < channel.resume_attempts
            and not channel.closed
        ):
            self.idle_resumes += 1
            self.resumed_from = decoder.last_event_id
            delay = (decoder.retry if decoder.retry is not None else channel.resume_delay_ms) / 1000
            self.timer = channel.clock.callLater(delay, self._resume)
            return
        if isinstance(result, Failure):
            reason = f"its stream from {channel.shown_url} broke: {explain(result)}"
        else:
            reason = f"its stream from {channel.shown_url} ended without it"
        self._end(AnswerMissing(f"no answer to {self.what}: {reason}"))

    def _resume(self) -> None:
        """Reopen the broken stream with a GET naming the last event seen."""
        self.timer = None
        if self.done:
            return
        channel = self.channel
        assert self.decoder is not None
        last_id, retry = self.decoder.last_event_id, self.decoder.retry
        self.pending = channel.open_stream(last_id)

        def opened(response: IResponse) -> None:
            self.pending = None
            if self.done:
                discard_body(response, self.channel.reactor)
                return
            code = response.code
            if 200 <= code < 300 and media_type(response) == EVENT_STREAM:
                decoder = SSEDecoder(channel.max_message_size)
                decoder.last_event_id, decoder.retry = last_id, retry
                self._read_stream(response, decoder)
            elif code in (400, 404) and self.sent_session:
                read_body(response, self.channel.reactor, ERROR_BODY_LIMIT, truncate=True).addBoth(
                    self._refused, code, response, True
                ).addErrback(self._bug)
            else:
                discard_body(response, self.channel.reactor)
                self._end(
                    AnswerMissing(
                        f"no answer to {self.what}: its stream from {channel.shown_url} broke "
                        f"and resuming it was refused with HTTP {code}"
                    )
                )

        self.pending.addCallbacks(opened, self._resume_failed).addErrback(self._bug)

    def _resume_failed(self, failure: Failure) -> None:
        """
        No connection for the resumption: a server restarting refuses connections for
        a moment, so try again after its C{retry} (the call's deadline still bounds
        it all), up to the resumption limit.
        """
        channel = self.channel
        if (
            failure.check(ConnectError) is not None
            and self.idle_resumes < channel.resume_attempts
            and not self.done
            and not channel.closed
        ):
            self.pending = None
            self.idle_resumes += 1
            assert self.decoder is not None
            retry = self.decoder.retry
            delay = (retry if retry is not None else channel.resume_delay_ms) / 1000
            self.timer = channel.clock.callLater(delay, self._resume)
            return
        self._unreachable(failure, started=True)

    def abort(self, reason: BaseException | None = None) -> None:
        """Stop waiting, close whatever is open, and fail the request with C{reason}."""
        if self.done:
            return
        self._end(reason)
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.cancel()
        if self.reader is not None:
            self.reader.abort()

    def fail(self, error: BaseException) -> None:
        """End the exchange before it was sent, failing its request with C{error}."""
        self._end(error)

    def _end(self, error: BaseException | None = None) -> None:
        """The exchange is over: fail the request if it went unanswered."""
        if self.done:
            return
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        channel = self.channel
        if self.request_id is not None and not self.answered and not channel.closed_peer:
            if error is None:
                error = AnswerMissing(
                    f"no answer to {self.what}: the reply from {channel.shown_url} did not carry it"
                )
            channel.peer.fail_outgoing(self.request_id, error)
        channel.forget_exchange(self)
        channel.exchange_acknowledged(self)
        if self.reader is None:
            self.finished.callback(None)
        else:
            self.reader.done.addBoth(lambda _: self.finished.callback(None))


class ListenStream:
    """
    The standalone GET stream of a legacy session, for what the server starts on its
    own: reopened when it ends (from the last event id it gave), with a growing delay,
    until too many attempts in a row bring nothing.
    """

    def __init__(self, channel: StreamableHTTPChannel) -> None:
        self.channel = channel
        self.stopped = False
        self.failures = 0
        self.last_event_id = ""
        self.retry: int | None = None
        self.pending: Deferred[Any] | None = None
        self.reader: BodyReader | None = None
        self.decoder: SSEDecoder | None = None
        self.timer: IDelayedCall | None = None
        #: Fires once the server has answered the first C{GET}.
        self._answered: Once[None] = Once()

    def when_answered(self) -> Deferred[None]:
        """
        A fresh Deferred that fires once the server has answered the first C{GET} (a
        stream, a 405, a refusal or no connection at all): from then on, what the
        server starts on its own has somewhere to go.
        """
        return self._answered.wait()

    def open(self) -> None:
        self.timer = None
        if self.stopped:
            return
        self.pending = self.channel.open_stream(self.last_event_id)
        self.pending.addCallbacks(self._response, self._unreachable).addErrback(self._bug)

    def _bug(self, failure: Failure) -> None:
        log.failure("{url}: the GET stream failed", failure, url=self.channel.shown_url)

    def _response(self, response: IResponse) -> None:
        self.pending = None
        self._answered.fire(None)
        channel = self.channel
        if self.stopped:
            discard_body(response, self.channel.reactor)
            return
        if response.code == 405:
            log.debug("{url} offers no GET stream (HTTP 405)", url=channel.shown_url)
            discard_body(response, self.channel.reactor)
            self.stopped = True
            return
        if not (200 <= response.code < 300 and media_type(response) == EVENT_STREAM):
            log.warn(
                "{url} refused the GET stream with HTTP {code}",
                url=channel.shown_url,
                code=response.code,
            )
            discard_body(response, self.channel.reactor)
            self._reopen_later()
            return
        decoder = SSEDecoder(channel.max_message_size)
        decoder.last_event_id, decoder.retry = self.last_event_id, self.retry
        self.decoder = decoder
        self.reader = BodyReader(self._data, self.channel.reactor)
        response.deliverBody(self.reader)
        self.reader.done.addBoth(self._ended).addErrback(self._bug)

    def _unreachable(self, failure: Failure) -> None:
        self.pending = None
        self._answered.fire(None)
        if self.stopped:
            return
        log.warn(
            "the GET stream to {url} failed: {reason}",
            url=self.channel.shown_url,
            reason=explain(failure),
        )
        self._reopen_later()

    def _data(self, data: bytes) -> None:
        assert self.decoder is not None
        channel = self.channel
        for event in self.decoder.feed(data):
            self.failures = 0
            if event.event == MESSAGE and event.data and not self.stopped and not channel.closed:
                deliver(channel.peer, event.data)

    def _ended(self, result: object) -> None:
        self.reader = None
        if self.decoder is not None:
            self.last_event_id, self.retry = self.decoder.last_event_id, self.decoder.retry
        if self.stopped:
            return
        if isinstance(result, Failure):
            log.info(
                "the GET stream from {url} broke: {reason}",
                url=self.channel.shown_url,
                reason=explain(result),
            )
        self._reopen_later()

    def _reopen_later(self) -> None:
        channel = self.channel
        self.failures += 1
        if self.failures > channel.reconnect_attempts:
            log.warn(
                "giving up on the GET stream from {url} after {n} attempts",
                url=channel.shown_url,
                n=self.failures - 1,
            )
            self.stopped = True
            return
        if self.retry is not None:
            delay = self.retry / 1000
        else:
            delay = min(channel.reconnect_delay * 2 ** (self.failures - 1), 30.0)
        self.timer = channel.clock.callLater(delay, self.open)

    def stop(self) -> Deferred[None]:
        """Close the stream and stop reopening it; fires once its connection is closed."""
        self._answered.fire(None)
        self.stopped = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.cancel()
        if self.reader is not None:
            done: Deferred[None] = Deferred()
            self.reader.done.addBoth(lambda _: done.callback(None))
            self.reader.abort()
            return done
        return succeed(None)


def _json_rpc(body: bytes, allow_batch: bool) -> Message | Batch | None:
    """The JSON-RPC message an error body holds, or C{None} if it holds none."""
    if not body.strip():
        return None
    try:
        return parse(body, allow_batch=allow_batch)
    except ProtocolError:
        return None


class JsonLines:
    """
    The complete lines of an C{application/json} answer read as it arrives: each a
    message, as long as every one parses; once one does not (a message spread over
    several lines), the rest is kept whole for L{rest}.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._partial = b""
        self._whole: bytes | None = None

    def feed(self, data: bytes) -> list[bytes]:
        """The lines C{data} completed, each one parseable message."""
        if self._whole is not None:
            self._whole += data
            self._check(self._whole)
            return []
        *complete, self._partial = (self._partial + data).split(b"\n")
        self._check(self._partial)
        found: list[bytes] = []
        for number, line in enumerate(complete):
            if not line.strip():
                continue
            try:
                parse(line, allow_batch=True)
            except ProtocolError:
                # Not one message a line: from here on it is read whole.
                self._whole = b"\n".join((*complete[number:], self._partial))
                self._partial = b""
                return found
            found.append(line)
        return found

    def rest(self) -> bytes:
        """What no complete line delivered, once the answer ended."""
        rest = self._whole if self._whole is not None else self._partial
        return rest if rest.strip() else b""

    def _check(self, held: bytes) -> None:
        if len(held) > self._limit:
            raise EventTooLarge(self._limit)


def modern_request_headers(request: Request, negotiated: Negotiated) -> dict[str, str]:
    """
    The request-metadata headers of a 2026-07-28 request besides C{MCP-Protocol-Version}:
    C{Mcp-Method}, C{Mcp-Name} for the methods that name a target, and, for a
    C{tools/call}, the C{Mcp-Param-*} headers L{Negotiated.param_headers} gives for its
    tool (header name suffix to the argument's value as text), encoded as
    L{encode_header_value} says.
    """
    headers = {METHOD_HEADER: request.method}
    params = request.params
    name_field = NAME_FIELDS.get(request.method)
    if name_field is not None and isinstance(params, dict):
        name = params.get(name_field)
        if isinstance(name, str):
            headers[NAME_HEADER] = encode_header_value(name)
            if request.method == "tools/call":
                extra = negotiated.param_headers.get(name)
                if extra:
                    for suffix, value in extra.items():
                        headers[PARAM_HEADER_PREFIX + suffix] = encode_header_value(value)
    return headers


#: The longest wait a C{Retry-After} is honoured for, in seconds.
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
