# -*- test-case-name: tests.server.test_http -*-
"""
MCP over Streamable HTTP at C{/mcp}, mounted in the daemon's one Klein app.

Both eras share the endpoint; each request says which it belongs to.

  - A request is I{modern} (2026-07-28) when its C{MCP-Protocol-Version} header says
    C{2026-07-28}, or when its C{_meta} names a protocol version that is not a legacy
    one.  Anything else is legacy, and a request without the header is 2025-03-26
    (2024-11-05 had no Streamable HTTP).
  - Origin, Host and authentication are checked before a request gets here, the same
    as on every route of the daemon (L{mcpx.daemon.gate}).

Legacy (2025-03-26 to 2025-11-25)
=================================

  - Only C{initialize} mints a session: a successful one answers with
    C{Mcp-Session-Id}, a random token the client sends on every later request.  An
    unknown or ended session is 404; C{DELETE} ends one.  A C{MCP-Protocol-Version}
    header on a later request must name the session's revision (400 otherwise).
  - A session's C{GET} stream (C{Accept: text/event-stream}) carries what mcpx pushes
    to the session outside any request.  The session counts as able to push for its
    whole life: what is pushed while no stream is open waits (up to
    L{BACKLOG_LIMIT} messages, oldest dropped) for the next one.  A second C{GET}
    replaces the first stream.
  - A POST's answer is JSON, or an event stream when something has to go first: a
    server request or a notification about the request (its progress, found by its
    progress token, or anything sent while handling it), or a keep-alive.  A server
    request made outside any POST goes on the GET stream, and fails at once if none is
    open.
  - Notifications and responses in a body are answered 202.  Within a session a
    dropped connection is not a cancellation: the request runs on and its answer is
    dropped.  C{notifications/cancelled} is; the cancelled request's POST then ends
    with 202 (or its stream closes) and no JSON-RPC answer.
  - A POST outside any session (no C{initialize}) is served on a connection of its own
    that cannot push (C{http-post}), shared identity C{http}; dropping its connection
    cancels it.
  - Batches (a JSON array) only within a 2025-03-26 session.
  - Sessions are kept per client: its C{Mcpx-Client} header, or else its address and
    the C{clientInfo.name} of its C{initialize} (L{session_client}).  One client keeps
    at most C{transport.maxSessionsPerClient}: a new one ends that client's least
    recently used idle session, or is refused with 429 and C{Retry-After} when all of
    them are busy.  Past L{MAX_SESSIONS} in all, the client holding the most gives up
    its least recently used idle one; a flood from one client ends only its own.

Modern (2026-07-28)
===================

  - C{MCP-Protocol-Version}, C{Mcp-Method} and, for the methods that name a target,
    C{Mcp-Name} are required and must agree with the body (C{-32020}, 400); values are
    compared after trimming whitespace, and C{=?base64?...?=} values are decoded.
  - The status follows the error code (L{mcpx.wire.errors.http_status_for}).
  - No sessions: none minted, none echoed.  C{GET} and C{DELETE} are 405.
  - A C{tools/call} of a pass-through tool whose C{inputSchema} marks arguments with
    C{x-mcp-header} must carry the matching C{Mcp-Param-*} headers (SEP-2243): the
    core checks them against the arguments (L{mcpx.server.param_headers}), and a
    missing, malformed or disagreeing one is C{-32020}, 400.
  - Closing the response stream cancels the request.  Notifications about the request
    go on its own response, as an event stream when the client accepts one; a
    C{subscriptions/listen} stream (L{mcpx.server.listen}) stays open as long as the
    server keeps the request running, and is answered when the daemon stops.

A slow request whose client accepts C{text/event-stream} turns into an event stream
after C{transport.sseKeepAlive} seconds of silence and carries a C{: keepalive} comment
each interval until its answer.  Events carry no ids: mcpx does not replay streams.
"""

from __future__ import annotations

import base64
import binascii
import contextvars
import secrets
from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import Any, Final, cast

from twisted.internet.defer import CancelledError, Deferred, gatherResults
from twisted.internet.interfaces import IConsumer, IDelayedCall, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest

from mcpx.ops.shutdown import shutting_down_error
from mcpx.server.conn import HTTP_MODERN, HTTP_POST, HTTP_SESSION, Conn
from mcpx.server.flow import Flow
from mcpx.server.listen import Listening
from mcpx.server.param_headers import REQUEST_HEADERS
from mcpx.server.stdio import McpCore
from mcpx.spec.matrix import batch_allowed
from mcpx.spec.revision import HEADERLESS_HTTP, NEWEST, NEWEST_FIRST, Revision
from mcpx.wire.errors import RpcError
from mcpx.wire.framing import DEFAULT_MAX_MESSAGE_SIZE
from mcpx.wire.messages import (
    Batch,
    ErrorResponse,
    Message,
    Notification,
    Request,
    RequestId,
    Response,
    encode,
    parse,
)
from mcpx.wire.peer import CANCELLED, RpcPeer, cancel_for_peer
from mcpx.wire.sse import comment, encode_event

log = Logger()

PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"

#: The methods whose C{Mcp-Name} header mirrors a field of their params (2026-07-28).
NAME_FIELDS: Final = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}

#: The identity of requests that belong to no session (sessionless legacy POSTs); each
#: 2026-07-28 request gets a scope of its own under it (see the server core).
HTTP_IDENTITY: Final = "http"

#: Messages pushed to a legacy session kept while it has no GET stream open.
BACKLOG_LIMIT: Final = 256

#: Sessions kept before the least recently used idle ones are ended.
MAX_SESSIONS: Final = 1024

#: Sessions one client keeps when nothing says otherwise (C{transport.maxSessionsPerClient}).
DEFAULT_SESSIONS_PER_CLIENT: Final = 64

#: When a client refused a session because all of its own are busy may try again.
_SESSION_RETRY_AFTER: Final = b"1"

CLIENT_HEADER: Final = b"mcpx-client"

SESSION_HEADER: Final = b"mcp-session-id"
EVENT_STREAM: Final = b"text/event-stream"
JSON: Final = b"application/json"
KEEPALIVE: Final = comment("keepalive")

_SUPPORTED: Final = tuple(rev.value for rev in NEWEST_FIRST)
_SENTINEL_START: Final = "=?base64?"
_SENTINEL_END: Final = "?="
_MISSING: Final[Any] = object()
_OWS: Final = " \t"

#: The session and POST a request is being handled for, seen by code the request's
#: coroutine runs (Twisted runs a coroutine in the context it was started in).
_HANDLING: contextvars.ContextVar[tuple[LegacySession, Exchange] | None] = contextvars.ContextVar(
    "mcpx_http_handling", default=None
)


def decode_header_value(value: str) -> str:
    """
    An C{Mcp-Name} (or C{Mcp-Param-*}) value as its sender meant it: C{=?base64?...?=}
    decoded, anything else as it is.  A malformed encoded value is returned unchanged, so
    it fails the comparison with the body.
    """
    if value.startswith(_SENTINEL_START) and value.endswith(_SENTINEL_END):
        encoded = value[len(_SENTINEL_START) : -len(_SENTINEL_END)]
        try:
            return base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return value
    return value


def _header(request: IRequest, name: bytes) -> str | None:
    """A request header's value with surrounding whitespace trimmed, or C{None}."""
    raw: bytes | None = request.getHeader(name)
    if raw is None:
        return None
    return raw.decode("latin-1").strip(_OWS)


def _accepts_event_stream(request: IRequest) -> bool:
    accept = request.getHeader(b"accept")
    return accept is not None and EVENT_STREAM in accept.lower()


def _notify_finish(request: IRequest) -> Deferred[None]:
    # On every twisted.web request, though IRequest does not declare it.
    finished: Deferred[None] = request.notifyFinish()  # type: ignore[attr-defined]
    return finished


def _meta_version(message: Message | Batch) -> Any:
    """The C{_meta} protocol version of a single request or notification, or L{_MISSING}."""
    if not isinstance(message, Request | Notification):
        return _MISSING
    params = message.params
    if type(params) is not dict:
        return _MISSING
    meta = params.get("_meta")
    if type(meta) is not dict:
        return _MISSING
    return meta.get(PROTOCOL_VERSION_KEY, _MISSING)


def _progress_token(request: Request) -> str | int | None:
    params = request.params
    meta = params.get("_meta") if type(params) is dict else None
    token = meta.get("progressToken") if type(meta) is dict else None
    return token if type(token) is str or type(token) is int else None


def _refusal(
    request: IRequest, status: int, error: RpcError, request_id: RequestId | None = None
) -> bytes:
    """A transport-level refusal: C{status}, with the JSON-RPC error as the body."""
    request.setResponseCode(status)
    request.setHeader(b"content-type", JSON)
    return encode(ErrorResponse(request_id, error))


def _accepted(request: IRequest) -> bytes:
    request.setResponseCode(202)
    return b""


def _answer(request: Request, outcome: object) -> bytes:
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


class Exchange:
    """
    The response to one POST: a JSON body at the end, or an event stream started when
    something has to go before the answer.

    @ivar streaming: the response has become an event stream (its headers are sent).
    @ivar closed: nothing more will be written: answered, or the client went away.
    @ivar lost: the client went away before the answer.
    @ivar headers: set on the response when it starts, whichever form it takes.
    """

    def __init__(
        self, request: IRequest, clock: IReactorTime, *, accepts_sse: bool, keep_alive: float
    ) -> None:
        self.request = request
        self.accepts_sse = accepts_sse
        self._clock = clock
        self._keep_alive = keep_alive
        self.streaming = False
        self.closed = False
        self.lost = False
        self.headers: dict[bytes, bytes] = {}
        #: Back-pressure of the event stream, once this response has become one.
        self.flow = Flow()
        self._timer: IDelayedCall | None = None
        if accepts_sse and keep_alive > 0:
            self._timer = clock.callLater(keep_alive, self._beat)
        _notify_finish(request).addBoth(self._gone)

    def _gone(self, outcome: object) -> None:
        if isinstance(outcome, Failure):
            self.lost = True
        self._close()

    def _close(self) -> None:
        if self.streaming and not self.closed:
            _unregister(self.request)
        self.closed = True
        timer, self._timer = self._timer, None
        if timer is not None and timer.active():
            timer.cancel()
        self.flow.stopProducing()

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

    def _beat(self) -> None:
        self._timer = None
        if self.closed:
            return
        self._start_stream()
        self.request.write(KEEPALIVE)
        self._timer = self._clock.callLater(self._keep_alive, self._beat)

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
        if self._timer is not None:
            # Silence is counted from the last thing written.
            self._timer.reset(self._keep_alive)
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


def session_client(request: IRequest, initialize: Request) -> str:
    """
    Whom a legacy session counts against: the C{Mcpx-Client} header when the request
    has one, else the peer's address (C{unix} on the unix socket) with the
    C{clientInfo.name} its C{initialize} declares.  Two hosts on the same loopback
    address are told apart by the names they give; neither name nor header is proof of
    anything, only a way to keep one client's flood from ending another's sessions.
    """
    named = _header(request, CLIENT_HEADER)
    if named:
        return f"client {named}"
    address = request.getClientAddress()
    peer = getattr(address, "host", None)
    if not isinstance(peer, str):
        peer = "unix"
    params = initialize.params if isinstance(initialize.params, dict) else {}
    info = params.get("clientInfo")
    name = info.get("name") if isinstance(info, dict) else None
    return f"peer {peer} {name if isinstance(name, str) else ''}".rstrip()


class LegacySession:
    """
    One legacy Streamable HTTP session, from C{initialize} to C{DELETE}.

    @ivar id: the C{Mcp-Session-Id}.
    @ivar client: whom it counts against (L{session_client}).
    @ivar conn: its L{Conn}, set when it is opened.
    @ivar peer: carries mcpx's requests to the client and their answers back.
    @ivar stream: the open C{GET} stream, if any.
    @ivar running: the requests being handled, by id.
    """

    def __init__(self, session_id: str, clock: IReactorTime, client: str = "") -> None:
        self.id = session_id
        self.client = client
        self.conn: Conn | None = None
        self.stream: GetStream | None = None
        self.running: dict[RequestId, Deferred[Any]] = {}
        self.ended = False
        #: Why the session ended under its requests, when they are owed an answer.
        self.ending_error: RpcError | None = None
        self._by_token: dict[str | int, Exchange] = {}
        self._backlog: deque[bytes] = deque(maxlen=BACKLOG_LIMIT)
        self._asking: Exchange | None = None
        self.peer = RpcPeer(
            self._send_unrouted,
            on_request=self._no_requests,
            negative_ids=True,
            clock=clock,
            name=f"http-session:{session_id[:8]}",
            send_request=self._send_request,
        )

    @property
    def idle(self) -> bool:
        return not self.running and self.stream is None

    def _no_requests(self, request: Request) -> object:
        raise RpcError.invalid_request("requests are POSTed, not sent as responses")

    def _current(self) -> Exchange | None:
        handling = _HANDLING.get()
        if handling is None or handling[0] is not self or handling[1].closed:
            return None
        return handling[1]

    # mcpx to the client

    def flow_for(self, token: str | int) -> Flow | None:
        """The session's L{Conn.flow_for}: the POST with that token, else the GET stream."""
        exchange = self._by_token.get(token)
        if exchange is not None and not exchange.closed:
            return exchange.flow
        return self.stream.flow if self.stream is not None else None

    def push(self, method: str, params: dict[str, Any] | None) -> None:
        """The session's L{Conn.push}: the POST it is about, else the GET stream."""
        payload = encode(Notification(method, params))
        exchange = None
        if method == "notifications/progress" and params is not None:
            token = params.get("progressToken")
            if type(token) is str or type(token) is int:
                exchange = self._by_token.get(token)
        if exchange is None:
            exchange = self._current()
        if exchange is not None and exchange.send(payload):
            return
        self._to_stream(payload)

    def ask(self, method: str, params: dict[str, Any]) -> Deferred[Any]:
        """The session's L{Conn.ask}: on the POST being handled, else the GET stream."""
        self._asking = self._current()
        try:
            return self.peer.request(method, params)
        finally:
            self._asking = None

    def _send_request(self, data: bytes, message: Request) -> None:
        exchange = self._asking
        if exchange is not None and exchange.send(data):
            return
        if self.stream is not None and self.stream.send(data):
            return
        raise ConnectionError(f"the client has no open stream to receive {message.method} on")

    def _send_unrouted(self, data: bytes) -> None:
        # Cancellations of mcpx's own requests, mostly.
        exchange = self._current()
        if exchange is not None and exchange.send(data):
            return
        self._to_stream(data)

    def _to_stream(self, payload: bytes) -> None:
        if self.stream is not None and self.stream.send(payload):
            return
        if len(self._backlog) == BACKLOG_LIMIT:
            log.info(
                "session {session}: no GET stream open; dropping an old pushed message",
                session=self.peer.name,
            )
        self._backlog.append(payload)

    def attach(self, stream: GetStream) -> None:
        """A new GET stream replaces the old one and receives what waited."""
        old, self.stream = self.stream, stream
        if old is not None:
            old.stop()
        while self._backlog and stream.open:
            stream.send(self._backlog.popleft())

    def detach(self, stream: GetStream) -> None:
        if self.stream is stream:
            self.stream = None

    # Requests

    def track(self, request: Request, handling: Deferred[Any], exchange: Exchange) -> None:
        self.running[request.id] = handling
        token = _progress_token(request)
        if token is not None:
            self._by_token[token] = exchange

    def forget(self, request: Request, handling: Deferred[Any]) -> None:
        if self.running.get(request.id) is handling:
            del self.running[request.id]
        token = _progress_token(request)
        if token is not None:
            self._by_token.pop(token, None)

    def cancel(self, params: object) -> bool:
        """Cancel the request a C{notifications/cancelled} names; C{False} if none runs."""
        if type(params) is not dict:
            return False
        request_id = params.get("requestId")
        if type(request_id) is not int and type(request_id) is not str:
            return False
        handling = self.running.pop(request_id, None)
        if handling is None:
            return False
        log.info(
            "session {session} cancelled request {id}: {reason}",
            session=self.peer.name,
            id=request_id,
            reason=params.get("reason"),
        )
        cancel_for_peer(handling)
        return True

    def end(self, core: McpCore, because: RpcError | None = None) -> None:
        """
        The session is over: its requests are cancelled and its stream ends.

        @param because: the error each request in flight is answered with; without
            it they end unanswered (the client ended the session itself).
        """
        if self.ended:
            return
        self.ended = True
        self.ending_error = because
        self.peer.close(ConnectionError("the session ended"))
        running, self.running = self.running, {}
        for handling in running.values():
            handling.cancel()
        if self.stream is not None:
            self.stream.stop()
            self.stream = None
        self._backlog.clear()
        if self.conn is not None:
            core.close(self.conn)


class McpHTTP:
    """
    The C{/mcp} endpoint: L{render} answers each request Klein routes to it.

    @ivar sessions: the legacy sessions, least recently used first.
    """

    def __init__(
        self,
        core: McpCore,
        clock: IReactorTime,
        *,
        keep_alive: float = 15.0,
        max_body: int = DEFAULT_MAX_MESSAGE_SIZE,
        max_sessions_per_client: int = DEFAULT_SESSIONS_PER_CLIENT,
    ) -> None:
        """
        @param max_sessions_per_client: C{transport.maxSessionsPerClient}.
        """
        self._core = core
        self._clock = clock
        self._keep_alive = keep_alive
        self._max_body = max_body
        self.sessions: OrderedDict[str, LegacySession] = OrderedDict()
        self._per_client = max_sessions_per_client
        #: Sessions per client, those still being initialized included.
        self._held: dict[str, int] = {}
        #: Clients at their cap since they were last below it (each logged once).
        self._crowded: set[str] = set()
        self._full = False

    def close(self) -> None:
        """
        End every session and every listen (the daemon is stopping): a session's
        requests in flight are answered with the shutting-down error.
        """
        sessions, self.sessions = self.sessions, OrderedDict()
        self._held.clear()
        for session in sessions.values():
            session.end(self._core, because=shutting_down_error())
        listening = getattr(self._core, "listening", None)
        if isinstance(listening, Listening):
            # Answered with their closing result while the connections are still up.
            listening.end_all()

    async def render(self, request: IRequest) -> bytes | None:
        """Answer one request to C{/mcp}: the body for Klein, or C{None} once streamed."""
        method = request.method
        if method == b"POST":
            return await self._post(request)
        if method == b"GET":
            return await self._get(request)
        if method == b"DELETE":
            return self._delete(request)
        request.setHeader(b"allow", b"GET, POST, DELETE")
        return _refusal(request, 405, RpcError.invalid_request("/mcp answers POST, GET and DELETE"))

    # POST

    def _read_body(self, request: IRequest) -> bytes | None:
        content = request.content
        if content is None:
            return b""
        body: bytes = content.read(self._max_body + 1)
        return None if len(body) > self._max_body else body

    async def _post(self, request: IRequest) -> bytes | None:
        body = self._read_body(request)
        if body is None:
            return _refusal(
                request,
                413,
                RpcError.invalid_request(
                    f"message longer than {self._max_body} bytes (transport.maxMessageSize)"
                ),
            )
        try:
            message = parse(body, allow_batch=True)
        except RpcError as e:
            return _refusal(request, 400, e, getattr(e, "id", None))
        version = _header(request, b"mcp-protocol-version")
        meta_version = _meta_version(message)
        if version == NEWEST.value or (
            meta_version is not _MISSING
            and (Revision.find(meta_version) is None or Revision.find(meta_version) is NEWEST)
        ):
            return await self._modern(request, message, version, meta_version)
        return await self._legacy(request, message, version)

    # Modern

    def _check_headers(
        self, request: IRequest, message: Message, version: str | None, meta_version: Any
    ) -> None:
        """
        The 2026-07-28 request-metadata headers against the body.

        @raise RpcError: C{-32020} for one missing or disagreeing.
        """
        if version is None:
            raise RpcError.header_mismatch("the MCP-Protocol-Version header is required")
        if meta_version is not _MISSING and meta_version != version:
            raise RpcError.header_mismatch(
                f"MCP-Protocol-Version {version!r} disagrees with params._meta "
                f"{PROTOCOL_VERSION_KEY} {meta_version!r}"
            )
        assert isinstance(message, Request | Notification)
        method = _header(request, b"mcp-method")
        if method is None:
            if isinstance(message, Request):
                raise RpcError.header_mismatch("the Mcp-Method header is required")
        elif method != message.method:
            raise RpcError.header_mismatch(
                f"Mcp-Method {method!r} disagrees with the body's method {message.method!r}"
            )
        field = NAME_FIELDS.get(message.method)
        if field is None or not isinstance(message, Request):
            return
        params = message.params
        target = params.get(field) if type(params) is dict else None
        if not isinstance(target, str):
            # The method's own validation says what is wrong with the body.
            return
        name = _header(request, b"mcp-name")
        if name is None:
            raise RpcError.header_mismatch(f"the Mcp-Name header is required for {message.method}")
        if decode_header_value(name) != target:
            raise RpcError.header_mismatch(
                f"Mcp-Name {name!r} disagrees with the body's params.{field} {target!r}"
            )

    async def _modern(
        self, request: IRequest, message: Message | Batch, version: str | None, meta_version: Any
    ) -> bytes | None:
        if isinstance(message, Batch):
            return _refusal(
                request, 400, RpcError.invalid_request(f"{NEWEST} has no batches: POST one message")
            )
        if isinstance(message, Response | ErrorResponse):
            return _refusal(
                request,
                400,
                RpcError.invalid_request(
                    f"a {NEWEST} client sends requests and notifications only"
                ),
            )
        request_id = message.id if isinstance(message, Request) else None
        try:
            self._check_headers(request, message, version, meta_version)
        except RpcError as e:
            return _refusal(request, e.http_status, e, request_id)
        if isinstance(message, Notification):
            conn = self._core.open(HTTP_MODERN, HTTP_IDENTITY)
            try:
                self._core.notification(conn, message)
            finally:
                self._core.close(conn)
            return _accepted(request)
        exchange = Exchange(
            request,
            self._clock,
            accepts_sse=_accepts_event_stream(request),
            keep_alive=self._keep_alive,
        )
        conn = self._core.open(
            HTTP_MODERN, HTTP_IDENTITY, push=exchange.push if exchange.accepts_sse else None
        )
        conn.flow_for = lambda token: exchange.flow
        # A tools/call's Mcp-Param-* headers are checked against the arguments by the
        # core, which alone knows the tool (mcpx.server.param_headers).
        headers = (
            REQUEST_HEADERS.set(lambda name: _header(request, name.encode("ascii")))
            if message.method == "tools/call"
            else None
        )
        try:
            result = await self._core.handle(conn, message)
        except CancelledError:
            # The client closed the stream: that is the cancellation.
            raise
        except RpcError as e:
            return exchange.answer(encode(ErrorResponse(message.id, e)), e.http_status)
        except Exception:
            log.failure("/mcp: {method} (id {id}) failed", method=message.method, id=message.id)
            error = RpcError.internal_error()
            return exchange.answer(encode(ErrorResponse(message.id, error)), error.http_status)
        finally:
            if headers is not None:
                REQUEST_HEADERS.reset(headers)
            self._core.close(conn)
        return exchange.answer(_answer(message, result))

    # Legacy

    async def _legacy(
        self, request: IRequest, message: Message | Batch, version: str | None
    ) -> bytes | None:
        request_id = message.id if isinstance(message, Request) else None
        revision = None
        if version is not None:
            revision = Revision.find(version)
            if revision is None:
                return _refusal(
                    request,
                    400,
                    RpcError(
                        RpcError.invalid_request().code,
                        f"unsupported MCP-Protocol-Version {version!r}",
                        {"supported": list(_SUPPORTED), "requested": version},
                    ),
                    request_id,
                )
        session_id = _header(request, SESSION_HEADER)
        session = None
        if session_id is not None:
            session = self.sessions.get(session_id)
            if session is None:
                return _refusal(
                    request,
                    404,
                    RpcError.invalid_request(
                        "no such session (it ended, or the daemon restarted); "
                        "initialize again without Mcp-Session-Id"
                    ),
                    request_id,
                )
            self.sessions.move_to_end(session_id)
            agreed = session.conn.revision if session.conn is not None else None
            if revision is not None and agreed is not None and revision is not agreed:
                return _refusal(
                    request,
                    400,
                    RpcError.invalid_request(
                        f"MCP-Protocol-Version {version} is not the session's revision {agreed}"
                    ),
                    request_id,
                )
        if isinstance(message, Batch):
            conn = session.conn if session is not None else None
            if (
                session is None
                or conn is None
                or conn.revision is None
                or not batch_allowed(conn.revision)
            ):
                return _refusal(
                    request,
                    400,
                    RpcError.invalid_request("batches are allowed in a 2025-03-26 session only"),
                )
            return await self._batch(request, session, message)
        if isinstance(message, Response | ErrorResponse):
            if session is None:
                return _refusal(
                    request,
                    400,
                    RpcError.invalid_request(
                        "a response belongs to the session that asked: send its Mcp-Session-Id"
                    ),
                )
            session.peer.receive_message(message)
            return _accepted(request)
        if isinstance(message, Notification):
            if session is not None:
                self._session_notification(session, message)
            else:
                conn = self._core.open(HTTP_POST, HTTP_IDENTITY, default_revision=revision)
                try:
                    self._core.notification(conn, message)
                finally:
                    self._core.close(conn)
            return _accepted(request)
        exchange = Exchange(
            request,
            self._clock,
            accepts_sse=_accepts_event_stream(request),
            keep_alive=self._keep_alive,
        )
        if session is not None:
            return await self._in_session(session, message, exchange)
        if message.method == "initialize":
            return await self._initialize(message, exchange, revision)
        return await self._sessionless(message, exchange, revision)

    def _session_notification(self, session: LegacySession, notification: Notification) -> None:
        if notification.method == CANCELLED and session.cancel(notification.params):
            return
        assert session.conn is not None
        self._core.notification(session.conn, notification)

    async def _sessionless(
        self, message: Request, exchange: Exchange, revision: Revision | None
    ) -> bytes | None:
        conn = self._core.open(
            HTTP_POST, HTTP_IDENTITY, default_revision=revision or HEADERLESS_HTTP
        )
        try:
            result = await self._core.handle(conn, message)
        except CancelledError:
            # Nothing else could cancel it: the connection dropping is the cancellation.
            raise
        except Exception:
            return exchange.answer(_answer(message, Failure()))
        finally:
            self._core.close(conn)
        return exchange.answer(_answer(message, result))

    async def _initialize(
        self, message: Request, exchange: Exchange, revision: Revision | None
    ) -> bytes | None:
        client = session_client(exchange.request, message)
        if not self._room_for(client):
            exchange.request.setHeader(b"retry-after", _SESSION_RETRY_AFTER)
            return _refusal(
                exchange.request,
                429,
                RpcError.invalid_request(
                    f"this client already has {self._per_client} sessions, every one busy "
                    "(transport.maxSessionsPerClient): end one with DELETE or reuse it"
                ),
                message.id,
            )
        self._held[client] = self._held.get(client, 0) + 1
        session_id = secrets.token_urlsafe(24)
        session = LegacySession(session_id, self._clock, client)
        session.conn = self._core.open(
            HTTP_SESSION,
            f"{HTTP_SESSION}:{session_id}",
            push=session.push,
            ask=session.ask,
            default_revision=revision or HEADERLESS_HTTP,
        )
        session.conn.flow_for = session.flow_for
        exchange.headers[SESSION_HEADER] = session_id.encode("ascii")
        try:
            result = await self._core.handle(session.conn, message)
        except CancelledError:
            self._release(client)
            session.end(self._core)
            raise
        except Exception:
            self._release(client)
            session.end(self._core)
            del exchange.headers[SESSION_HEADER]
            exchange.request.responseHeaders.removeHeader(SESSION_HEADER)
            return exchange.answer(_answer(message, Failure()))
        self._add_session(session)
        return exchange.answer(_answer(message, result))

    def _room_for(self, client: str) -> bool:
        """
        Whether C{client} may have another session, ending its least recently used idle
        one if it is at its cap: C{False} when every one of its sessions is busy.
        """
        if self._held.get(client, 0) < self._per_client:
            self._crowded.discard(client)
            return True
        if client not in self._crowded:
            self._crowded.add(client)
            log.warn(
                "/mcp: client {client} has {limit} sessions (transport.maxSessionsPerClient); "
                "its new sessions end its least recently used idle ones",
                client=client,
                limit=self._per_client,
            )
        for old in self.sessions.values():
            if old.client == client and old.idle:
                self._end(old)
                return True
        return False

    def _release(self, client: str) -> None:
        held = self._held.get(client, 0) - 1
        if held > 0:
            self._held[client] = held
        else:
            self._held.pop(client, None)

    def _add_session(self, session: LegacySession) -> None:
        full = len(self.sessions) >= MAX_SESSIONS
        if full and not self._full:
            log.warn(
                "/mcp: {limit} sessions are open; new ones end the least recently used idle "
                "session of the client that holds the most",
                limit=MAX_SESSIONS,
            )
        self._full = full
        while len(self.sessions) >= MAX_SESSIONS:
            old = self._most_crowded_idle()
            if old is None:
                break
            self._end(old)
        self.sessions[session.id] = session

    def _most_crowded_idle(self) -> LegacySession | None:
        """The least recently used idle session of the client that holds the most."""
        chosen: LegacySession | None = None
        for old in self.sessions.values():
            if old.idle and (
                chosen is None or self._held.get(old.client, 0) > self._held.get(chosen.client, 0)
            ):
                chosen = old
        return chosen

    def _end(self, session: LegacySession) -> None:
        if self.sessions.pop(session.id, None) is not None:
            self._release(session.client)
        session.end(self._core)

    def _start(self, session: LegacySession, message: Request, exchange: Exchange) -> Deferred[Any]:
        """
        Handle a request of C{session}, shielded from the POST's connection: the returned
        Deferred may be cancelled (the client went away) while the request runs on.
        """
        assert session.conn is not None
        token = _HANDLING.set((session, exchange))
        try:
            handling: Deferred[Any] = Deferred.fromCoroutine(
                self._core.handle(session.conn, message)
            )
        finally:
            _HANDLING.reset(token)
        waiter: Deferred[Any] = Deferred()
        session.track(message, handling, exchange)

        def settle(outcome: object) -> None:
            session.forget(message, handling)
            if not waiter.called:
                waiter.callback(outcome)

        handling.addBoth(settle)
        return waiter

    async def _in_session(
        self, session: LegacySession, message: Request, exchange: Exchange
    ) -> bytes | None:
        if message.id in session.running:
            return exchange.answer(
                encode(
                    ErrorResponse(
                        message.id,
                        RpcError.invalid_request("id already in use by a request in flight"),
                    )
                )
            )
        try:
            result = await self._start(session, message, exchange)
        except CancelledError:
            if exchange.lost:
                raise
            if session.ending_error is not None:
                return exchange.answer(encode(ErrorResponse(message.id, session.ending_error)))
            # Cancelled by the client (notifications/cancelled) or the session's end.
            return exchange.abandon()
        except Exception:
            return exchange.answer(_answer(message, Failure()))
        return exchange.answer(_answer(message, result))

    async def _batch(self, request: IRequest, session: LegacySession, batch: Batch) -> bytes | None:
        replies: list[bytes] = [encode(ErrorResponse(e.id, e)) for e in batch.invalid]
        exchange: Exchange | None = None
        waiting: list[Deferred[bytes | None]] = []
        for message in batch.messages:
            if isinstance(message, Request):
                if message.method == "initialize":
                    replies.append(
                        encode(
                            ErrorResponse(
                                message.id,
                                RpcError.invalid_request("initialize cannot be part of a batch"),
                            )
                        )
                    )
                    continue
                if exchange is None:
                    exchange = Exchange(
                        request,
                        self._clock,
                        accepts_sse=_accepts_event_stream(request),
                        keep_alive=self._keep_alive,
                    )
                waiting.append(self._batch_reply(session, message, exchange))
            elif isinstance(message, Notification):
                self._session_notification(session, message)
            else:
                session.peer.receive_message(message)
        if not waiting and not replies:
            return _accepted(request)
        if exchange is None:
            request.setHeader(b"content-type", JSON)
            return b"[" + b",".join(replies) + b"]"
        answers = await gatherResults(waiting, consumeErrors=True)
        replies.extend(answer for answer in answers if answer is not None)
        if not replies:
            return exchange.abandon()
        return exchange.answer_batch(replies)

    def _batch_reply(
        self, session: LegacySession, message: Request, exchange: Exchange
    ) -> Deferred[bytes | None]:
        if message.id in session.running:
            error = RpcError.invalid_request("id already in use by a request in flight")
            reply: Deferred[bytes | None] = Deferred()
            reply.callback(encode(ErrorResponse(message.id, error)))
            return reply

        def answered(outcome: object) -> bytes | None:
            if isinstance(outcome, Failure) and outcome.check(CancelledError):
                if session.ending_error is not None:
                    return encode(ErrorResponse(message.id, session.ending_error))
                return None
            return _answer(message, outcome)

        return self._start(session, message, exchange).addBoth(answered)

    # GET and DELETE

    async def _get(self, request: IRequest) -> bytes | None:
        if _header(request, b"mcp-protocol-version") == NEWEST.value:
            return self._not_allowed(request, f"{NEWEST} has no GET stream")
        session_id = _header(request, SESSION_HEADER)
        if session_id is None:
            return self._not_allowed(
                request,
                "a GET stream belongs to a session: initialize first, then send its Mcp-Session-Id",
            )
        session = self.sessions.get(session_id)
        if session is None:
            return _refusal(request, 404, RpcError.invalid_request("no such session"))
        if not _accepts_event_stream(request):
            return _refusal(
                request, 406, RpcError.invalid_request("the GET stream is text/event-stream")
            )
        self.sessions.move_to_end(session_id)
        stream = GetStream(request, self._clock, self._keep_alive)
        session.attach(stream)
        try:
            await stream.ended
        finally:
            session.detach(stream)
            stream.release()
        return None

    def _delete(self, request: IRequest) -> bytes | None:
        if _header(request, b"mcp-protocol-version") == NEWEST.value:
            return self._not_allowed(request, f"{NEWEST} has no sessions to end")
        session_id = _header(request, SESSION_HEADER)
        if session_id is None:
            return _refusal(
                request,
                400,
                RpcError.invalid_request("DELETE ends the session its Mcp-Session-Id names"),
            )
        session = self.sessions.get(session_id)
        if session is None:
            return _refusal(request, 404, RpcError.invalid_request("no such session"))
        self._end(session)
        request.setResponseCode(200)
        return b""

    def _not_allowed(self, request: IRequest, why: str) -> bytes:
        request.setHeader(b"allow", b"POST")
        return _refusal(request, 405, RpcError.invalid_request(why))
