"""
Tests for L{mcpx.questions.broker}.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase, TestCase

from mcpx.questions.answers import InvalidAnswer
from mcpx.questions.broker import Broker, QuestionClosed, UnknownQuestion
from mcpx.questions.record import ROUTE_BROKER, ROUTE_CLIENT, Question, QuestionState
from mcpx.questions.store import QuestionStore
from mcpx.spec.questions import ELICIT, LIST_ROOTS, SAMPLE
from mcpx.wire.errors import RpcError

FORM = {
    "message": "github (via mcpx) asks: who are you?",
    "requestedSchema": {
        "type": "object",
        "properties": {"age": {"type": "integer", "maximum": 150}},
        "required": ["age"],
    },
}

URL = {
    "mode": "url",
    "message": "github (via mcpx) asks: sign in",
    "url": "https://example.org/login",
    "elicitationId": "e1",
}

SAMPLED = {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}


class BrokerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.events: list[tuple[str, str, dict[str, Any]]] = []
        self.broker = Broker(self.clock, publish=self.publish, ttl=60.0, keep=300.0)

    def publish(self, kind: str, server: str, **data: Any) -> None:
        self.events.append((kind, server, data))

    def ask(
        self, method: str = ELICIT, params: dict[str, Any] = FORM, **kw: Any
    ) -> tuple[Question, Deferred[dict[str, Any]]]:
        return self.broker.ask(server="github", scope_key="", method=method, params=params, **kw)

    def test_ask_records_and_announces(self) -> None:
        """Asking lists a pending question with its deadline and publishes question.asked."""
        self.clock.advance(5)
        question, answered = self.ask(call_id="c1")
        self.assertNoResult(answered)
        self.assertEqual(self.broker.questions(), [question])
        self.assertIs(self.broker.get(question.id), question)
        self.assertEqual(
            (question.state, question.created, question.deadline, question.route),
            (QuestionState.PENDING, 5.0, 65.0, ROUTE_BROKER),
        )
        self.assertEqual(
            self.events,
            [
                (
                    "question.asked",
                    "github",
                    {"id": question.id, "method": ELICIT, "route": "broker", "call": "c1"},
                )
            ],
        )

    def test_ask_copies_params(self) -> None:
        """Changing the params after asking does not change the recorded question."""
        params = dict(FORM)
        question, _ = self.ask(params=params)
        params["message"] = "changed"
        self.assertEqual(question.params["message"], FORM["message"])

    def test_ask_refuses_unknown_method(self) -> None:
        """Only the three question methods can be asked."""
        self.assertRaises(ValueError, self.ask, method="tools/call")
        self.assertRaises(ValueError, self.ask, route="elsewhere")

    def test_accept_form(self) -> None:
        """An accepted form answer fires the ask with accept and the content, and is kept."""
        question, answered = self.ask()
        self.clock.advance(3)
        closed = self.broker.answer(
            question.id, {"action": "accept", "content": {"age": 36}}, by="cli"
        )
        expected = {"action": "accept", "content": {"age": 36}}
        self.assertEqual(self.successResultOf(answered), expected)
        self.assertIs(closed, question)
        self.assertEqual(
            (question.state, question.answer, question.answered_by, question.finished),
            (QuestionState.ANSWERED, expected, "cli", 3.0),
        )
        self.assertEqual(
            self.events[-1], ("question.closed", "github", {"id": question.id, "state": "answered"})
        )

    def test_invalid_form_answer(self) -> None:
        """An answer that does not fit the form is refused with why; the question stays open."""
        question, answered = self.ask()
        with self.assertRaises(InvalidAnswer) as caught:
            self.broker.answer(question.id, {"action": "accept", "content": {"age": 200}}, by="api")
        self.assertEqual(str(caught.exception), "age: 200 is more than the maximum 150")
        self.assertRaises(InvalidAnswer, self.broker.answer, question.id, {"action": "ok"}, by="x")
        self.assertNoResult(answered)
        self.assertIs(question.state, QuestionState.PENDING)
        self.broker.answer(question.id, {"action": "accept", "content": {"age": 1}}, by="api")
        self.assertEqual(self.successResultOf(answered)["content"], {"age": 1})

    def test_accept_url(self) -> None:
        """Accepting a url-mode elicitation sends accept without content."""
        question, answered = self.ask(params=URL)
        self.broker.answer(question.id, {"action": "accept", "content": {"x": 1}}, by="cli")
        self.assertEqual(self.successResultOf(answered), {"action": "accept"})

    def test_decline_and_cancel_elicitation(self) -> None:
        """Declining or cancelling an elicitation sends that action upstream."""
        declined, by_decline = self.ask()
        cancelled, by_cancel = self.ask()
        answered, by_action = self.ask()
        self.broker.decline(declined.id, by="cli")
        self.broker.cancel(cancelled.id, by="api")
        self.broker.answer(answered.id, {"action": "decline"}, by="api")
        self.assertEqual(self.successResultOf(by_decline), {"action": "decline"})
        self.assertEqual(self.successResultOf(by_cancel), {"action": "cancel"})
        self.assertEqual(self.successResultOf(by_action), {"action": "decline"})
        self.assertEqual(
            [q.state for q in (declined, cancelled, answered)],
            [QuestionState.DECLINED, QuestionState.CANCELLED, QuestionState.DECLINED],
        )

    def test_expiry_is_cancel(self) -> None:
        """At its deadline an elicitation expires and answers cancel, never decline."""
        question, answered = self.ask()
        self.clock.advance(59)
        self.assertNoResult(answered)
        self.clock.advance(1)
        self.assertEqual(self.successResultOf(answered), {"action": "cancel"})
        self.assertEqual((question.state, question.answered_by), (QuestionState.EXPIRED, "expiry"))
        self.assertEqual(self.events[-1][2], {"id": question.id, "state": "expired"})

    def test_own_deadline(self) -> None:
        """A deadline given by the asker replaces the broker's ttl."""
        question, answered = self.ask(deadline=10.0)
        self.clock.advance(10)
        self.assertIs(question.state, QuestionState.EXPIRED)
        self.successResultOf(answered)

    def test_answer_cancels_deadline(self) -> None:
        """An answered question does not expire later."""
        question, answered = self.ask()
        self.broker.answer(question.id, {"action": "accept", "content": {"age": 2}}, by="cli")
        self.clock.advance(120)
        self.assertEqual(self.successResultOf(answered)["action"], "accept")
        self.assertIs(question.state, QuestionState.ANSWERED)
        self.assertEqual(self.clock.getDelayedCalls()[0].getTime(), 300.0)  # only pruning left

    def test_sampling(self) -> None:
        """A sampling answer goes upstream as given; a malformed one is refused."""
        question, answered = self.ask(method=SAMPLE, params={"messages": []})
        self.assertRaises(InvalidAnswer, self.broker.answer, question.id, {"role": "bot"}, by="cli")
        self.assertRaises(
            InvalidAnswer, self.broker.answer, question.id, {**SAMPLED, "model": 3}, by="cli"
        )
        self.assertRaises(
            InvalidAnswer, self.broker.answer, question.id, {**SAMPLED, "content": "x"}, by="cli"
        )
        self.broker.answer(question.id, SAMPLED, by="cli")
        self.assertEqual(self.successResultOf(answered), SAMPLED)
        self.assertEqual(question.answer, SAMPLED)

    def test_refused_sampling_and_roots_fail(self) -> None:
        """Declined, cancelled and expired sampling or roots questions fail with an RpcError."""
        declined, by_decline = self.ask(method=SAMPLE, params={})
        cancelled, by_cancel = self.ask(method=LIST_ROOTS, params={})
        _, by_expiry = self.ask(method=SAMPLE, params={})
        self.broker.decline(declined.id, by="cli")
        self.broker.cancel(cancelled.id, by="cli")
        self.clock.advance(60)
        messages = []
        for outcome in (by_decline, by_cancel, by_expiry):
            error = self.failureResultOf(outcome, RpcError).value
            assert isinstance(error, RpcError)
            self.assertEqual(error.code, -1)
            messages.append(error.message)
        self.assertEqual(
            messages,
            ["sampling request declined", "roots request cancelled", "sampling request expired"],
        )
        self.assertIsNone(declined.answer)

    def test_roots(self) -> None:
        """A roots answer must list file:// roots."""
        question, answered = self.ask(method=LIST_ROOTS, params={})
        for bad in ({}, {"roots": [{"name": "x"}]}, {"roots": [{"uri": "https://x"}]}):
            self.assertRaises(InvalidAnswer, self.broker.answer, question.id, bad, by="cli")
        roots = {"roots": [{"uri": "file:///src", "name": "src"}]}
        self.broker.answer(question.id, roots, by="cli")
        self.assertEqual(self.successResultOf(answered), roots)

    def test_unknown_and_closed(self) -> None:
        """Answering an unknown id or a finished question raises, and changes nothing."""
        question, _ = self.ask()
        self.broker.decline(question.id, by="cli")
        self.assertRaises(UnknownQuestion, self.broker.answer, "q_nope", {}, by="cli")
        self.assertRaises(UnknownQuestion, self.broker.decline, "q_nope", by="cli")
        with self.assertRaises(QuestionClosed) as caught:
            self.broker.cancel(question.id, by="cli")
        self.assertIs(caught.exception.question, question)
        self.assertIs(question.state, QuestionState.DECLINED)

    def test_withdrawn(self) -> None:
        """Cancelling the ask withdraws the question; nothing fires or fails later."""
        question, answered = self.ask()
        answered.cancel()
        self.failureResultOf(answered, CancelledError)
        self.assertEqual(
            (question.state, question.answered_by), (QuestionState.CANCELLED, "withdrawn")
        )
        self.assertEqual(self.events[-1][2], {"id": question.id, "state": "cancelled"})
        self.clock.advance(60)
        self.assertIs(question.state, QuestionState.CANCELLED)
        self.assertRaises(QuestionClosed, self.broker.decline, question.id, by="cli")
        self.assertEqual(self.flushLoggedErrors(), [])

    def test_call_given_up_withdraws(self) -> None:
        """
        A question whose call was given up on ends cancelled, by C{withdrawn}, and its
        server is answered C{cancel}; withdrawing it again, or an unknown one, is nothing.
        """
        question, answered = self.ask()
        self.broker.withdraw(question.id)
        self.assertEqual(self.successResultOf(answered), {"action": "cancel"})
        self.assertEqual(
            (question.state, question.answered_by), (QuestionState.CANCELLED, "withdrawn")
        )
        self.broker.withdraw(question.id)
        self.broker.withdraw("q_unknown")
        self.assertEqual(question.answered_by, "withdrawn")

    def test_call_cut_short_by_shutdown_keeps_question(self) -> None:
        """
        Once the daemon is closing, the calls it cuts short are not given up on: their
        questions stay pending for the next daemon, their servers answered nothing.
        """
        question, answered = self.ask()
        self.broker.closing()
        self.broker.withdraw(question.id)
        self.assertIs(question.state, QuestionState.PENDING)
        self.assertNoResult(answered)

    def test_withdrawn_by_shutdown_stays_pending(self) -> None:
        """
        Once the daemon is closing, a question withdrawn because its server is being
        closed stays pending (for the next daemon to list), rather than ending cancelled.
        """
        question, answered = self.ask()
        self.broker.closing()
        answered.cancel()
        self.failureResultOf(answered, CancelledError)
        self.assertIs(question.state, QuestionState.PENDING)
        self.assertEqual([question], self.broker.questions(state=QuestionState.PENDING))

    def test_cancel_after_answer(self) -> None:
        """Cancelling an ask that already fired changes nothing."""
        question, answered = self.ask(method=SAMPLE, params={})
        self.broker.answer(question.id, SAMPLED, by="cli")
        answered.cancel()
        self.assertEqual(self.successResultOf(answered), SAMPLED)
        self.assertIs(question.state, QuestionState.ANSWERED)

    def test_settle(self) -> None:
        """A question the client answered is recorded as given, without firing the ask."""
        question, answered = self.ask(route=ROUTE_CLIENT)
        result = {"action": "accept", "content": {"unchecked": True}}
        self.broker.settle(question.id, result, QuestionState.ANSWERED, by="client")
        self.assertNoResult(answered)
        self.assertEqual(
            (question.state, question.answer, question.answered_by),
            (QuestionState.ANSWERED, result, "client"),
        )
        self.clock.advance(60)
        self.assertNoResult(answered)
        self.assertIs(question.state, QuestionState.ANSWERED)

    def test_settle_ignores_unknown_and_closed(self) -> None:
        """Settling an unknown or finished question is ignored; settling as pending is an error."""
        question, _ = self.ask(route=ROUTE_CLIENT)
        self.broker.settle("q_nope", None, QuestionState.CANCELLED, by="client")
        self.assertRaises(
            ValueError,
            self.broker.settle,
            question.id,
            None,
            QuestionState.PENDING,
            by="client",
        )
        self.broker.cancel(question.id, by="cli")
        self.broker.settle(question.id, {"x": 1}, QuestionState.ANSWERED, by="client")
        self.assertEqual(question.answer, {"action": "cancel"})
        self.assertEqual(question.answered_by, "cli")

    def test_reroute(self) -> None:
        """A client question it could not take goes to the broker, same deadline, re-announced."""
        question, answered = self.ask(route=ROUTE_CLIENT, call_id="c1")
        self.broker.reroute(question.id)
        self.assertEqual(question.route, ROUTE_BROKER)
        self.assertEqual(
            self.events[-1],
            (
                "question.asked",
                "github",
                {"id": question.id, "method": ELICIT, "route": "broker", "call": "c1"},
            ),
        )
        count = len(self.events)
        self.broker.reroute(question.id)
        self.broker.reroute("q_nope")
        self.assertEqual(len(self.events), count)
        self.clock.advance(60)
        self.assertEqual(self.successResultOf(answered), {"action": "cancel"})

    def test_listing(self) -> None:
        """Questions are listed oldest first, and can be chosen by state."""
        first, _ = self.ask()
        self.clock.advance(1)
        second, _ = self.ask()
        self.clock.advance(1)
        third, _ = self.ask()
        self.broker.decline(second.id, by="cli")
        self.assertEqual(self.broker.questions(), [first, second, third])
        self.assertEqual(self.broker.questions(state=QuestionState.PENDING), [first, third])
        self.assertEqual(self.broker.questions(state=QuestionState.DECLINED), [second])

    def test_pruning(self) -> None:
        """Finished questions are listed for `keep` seconds, then forgotten; pending ones stay."""
        first, _ = self.ask(deadline=10_000.0)
        done, _ = self.ask()
        self.broker.decline(done.id, by="cli")
        self.clock.advance(100)
        later, _ = self.ask()
        self.broker.cancel(later.id, by="cli")
        self.clock.advance(200)
        self.assertEqual(self.broker.questions(), [first, later])
        self.assertIsNone(self.broker.get(done.id))
        self.clock.advance(100)
        self.assertEqual(self.broker.questions(), [first])
        self.assertEqual(self.clock.getDelayedCalls()[0].getTime(), 10_000.0)

    def test_stop_cancels_timers(self) -> None:
        """Stopping leaves no timer behind and fires no pending ask."""
        _, answered = self.ask()
        done, _ = self.ask()
        self.broker.decline(done.id, by="cli")
        self.successResultOf(self.broker.stop())
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertNoResult(answered)

    def test_start_without_store(self) -> None:
        """A broker without a store starts empty at once."""
        broker = Broker(self.clock)
        self.successResultOf(broker.start())
        self.assertEqual(broker.questions(), [])

    def test_no_publisher(self) -> None:
        """A broker with nobody to publish to still asks and answers."""
        broker = Broker(self.clock)
        question, answered = broker.ask(server="s", scope_key="", method=SAMPLE, params={})
        broker.answer(question.id, SAMPLED, by="cli")
        self.assertEqual(self.successResultOf(answered), SAMPLED)


class _SlowStore(QuestionStore):
    """A real question store (an SQLite file) whose opening waits until the test says so."""

    def __init__(self, path: str) -> None:
        super().__init__(path, reactor)
        self.go: Deferred[None] = Deferred()
        self.closed = False

    def open(self) -> Deferred[None]:
        return self.go.addCallback(lambda _: super(_SlowStore, self).open())

    def close(self) -> Deferred[None]:
        self.closed = True
        return super().close()


class StopWhileOpeningTests(TestCase):
    async def test_stop_waits_for_the_opening(self) -> None:
        """A daemon that stops while its question store is still opening (its port was taken)
        closes the store once it has opened, and nothing fails: the opening is not cut off
        half-way with the store gone from under it."""
        store = _SlowStore(self.mktemp())
        broker = Broker(Clock(), store=store)
        started = broker.start()
        stopped = broker.stop()
        self.assertNoResult(stopped)
        self.assertFalse(store.closed)
        store.go.callback(None)
        await started
        await stopped
        self.assertTrue(store.closed)

    async def test_stop_after_a_failed_opening(self) -> None:
        """A store that could not be opened still lets the broker stop; the opening's failure
        stays the start's to report."""
        store = _SlowStore(self.mktemp())
        broker = Broker(Clock(), store=store)
        started = broker.start()
        stopped = broker.stop()
        store.go.errback(OSError("disk full"))
        self.failureResultOf(started, OSError)
        await stopped


class PendingBoundsTests(SynchronousTestCase):
    """How many questions upstreams may have waiting: per call, per server, in all."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.broker = Broker(self.clock, max_per_call=2, max_per_server=3, max_pending=4)

    def ask(self, server: str, call_id: str | None) -> Deferred[dict[str, Any]]:
        return self.broker.ask(
            server=server, scope_key="", method=ELICIT, params=FORM, call_id=call_id
        )[1]

    def refused(self, server: str, call_id: str | None) -> str:
        with self.assertRaises(RpcError) as raised:
            self.ask(server, call_id)
        message: str = raised.exception.message
        self.assertIn("too many questions", message)
        return message

    def test_per_call(self) -> None:
        """A call's questions past its bound are refused; another call's still go."""
        self.ask("github", "c1")
        self.ask("github", "c1")
        self.assertIn("this call", self.refused("github", "c1"))
        self.ask("github", "c2")
        self.assertEqual(len(self.broker.questions()), 3)

    def test_per_server_and_in_all(self) -> None:
        """A server's questions past its bound are refused, and everyone's past the total."""
        self.ask("github", None)
        self.ask("github", "c1")
        waiting = self.ask("github", "c2")
        self.assertIn("server github", self.refused("github", "c3"))
        self.ask("files", None)
        self.assertIn("mcpx", self.refused("files", None))
        # One answered makes room again.
        question = self.broker.questions()[2]
        self.broker.decline(question.id, by="me")
        self.assertTrue(waiting.called)
        self.ask("files", None)

    def test_withdrawn_and_expired_make_room(self) -> None:
        """A question withdrawn or expired no longer counts."""
        first = self.ask("github", "c1")
        self.ask("github", "c1")
        first.addErrback(lambda _: None).cancel()
        self.ask("github", "c1")
        self.clock.advance(self.broker.ttl + 1)
        self.ask("github", "c1")
        self.ask("github", "c1")

    def test_finished_ones_kept_are_bounded(self) -> None:
        """
        Asking and withdrawing over and over keeps no more than max_finished finished
        questions listed (the oldest go first), long before their keep runs out.
        """
        broker = Broker(self.clock, max_finished=10, keep=900.0)
        for n in range(100):
            self.clock.advance(1)
            _, answered = broker.ask(
                server="github", scope_key="", method=ELICIT, params=FORM, call_id=f"c{n}"
            )
            answered.addErrback(lambda _: None).cancel()
        kept = broker.questions()
        self.assertLessEqual(len(kept), 10)
        self.assertGreater(len(kept), 0)
        self.assertEqual(kept[-1].call_id, "c99")
