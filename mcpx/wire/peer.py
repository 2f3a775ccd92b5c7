# -*- test-case-name: tests.wire.test_peer -*-
"""
One end of a JSON-RPC connection, in both directions at once.

An L{RpcPeer} is the same object whether mcpx is a server answering a host or a client
calling an upstream: MCP lets either side send requests, so every connection needs both an
outgoing table (our ids to the Deferreds waiting for answers) and an incoming table (their ids
to the Deferreds of our handlers).

Re-entrancy: L{RpcPeer.receive} parses a whole message before acting on it and keeps no parser
state, and framing (L{mcpx.wire.framing.LineBuffer}) splits a chunk into lines before any line
is delivered.  So the handlers and the callbacks of the Deferreds fired here run synchronously,
with every table already updated: an entry is removed before its Deferred fires, and added
before the bytes that could answer it are sent.  A callback may call L{RpcPeer.request},
L{RpcPeer.notify}, L{RpcPeer.receive} or L{RpcPeer.close} without corrupting anything.

Cancellation: C{notifications/cancelled} is the one MCP method this layer knows.  Cancelling a
Deferred returned by L{RpcPeer.request} (directly or through a timeout) sends it; receiving it
for a request still being handled cancels that handler's Deferred and no response is sent.
Anything else named by it (including, in 2026-07-28, a server ending a client's
C{subscriptions/listen}) goes to the notification handler untouched.

A request given up on is not over at the other side until it answers: a server that does not
stop mid-way, or a cancel that crosses the server's own request on the wire, can still act for
it.  Once L{RpcPeer.expect_late} is set, the ids given up on with a C{notifications/cancelled}
are kept (L{RpcPeer.awaiting_late}) until their late answer arrives or the grace passes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeAlias

from twisted.internet.defer import CancelledError, Deferred, fail
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx.call import Call
from mcpx.wire.batch_reply import BatchReply
from mcpx.wire.cancellation import CANCELLED
from mcpx.wire.errors import INVALID_REQUEST, ProtocolError, RpcError
from mcpx.wire.messages import (
    Batch,
    ErrorResponse,
    IdSequence,
    Message,
    Notification,
    Params,
    Request,
    RequestId,
    Response,
    encode,
    encode_request,
    parse,
)
from mcpx.wire.peer_errors import ConnectionClosed, NoReply, RequestTimedOut

#: What a peer's users import from here, besides the peer itself.
__all__ = [
    "CANCELLED",
    "ConnectionClosed",
    "NoReply",
    "NotificationHandler",
    "RequestHandler",
    "RequestTimedOut",
    "RpcPeer",
]

#: Answers a request: returns the result, or a Deferred or coroutine producing it, or raises
#: (an L{RpcError} is sent as is; anything else is logged and sent as -32603).
RequestHandler: TypeAlias = Callable[[Request], object]
#: Receives a notification; what it returns is ignored, but failures are logged.
NotificationHandler: TypeAlias = Callable[[Notification], object]


class _Outgoing:
    """A request we sent and are waiting on (a plain slotted class: one is made per request)."""

    __slots__ = ("deferred", "for_whom", "id", "method", "peer", "send_cancel", "timer")

    def __init__(
        self,
        peer: RpcPeer,
        id: RequestId,
        method: str,
        send_cancel: bool,
        for_whom: Call | None = None,
    ) -> None:
        self.peer = peer
        self.id = id
        self.method = method
        self.send_cancel = send_cancel
        self.for_whom = for_whom
        self.timer: IDelayedCall | None = None
        self.deferred: Deferred[Any] = Deferred(self.cancel)

    def cancel(self, deferred: Deferred[Any]) -> None:
        self.peer._abandon(self, "cancelled by the requester")

    def expire(self, timeout: float) -> None:
        self.timer = None
        if self.peer._abandon(self, f"timed out after {timeout}s"):
            self.deferred.errback(RequestTimedOut(self.method, self.id, timeout))


class RpcPeer:
    """
    The correlation engine for one JSON-RPC connection.

    @ivar allow_batches: whether an incoming JSON array is processed as a batch or refused
        with -32600; only 2025-03-26 allows batches, so the layer that negotiates the revision
        sets this.
    """

    log = Logger()

    def __init__(
        self,
        send: Callable[[bytes], None],
        *,
        on_request: RequestHandler,
        on_notification: NotificationHandler | None = None,
        negative_ids: bool = False,
        clock: IReactorTime | None = None,
        allow_batches: bool = False,
        name: str = "",
        send_request: Callable[[bytes, Request], None] | None = None,
        on_abandon: Callable[[RequestId], None] | None = None,
    ) -> None:
        """
        @param send: writes one encoded message (no framing) to the other side.
        @param on_request: answers incoming requests; see L{RequestHandler}.
        @param on_notification: receives incoming notifications; without one they are dropped.
        @param negative_ids: originate ids -1, -2, ... (mcpx as a server) instead of 1, 2, ...
        @param clock: schedules request timeouts; needed only when one is asked for.
        @param name: names the other side in logs and errors.
        @param send_request: writes an outgoing request when the transport needs to see it
            as a message rather than bytes (HTTP sets headers from its method and params);
            C{send} writes everything else.
        @param on_abandon: told the id of each outgoing request given up on (cancelled or
            timed out), for a transport that cancels by closing a stream.
        """
        self._send = send
        self._send_request = send_request
        self._on_abandon = on_abandon
        self._on_request = on_request
        self._on_notification = on_notification
        self._next_id = IdSequence(negative_ids).take
        self._clock = clock
        self.allow_batches = allow_batches
        self.name = name
        self._outgoing: dict[RequestId, _Outgoing] = {}
        self._carried_for: Call | None = None
        self._incoming: dict[RequestId, Deferred[Any]] = {}
        #: The calls some of them are handled as (L{calling}).
        self._calls: dict[RequestId, Call] = {}
        self._closed: BaseException | None = None
        #: Requests given up on whose late answers are still awaited, with their expiry.
        self._late: dict[RequestId, IDelayedCall] = {}
        #: Whom each request in L{_late} was made for (its C{for_whom}).
        self._late_for: dict[RequestId, Call | None] = {}
        self._late_grace: float | None = None

    def handle_with(
        self, on_request: RequestHandler, on_notification: NotificationHandler | None
    ) -> None:
        """
        Hand what arrives from now on to new handlers: the era probe keeps one
        connection and peer while the session on top of it changes era.
        """
        self._on_request = on_request
        self._on_notification = on_notification

    @property
    def in_flight_outgoing(self) -> int:
        """Requests sent and not yet answered, cancelled or timed out."""
        return len(self._outgoing)

    @property
    def in_flight_incoming(self) -> int:
        """Requests received whose handlers have not finished."""
        return len(self._incoming)

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def is_handling(self, request_id: RequestId) -> bool:
        """Whether a request with this id is being handled (its id is in use)."""
        return request_id in self._incoming

    def track_incoming(self, request_id: RequestId, handling: Deferred[Any]) -> None:
        """
        Count a request that reached its handler by another way than L{receive} (a
        transport that gives each request an exchange of its own) as being handled
        here: a C{notifications/cancelled} naming it cancels C{handling}, and so does
        L{close}.  The caller answers it, and calls L{forget_incoming} when it has.
        """
        self._incoming[request_id] = handling

    def forget_incoming(self, request_id: RequestId, handling: Deferred[Any]) -> None:
        """The request L{track_incoming} counted is over (if it is still that one)."""
        if self._incoming.get(request_id) is handling:
            del self._incoming[request_id]
            self._calls.pop(request_id, None)

    def calling(self, request_id: RequestId, call: Call) -> None:
        """
        The request being handled under C{request_id} is handled as C{call} (told from
        within its handler, which may be before the handler has returned): a
        C{notifications/cancelled} naming it withdraws the call (L{Call.withdraw})
        before its handler is cancelled, so that the handler's canceller can tell the
        other side cancelling it from the connection going (or mcpx giving up), which
        leaves the call as it was.  Forgotten when the request ends.
        """
        self._calls[request_id] = call

    def expect_late(self, grace: float) -> None:
        """
        From now on, count each request given up on with a C{notifications/cancelled}
        as still running at the other side until it answers, or for C{grace} seconds
        (needs the C{clock}).
        """
        if self._clock is None:
            raise ValueError("RpcPeer needs a clock to expect late answers")
        self._late_grace = grace

    @property
    def awaiting_late(self) -> int:
        """Requests given up on that the other side may still be working on."""
        return len(self._late)

    def late_for_whom(self) -> list[Call | None]:
        """Whom each request counted by L{awaiting_late} was made for (C{None}: nobody)."""
        return [self._late_for.get(request_id) for request_id in self._late]

    def _forget_late(self, request_id: RequestId) -> None:
        self._late.pop(request_id, None)
        self._late_for.pop(request_id, None)

    # Outgoing

    def request(
        self,
        method: str,
        params: Params = None,
        *,
        timeout: float | None = None,
        send_cancel: bool = True,
        for_whom: Call | None = None,
    ) -> Deferred[Any]:
        """
        Send a request and wait for its answer.

        @param timeout: seconds to wait before giving up (needs the C{clock}).
        @param send_cancel: whether abandoning the request (cancelling the returned Deferred,
            or the timeout) sends C{notifications/cancelled}.  Turn it off for requests the
            protocol forbids cancelling, such as C{initialize}.
        @param for_whom: whom the request is made for (a call), told to the handler of a
            request the peer sends on this one's reply stream (L{carried_for}).
        @return: fires with the C{result}; fails with the L{RpcError} the peer answered with,
            L{RequestTimedOut}, C{CancelledError} if cancelled, or L{ConnectionClosed}.
        """
        if self._closed is not None:
            return fail(ConnectionClosed(self.name, self._closed))
        request_id = self._next_id()
        message = Request(request_id, method, params)
        try:
            data = encode_request(message)
        except (TypeError, ValueError, RecursionError):
            return fail()
        entry = _Outgoing(self, request_id, method, send_cancel, for_whom)
        if timeout is not None:
            if self._clock is None:
                raise ValueError("RpcPeer needs a clock to time requests out")
            entry.timer = self._clock.callLater(timeout, entry.expire, timeout)
        # Registered before sending: an in-memory peer may answer before send() returns.
        self._outgoing[request_id] = entry
        try:
            if self._send_request is None:
                self._send(data)
            else:
                self._send_request(data, message)
        except Exception:
            self._outgoing.pop(request_id, None)
            if entry.timer is not None:
                entry.timer.cancel()
            return fail()
        return entry.deferred

    @property
    def carried_for(self) -> Call | None:
        """
        While a request handler is called: whom the request of ours whose reply stream
        carried the peer's request was made for (its C{for_whom}), else C{None}.
        """
        return self._carried_for

    def notify(self, method: str, params: Params = None) -> None:
        """
        Send a notification.  After L{close} it is dropped.

        @raise TypeError: if C{params} cannot be encoded as JSON.
        """
        self._write(encode(Notification(method, params)))

    def _abandon(self, entry: _Outgoing, reason: str) -> bool:
        """Forget an outgoing request and tell the peer; C{False} if it was already settled."""
        if self._outgoing.get(entry.id) is not entry:
            return False
        del self._outgoing[entry.id]
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
        self.log.debug(
            "{peer}: abandoned {method} (id {id}): {reason}",
            peer=self.name,
            method=entry.method,
            id=entry.id,
            reason=reason,
        )
        if entry.send_cancel and self._closed is None:
            self._write(encode(Notification(CANCELLED, {"requestId": entry.id, "reason": reason})))
            if self._late_grace is not None and self._clock is not None:
                self._late[entry.id] = self._clock.callLater(
                    self._late_grace, self._forget_late, entry.id
                )
                self._late_for[entry.id] = entry.for_whom
        if self._on_abandon is not None:
            try:
                self._on_abandon(entry.id)
            except Exception:
                self.log.failure("{peer}: abandoning {id} failed", peer=self.name, id=entry.id)
        return True

    def fail_outgoing(self, request_id: RequestId, error: BaseException) -> bool:
        """
        Fail an outgoing request for a reason the transport found (an HTTP status, a
        stream that ended without an answer).  C{False} if it was already settled.
        """
        entry = self._outgoing.pop(request_id, None)
        if entry is None:
            return False
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
        entry.deferred.errback(error)
        return True

    # Incoming

    def receive(self, data: bytes) -> None:
        """
        Handle one framed message (or batch) from the other side.

        A message that cannot be read is answered with the matching error; nothing raised by
        parsing or by the handlers reaches the caller.  After L{close}, messages are ignored.
        """
        if self._closed is not None:
            return
        try:
            message = parse(data, allow_batch=self.allow_batches)
        except ProtocolError as e:
            self._protocol_error(e)
            return
        self.receive_message(message)

    def receive_message(
        self, message: Message | Batch, carried_by: RequestId | None = None
    ) -> None:
        """
        Handle a message that has already been parsed (for instance, from an HTTP body).

        @param carried_by: the request of ours whose reply stream carried it (Streamable
            HTTP sends a server's request about one of ours there): its handler learns
            whom that request was for through L{carried_for}.
        """
        if self._closed is not None:
            return
        if isinstance(message, Response):
            self._settle(message.id, message.result, None)
        elif isinstance(message, Request):
            carrier = self._outgoing.get(carried_by) if carried_by is not None else None
            if carrier is None or carrier.for_whom is None:
                self._dispatch(message, None)
                return
            # Known only while the handler is called: it takes what it needs then.
            self._carried_for = carrier.for_whom
            try:
                self._dispatch(message, None)
            finally:
                self._carried_for = None
        elif isinstance(message, Notification):
            self._notification(message)
        elif isinstance(message, ErrorResponse):
            if message.id is None:
                self.log.warn(
                    "{peer} reported an error about a message it could not read: {error}",
                    peer=self.name,
                    error=message.error,
                )
            else:
                self._settle(message.id, None, message.error)
        else:
            self._batch(message)

    def reject_oversized(self, limit: int) -> None:
        """
        Answer a message that framing dropped for being longer than C{limit} bytes.

        Its id was never read, so the error carries a C{null} id.
        """
        self.log.warn(
            "{peer} sent a message longer than {limit} bytes; dropped", peer=self.name, limit=limit
        )
        error = RpcError.invalid_request(f"message longer than {limit} bytes")
        self._write(encode(ErrorResponse(None, error)))

    def _protocol_error(self, error: ProtocolError, batch: BatchReply | None = None) -> None:
        if error.about_response:
            # JSON-RPC never answers a response; fail the request it meant to answer instead.
            entry = None if error.id is None else self._outgoing.get(error.id)
            self.log.warn(
                "{peer} sent an unreadable response (id {id}): {error}",
                peer=self.name,
                id=error.id,
                error=error,
            )
            if entry is not None:
                self._settle(entry.id, None, error)
            return
        self.log.warn(
            "{peer} sent an invalid message (id {id}): {error}",
            peer=self.name,
            id=error.id,
            error=error,
        )
        reply = encode(ErrorResponse(error.id, error))
        if batch is None:
            self._write(reply)
        else:
            batch.add(reply)

    def _settle(self, request_id: RequestId, result: Any, error: RpcError | None) -> None:
        entry = self._outgoing.pop(request_id, None)
        if entry is None:
            late = self._late.pop(request_id, None)
            self._late_for.pop(request_id, None)
            if late is not None and late.active():
                late.cancel()
            # Usually a race with a cancellation or timeout, which the spec allows for.
            self.log.info(
                "{peer} answered id {id}, which has no request waiting; dropped",
                peer=self.name,
                id=request_id,
            )
            return
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
        if error is None:
            entry.deferred.callback(result)
        else:
            entry.deferred.errback(error)

    def _dispatch(self, request: Request, batch: BatchReply | None) -> None:
        if self.is_handling(request.id):
            # Ids must not be reused while in flight; answering keeps the original's entry.
            error = ProtocolError(
                INVALID_REQUEST,
                "Invalid Request: id already in use by a request in flight",
                id=request.id,
            )
            self._protocol_error(error, batch)
            return
        try:
            outcome = self._on_request(request)
        except NoReply:
            return
        except Exception as e:
            self._answer(request, self._error_reply(request, e, None), batch)
            return
        if isinstance(outcome, Deferred):
            handling: Deferred[Any] = outcome
        elif inspect.iscoroutine(outcome):
            handling = Deferred.fromCoroutine(outcome)
        else:
            self._answer(request, self._reply(request, outcome), batch)
            return
        if batch is not None:
            batch.expect()
        self.track_incoming(request.id, handling)
        handling.addBoth(self._finished, request, handling, batch)

    def _finished(
        self,
        outcome: object,
        request: Request,
        handling: Deferred[Any],
        batch: BatchReply | None,
    ) -> None:
        # A handler cancelled by the peer (or by close()) was removed first: answer nothing.
        answering = self._incoming.get(request.id) is handling
        if answering:
            del self._incoming[request.id]
            self._calls.pop(request.id, None)
            if isinstance(outcome, Failure) and outcome.check(NoReply):
                answering = False
                outcome = None
        if batch is not None:
            batch.settle(self._reply(request, outcome) if answering else None)
        elif answering:
            self._write(self._reply(request, outcome))
        elif isinstance(outcome, Failure) and not isinstance(outcome.value, CancelledError):
            self._handler_failed(request, outcome, " after it was cancelled")

    def _handler_failed(self, request: Request, failure: Failure | None, when: str = "") -> None:
        """Log that the handler of C{request} failed (with no C{failure}: the one being handled)."""
        self.log.failure(
            "{peer}: handler for {method} (id {id}) failed{when}",
            failure,
            peer=self.name,
            method=request.method,
            id=request.id,
            when=when,
        )

    def _answer(self, request: Request, reply: bytes, batch: BatchReply | None) -> None:
        if batch is None:
            self._write(reply)
        else:
            batch.add(reply)

    def _reply(self, request: Request, outcome: object) -> bytes:
        """The encoded answer to C{request}, whose handler produced C{outcome}."""
        if isinstance(outcome, Failure):
            assert outcome.value is not None
            return self._error_reply(request, outcome.value, outcome)
        try:
            return encode(Response(request.id, outcome))
        except (TypeError, ValueError, RecursionError) as e:
            return self._error_reply(request, e, None)

    def _error_reply(
        self, request: Request, error: BaseException, failure: Failure | None
    ) -> bytes:
        """
        The encoded error answering C{request}.  Called with no C{failure} only while
        C{error} is being handled, so that the log can take the traceback from there.
        """
        if not isinstance(error, RpcError):
            if isinstance(error, CancelledError):
                error = RpcError.internal_error("Request cancelled")
            else:
                self._handler_failed(request, failure)
                # The peer learns only that it failed: exception text may hold secrets.
                error = RpcError.internal_error()
        return encode(ErrorResponse(request.id, error))

    def _notification(self, notification: Notification) -> None:
        if notification.method == CANCELLED and self.cancel_incoming(notification.params):
            return
        if self._on_notification is None:
            return
        try:
            outcome = self._on_notification(notification)
            if inspect.iscoroutine(outcome):
                outcome = Deferred.fromCoroutine(outcome)
        except Exception:
            self._notification_failed(None, notification)
            return
        if isinstance(outcome, Deferred):
            outcome.addErrback(self._notification_failed, notification)

    def _notification_failed(self, failure: Failure | None, notification: Notification) -> None:
        self.log.failure(
            "{peer}: handling notification {method} failed",
            failure,
            peer=self.name,
            method=notification.method,
        )

    def cancel_incoming(self, params: Params) -> bool:
        """
        Stop the handler a C{notifications/cancelled} with these C{params} names (as
        L{receive} does for one that arrives through it); C{False} if none is running.
        """
        if type(params) is not dict:
            return False
        request_id = params.get("requestId")
        # bool and float would find int keys by hash equality: only exact types name a request.
        if type(request_id) is not int and type(request_id) is not str:
            return False
        handling = self._incoming.pop(request_id, None)
        call = self._calls.pop(request_id, None)
        if handling is None:
            return False
        self.log.info(
            "{peer} cancelled request {id}: {reason}",
            peer=self.name,
            id=request_id,
            reason=params.get("reason"),
        )
        self._stop(handling, call)
        return True

    def _stop(self, handling: Deferred[Any], withdrawn: Call | None = None) -> None:
        # A canceller is user code; what it raises must not reach the transport.
        try:
            try:
                if withdrawn is not None:
                    withdrawn.withdraw()
            finally:
                handling.cancel()
        except Exception:
            self.log.failure("{peer}: cancelling a handler failed", peer=self.name)

    def _batch(self, batch: Batch) -> None:
        reply = BatchReply(self._write)
        for error in batch.invalid:
            self._protocol_error(error, reply)
        for message in batch.messages:
            if self._closed is not None:
                return
            if isinstance(message, Request):
                self._dispatch(message, reply)
            else:
                self.receive_message(message)
        reply.seal()

    # Both

    def _write(self, data: bytes) -> None:
        if self._closed is not None:
            return
        try:
            self._send(data)
        except Exception:
            self.log.failure("{peer}: sending failed", peer=self.name)

    def close(self, reason: Failure | BaseException) -> None:
        """
        The connection is gone: fail every outstanding request with L{ConnectionClosed},
        cancel every running handler (their answers could not be delivered), and refuse
        requests from now on.  Calling it again does nothing.
        """
        if self._closed is not None:
            return
        cause = reason.value if isinstance(reason, Failure) else reason
        if cause is None:
            cause = ConnectionError("closed")
        self._closed = cause
        outgoing, self._outgoing = self._outgoing, {}
        incoming, self._incoming = self._incoming, {}
        self._calls.clear()
        late, self._late = self._late, {}
        self._late_for.clear()
        for timer in late.values():
            if timer.active():
                timer.cancel()
        for entry in outgoing.values():
            if entry.timer is not None:
                entry.timer.cancel()
                entry.timer = None
            entry.deferred.errback(ConnectionClosed(self.name, cause))
        for handling in incoming.values():
            self._stop(handling)
