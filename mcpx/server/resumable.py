# -*- test-case-name: tests.server.test_resumable -*-
"""
How mcpx puts an upstream's question to the client that made the call.

A legacy client (stdio, or a Streamable HTTP session) is sent the question as a
request on its own connection while its call is open: L{ConnAsker}.

A 2026-07-28 client has no connection to be asked on.  Its request is answered
C{input_required} with the questions and a signed C{requestState}, and it sends the
same request again with the answers.  So the upstream call cannot belong to the
client's request: it runs in a L{ResumableCall}, which the first request and every
retry wait on until it either finishes or asks (L{ResumableCall.next}), and which
stays collectable as a daemon task once it has asked.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

from attrs import define
from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx.call import Call, ClientUnreachable
from mcpx.once import Once, Waiters
from mcpx.questions.relay import unfit_answer
from mcpx.server.conn import Conn, Reply
from mcpx.spec.downgrade import question
from mcpx.spec.matrix import notification_in
from mcpx.wire.peer import ConnectionClosed

log = Logger()


class ConnAsker:
    """
    Asks a legacy client on its connection.

    The question is sent on the stream the request that made the call is answered on,
    where the transport handed one over (L{Reply}: an HTTP session's POST) rather than
    anywhere else; so is the C{notifications/cancelled} that withdraws it, when the
    question's Deferred is cancelled.
    """

    __slots__ = ("_conn", "_reply")

    def __init__(self, conn: Conn, reply: Reply | None) -> None:
        self._conn = conn
        self._reply = reply

    def ask(self, method: str, params: dict[str, Any], key: str) -> Deferred[Any]:
        ask = self._conn.ask
        if ask is None or self._conn.closed:
            return fail(ClientUnreachable("the client's connection is closed"))
        if self._conn.revision is not None:
            # Spelled for the revision this client agreed, not the upstream's.
            params = question(method, params, self._conn.revision)
        try:
            asking = ask(method, params) if self._reply is None else self._reply.ask(method, params)
        except Exception as e:
            return fail(ClientUnreachable(str(e)))

        def unreachable(failure: Failure) -> Failure:
            if failure.check(ConnectionClosed, ConnectionError, ConnectionDone, ConnectionLost):
                raise ClientUnreachable(failure.getErrorMessage())
            return failure

        def withdraw(_: Deferred[Any]) -> None:
            asking.cancel()

        answer: Deferred[Any] = Deferred(withdraw)

        def settled(outcome: object) -> None:
            if answer.called:
                return
            if isinstance(outcome, Failure):
                answer.errback(outcome)
            else:
                answer.callback(outcome)

        asking.addErrback(unreachable).addBoth(settled)
        return answer

    def tell(self, method: str, params: dict[str, Any]) -> bool:
        conn = self._conn
        push = conn.push
        if push is None or conn.closed or conn.revision is None:
            return False
        if not notification_in(method, conn.revision):
            return False
        if self._reply is None:
            push(method, params)
        else:
            self._reply.push(method, params)
        return True


@define(eq=False)
class _Asked:
    method: str
    params: dict[str, Any]
    answer: Deferred[Any]


class ResumableCall:
    """
    One upstream call made for a 2026-07-28 request, and the questions it is asking.

    @ivar call: the host's call it runs (a task once it has asked, L{Call.is_task}).
    @ivar id: the call's id (and its task's, once it has asked).
    @ivar method: the request's method.
    """

    def __init__(self, call: Call, method: str, clock: IReactorTime) -> None:
        self.call = call
        self.id = call.id
        self.method = method
        #: How many times it has come back asking (the highest round any state counted).
        self.rounds = 0
        #: Why mcpx gave up on it, if it did.
        self.abandoned: str | None = None
        self._clock = clock
        self._asked: dict[str, _Asked] = {}
        self._watchers: Waiters[None] = Waiters()
        self._wake_call: IDelayedCall | None = None
        self._outcome: object = None
        self._done = False
        #: The outcome, for whoever keeps the call (its task, its forgetting).
        self._ended: Once[Any] = Once()
        self._work: Deferred[Any] | None = None

    # The Asker

    def ask(self, method: str, params: dict[str, Any], key: str) -> Deferred[Any]:
        """Hold a question until the client's next request collects it (see L{asking})."""

        def withdrawn(answer: Deferred[Any]) -> None:
            entry = self._asked.get(key)
            if entry is not None and entry.answer is answer:
                del self._asked[key]

        answer: Deferred[Any] = Deferred(withdrawn)
        if key in self._asked:
            # Two questions under one key (two servers' rounds in one call): keep both.
            key = next(f"{key}-{n}" for n in itertools.count(2) if f"{key}-{n}" not in self._asked)
        self._asked[key] = _Asked(method, params, answer)
        # The questions of one round arrive together; the client sees them together.
        if self._watchers and self._wake_call is None:
            self._wake_call = self._clock.callLater(0, self._wake)
        return answer

    # The work

    def run(self, work: Deferred[Any]) -> None:
        self._work = work
        work.addBoth(self._finished)

    def _finished(self, outcome: object) -> None:
        self._done = True
        self._outcome = outcome
        # A question still held can reach its client no more (only this call's results
        # carry it): the broker takes it.  Only one the pool tied to the call by
        # attribution alone is left when the server answered the call
        # (mcpx.call.Call.call_ended).
        held, self._asked = self._asked, {}
        for entry in held.values():
            entry.answer.errback(ClientUnreachable("the call it was tied to has ended"))
        # The requests waiting on it first, then those keeping it.
        self._wake()
        self._ended.fire(outcome)

    def outcome(self) -> Deferred[Any]:
        """A Deferred that fires with the call's outcome (a task keeps it this way)."""
        return self._ended.wait()

    def cancel(self) -> None:
        """Give up on the call (its request went before it asked anything)."""
        if self._work is not None and not self._done:
            self._work.cancel()

    @property
    def done(self) -> bool:
        return self._done

    def result(self) -> Any:
        """The call's result; raises its failure.  Only once L{done}."""
        if isinstance(self._outcome, Failure):
            self._outcome.raiseException()
        return self._outcome

    # The client's side

    def next(self) -> Deferred[None]:
        """Fires when the call has finished or has questions for the client."""
        if self._done or self._asked:
            return succeed(None)
        return self._watchers.wait()

    def _wake(self) -> None:
        self._wake_call = None
        self._watchers.fire(None)

    def asking(self) -> dict[str, dict[str, Any]]:
        """The questions waiting for the client, as C{inputRequests}."""
        return {
            key: {"method": entry.method, "params": entry.params}
            for key, entry in self._asked.items()
        }

    def tell(self, method: str, params: dict[str, Any]) -> bool:
        """A 2026-07-28 client hears nothing outside its requests' results."""
        return False

    def answer(self, responses: Mapping[str, Any]) -> int:
        """
        Give the client's C{inputResponses} to the questions with those keys.  An
        elicitation answer whose content does not fit its form by mcpx's check goes on
        all the same, logged, for the server to judge as it would directly (asking it
        again left the client asked round after round until C{proto.askRounds}).

        @return: how many questions were answered (keys asking nothing are ignored).
        """
        answered = 0
        for key, response in responses.items():
            entry = self._asked.get(key)
            if entry is None:
                continue
            unfit = unfit_answer(entry.method, entry.params, response)
            if unfit is not None:
                log.warn(
                    "the client's answer to question {key} does not fit its form ({why}); "
                    "it goes to the server, which judges it",
                    key=key,
                    why=unfit,
                )
            del self._asked[key]
            answered += 1
            entry.answer.callback(response)
        return answered


def waiting(call: ResumableCall, on_cancel: Callable[[], None]) -> Deferred[None]:
    """
    L{ResumableCall.next}, where cancelling (the client's request went away) calls
    C{on_cancel} and otherwise leaves the call running.
    """
    watcher = call.next()

    def cancelled(failure: Failure) -> Failure:
        if failure.check(CancelledError):
            on_cancel()
        return failure

    return watcher.addErrback(cancelled)
