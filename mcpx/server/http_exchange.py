# -*- test-case-name: tests.server.test_http -*-
"""
What both eras of C{/mcp} share (L{mcpx.server.http} tells a request's era, and serves
a 2026-07-28 one; L{mcpx.server.http_legacy} the legacy ones):

  - the request headers, by the names L{mcpx.wire.http_common} spells (L{header});
  - the responses: one POST's answer, a JSON body or an event stream (L{Exchange}), and
    a legacy session's C{GET} stream (L{GetStream}), both paused by Twisted while their
    client does not read (L{mcpx.server.flow}); a refusal, a 202;
  - a message outside any session (every 2026-07-28 request, and a legacy POST sent
    without C{initialize}): the connection of its own it is served on
    (L{open_alone}, L{notification_alone}) and the identity it counts as
    (L{identity_of}).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator, Iterable
from contextvars import copy_context
from typing import Any, Final, TypeAlias, cast

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IConsumer, IDelayedCall, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest

from mcpx.auth.caller import request_subject, subject_identity
from mcpx.server.conn import Conn
from mcpx.server.flow import Flow
from mcpx.server.mcp_socket import McpCore
from mcpx.spec.revision import UNDECLARED, Revision
from mcpx.wire.errors import RpcError
from mcpx.wire.http_common import (
    CLIENT_HEADER,
    METHOD_HEADER,
    NAME_HEADER,
    PROTOCOL_VERSION_HEADER,
    SESSION_ID_HEADER,
)
from mcpx.wire.messages import ErrorResponse, Notification, Request, RequestId, Response, encode
from mcpx.wire.sse import comment, encode_event

log = Logger()

EVENT_STREAM: Final = b"text/event-stream"
JSON: Final = b"application/json"
KEEPALIVE: Final = comment("keepalive")

_OWS: Final = " \t"


def raw_name(name: str) -> bytes:
    """A header's name as twisted.web looks it up: lowercase bytes."""
    return name.lower().encode("ascii")


#: The headers of L{mcpx.wire.http_common} a server reads, as L{header} takes them.
PROTOCOL_VERSION: Final = raw_name(PROTOCOL_VERSION_HEADER)
SESSION_ID: Final = raw_name(SESSION_ID_HEADER)
METHOD: Final = raw_name(METHOD_HEADER)
NAME: Final = raw_name(NAME_HEADER)
CLIENT: Final = raw_name(CLIENT_HEADER)


#: The most values L{header} and L{accepts_event_stream} each remember what they
#: read of, and the longest: a client sends the same few short values (a protocol
#: version, a method, a tool's name, its C{Accept}) request after request.  Past
#: these, a value is read as it comes, each time.
MAX_REMEMBERED: Final = 256
MAX_REMEMBERED_LENGTH: Final = 128

_texts: dict[bytes, str] = {}
_accepting: dict[bytes, bool] = {}


def _remember(memo: dict[bytes, Any], raw: bytes, read: object) -> None:
    """Remember C{read}, what C{raw} was read as, if C{memo} has room and C{raw} is short."""
    if len(memo) < MAX_REMEMBERED and len(raw) <= MAX_REMEMBERED_LENGTH:
        memo[raw] = read


def header(request: IRequest, name: bytes) -> str | None:
    """A request header's value with surrounding whitespace trimmed, or C{None}."""
    raw: bytes | None = request.getHeader(name)
    if raw is None:
        return None
    text = _texts.get(raw)
    if text is None:
        text = raw.decode("latin-1").strip(_OWS)
        _remember(_texts, raw, text)
    return text


def accepts_event_stream(request: IRequest) -> bool:
    accept: bytes | None = request.getHeader(b"accept")
    if accept is None:
        return False
    accepts = _accepting.get(accept)
    if accepts is None:
        # find, not `in`: see mcpx.daemon.lean_path's LeanRequest.setHeader.
        accepts = accept.lower().find(EVENT_STREAM) >= 0
        _remember(_accepting, accept, accepts)
    return accepts


def _notify_finish(request: IRequest) -> Deferred[None]:
    # On every twisted.web request, though IRequest does not declare it.
    finished: Deferred[None] = request.notifyFinish()  # type: ignore[attr-defined]
    return finished


def refusal(
    request: IRequest, status: int, error: RpcError, request_id: RequestId | None = None
) -> bytes:
    """A transport-level refusal: C{status}, with the JSON-RPC error as the body."""
    request.setResponseCode(status)
    request.setHeader(b"content-type", JSON)
    return encode(ErrorResponse(request_id, error))


def accepted(request: IRequest) -> bytes:
    request.setResponseCode(202)
    return b""


def answer_for(request: Request, outcome: object) -> bytes:
    """The encoded response to C{request}, whose handling produced C{outcome}."""
    if isinstance(outcome, Failure):
        error = outcome.value
        if not isinstance(error, RpcError):
            log.failure(
                "/mcp: {method} (id {id}) failed", outcome, method=request.method, id=request.id
            )
            error = RpcError.internal_error()
        return encode(ErrorResponse(request.id, error))
    try:
        return encode(Response(request.id, outcome))
    except (TypeError, ValueError, RecursionError):
        log.failure("/mcp: the result of {method} is not JSON", method=request.method)
        return encode(ErrorResponse(request.id, RpcError.internal_error()))


def _register(request: IRequest, flow: Flow) -> None:
    """Have Twisted pause C{flow} while C{request}'s client is not reading."""
    if IConsumer.providedBy(request):
        cast(IConsumer, request).registerProducer(flow, True)


def _unregister(request: IRequest) -> None:
    # A finished or lost request has dropped its channel, and its producer with it.
    if IConsumer.providedBy(request) and getattr(request, "channel", True) is not None:
        cast(IConsumer, request).unregisterProducer()


#: What answers a request to C{/mcp}: its body, C{None} once streamed, or the rest of it
#: for a request that waits (L{Later}, or a coroutine of the body or C{None}).
Answer: TypeAlias = "bytes | Later | Coroutine[Deferred[Any], Any, bytes | None] | None"


class Started:
    """
    A coroutine run a step at a time, each step in one C{contextvars} context of its
    own, as L{Deferred.fromCoroutine} would run it: to its first wait here and now
    (L{start}), then resumed by whoever drives it, with the outcome of what it waits
    on (L{step}): a route that waits on that itself (L{mcpx.daemon.lean_path}), or
    a coroutine that awaits this.

    @ivar waiting: what the coroutine waits on, while it does.
    @ivar result: what the coroutine returned, once a step says it finished.
    """

    __slots__ = ("_context", "_coroutine", "result", "waiting")

    def __init__(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        self._coroutine = coroutine
        self._context = copy_context()
        self.waiting: Any = None
        self.result: Any = None

    def start(self) -> bool:
        """
        Run the coroutine to its first wait.

        @return: whether it finished (its value is L{result}).
        @raise BaseException: what it raised, if it failed before waiting.
        """
        return self.step(None)

    def step(self, sent: object) -> bool:
        """
        Resume the coroutine with C{sent} (a L{Failure}'s exception thrown in), up to
        its next wait.

        @return: whether it finished (its value is L{result}), else it waits on
            L{waiting}.
        @raise BaseException: what it raised.
        """
        try:
            if isinstance(sent, Failure):
                self.waiting = self._context.run(sent.throwExceptionIntoGenerator, self._coroutine)
            else:
                self.waiting = self._context.run(self._coroutine.send, sent)
        except StopIteration as done:
            self.waiting = None
            self.result = done.value
            return True
        return False

    def __await__(self) -> Generator[Any, Any, Any]:
        while True:
            try:
                sent = yield self.waiting
            except GeneratorExit:
                self._coroutine.close()
                raise
            except BaseException:
                if self.step(Failure()):
                    return self.result
            else:
                if self.step(sent):
                    return self.result


class Stepping:
    """
    What drives a L{Started} coroutine that waits, as Twisted's coroutine runner would:
    resumed with the outcome of each Deferred it waits on (its failure thrown in),
    until it ends (L{_ended}).  L{Driven}, and the lean path's answer to a request that
    waits (L{mcpx.daemon.lean_path}), are such.

    @ivar _running: the coroutine; C{None} where a Deferred is waited on instead (its
        outcome is the end).
    @ivar _waiting: the Deferred it waits on, while it does.
    """

    __slots__ = ("_running", "_waiting")

    _running: Started | None
    _waiting: Deferred[Any] | None

    def step(self, result: object) -> None:
        """
        Send C{result} in (a L{Failure} thrown in), until it waits or ends; the
        callback of the Deferred it waits on (which is then waited on no more).
        """
        self._waiting = None
        running = self._running
        if running is None:
            self._ended(result)
            return
        try:
            done = running.step(result)
        except BaseException:
            self._ended(Failure())
            return
        if done:
            self._ended(running.result)
        else:
            self._wait(running.waiting)

    def _wait(self, waiting: object) -> None:
        if not isinstance(waiting, Deferred):
            # Not a Deferred: sent back in, as Twisted's coroutine runner does.
            self.step(waiting)
            return
        # A Deferred a coroutine waits on has not fired (or is paused): the callback
        # runs later, never now.
        self._waiting = waiting
        waiting.addBoth(self.step)

    def _ended(self, outcome: object) -> None:
        """It ended with C{outcome}: the coroutine's result, or a L{Failure}."""
        raise NotImplementedError


class Driven(Stepping):
    """
    The outcome of a L{Started} coroutine that waits, as a L{Deferred} (L{outcome}):
    driven (L{Stepping}) as C{Deferred.fromCoroutine(started.__await__())} would run
    it, without that generator and Twisted's coroutine runner between: a legacy
    session's request that waits (L{mcpx.server.http_legacy}), whose Deferred its
    session tracks and cancels.

    Cancelling L{outcome} cancels the Deferred the coroutine waits on; the coroutine's
    outcome then is L{outcome}'s, most often that C{CancelledError} raised on.  One that
    waits again instead has L{outcome} fail with the C{CancelledError} at once (where
    Twisted's runner would wait for it), and what it ends with later is dropped.
    """

    __slots__ = ("outcome",)

    def __init__(self, handling: Started) -> None:
        """@param handling: started, and waiting on L{Started.waiting}."""
        self._running = handling
        self._waiting = None
        self.outcome: Deferred[Any] = Deferred(self._cancel)
        self._wait(handling.waiting)

    def _ended(self, outcome: object) -> None:
        if self.outcome.called:
            return
        if isinstance(outcome, Failure):
            self.outcome.errback(outcome)
        else:
            self.outcome.callback(outcome)

    def _cancel(self, outcome: Deferred[Any]) -> None:
        waiting = self._waiting
        if waiting is not None:
            waiting.cancel()


class Later:
    """
    The rest of an answer whose handling waits: the handling, started (L{Started}), or
    a L{Deferred} of its outcome, and what makes the answer of that outcome
    (L{finish}).  Awaiting this is awaiting the handling, then finishing; a route can
    instead drive the handling (or wait on the Deferred) itself and call L{finish}
    (L{mcpx.daemon.lean_path}), with no coroutine in between.

    @ivar then: makes the answer: C{then(outcome, *args)} is L{finish}'s.
    @ivar args: what C{then} is given after the outcome.
    """

    __slots__ = ("args", "handling", "then")

    def __init__(
        self,
        handling: Started | Deferred[Any],
        then: Callable[..., bytes | None],
        *args: object,
    ) -> None:
        self.handling = handling
        self.then = then
        self.args = args

    def finish(self, outcome: object) -> bytes | None:
        """
        The answer of the handling's outcome: its result, or a L{Failure}.

        @raise BaseException: a failure that is no answer's (a cancellation).
        """
        return self.then(outcome, *self.args)

    def __await__(self) -> Generator[Any, Any, bytes | None]:
        try:
            result = yield from self.handling.__await__()
        except BaseException:
            return self.finish(Failure())
        return self.finish(result)


#: How early a keep-alive may be sent: the shared timer is re-armed by a difference of
#: times, which the clock's arithmetic may round a hair short of the response's due.
KEEPALIVE_SLACK: Final = 0.001


class KeepAlive:
    """
    The keep-alive of the responses that wait (L{Exchange.watch}): a response silent for
    C{interval} seconds gets a keep-alive comment (L{Exchange.beat}), and again each
    interval of silence, until it is closed.

    One timer serves every response watched: it is armed when one is and none is
    armed, for the earliest due.  When the last response watched closes, the timer is
    left to fire once with nothing due (at most an interval later) rather than
    cancelled: a client making one request after another would otherwise arm and
    cancel a timer for each (about 7,000 daemon instructions a pass-through call);
    a response watched meanwhile is due after it, and the timer, firing, is armed
    again for it.  L{stop} cancels it (the daemon is stopping).  The responses are
    kept by when each is due, in order: each is due C{interval} after it was last
    written to, so the one written to last goes last.
    """

    __slots__ = ("_clock", "_due", "_interval", "_timer")

    def __init__(self, clock: IReactorTime, interval: float) -> None:
        self._clock = clock
        self._interval = interval
        self._due: dict[Exchange, float] = {}
        self._timer: IDelayedCall | None = None

    def silent(self, exchange: Exchange) -> None:
        """C{exchange} is silent from now: its keep-alive is due one interval from now."""
        due = self._due
        if exchange in due:
            del due[exchange]
        due[exchange] = self._clock.seconds() + self._interval
        if self._timer is None:
            self._timer = self._clock.callLater(self._interval, self._fire)

    def forget(self, exchange: Exchange) -> None:
        """C{exchange} is closed: it gets no more keep-alives (the timer is left armed)."""
        self._due.pop(exchange, None)

    def stop(self) -> None:
        """Cancel the timer, if armed (the endpoint is closing)."""
        timer, self._timer = self._timer, None
        if timer is not None and timer.active():
            timer.cancel()

    def _fire(self) -> None:
        self._timer = None
        now = self._clock.seconds()
        due = self._due
        beating = []
        for exchange, at in due.items():
            if at > now + KEEPALIVE_SLACK:
                break
            beating.append(exchange)
        later = now + self._interval
        for exchange in beating:
            del due[exchange]
            due[exchange] = later
        for exchange in beating:
            try:
                exchange.beat()
            except Exception:
                log.failure("keep-alive failed")
        if due and self._timer is None:
            first = next(iter(due.values()))
            self._timer = self._clock.callLater(max(0.0, first - now), self._fire)


class Exchange:
    """
    The response to one POST: a JSON body at the end, or an event stream started when
    something has to go before the answer.  Its keep-alive and its watch for the client
    going away start with L{watch}.

    @ivar beats: the keep-alive this response shares with the others of its endpoint
        (L{KeepAlive}); without one, it has one of its own once watched.

    @ivar streaming: the response has become an event stream (its headers are sent).
    @ivar closed: nothing more will be written: answered, or the client went away.
    @ivar lost: the client went away before the answer.
    @ivar headers: set on the response when it starts, whichever form it takes.

    A plain slotted class (one is made for every POST): no attribute dictionary.
    """

    __slots__ = (
        "_beats",
        "_clock",
        "_flow",
        "_keep_alive",
        "_kept_by",
        "accepts_sse",
        "closed",
        "headers",
        "lost",
        "request",
        "streaming",
    )

    def __init__(
        self,
        request: IRequest,
        clock: IReactorTime,
        *,
        accepts_sse: bool,
        keep_alive: float,
        beats: KeepAlive | None = None,
    ) -> None:
        self.request = request
        self._clock = clock
        self.accepts_sse = accepts_sse
        self._keep_alive = keep_alive
        self._beats = beats
        self.streaming = False
        self.closed = False
        self.lost = False
        self.headers: dict[bytes, bytes] = {}
        self._flow: Flow | None = None
        self._kept_by: KeepAlive | None = None

    @property
    def flow(self) -> Flow:
        """
        The back-pressure of this response, made when something first asks for it (most
        answers are made with none); stopped once the response is closed.
        """
        flow = self._flow
        if flow is None:
            flow = self._flow = Flow()
            if self.closed:
                flow.stopProducing()
        return flow

    def watch(self) -> None:
        """
        Start the keep-alive and watch for the client going away, once the answer is
        not ready by the time the request's handling first waits (an answer made at once
        needs neither: nothing can happen to it before it is written).
        """
        if self.closed:
            return
        if self.accepts_sse and self._keep_alive > 0:
            beats = self._beats
            if beats is None:
                beats = self._beats = KeepAlive(self._clock, self._keep_alive)
            self._kept_by = beats
            beats.silent(self)
        # Told once the request is over: with None when it finished, a Failure when its
        # client went away first.  A request that says so itself (when_over, as
        # mcpx.daemon.lean_path's does) is asked to, with no Deferred; any other through
        # notifyFinish.
        request = self.request
        own = getattr(request, "when_over", None)
        if own is not None:
            own(self._gone)
        else:
            _notify_finish(request).addBoth(self._gone)

    def _gone(self, outcome: object) -> None:
        if isinstance(outcome, Failure):
            self.lost = True
        if not self.closed:
            # Most often closed already: answered.
            self._close()

    def _close(self) -> None:
        if self.streaming and not self.closed:
            _unregister(self.request)
        self.closed = True
        beats = self._kept_by
        if beats is not None:
            self._kept_by = None
            beats.forget(self)
        flow = self._flow
        if flow is not None:
            flow.stopProducing()

    def _start_stream(self) -> None:
        if self.streaming:
            return
        self.streaming = True
        request = self.request
        # Twisted pauses the flow while the client does not read what it was sent.
        _register(request, self.flow)
        request.setResponseCode(200)
        request.setHeader(b"content-type", EVENT_STREAM)
        request.setHeader(b"cache-control", b"no-cache")
        request.setHeader(b"x-accel-buffering", b"no")
        for name, value in self.headers.items():
            request.setHeader(name, value)

    def beat(self) -> None:
        """A keep-alive comment (L{KeepAlive}: the response has been silent too long)."""
        if self.closed:
            return
        self._start_stream()
        self.request.write(KEEPALIVE)

    def send(self, payload: bytes) -> bool:
        """
        Write a message (a notification or a server request) before the answer.

        @return: C{False} if this response cannot carry it (answered, gone, or the client
            does not accept an event stream).
        """
        if self.closed or not self.accepts_sse:
            return False
        self._start_stream()
        self.request.write(encode_event(payload))
        beats = self._kept_by
        if beats is not None:
            # Silence is counted from the last thing written.
            beats.silent(self)
        return True

    def push(self, method: str, params: dict[str, Any] | None) -> None:
        """Send a notification about this request (the push of a 2026-07-28 request)."""
        self.send(encode(Notification(method, params)))

    def answer(self, payload: bytes, status: int = 200) -> bytes | None:
        """
        Send the final message.

        @return: the body for Klein to write (a JSON answer), or C{None} when it went on
            the event stream (or nowhere: the client is gone).
        """
        was_closed = self.closed
        self._close()
        if was_closed or self.lost:
            return None
        if self.streaming:
            self.request.write(encode_event(payload))
            return None
        request = self.request
        request.setResponseCode(status)
        request.setHeader(b"content-type", JSON)
        for name, value in self.headers.items():
            request.setHeader(name, value)
        return payload

    def answer_batch(self, payloads: Iterable[bytes]) -> bytes | None:
        """The answers to a batch: one event each on a stream, else a JSON array."""
        parts = list(payloads)
        if self.streaming:
            if not self.closed:
                for part in parts:
                    self.request.write(encode_event(part))
            self._close()
            return None
        return self.answer(b"[" + b",".join(parts) + b"]")

    def abandon(self) -> bytes | None:
        """End without an answer (the request was cancelled): close the stream, or 202."""
        was_closed = self.closed
        self._close()
        if was_closed or self.lost or self.streaming:
            return None
        self.request.setResponseCode(202)
        return b""


class GetStream:
    """
    A legacy session's C{GET} stream: what mcpx pushes outside any request, and a
    keep-alive comment each interval.

    @ivar ended: fires when the stream ends from this side (replaced, session ended).
    """

    def __init__(self, request: IRequest, clock: IReactorTime, keep_alive: float) -> None:
        self.request = request
        self.ended: Deferred[None] = Deferred()
        self.open = True
        request.setResponseCode(200)
        request.setHeader(b"content-type", EVENT_STREAM)
        request.setHeader(b"cache-control", b"no-cache")
        request.setHeader(b"x-accel-buffering", b"no")
        self.flow = Flow()
        _register(request, self.flow)
        # The headers go now, so the client knows the stream is there.
        request.write(b"")
        self._beat = LoopingCall(self._keep_alive)
        self._beat.clock = clock
        if keep_alive > 0:
            self._beat.start(keep_alive, now=False).addErrback(
                lambda failure: log.failure("keep-alive failed", failure)
            )
        _notify_finish(request).addBoth(self._gone)

    def _keep_alive(self) -> None:
        if self.open:
            self.request.write(KEEPALIVE)

    def _gone(self, outcome: object) -> None:
        self.open = False
        self.stop()

    def send(self, payload: bytes) -> bool:
        if not self.open:
            return False
        self.request.write(encode_event(payload))
        return True

    def stop(self) -> None:
        """End the stream (the awaiting route returns, and Klein finishes the response)."""
        self.release()
        if not self.ended.called:
            self.ended.callback(None)

    def release(self) -> None:
        """Stop the keep-alive; for the route itself, which must not fire L{ended}."""
        if not self.flow.stopped:
            _unregister(self.request)
            self.flow.stopProducing()
        self.open = False
        if self._beat.running:
            self._beat.stop()


# A message outside any session

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
