# -*- test-case-name: tests.server.test_http -*-
"""
The legacy side of C{/mcp} (2025-03-26 to 2025-11-25; L{mcpx.server.http} says what
each era does): a POST to its session, an C{initialize} that mints one, or one outside
any; a session's C{GET} stream; and the C{DELETE} that ends it.  The sessions themselves
are L{mcpx.server.http_sessions}.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

from twisted.internet.defer import CancelledError, Deferred, gatherResults
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest

from mcpx.auth.caller import request_subject
from mcpx.server.conn import HTTP_POST, HTTP_SESSION, Conn
from mcpx.server.http_alone import notification_alone, open_alone
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
from mcpx.server.http_sessions import (
    LegacySession,
    Sessions,
    session_client,
    session_id_for,
    session_owner,
    session_principal,
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
from mcpx.wire.peer import CANCELLED

log = Logger()

#: When a client refused a session because all of its own are busy may try again.
_SESSION_RETRY_AFTER: Final = b"1"

SESSION_HEADER: Final = b"mcp-session-id"

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
    def sessions(self) -> OrderedDict[str, LegacySession]:
        """The legacy sessions, least recently used first."""
        return self._sessions.by_id

    async def post(
        self, request: IRequest, message: Message | Batch, version: str | None
    ) -> bytes | None:
        """A legacy POST: to its session, an C{initialize} that mints one, or neither."""
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
                notification_alone(self._core, message, HTTP_POST, request, revision)
            return accepted(request)
        exchange = self._exchange(request)
        if session is not None:
            return await self._in_session(session, message, exchange)
        if message.method == "initialize":
            return await self._initialize(message, exchange, revision)
        return await self._sessionless(message, exchange, revision)

    def _session_notification(self, session: LegacySession, notification: Notification) -> None:
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
        session = LegacySession(session_id, self._clock, client, principal)
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
        exchange.headers[SESSION_HEADER] = session_id.encode("ascii")
        try:
            result = await self._core.handle(session.conn, message)
        except CancelledError:
            self._sessions.release(client, principal)
            session.end(self._core)
            raise
        except Exception:
            self._sessions.release(client, principal)
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
        handling: Deferred[Any] = Deferred.fromCoroutine(
            self._core.handle(session.conn, message, session.on_post(exchange))
        )
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

    async def get(self, request: IRequest) -> bytes | None:
        """A session's C{GET} stream: what is pushed to it outside any request."""
        session_id = header(request, SESSION_HEADER)
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


def method_not_allowed(request: IRequest, why: str) -> bytes:
    """C{405} for a C{GET} or C{DELETE} that has nothing to stand for, saying why."""
    request.setHeader(b"allow", b"POST")
    return refusal(request, 405, RpcError.invalid_request(why))
