# -*- test-case-name: tests.server.test_http -*-
"""
The legacy side of C{/mcp} (2025-03-26 to 2025-11-25; L{mcpx.server.http} says what
each era does): a POST to its session, an C{initialize} that mints one, or one outside
any; a session's C{GET} stream; and the C{DELETE} that ends it (L{LegacyHTTP}).  The
sessions themselves, from C{initialize} to C{DELETE} (L{HostSession}), their ids, and
how many each client may keep (L{Sessions}).
"""

from __future__ import annotations

import re
import secrets
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any, Final

from attrs import frozen
from twisted.internet.defer import CancelledError, Deferred, gatherResults, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest

from mcpx.auth.caller import request_subject, subject_identity
from mcpx.lasting import Lasting
from mcpx.server.conn import HTTP_POST, HTTP_SESSION, Conn, Reply
from mcpx.server.flow import Flow
from mcpx.server.http_exchange import (
    CLIENT,
    JSON,
    SESSION_ID,
    Answer,
    Driven,
    Exchange,
    GetStream,
    Later,
    Started,
    accepted,
    accepts_event_stream,
    answer_for,
    header,
    notification_alone,
    open_alone,
    refusal,
)
from mcpx.server.mcp_socket import McpCore
from mcpx.server.request_context import subject_session
from mcpx.spec.matrix import batch_allowed
from mcpx.spec.revision import HEADERLESS_HTTP, NEWEST_FIRST, Revision
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import (
    Batch,
    ErrorResponse,
    Message,
    Notification,
    Request,
    Response,
    encode,
)
from mcpx.wire.peer import CANCELLED, RpcPeer

log = Logger()

#: Messages pushed to a legacy session kept while it has no GET stream open.
BACKLOG_LIMIT: Final = 256

#: The most bytes of those messages kept; the oldest go first beyond it.
BACKLOG_BYTES: Final = 4 * 1024 * 1024

#: Sessions kept before the least recently used idle ones are ended.
MAX_SESSIONS: Final = 1024

#: Sessions one client keeps when nothing says otherwise (C{transport.maxSessionsPerClient}).
DEFAULT_SESSIONS_PER_CLIENT: Final = 64

#: What separates the daemon's id from the random part of an C{Mcp-Session-Id}; neither
#: a daemon id nor C{secrets.token_urlsafe} has it.
SESSION_ID_SEPARATOR: Final = "."

_DAEMON_PART: Final = re.compile(r"d_[0-9a-f]{12}")

#: When a client refused a session because all of its own are busy may try again.
_SESSION_RETRY_AFTER: Final = b"1"

_SUPPORTED: Final = tuple(rev.value for rev in NEWEST_FIRST)


class LegacyHTTP:
    """
    The legacy requests to C{/mcp}, served by C{core} over the sessions in C{sessions}.

    @param exchange: makes the response to a POST (L{mcpx.server.http.McpHTTP}'s).
    @param daemon: this daemon's id, which begins every session id it mints.
    """

    def __init__(
        self,
        core: McpCore,
        clock: IReactorTime,
        sessions: Sessions,
        exchange: Callable[[IRequest], Exchange],
        *,
        keep_alive: float,
        daemon: str | None,
    ) -> None:
        self._core = core
        self._clock = clock
        self._sessions = sessions
        self._exchange = exchange
        self._keep_alive = keep_alive
        self._daemon = daemon

    @property
    def sessions(self) -> OrderedDict[str, HostSession]:
        """The legacy sessions, least recently used first."""
        return self._sessions.by_id

    def post(self, request: IRequest, message: Message | Batch, version: str | None) -> Answer:
        """
        A legacy POST: to its session, an C{initialize} that mints one, or neither.  A
        request of a session is answered at once when its handling does not wait.
        """
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
        session_id = header(request, SESSION_ID)
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
            return self._batch(request, session, message)
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
                notification_alone(self._core, message, HTTP_POST, request, revision)
            return accepted(request)
        exchange = self._exchange(request)
        if session is not None:
            return self._in_session(session, message, exchange)
        exchange.watch()
        if message.method == "initialize":
            return self._initialize(message, exchange, revision)
        return self._sessionless(message, exchange, revision)

    def _session_notification(self, session: HostSession, notification: Notification) -> None:
        if notification.method == CANCELLED and session.peer.cancel_incoming(notification.params):
            return
        assert session.conn is not None
        self._core.notification(session.conn, notification)

    async def _sessionless(
        self, message: Request, exchange: Exchange, revision: Revision | None
    ) -> bytes | None:
        conn = open_alone(self._core, exchange.request, HTTP_POST, revision or HEADERLESS_HTTP)
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
        principal = session_principal(exchange.request)
        if not self._sessions.hold(client, principal):
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
        session = HostSession(session_id, self._clock, client, principal)
        session.subject = request_subject(exchange.request)
        identity = f"{HTTP_SESSION}:{session_id}"
        if session.subject is not None:
            # Under its subject's identity, as everything its requests do is that
            # subject's: its upstream sign-ins among them (mcpx.auth.caller.principal_of).
            identity = subject_session(session.subject, identity)
        session.conn = self._core.open(
            Conn(
                HTTP_SESSION,
                identity,
                push=session.push,
                ask=session.ask,
                default_revision=revision or HEADERLESS_HTTP,
                subject=session.subject,
                flow_for=session.flow_for,
                calling=session.peer.calling,
            )
        )
        exchange.headers[SESSION_ID] = session_id.encode("ascii")
        try:
            result = await self._core.handle(session.conn, message)
        except CancelledError:
            self._sessions.release(client, principal)
            session.end(self._core)
            raise
        except Exception:
            self._sessions.release(client, principal)
            session.end(self._core)
            del exchange.headers[SESSION_ID]
            exchange.request.responseHeaders.removeHeader(SESSION_ID)
            return exchange.answer(answer_for(message, Failure()))
        self._sessions.add(session)
        return exchange.answer(answer_for(message, result))

    def _start(self, session: HostSession, message: Request, exchange: Exchange) -> Deferred[Any]:
        """
        Handle a request of C{session}, shielded from the POST's connection: the returned
        Deferred may be cancelled (the client went away) while the request runs on.
        """
        assert session.conn is not None
        return self._run(
            session,
            message,
            exchange,
            Deferred.fromCoroutine(
                self._core.handle(session.conn, message, session.on_post(exchange))
            ),
        )

    def _run(
        self, session: HostSession, message: Request, exchange: Exchange, handling: Deferred[Any]
    ) -> Deferred[Any]:
        """L{_start} of a request whose handling has begun: tracked until it ends."""
        waiter: Deferred[Any] = Deferred()
        session.track(message, handling, exchange)

        def settle(outcome: object) -> None:
            session.forget(message, handling)
            if not waiter.called:
                waiter.callback(outcome)

        handling.addBoth(settle)
        return waiter

    def _in_session(self, session: HostSession, message: Request, exchange: Exchange) -> Answer:
        if session.peer.is_handling(message.id):
            return exchange.answer(
                encode(
                    ErrorResponse(
                        message.id,
                        RpcError.invalid_request("id already in use by a request in flight"),
                    )
                )
            )
        assert session.conn is not None
        # Run here to its first wait: an answer ready by then (a cached listing) is
        # written at once, with no keep-alive armed nor Deferred made to wait for it.
        handling = Started(self._core.handle(session.conn, message, session.on_post(exchange)))
        try:
            done = handling.start()
        except Exception:
            failed: Deferred[Any] = Deferred()
            failed.errback()
            ran = self._run(session, message, exchange, failed)
        else:
            if not done:
                exchange.watch()
                waiting = self._run(session, message, exchange, Driven(handling).outcome)
                return Later(waiting, self._in_session_done, session, message, exchange)
            ran = self._run(session, message, exchange, succeed(handling.result))
        # Tracked and forgotten at once, as one whose Deferred had fired: what its
        # handler told the session's peer about it (the call it is) goes with it.
        outcomes: list[object] = []
        ran.addBoth(outcomes.append)
        [outcome] = outcomes
        if isinstance(outcome, Failure):
            return self._ended(session, message, exchange, outcome)
        return exchange.answer(answer_for(message, outcome))

    def _in_session_done(
        self, outcome: object, session: HostSession, message: Request, exchange: Exchange
    ) -> bytes | None:
        """The answer to a request of C{session} whose handling waited: its outcome's."""
        if isinstance(outcome, Failure):
            if not outcome.check(Exception):
                outcome.raiseException()
            return self._ended(session, message, exchange, outcome)
        return exchange.answer(answer_for(message, outcome))

    def _ended(
        self, session: HostSession, message: Request, exchange: Exchange, failure: Failure
    ) -> bytes | None:
        """The answer to a request of C{session} whose handling failed with C{failure}."""
        if failure.check(CancelledError):
            if exchange.lost:
                failure.raiseException()
            if session.ending_error is not None:
                return exchange.answer(encode(ErrorResponse(message.id, session.ending_error)))
            # Cancelled by the client (notifications/cancelled) or the session's end.
            return exchange.abandon()
        return exchange.answer(answer_for(message, failure))

    async def _batch(self, request: IRequest, session: HostSession, batch: Batch) -> bytes | None:
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
                    exchange.watch()
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
        self, session: HostSession, message: Request, exchange: Exchange
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

    async def get(self, request: IRequest) -> bytes | None:
        """A session's C{GET} stream: what is pushed to it outside any request."""
        session_id = header(request, SESSION_ID)
        if session_id is None:
            return method_not_allowed(
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

    def delete(self, request: IRequest) -> bytes:
        """C{DELETE}: the end of the session its C{Mcp-Session-Id} names."""
        session_id = header(request, SESSION_ID)
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

    def _not_ours(self, session_id: str, session: HostSession | None) -> None:
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


def method_not_allowed(request: IRequest, why: str) -> bytes:
    """C{405} for a C{GET} or C{DELETE} that has nothing to stand for, saying why."""
    request.setHeader(b"allow", b"POST")
    return refusal(request, 405, RpcError.invalid_request(why))


# The sessions


def session_id_for(daemon: str | None) -> str:
    """
    A new C{Mcp-Session-Id}: 32 random URL-safe characters (192 bits), after the id of
    the daemon minting it and a dot when it has one (C{d_3f2a9c1b7e4d.}), so that a
    balancer can route by it and a daemon can tell another daemon's session.
    """
    random = secrets.token_urlsafe(24)
    return random if daemon is None else f"{daemon}{SESSION_ID_SEPARATOR}{random}"


def session_owner(session_id: str) -> str | None:
    """The id of the daemon that minted C{session_id}, if it names one."""
    owner, dot, _ = session_id.partition(SESSION_ID_SEPARATOR)
    return owner if dot and _DAEMON_PART.fullmatch(owner) else None


def _progress_token(request: Request) -> str | int | None:
    params = request.params
    meta = params.get("_meta") if type(params) is dict else None
    token = meta.get("progressToken") if type(meta) is dict else None
    return token if type(token) is str or type(token) is int else None


def session_principal(request: IRequest) -> str:
    """
    Whom a legacy session counts against in the first place, which the client cannot
    choose: its access token's subject (C{daemon.auth} C{oauth}), else the connection's
    peer: C{unix} on the unix socket (its owner), the peer's address on TCP (on
    loopback, the daemon's own user, the only one C{peer} lets in; beyond it, one
    machine).  A name the client gives (L{session_client}) only subdivides it.
    """
    subject = request_subject(request)
    if subject is not None:
        return subject_identity(subject)
    address = request.getClientAddress()
    peer = getattr(address, "host", None)
    return f"peer {peer}" if isinstance(peer, str) else "unix"


def session_client(request: IRequest, initialize: Request) -> str:
    """
    Whom a legacy session counts against within its principal (L{session_principal}):
    an access token's subject is one client, whatever it names; otherwise the
    C{Mcpx-Client} header when the request has one, else the C{clientInfo.name} its
    C{initialize} declares.  Two hosts of one principal are told apart by the names
    they give; a name is not proof of anything, so it only keeps one host's flood from
    ending another's sessions, and never reaches past its principal.
    """
    principal = session_principal(request)
    if request_subject(request) is not None:
        return principal
    named = header(request, CLIENT)
    if named:
        return f"{principal} client {named}"
    params = initialize.params if isinstance(initialize.params, dict) else {}
    info = params.get("clientInfo")
    name = info.get("name") if isinstance(info, dict) else None
    return f"{principal} {name if isinstance(name, str) else ''}".rstrip()


@frozen
class _OnPost:
    """
    A request of a legacy session answered on its own POST (L{mcpx.server.conn.Reply}):
    while that POST is open, what the request pushes and asks goes on it.
    """

    session: HostSession
    exchange: Exchange

    def _open(self) -> Exchange | None:
        return None if self.exchange.closed else self.exchange

    def push(self, method: str, params: dict[str, Any] | None) -> None:
        self.session.push(method, params, self._open())

    def ask(self, method: str, params: dict[str, Any]) -> Deferred[Any]:
        return self.session.ask(method, params, self._open())

    def flow(self) -> Flow | None:
        exchange = self._open()
        if exchange is not None and exchange.accepts_sse:
            return exchange.flow
        return self.session.flow_for(None)


class HostSession:
    """
    One legacy Streamable HTTP session, from C{initialize} to C{DELETE}.

    @ivar id: the C{Mcp-Session-Id}.
    @ivar client: whom it counts against (L{session_client}), within its principal.
    @ivar principal: whom it counts against in the first place (L{session_principal}).
    @ivar conn: its L{Conn}, set when it is opened.
    @ivar peer: carries mcpx's requests to the client and their answers back.
    @ivar stream: the open C{GET} stream, if any.
    @ivar subject: the access token's subject it was opened with (C{daemon.auth}
        C{oauth}), else C{None}; only requests with that subject may use it.

    The requests being handled are counted in the peer's table of incoming requests
    (L{RpcPeer.track_incoming}), which cancels them on the client's
    C{notifications/cancelled} and when the session ends.
    """

    def __init__(
        self, session_id: str, clock: IReactorTime, client: str = "", principal: str = ""
    ) -> None:
        self.id = session_id
        self.client = client
        self.principal = principal
        self.subject: str | None = None
        self.conn: Conn | None = None
        self.stream: GetStream | None = None
        self.ended = False
        #: Why the session ended under its requests, when they are owed an answer.
        self.ending_error: RpcError | None = None
        self._by_token: dict[str | int, Exchange] = {}
        self._backlog: deque[bytes] = deque(maxlen=BACKLOG_LIMIT)
        self._backlog_bytes = 0
        self._asking: Exchange | None = None
        self.peer = RpcPeer(
            self._send_unrouted,
            on_request=self._no_requests,
            negative_ids=True,
            clock=clock,
            # (The random part's start: every session of a daemon starts with its id.)
            name=f"http-session:{session_id.rpartition(SESSION_ID_SEPARATOR)[2][:8]}",
            send_request=self._send_request,
        )

    def belongs_to(self, request: IRequest) -> bool:
        """Whether C{request} comes from whoever opened the session."""
        return request_subject(request) == self.subject

    @property
    def idle(self) -> bool:
        return not self.peer.in_flight_incoming and self.stream is None

    def _no_requests(self, request: Request) -> object:
        raise RpcError.invalid_request("requests are POSTed, not sent as responses")

    def on_post(self, exchange: Exchange) -> Reply:
        """The L{Reply} of a request of this session answered on C{exchange}'s POST."""
        return _OnPost(self, exchange)

    # mcpx to the client

    def flow_for(self, token: str | int | None) -> Flow | None:
        """
        The session's L{Conn.flow_for}, whatever the token: the GET stream's.  A
        call's progress goes on its POST (L{push}, by its token) and is held back only
        while the GET stream is, as it always was (its relay used to be made before
        the session knew the POST by its token, L{track}).  The POST's own flow is
        its L{Reply}'s.
        """
        return self.stream.flow if self.stream is not None else None

    def push(self, method: str, params: dict[str, Any] | None, on: Exchange | None = None) -> None:
        """
        The session's L{Conn.push}: the POST it is about (a progress report's), else
        the POST C{on} (L{on_post}), else the GET stream.
        """
        payload = encode(Notification(method, params))
        exchange = None
        if method == "notifications/progress" and params is not None:
            token = params.get("progressToken")
            if type(token) is str or type(token) is int:
                exchange = self._by_token.get(token)
        if exchange is None:
            exchange = on
        if exchange is not None and exchange.send(payload):
            return
        self._to_stream(payload)

    def ask(self, method: str, params: dict[str, Any], on: Exchange | None = None) -> Deferred[Any]:
        """
        The session's L{Conn.ask}: on the POST C{on} (L{on_post}), else the GET stream;
        its withdrawal (C{notifications/cancelled}) goes the same way.
        """
        self._asking = on
        try:
            asked = self.peer.request(method, params)
        finally:
            self._asking = None
        if on is None:
            return asked

        def withdraw(_: Deferred[Any]) -> None:
            self._asking = None if on.closed else on
            try:
                asked.cancel()
            finally:
                self._asking = None

        answer: Deferred[Any] = Deferred(withdraw)
        asked.chainDeferred(answer)
        return answer

    def _send_request(self, data: bytes, message: Request) -> None:
        exchange = self._asking
        if exchange is not None and exchange.send(data):
            return
        if self.stream is not None and self.stream.send(data):
            return
        raise ConnectionError(f"the client has no open stream to receive {message.method} on")

    def _send_unrouted(self, data: bytes) -> None:
        # Cancellations of mcpx's own requests, mostly: on the POST they were asked on.
        exchange = self._asking
        if exchange is not None and exchange.send(data):
            return
        self._to_stream(data)

    def _to_stream(self, payload: bytes) -> None:
        if self.stream is not None and self.stream.send(payload):
            return
        if len(payload) > BACKLOG_BYTES:
            log.info(
                "session {session}: no GET stream open; dropping a pushed message of {size} bytes",
                session=self.peer.name,
                size=len(payload),
            )
            return
        if len(self._backlog) == BACKLOG_LIMIT:
            self._backlog_bytes -= len(self._backlog[0])
        self._backlog.append(payload)
        self._backlog_bytes += len(payload)
        if len(self._backlog) == BACKLOG_LIMIT or self._backlog_bytes > BACKLOG_BYTES:
            log.info(
                "session {session}: no GET stream open; dropping old pushed messages",
                session=self.peer.name,
            )
        while self._backlog_bytes > BACKLOG_BYTES:
            self._backlog_bytes -= len(self._backlog.popleft())

    def attach(self, stream: GetStream) -> None:
        """A new GET stream replaces the old one and receives what waited."""
        old, self.stream = self.stream, stream
        if old is not None:
            old.stop()
        while self._backlog and stream.open:
            payload = self._backlog.popleft()
            self._backlog_bytes -= len(payload)
            stream.send(payload)

    def detach(self, stream: GetStream) -> None:
        if self.stream is stream:
            self.stream = None

    # Requests

    def track(self, request: Request, handling: Deferred[Any], exchange: Exchange) -> None:
        self.peer.track_incoming(request.id, handling)
        token = _progress_token(request)
        if token is not None:
            self._by_token[token] = exchange

    def forget(self, request: Request, handling: Deferred[Any]) -> None:
        self.peer.forget_incoming(request.id, handling)
        token = _progress_token(request)
        if token is not None:
            self._by_token.pop(token, None)

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
        if self.stream is not None:
            self.stream.stop()
            self.stream = None
        self._backlog.clear()
        if self.conn is not None:
            core.close(self.conn)


class Sessions:
    """
    The legacy sessions of one C{/mcp} endpoint, least recently used first, and the
    sessions each client and each principal hold (those still being initialized
    included).  Past L{MAX_SESSIONS} the principal holding the most yields, so a flood
    under names that change ends only the flooding principal's own sessions.
    """

    def __init__(self, core: McpCore, per_client: int) -> None:
        self._core = core
        self.per_client = per_client
        self.by_id: OrderedDict[str, HostSession] = OrderedDict()
        self._held: dict[str, int] = {}
        self._by_principal: dict[str, int] = {}
        #: Clients at their cap since they were last below it (each logged once).
        self._crowded: Lasting[str] = Lasting()
        self._full = False

    def used(self, session_id: str) -> HostSession | None:
        """The session C{session_id} names, now the most recently used; C{None} if none."""
        session = self.by_id.get(session_id)
        if session is not None:
            self.by_id.move_to_end(session_id)
        return session

    def hold(self, client: str, principal: str) -> bool:
        """
        Count a new session for C{client} of C{principal}, ending its least recently used
        idle one if it is at its cap: C{False} (nothing counted) when every one of its
        sessions is busy.
        """
        if not self._room_for(client):
            return False
        self._held[client] = self._held.get(client, 0) + 1
        self._by_principal[principal] = self._by_principal.get(principal, 0) + 1
        return True

    def _room_for(self, client: str) -> bool:
        if self._held.get(client, 0) < self.per_client:
            self._crowded.ends(client)
            return True
        if self._crowded.begins(client):
            log.warn(
                "/mcp: client {client} has {limit} sessions (transport.maxSessionsPerClient); "
                "its new sessions end its least recently used idle ones",
                client=client,
                limit=self.per_client,
            )
        for old in self.by_id.values():
            if old.client == client and old.idle:
                self.end(old)
                return True
        return False

    def release(self, client: str, principal: str) -> None:
        """One session C{client} of C{principal} held is gone."""
        for counts, key in ((self._held, client), (self._by_principal, principal)):
            held = counts.get(key, 0) - 1
            if held > 0:
                counts[key] = held
            else:
                counts.pop(key, None)

    def add(self, session: HostSession) -> None:
        """A session that initialized, past L{MAX_SESSIONS} at the cost of an idle one."""
        full = len(self.by_id) >= MAX_SESSIONS
        if full and not self._full:
            log.warn(
                "/mcp: {limit} sessions are open; new ones end the least recently used idle "
                "session of the principal, and its client, that hold the most",
                limit=MAX_SESSIONS,
            )
        self._full = full
        while len(self.by_id) >= MAX_SESSIONS:
            old = self._most_crowded_idle()
            if old is None:
                break
            self.end(old)
        self.by_id[session.id] = session

    def _most_crowded_idle(self) -> HostSession | None:
        """
        The least recently used idle session of the principal that holds the most, and
        within it of the client that holds the most.
        """
        chosen: HostSession | None = None
        most = (0, 0)
        for old in self.by_id.values():
            if not old.idle:
                continue
            held = (self._by_principal.get(old.principal, 0), self._held.get(old.client, 0))
            if chosen is None or held > most:
                chosen, most = old, held
        return chosen

    def end(self, session: HostSession) -> None:
        """End C{session} (a C{DELETE}, or room made for another)."""
        if self.by_id.pop(session.id, None) is not None:
            self.release(session.client, session.principal)
        session.end(self._core)

    def end_all(self, because: RpcError) -> None:
        """End every session, its requests in flight answered with C{because}."""
        sessions, self.by_id = self.by_id, OrderedDict()
        self._held.clear()
        self._by_principal.clear()
        for session in sessions.values():
            session.end(self._core, because=because)
