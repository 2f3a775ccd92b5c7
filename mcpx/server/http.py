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
    L{mcpx.server.http_sessions.BACKLOG_LIMIT} messages, oldest dropped) for the next
    one.  A second C{GET} replaces the first stream.
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
    them are busy.  Past L{mcpx.server.http_sessions.MAX_SESSIONS} in all, the client
    holding the most gives up its least recently used idle one; a flood from one client
    ends only its own (L{mcpx.server.http_sessions.Sessions}).

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

from collections import OrderedDict
from typing import Any, Final

from twisted.internet.defer import CancelledError, Deferred, gatherResults
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest

from mcpx.auth.caller import request_subject, subject_identity
from mcpx.ops.shutdown import shutting_down_error
from mcpx.server.conn import HTTP_MODERN, HTTP_POST, HTTP_SESSION, Conn
from mcpx.server.http_exchange import (
    JSON,
    Exchange,
    GetStream,
    accepted,
    accepts_event_stream,
    answer_for,
    header,
    refusal,
)
from mcpx.server.http_headers import MISSING, check_headers, meta_version_of
from mcpx.server.http_sessions import (
    DEFAULT_SESSIONS_PER_CLIENT,
    HANDLING,
    LegacySession,
    Sessions,
    session_client,
    session_id_for,
    session_owner,
)
from mcpx.server.listen import Listening
from mcpx.server.param_headers import REQUEST_HEADERS
from mcpx.server.stdio import McpCore
from mcpx.spec.matrix import batch_allowed
from mcpx.spec.revision import HEADERLESS_HTTP, NEWEST, NEWEST_FIRST, UNDECLARED, Revision
from mcpx.wire.errors import RpcError
from mcpx.wire.framing import DEFAULT_MAX_MESSAGE_SIZE
from mcpx.wire.messages import (
    Batch,
    ErrorResponse,
    Message,
    Notification,
    Request,
    Response,
    encode,
    parse,
)
from mcpx.wire.peer import CANCELLED

log = Logger()


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


#: When a client refused a session because all of its own are busy may try again.
_SESSION_RETRY_AFTER: Final = b"1"

SESSION_HEADER: Final = b"mcp-session-id"

_SUPPORTED: Final = tuple(rev.value for rev in NEWEST_FIRST)


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
            begins every C{Mcp-Session-Id} it mints (L{session_id_for}), so a balancer
            can keep a session on its daemon and a daemon can tell whose a session is.
        """
        self._daemon = daemon
        self._core = core
        self._clock = clock
        self._keep_alive = keep_alive
        self._max_body = max_body
        self._sessions = Sessions(core, max_sessions_per_client)

    def close(self) -> None:
        """
        End every session and every listen (the daemon is stopping): a session's
        requests in flight are answered with the shutting-down error.
        """
        self._sessions.end_all(shutting_down_error())
        listening = getattr(self._core, "listening", None)
        if isinstance(listening, Listening):
            # Answered with their closing result while the connections are still up.
            listening.end_all()

    @property
    def sessions(self) -> OrderedDict[str, LegacySession]:
        """The legacy sessions, least recently used first."""
        return self._sessions.by_id

    async def render(self, request: IRequest) -> bytes | None:
        """
        Answer one request to C{/mcp}: the body, with its C{Content-Length} set, for the
        route to write (Klein's, or L{mcpx.daemon.lean_path}'s), or C{None} once streamed.
        """
        body = await self._answer(request)
        if body is not None:
            # Framed by its length, not chunked: one write, and the same on both paths.
            request.setHeader(b"content-length", b"%d" % len(body))
        return body

    async def _answer(self, request: IRequest) -> bytes | None:
        method = request.method
        if method == b"POST":
            return await self._post(request)
        if method == b"GET":
            return await self._get(request)
        if method == b"DELETE":
            return self._delete(request)
        request.setHeader(b"allow", b"GET, POST, DELETE")
        return refusal(request, 405, RpcError.invalid_request("/mcp answers POST, GET and DELETE"))

    # POST

    def _exchange(self, request: IRequest) -> Exchange:
        """The response to a POST, an event stream if it must be and its client accepts."""
        return Exchange(
            request,
            self._clock,
            accepts_sse=accepts_event_stream(request),
            keep_alive=self._keep_alive,
        )

    def _read_body(self, request: IRequest) -> bytes | None:
        content = request.content
        if content is None:
            return b""
        body: bytes = content.read(self._max_body + 1)
        return None if len(body) > self._max_body else body

    async def _post(self, request: IRequest) -> bytes | None:
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
        version = header(request, b"mcp-protocol-version")
        meta_version = meta_version_of(message)
        if version == NEWEST.value or (
            meta_version is not MISSING
            and (Revision.find(meta_version) is None or Revision.find(meta_version) is NEWEST)
        ):
            return await self._modern(request, message, version, meta_version)
        return await self._legacy(request, message, version)

    # Modern

    async def _modern(
        self, request: IRequest, message: Message | Batch, version: str | None, meta_version: Any
    ) -> bytes | None:
        if isinstance(message, Batch):
            return refusal(
                request, 400, RpcError.invalid_request(f"{NEWEST} has no batches: POST one message")
            )
        if isinstance(message, Response | ErrorResponse):
            return refusal(
                request,
                400,
                RpcError.invalid_request(
                    f"a {NEWEST} client sends requests and notifications only"
                ),
            )
        request_id = message.id if isinstance(message, Request) else None
        try:
            check_headers(request, message, version, meta_version)
        except RpcError as e:
            return refusal(request, e.http_status, e, request_id)
        if isinstance(message, Notification):
            self._notification_alone(message, HTTP_MODERN, request)
            return accepted(request)
        exchange = self._exchange(request)
        subject = request_subject(request)
        conn = self._core.open(
            Conn(
                HTTP_MODERN,
                identity_of(subject),
                push=exchange.push if exchange.accepts_sse else None,
                subject=subject,
                flow_for=lambda token: exchange.flow,
            )
        )
        # A tools/call's Mcp-Param-* headers are checked against the arguments by the
        # core, which alone knows the tool (mcpx.server.param_headers).
        headers = (
            REQUEST_HEADERS.set(lambda name: header(request, name.encode("ascii")))
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
        return exchange.answer(answer_for(message, result))

    # Legacy

    async def _legacy(
        self, request: IRequest, message: Message | Batch, version: str | None
    ) -> bytes | None:
        request_id = message.id if isinstance(message, Request) else None
        revision = None
        if version is not None:
            revision = Revision.find(version)
            if revision is None:
                return refusal(
                    request,
                    400,
                    RpcError(
                        RpcError.invalid_request().code,
                        f"unsupported MCP-Protocol-Version {version!r}",
                        {"supported": list(_SUPPORTED), "requested": version},
                    ),
                    request_id,
                )
        session_id = header(request, SESSION_HEADER)
        session = None
        if session_id is not None:
            session = self._sessions.used(session_id)
            if session is None or not session.belongs_to(request):
                # Another subject's session is answered as if it did not exist.
                self._not_ours(session_id, session)
                return refusal(
                    request,
                    404,
                    RpcError.invalid_request(
                        "no such session (it ended, or the daemon restarted); "
                        "initialize again without Mcp-Session-Id"
                    ),
                    request_id,
                )
            agreed = session.conn.revision if session.conn is not None else None
            if revision is not None and agreed is not None and revision is not agreed:
                return refusal(
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
                return refusal(
                    request,
                    400,
                    RpcError.invalid_request("batches are allowed in a 2025-03-26 session only"),
                )
            return await self._batch(request, session, message)
        if isinstance(message, Response | ErrorResponse):
            if session is None:
                return refusal(
                    request,
                    400,
                    RpcError.invalid_request(
                        "a response belongs to the session that asked: send its Mcp-Session-Id"
                    ),
                )
            session.peer.receive_message(message)
            return accepted(request)
        if isinstance(message, Notification):
            if session is not None:
                self._session_notification(session, message)
            else:
                self._notification_alone(message, HTTP_POST, request, revision)
            return accepted(request)
        exchange = self._exchange(request)
        if session is not None:
            return await self._in_session(session, message, exchange)
        if message.method == "initialize":
            return await self._initialize(message, exchange, revision)
        return await self._sessionless(message, exchange, revision)

    def _notification_alone(
        self,
        message: Notification,
        transport: str,
        request: IRequest,
        revision: Revision | None = None,
    ) -> None:
        """A notification outside any session, on a connection of its own."""
        conn = self._open_alone(request, transport, revision or UNDECLARED)
        try:
            self._core.notification(conn, message)
        finally:
            self._core.close(conn)

    def _open_alone(self, request: IRequest, transport: str, revision: Revision) -> Conn:
        """The connection of one message outside any session: its caller is the token's."""
        subject = request_subject(request)
        return self._core.open(
            Conn(transport, identity_of(subject), default_revision=revision, subject=subject)
        )

    def _session_notification(self, session: LegacySession, notification: Notification) -> None:
        if notification.method == CANCELLED and session.peer.cancel_incoming(notification.params):
            return
        assert session.conn is not None
        self._core.notification(session.conn, notification)

    async def _sessionless(
        self, message: Request, exchange: Exchange, revision: Revision | None
    ) -> bytes | None:
        conn = self._open_alone(exchange.request, HTTP_POST, revision or HEADERLESS_HTTP)
        try:
            result = await self._core.handle(conn, message)
        except CancelledError:
            # Nothing else could cancel it: the connection dropping is the cancellation.
            raise
        except Exception:
            return exchange.answer(answer_for(message, Failure()))
        finally:
            self._core.close(conn)
        return exchange.answer(answer_for(message, result))

    async def _initialize(
        self, message: Request, exchange: Exchange, revision: Revision | None
    ) -> bytes | None:
        client = session_client(exchange.request, message)
        if not self._sessions.hold(client):
            exchange.request.setHeader(b"retry-after", _SESSION_RETRY_AFTER)
            return refusal(
                exchange.request,
                429,
                RpcError.invalid_request(
                    f"this client already has {self._sessions.per_client} sessions, every one "
                    "busy (transport.maxSessionsPerClient): end one with DELETE or reuse it"
                ),
                message.id,
            )
        session_id = session_id_for(self._daemon)
        session = LegacySession(session_id, self._clock, client)
        session.subject = request_subject(exchange.request)
        session.conn = self._core.open(
            Conn(
                HTTP_SESSION,
                f"{HTTP_SESSION}:{session_id}",
                push=session.push,
                ask=session.ask,
                default_revision=revision or HEADERLESS_HTTP,
                subject=session.subject,
                flow_for=session.flow_for,
            )
        )
        exchange.headers[SESSION_HEADER] = session_id.encode("ascii")
        try:
            result = await self._core.handle(session.conn, message)
        except CancelledError:
            self._sessions.release(client)
            session.end(self._core)
            raise
        except Exception:
            self._sessions.release(client)
            session.end(self._core)
            del exchange.headers[SESSION_HEADER]
            exchange.request.responseHeaders.removeHeader(SESSION_HEADER)
            return exchange.answer(answer_for(message, Failure()))
        self._sessions.add(session)
        return exchange.answer(answer_for(message, result))

    def _start(self, session: LegacySession, message: Request, exchange: Exchange) -> Deferred[Any]:
        """
        Handle a request of C{session}, shielded from the POST's connection: the returned
        Deferred may be cancelled (the client went away) while the request runs on.
        """
        assert session.conn is not None
        token = HANDLING.set((session, exchange))
        try:
            handling: Deferred[Any] = Deferred.fromCoroutine(
                self._core.handle(session.conn, message)
            )
        finally:
            HANDLING.reset(token)
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
        if session.peer.is_handling(message.id):
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
            return exchange.answer(answer_for(message, Failure()))
        return exchange.answer(answer_for(message, result))

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
                    exchange = self._exchange(request)
                waiting.append(self._batch_reply(session, message, exchange))
            elif isinstance(message, Notification):
                self._session_notification(session, message)
            else:
                session.peer.receive_message(message)
        if not waiting and not replies:
            return accepted(request)
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
        if session.peer.is_handling(message.id):
            error = RpcError.invalid_request("id already in use by a request in flight")
            reply: Deferred[bytes | None] = Deferred()
            reply.callback(encode(ErrorResponse(message.id, error)))
            return reply

        def answered(outcome: object) -> bytes | None:
            if isinstance(outcome, Failure) and outcome.check(CancelledError):
                if session.ending_error is not None:
                    return encode(ErrorResponse(message.id, session.ending_error))
                return None
            return answer_for(message, outcome)

        return self._start(session, message, exchange).addBoth(answered)

    # GET and DELETE

    async def _get(self, request: IRequest) -> bytes | None:
        if header(request, b"mcp-protocol-version") == NEWEST.value:
            return self._not_allowed(request, f"{NEWEST} has no GET stream")
        session_id = header(request, SESSION_HEADER)
        if session_id is None:
            return self._not_allowed(
                request,
                "a GET stream belongs to a session: initialize first, then send its Mcp-Session-Id",
            )
        session = self.sessions.get(session_id)
        if session is None or not session.belongs_to(request):
            self._not_ours(session_id, session)
            return refusal(request, 404, RpcError.invalid_request("no such session"))
        if not accepts_event_stream(request):
            return refusal(
                request, 406, RpcError.invalid_request("the GET stream is text/event-stream")
            )
        self._sessions.used(session_id)
        stream = GetStream(request, self._clock, self._keep_alive)
        session.attach(stream)
        try:
            await stream.ended
        finally:
            session.detach(stream)
            stream.release()
        return None

    def _delete(self, request: IRequest) -> bytes | None:
        if header(request, b"mcp-protocol-version") == NEWEST.value:
            return self._not_allowed(request, f"{NEWEST} has no sessions to end")
        session_id = header(request, SESSION_HEADER)
        if session_id is None:
            return refusal(
                request,
                400,
                RpcError.invalid_request("DELETE ends the session its Mcp-Session-Id names"),
            )
        session = self.sessions.get(session_id)
        if session is None or not session.belongs_to(request):
            self._not_ours(session_id, session)
            return refusal(request, 404, RpcError.invalid_request("no such session"))
        self._sessions.end(session)
        request.setResponseCode(200)
        return b""

    def _not_ours(self, session_id: str, session: LegacySession | None) -> None:
        """Log whose a session id this daemon does not know is, if another daemon's."""
        if session is not None or self._daemon is None:
            return
        owner = session_owner(session_id)
        if owner is not None and owner != self._daemon:
            # Only the daemon's part: the rest of a session id is as good as a password.
            log.info(
                "a request named a session of daemon {owner}, not of this one ({daemon}): "
                "answered 404, so its host initializes again here (that daemon stopped or "
                "restarted, or a balancer sent the session to the wrong daemon)",
                owner=owner,
                daemon=self._daemon,
            )

    def _not_allowed(self, request: IRequest, why: str) -> bytes:
        request.setHeader(b"allow", b"POST")
        return refusal(request, 405, RpcError.invalid_request(why))
