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
    L{mcpx.server.http_legacy.BACKLOG_LIMIT} messages and
    L{mcpx.server.http_legacy.BACKLOG_BYTES} bytes, oldest dropped) for the next one.
    A second C{GET} replaces the first stream.
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
  - Sessions are kept per client within a principal the client cannot choose (its
    access token's subject, else its peer: C{unix} or its address;
    L{mcpx.server.http_legacy.session_principal}): the subject itself, or its
    C{Mcpx-Client} header, or else the C{clientInfo.name} of its C{initialize}
    (L{session_client}).  One client keeps at
    most C{transport.maxSessionsPerClient}: a new one ends that client's least recently
    used idle session, or is refused with 429 and C{Retry-After} when all of them are
    busy.  Past L{mcpx.server.http_legacy.MAX_SESSIONS} in all, the principal holding
    the most, and its client holding the most, gives up its least recently used idle
    one; a flood from one principal ends only its own, whatever names it gives
    (L{mcpx.server.http_legacy.Sessions}).

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

Here the era of each request is told and a 2026-07-28 one served; the legacy requests
are L{mcpx.server.http_legacy}'s, and what both share (the responses, and the connection of
a message outside any session) is L{mcpx.server.http_exchange}'s.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Final, cast

from twisted.internet.defer import CancelledError
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest

from mcpx.auth.caller import request_subject
from mcpx.ops.shutdown import shutting_down_error
from mcpx.server.conn import HTTP_MODERN, Conn
from mcpx.server.http_exchange import (
    METHOD,
    NAME,
    PROTOCOL_VERSION,
    Answer,
    Exchange,
    KeepAlive,
    Later,
    Started,
    accepted,
    accepts_event_stream,
    answer_for,
    header,
    identity_of,
    notification_alone,
    refusal,
)
from mcpx.server.http_legacy import (
    DEFAULT_SESSIONS_PER_CLIENT,
    HostSession,
    LegacyHTTP,
    Sessions,
    method_not_allowed,
)
from mcpx.server.listen import Listening
from mcpx.server.mcp_socket import McpCore
from mcpx.spec.meta_keys import PROTOCOL_VERSION_KEY
from mcpx.spec.revision import NEWEST, Revision
from mcpx.wire.errors import RpcError
from mcpx.wire.framing import DEFAULT_MAX_MESSAGE_SIZE
from mcpx.wire.http_common import NAME_FIELDS, decode_header_value
from mcpx.wire.messages import (
    Batch,
    ErrorResponse,
    Message,
    Notification,
    Request,
    encode,
    parse,
)

log = Logger()

#: A C{_meta} without a protocol version (L{meta_version_of}).
MISSING: Final[Any] = object()

#: The newest revision's name, as a header or C{_meta} gives it (read once, not through
#: the enum's property on every request).
_NEWEST: Final = NEWEST.value

#: What a client sends of its own, as C{isinstance} takes it (a tuple, not a union made
#: again on every request).
_ASKS: Final = (Request, Notification)


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
        daemon: str | None = None,
    ) -> None:
        """
        @param max_sessions_per_client: C{transport.maxSessionsPerClient}.
        @param daemon: this daemon's id (L{mcpx.store.heartbeat.new_daemon_id}), which
            begins every C{Mcp-Session-Id} it mints
            (L{mcpx.server.http_legacy.session_id_for}), so a balancer
            can keep a session on its daemon and a daemon can tell whose a session is.
        """
        self._core = core
        self._clock = clock
        self._keep_alive = keep_alive
        self._max_body = max_body
        #: One keep-alive timer for every response that waits, of both eras.
        self._beats = KeepAlive(clock, keep_alive)
        self._sessions = Sessions(core, max_sessions_per_client)
        self._legacy = LegacyHTTP(
            core,
            clock,
            self._sessions,
            self._exchange,
            keep_alive=keep_alive,
            daemon=daemon,
        )

    def close(self) -> None:
        """
        End every session and every listen (the daemon is stopping): a session's
        requests in flight are answered with the shutting-down error.
        """
        self._sessions.end_all(shutting_down_error())
        self._beats.stop()
        listening = getattr(self._core, "listening", None)
        if isinstance(listening, Listening):
            # Answered with their closing result while the connections are still up.
            listening.end_all()

    @property
    def sessions(self) -> OrderedDict[str, HostSession]:
        """The legacy sessions, least recently used first."""
        return self._sessions.by_id

    async def render(self, request: IRequest) -> bytes | None:
        """
        Answer one request to C{/mcp}: the body, with its C{Content-Length} set, for the
        route to write (Klein's), or C{None} once streamed.
        """
        body = self.respond(request)
        if body is not None and not isinstance(body, bytes):
            body = await body
        return self.framed(request, body)

    def framed(self, request: IRequest, body: bytes | None) -> bytes | None:
        """
        C{body}, with its C{Content-Length} set on C{request}: an answer to C{/mcp} is
        framed by its length, not chunked (one write, and the same on every route).
        """
        if body is not None:
            request.setHeader(b"content-length", b"%d" % len(body))
        return body

    def respond(self, request: IRequest) -> Answer:
        """
        L{render}'s answer as it is by the time the request's handling first waits: the
        body, or C{None} once streamed, or else the coroutine of the rest, giving either;
        the route frames the body (L{framed}) and writes it.  L{mcpx.daemon.lean_path} runs that
        coroutine itself, without the coroutine of L{render} around it.
        """
        method = request.method
        if method == b"POST":
            return self._post(request)
        if method == b"GET":
            return self._get(request)
        if method == b"DELETE":
            return self._delete(request)
        request.setHeader(b"allow", b"GET, POST, DELETE")
        return refusal(request, 405, RpcError.invalid_request("/mcp answers POST, GET and DELETE"))

    # POST

    def _exchange(self, request: IRequest) -> Exchange:
        """
        The response to a POST, an event stream if it must be and its client accepts;
        not yet watched (L{Exchange.watch}).
        """
        return Exchange(
            request,
            self._clock,
            accepts_sse=accepts_event_stream(request),
            keep_alive=self._keep_alive,
            beats=self._beats,
        )

    def _read_body(self, request: IRequest) -> bytes | None:
        content = request.content
        if content is None:
            return b""
        body: bytes = content.read(self._max_body + 1)
        return None if len(body) > self._max_body else body

    def _post(self, request: IRequest) -> Answer:
        body = self._read_body(request)
        if body is None:
            return refusal(
                request,
                413,
                RpcError.invalid_request(
                    f"message longer than {self._max_body} bytes (transport.maxMessageSize)"
                ),
            )
        try:
            message = parse(body, allow_batch=True)
        except RpcError as e:
            return refusal(request, 400, e, getattr(e, "id", None))
        version = header(request, PROTOCOL_VERSION)
        meta_version = meta_version_of(message)
        if version == _NEWEST or (
            meta_version is not MISSING
            and (Revision.find(meta_version) is None or Revision.find(meta_version) is NEWEST)
        ):
            return self._modern(request, message, version, meta_version)
        return self._legacy.post(request, message, version)

    # Modern

    def _modern(
        self, request: IRequest, message: Message | Batch, version: str | None, meta_version: Any
    ) -> Answer:
        if not isinstance(message, Request):
            return self._modern_not_request(request, message, version, meta_version)
        try:
            check_headers(request, message, version, meta_version)
        except RpcError as e:
            return refusal(request, e.http_status, e, message.id)
        exchange = self._exchange(request)
        subject = request_subject(request)
        conn = self._core.open(
            Conn(
                HTTP_MODERN,
                identity_of(subject),
                push=exchange.push if exchange.accepts_sse else None,
                subject=subject,
                flow_for=lambda token: exchange.flow,
                # A tools/call's Mcp-Param-* headers are checked against the arguments
                # by the core, which alone knows the tool (mcpx.server.param_headers).
                headers=(
                    (lambda name: header(request, name.encode("ascii")))
                    if message.method == "tools/call"
                    else None
                ),
            )
        )
        # The handling runs here to its first wait: an answer ready by then (a cached
        # listing) is written at once, with no keep-alive armed nor Deferred made for it.
        handling = Started(self._core.handle(conn, message))
        try:
            started = handling.start()
        except BaseException as error:
            try:
                return _failed(exchange, message, error)
            finally:
                self._core.close(conn)
        if started:
            self._core.close(conn)
            return exchange.answer(answer_for(message, handling.result))
        exchange.watch()
        return Later(handling, self._modern_done, exchange, conn, message)

    def _modern_not_request(
        self, request: IRequest, message: Message | Batch, version: str | None, meta_version: Any
    ) -> bytes:
        """A 2026-07-28 POST of anything but a request: a notification, or refused."""
        if isinstance(message, Batch):
            return refusal(
                request, 400, RpcError.invalid_request(f"{NEWEST} has no batches: POST one message")
            )
        if not isinstance(message, Notification):
            return refusal(
                request,
                400,
                RpcError.invalid_request(
                    f"a {NEWEST} client sends requests and notifications only"
                ),
            )
        try:
            check_headers(request, message, version, meta_version)
        except RpcError as e:
            return refusal(request, e.http_status, e)
        notification_alone(self._core, message, HTTP_MODERN, request)
        return accepted(request)

    def _modern_done(
        self, outcome: object, exchange: Exchange, conn: Conn, message: Request
    ) -> bytes | None:
        """The answer of a 2026-07-28 request whose handling waited: its outcome's."""
        self._core.close(conn)
        if isinstance(outcome, Failure):
            return _failed(exchange, message, cast(BaseException, outcome.value))
        return exchange.answer(answer_for(message, outcome))

    # GET and DELETE: a legacy session's

    def _get(self, request: IRequest) -> Answer:
        if header(request, PROTOCOL_VERSION) == _NEWEST:
            return method_not_allowed(request, f"{NEWEST} has no GET stream")
        return self._legacy.get(request)

    def _delete(self, request: IRequest) -> bytes | None:
        if header(request, PROTOCOL_VERSION) == _NEWEST:
            return method_not_allowed(request, f"{NEWEST} has no sessions to end")
        return self._legacy.delete(request)


def _failed(exchange: Exchange, message: Request, error: BaseException) -> bytes | None:
    """
    The answer to C{message} whose handling raised C{error}: an L{RpcError} is the
    client's, anything else is logged and an internal error.  A cancellation (the
    client closed the stream) and a C{BaseException} go on up.
    """
    if isinstance(error, RpcError):
        return exchange.answer(encode(ErrorResponse(message.id, error)), error.http_status)
    if isinstance(error, CancelledError) or not isinstance(error, Exception):
        raise error
    log.failure(
        "/mcp: {method} (id {id}) failed", Failure(error), method=message.method, id=message.id
    )
    internal = RpcError.internal_error()
    return exchange.answer(encode(ErrorResponse(message.id, internal)), internal.http_status)


# The 2026-07-28 request-metadata headers


def check_headers(
    request: IRequest, message: Request | Notification, version: str | None, meta_version: Any
) -> None:
    """
    The 2026-07-28 request-metadata headers against the body.

    @raise RpcError: C{-32020} for one missing or disagreeing.
    """
    if version is None:
        raise RpcError.header_mismatch("the MCP-Protocol-Version header is required")
    if meta_version is not MISSING and meta_version != version:
        raise RpcError.header_mismatch(
            f"MCP-Protocol-Version {version!r} disagrees with params._meta "
            f"{PROTOCOL_VERSION_KEY} {meta_version!r}"
        )
    method = header(request, METHOD)
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
    name = header(request, NAME)
    if name is None:
        raise RpcError.header_mismatch(f"the Mcp-Name header is required for {message.method}")
    try:
        said = decode_header_value(name)
    except ValueError:
        # A malformed encoded value is taken as it is, and so fails the comparison.
        said = name
    if said != target:
        raise RpcError.header_mismatch(
            f"Mcp-Name {name!r} disagrees with the body's params.{field} {target!r}"
        )


def meta_version_of(message: Message | Batch) -> Any:
    """The C{_meta} protocol version of a single request or notification, or L{MISSING}."""
    if not isinstance(message, _ASKS):
        return MISSING
    params = message.params
    if type(params) is not dict:
        return MISSING
    meta = params.get("_meta")
    if type(meta) is not dict:
        return MISSING
    return meta.get(PROTOCOL_VERSION_KEY, MISSING)
