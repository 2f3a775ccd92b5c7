"""
Tests for L{mcpx.server.resumable}: asking a legacy client on its connection
(L{ConnAsker}), and the upstream call a 2026-07-28 request waits on (L{ResumableCall}).
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ConnectionLost
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.call import Call, ClientUnreachable
from mcpx.server.conn import STDIO, Conn
from mcpx.server.resumable import ConnAsker, ResumableCall, waiting
from mcpx.spec.questions import ELICIT, LIST_ROOTS, SAMPLE
from mcpx.spec.revision import Revision
from mcpx.wire.errors import RpcError
from mcpx.wire.peer import ConnectionClosed

FORM: dict[str, Any] = {
    "message": "github (via mcpx) asks: who?",
    "requestedSchema": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    },
}
SAMPLING: dict[str, Any] = {"messages": [], "maxTokens": 5}
ACCEPTED = {"action": "accept", "content": {"name": "ada"}}


class FakeClient:
    """The client end of a connection: records what it is asked, answers when told."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, Any], str]] = []
        self.replies: list[Deferred[Any]] = []

    def ask(self, method: str, params: dict[str, Any]) -> Deferred[Any]:
        self.asked.append((method, params, ""))
        reply: Deferred[Any] = Deferred()
        self.replies.append(reply)
        return reply


class FakeReply:
    """The stream a request is answered on (L{Reply}): records what goes on it."""

    def __init__(self) -> None:
        self.client = FakeClient()
        self.pushed: list[tuple[str, Any]] = []

    def push(self, method: str, params: dict[str, Any] | None) -> None:
        self.pushed.append((method, params))

    def ask(self, method: str, params: dict[str, Any]) -> Deferred[Any]:
        return self.client.ask(method, params)

    def flow(self) -> None:
        return None


class ConnAskerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.client = FakeClient()
        self.conn = Conn(STDIO, "host", ask=self.client.ask)
        self.asker = ConnAsker(self.conn, None)

    def test_asks_on_connection(self) -> None:
        """The question goes to the client as a request; its result comes back."""
        answered = self.asker.ask(ELICIT, FORM, "q_1")
        self.assertEqual([(m, p) for m, p, _ in self.client.asked], [(ELICIT, FORM)])
        self.client.replies[0].callback(ACCEPTED)
        self.assertEqual(self.successResultOf(answered), ACCEPTED)

    def test_tell_where_the_revision_has_it(self) -> None:
        """
        A url elicitation's completion is pushed to a 2025-11-25 client, and not to a
        client of a revision without that notification, nor to one that cannot be pushed to.
        """
        pushed: list[tuple[str, Any]] = []
        params = {"elicitationId": "e-1"}
        for revision, push, sent in (
            (Revision.V2025_11_25, True, True),
            (Revision.V2025_06_18, True, False),
            (Revision.V2025_11_25, False, False),
        ):
            conn = Conn(
                STDIO,
                "host",
                ask=self.client.ask,
                push=(lambda m, p: pushed.append((m, p))) if push else None,
                revision=revision,
            )
            told = ConnAsker(conn, None).tell("notifications/elicitation/complete", params)
            self.assertEqual(told, sent, (revision, push))
        self.assertEqual(pushed, [("notifications/elicitation/complete", params)])

    def test_asked_on_the_reply(self) -> None:
        """
        The question, and a completion told, go on the stream the request that made
        the call is answered on (its L{Reply}: an HTTP session's POST), not on the
        connection; withdrawing the question cancels what the reply asked.
        """
        reply = FakeReply()
        pushed: list[tuple[str, Any]] = []
        conn = Conn(
            STDIO,
            "host",
            ask=self.client.ask,
            push=lambda m, p: pushed.append((m, p)),
            revision=Revision.V2025_11_25,
        )
        asker = ConnAsker(conn, reply)
        answered = asker.ask(ELICIT, FORM, "q_1")
        self.assertEqual(self.client.asked, [])
        self.assertEqual([(m, p) for m, p, _ in reply.client.asked], [(ELICIT, FORM)])
        asker.tell("notifications/elicitation/complete", {"elicitationId": "e-1"})
        self.assertEqual(pushed, [])
        self.assertEqual(
            reply.pushed, [("notifications/elicitation/complete", {"elicitationId": "e-1"})]
        )
        answered.cancel()
        self.failureResultOf(answered, CancelledError)
        self.assertTrue(reply.client.replies[0].called, "the reply's question withdrawn")

    def test_connection_closed_unreachable(self) -> None:
        """A connection that closes while the client is asked makes it unreachable."""
        for error in (
            ConnectionClosed("host", ConnectionLost("gone")),
            ConnectionLost("gone"),
            ConnectionResetError("reset"),
        ):
            answered = self.asker.ask(ELICIT, FORM, "q_1")
            self.client.replies[-1].errback(error)
            self.failureResultOf(answered, ClientUnreachable)

    def test_client_error_kept(self) -> None:
        """A JSON-RPC error from the client stays that error: it is the client's answer."""
        answered = self.asker.ask(SAMPLE, SAMPLING, "q_1")
        self.client.replies[0].errback(RpcError(-1, "user rejected"))
        error = self.failureResultOf(answered, RpcError).value
        assert isinstance(error, RpcError)
        self.assertEqual(error.message, "user rejected")

    def test_closed_connection(self) -> None:
        """A connection already closed is not asked at all."""
        self.conn.closed = True
        self.failureResultOf(self.asker.ask(ELICIT, FORM, "q_1"), ClientUnreachable)
        self.assertEqual(self.client.asked, [])

    def test_connection_that_cannot_ask(self) -> None:
        """A connection with no way to send the client a request cannot be asked."""
        asker = ConnAsker(Conn(STDIO, "host"), None)
        self.failureResultOf(asker.ask(ELICIT, FORM, "q_1"), ClientUnreachable)

    def test_ask_raises(self) -> None:
        """A connection that fails while sending makes the client unreachable."""

        def ask(method: str, params: dict[str, Any]) -> Deferred[Any]:
            raise ConnectionClosed("host", ConnectionLost("gone"))

        asker = ConnAsker(Conn(STDIO, "host", ask=ask), None)
        self.failureResultOf(asker.ask(ELICIT, FORM, "q_1"), ClientUnreachable)


class ResumableCallTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.call = ResumableCall(Call("call-1", {}), "tools/call", self.clock)
        self.work_cancelled = 0
        self.work: Deferred[Any] = Deferred(self.cancel_work)
        self.call.run(self.work)

    def cancel_work(self, _: Deferred[Any]) -> None:
        self.work_cancelled += 1

    def test_next_on_finish(self) -> None:
        """The request waiting on the call wakes when the call finishes, with its result."""
        watcher = self.call.next()
        self.assertNoResult(watcher)
        self.assertFalse(self.call.done)
        self.work.callback({"content": []})
        self.successResultOf(watcher)
        self.assertTrue(self.call.done)
        self.assertEqual(self.call.result(), {"content": []})
        self.successResultOf(self.call.next())

    def test_next_on_failure(self) -> None:
        """A call that fails wakes its request too, and its result raises the failure."""
        watcher = self.call.next()
        self.work.errback(RpcError(-32603, "upstream broke"))
        self.successResultOf(watcher)
        self.assertTrue(self.call.done)
        self.assertRaises(RpcError, self.call.result)

    def test_question_left_at_the_end_goes_to_the_broker(self) -> None:
        """
        A question still held when the call finishes (one the server may have asked
        outside the call) can no longer reach the client: it fails as unreachable, so
        the broker takes it, and the client is not shown it.
        """
        answer = self.call.ask(ELICIT, FORM, "who")
        self.work.callback({"content": []})
        self.failureResultOf(answer, ClientUnreachable)
        self.assertEqual(self.call.asking(), {})

    def test_next_on_ask(self) -> None:
        """The request wakes when the call asks, and sees the question under its key."""
        watcher = self.call.next()
        answer = self.call.ask(ELICIT, FORM, "who")
        self.assertNoResult(watcher)
        self.clock.advance(0)
        self.successResultOf(watcher)
        self.assertEqual(self.call.asking(), {"who": {"method": ELICIT, "params": FORM}})
        self.assertNoResult(answer)
        self.assertFalse(self.call.done)

    def test_round_batched(self) -> None:
        """Two questions asked in the same turn are collected together, in one wake."""
        watcher = self.call.next()
        self.call.ask(ELICIT, FORM, "who")
        self.call.ask(SAMPLE, SAMPLING, "think")
        self.assertNoResult(watcher)
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        self.clock.advance(0)
        self.successResultOf(watcher)
        self.assertEqual(
            self.call.asking(),
            {
                "who": {"method": ELICIT, "params": FORM},
                "think": {"method": SAMPLE, "params": SAMPLING},
            },
        )

    def test_next_with_questions_waiting(self) -> None:
        """A request that comes while questions are waiting is not made to wait."""
        self.call.ask(ELICIT, FORM, "who")
        self.successResultOf(self.call.next())

    def test_answer_by_key(self) -> None:
        """The client's answers reach the questions with their keys; others are ignored."""
        who = self.call.ask(ELICIT, FORM, "who")
        think = self.call.ask(SAMPLE, SAMPLING, "think")
        count = self.call.answer({"who": ACCEPTED, "nobody": {"x": 1}})
        self.assertEqual(count, 1)
        self.assertEqual(self.successResultOf(who), ACCEPTED)
        self.assertNoResult(think)
        self.assertEqual(list(self.call.asking()), ["think"])
        self.assertEqual(self.call.answer({"who": ACCEPTED}), 0)
        self.assertEqual(self.call.answer({}), 0)

    def test_unfit_answer_goes_on(self) -> None:
        """
        An accepted form whose content does not fit the requested schema by mcpx's check
        goes on for the server to judge, as it would directly; it is not asked again
        round after round (issue 43, item 7).
        """
        who = self.call.ask(ELICIT, FORM, "who")
        unfit = {"action": "accept", "content": {"name": 7}}
        self.assertEqual(self.call.answer({"who": unfit}), 1)
        self.assertEqual(self.successResultOf(who), unfit)
        self.assertEqual(list(self.call.asking()), [])

    def test_other_answers_unchecked(self) -> None:
        """Sampling and roots answers, and url-mode elicitations, go as the client gave them."""
        url = {"mode": "url", "message": "sign in", "url": "https://x", "elicitationId": "e"}
        asked = {
            "think": self.call.ask(SAMPLE, SAMPLING, "think"),
            "roots": self.call.ask(LIST_ROOTS, {}, "roots"),
            "login": self.call.ask(ELICIT, url, "login"),
        }
        given = {"think": {"odd": True}, "roots": {"roots": []}, "login": {"action": "accept"}}
        self.assertEqual(self.call.answer(given), 3)
        for key, answer in asked.items():
            self.assertEqual(self.successResultOf(answer), given[key])

    def test_withdrawn_question_not_asked(self) -> None:
        """A question the upstream gave up on is no longer shown to the client."""
        who = self.call.ask(ELICIT, FORM, "who")
        who.cancel()
        self.failureResultOf(who, CancelledError)
        self.assertEqual(self.call.asking(), {})
        self.assertEqual(self.call.answer({"who": ACCEPTED}), 0)

    def test_cancelled_watcher_leaves_work(self) -> None:
        """A request that goes away stops waiting, but the call runs on."""
        watcher = self.call.next()
        watcher.cancel()
        self.failureResultOf(watcher, CancelledError)
        self.assertEqual(self.work_cancelled, 0)
        # Nobody is waiting any more, so nothing is scheduled to wake them.
        asked = self.call.ask(ELICIT, FORM, "who")
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.work.callback({"done": True})
        self.assertEqual(self.call.result(), {"done": True})
        self.failureResultOf(asked, ClientUnreachable)

    def test_waiting_cancelled(self) -> None:
        """L{waiting}: cancelling tells C{on_cancel}, and still leaves the call running."""
        gave_up: list[bool] = []
        watcher = waiting(self.call, lambda: gave_up.append(True))
        watcher.cancel()
        self.failureResultOf(watcher, CancelledError)
        self.assertEqual(gave_up, [True])
        self.assertEqual(self.work_cancelled, 0)
        self.assertFalse(self.call.done)

    def test_waiting_woken(self) -> None:
        """L{waiting} fires like L{ResumableCall.next}, and then C{on_cancel} is not called."""
        gave_up: list[bool] = []
        watcher = waiting(self.call, lambda: gave_up.append(True))
        self.work.callback({})
        self.successResultOf(watcher)
        self.assertEqual(gave_up, [])

    def test_outcome_many_listeners(self) -> None:
        """Everyone who asks for the outcome gets the result, before or after it came."""
        early = [self.call.outcome(), self.call.outcome()]
        for listener in early:
            self.assertNoResult(listener)
        self.work.callback({"content": [1]})
        late = self.call.outcome()
        for listener in [*early, late]:
            self.assertEqual(self.successResultOf(listener), {"content": [1]})

    def test_outcome_failure_many_listeners(self) -> None:
        """A failed call fails every listener with its error."""
        early = self.call.outcome()
        self.work.errback(RpcError(-32603, "upstream broke"))
        late = self.call.outcome()
        self.failureResultOf(early, RpcError)
        self.failureResultOf(late, RpcError)

    def test_cancel(self) -> None:
        """Cancelling a call that has not finished cancels its work; a finished one is left."""
        self.call.cancel()
        self.assertEqual(self.work_cancelled, 1)
        self.assertTrue(self.call.done)
        self.assertRaises(CancelledError, self.call.result)
        self.call.cancel()
        self.assertEqual(self.work_cancelled, 1)

    def test_finish_while_wake_scheduled(self) -> None:
        """A call that finishes in the turn it asked wakes its request once, not twice."""
        watcher = self.call.next()
        asked = self.call.ask(ELICIT, FORM, "who")
        self.work.callback({})
        self.successResultOf(watcher)
        self.failureResultOf(asked, ClientUnreachable)
        self.clock.advance(0)
        self.successResultOf(self.call.next())
