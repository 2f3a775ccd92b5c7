# -*- test-case-name: tests.upstream.test_http -*-
"""
One request's POST to a Streamable HTTP server and everything that answers it: a
JSON body, or an SSE stream and its resumptions, same-origin redirects, and the
refusals the channel reports.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Protocol

from hyperlink import EncodedURL
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectError
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IResponse

from mcpx.settings.secrets import excerpt
from mcpx.settings.servers import redact_url
from mcpx.upstream.channel import MessageTooLarge, Negotiated, SessionExpired, TransportRefused
from mcpx.upstream.http_client import (
    ERROR_BODY_LIMIT,
    EVENT_STREAM,
    JSON,
    BodyReader,
    BodyTooLarge,
    BytesBody,
    ChannelParts,
    Credentials,
    RequestFailed,
    answers_request,
    as_headers,
    deliver,
    discard_body,
    explain,
    media_type,
    read_body,
)
from mcpx.upstream.http_headers import (
    MAX_REDIRECTS,
    refusal_hint,
    retry_after,
    same_origin,
    says_unknown_session,
)
from mcpx.wire.errors import ProtocolError
from mcpx.wire.messages import Batch, ErrorResponse, Message, Request, parse
from mcpx.wire.sse import MESSAGE, EventTooLarge, SSEDecoder
from mcpx.wire.twisted_private import request_not_sent

log = Logger()


class ExchangeChannel(ChannelParts, Protocol):
    """What an L{Exchange} needs of its channel (L{mcpx.upstream.http.StreamableHTTPChannel})."""

    negotiated: Negotiated
    credentials: Credentials | None
    resume_attempts: int
    resume_delay_ms: int

    @property
    def closed_peer(self) -> bool:
        """Whether the peer is gone (or was never attached)."""

    def capture_session(self, response: IResponse) -> None:
        """Keep the session id the server gave in answer to C{initialize}."""

    def exchange_acknowledged(self, exchange: Exchange) -> None:
        """The server has answered the exchange's POST: what waited on it may go."""

    def forget_exchange(self, exchange: Exchange) -> None:
        """The exchange is over."""


class AnswerMissing(ConnectionError):
    """
    The server answered a request's POST but its response (a JSON body, an SSE stream
    and any resumptions of it) ended without the JSON-RPC answer to that request.
    """

    #: The server accepted the request, so it may have acted on it.
    started = True


class Exchange:
    """
    One POST and everything that answers it: a JSON body, or an SSE stream and its
    resumptions.

    @ivar request_id: the id of the request it carries; C{None} for a notification or
        a response.
    @ivar finished: fires once nothing of the exchange is left open.
    """

    def __init__(
        self,
        channel: ExchangeChannel,
        data: bytes,
        request: Request | None,
        headers: dict[str, str],
    ) -> None:
        self.channel = channel
        self.data = data
        self.request = request
        self.request_id = request.id if request is not None else None
        self.headers = headers
        self.sent_session = "Mcp-Session-Id" in headers
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

    def _hint(self, channel: ExchangeChannel, response: IResponse, code: int) -> str:
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


def _json_rpc(body: bytes, allow_batch: bool) -> Message | Batch | None:
    """The JSON-RPC message an error body holds, or C{None} if it holds none."""
    if not body.strip():
        return None
    try:
        return parse(body, allow_batch=allow_batch)
    except ProtocolError:
        return None


#: The request whose answer stays open (L{Exchange._read_lines}).
LISTEN = "subscriptions/listen"


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
