"""
The attribution rule, end to end through the pool: a question an upstream asks on its
connection belongs to a call only when every request in flight on that connection is
that call's; otherwise it waits in the broker, attributed to nobody.  And while a
question waits, the pool's call deadlines on that connection are held.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from mcpx.call import Call
from mcpx.pool import CallTimedOut, Pool
from mcpx.pool.pool import DEFAULT_CANCEL_GRACE, NobodysRequest
from mcpx.questions.broker import Broker
from mcpx.questions.record import ROUTE_BROKER, ROUTE_CLIENT, Question, QuestionState
from mcpx.questions.relay import Relay
from mcpx.spec.questions import ELICIT
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import Response, encode
from tests.pool.fakes import FakeConnector, FakeUpstream, servers, stdio, text_result

CALL_TIMEOUT = 30.0
IDLE_TIMEOUT = 600.0
FORM: dict[str, Any] = {
    "message": "who?",
    "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
}
ACCEPTED = {"action": "accept", "content": {"name": "ada"}}
DECLINED = {"action": "decline"}


class RecordingAsker:
    """A calling client: every question put to it, answered when the test says."""

    def __init__(self) -> None:
        self.asked: list[Deferred[Any]] = []

    def ask(self, method: str, params: dict[str, Any], key: str) -> Deferred[Any]:
        answer: Deferred[Any] = Deferred()
        self.asked.append(answer)
        return answer

    def tell(self, method: str, params: dict[str, Any]) -> bool:
        return False


class AttributionTestCase(SynchronousTestCase):
    max_asking_instances = 1

    def setUp(self) -> None:
        self.clock = Clock()
        self.connector = FakeConnector(self.clock)
        self.connector.answers["tools/call"] = self.arrived
        #: The upstream's unanswered tools/call replies, by the text the call sent.
        self.replies: dict[str, Deferred[Any]] = {}
        #: When set, the upstream asks a question the moment a tools/call arrives.
        self.ask_on_arrival = False
        self.arrival_checks: list[Callable[[], None]] = []
        self.arrival_checked = 0
        self.broker = Broker(self.clock, store=None, ttl=3600.0)
        self.relay = Relay(
            self.broker, self.clock, owner=self.owner, hold=self.hold, lone=self.lone
        )
        self.pool = Pool(
            servers=servers(stdio("a"), stdio("c", scope="client")),
            connector=self.connector,
            clock=self.clock,
            call_timeout=CALL_TIMEOUT,
            idle_timeout=IDLE_TIMEOUT,
            handlers=self.relay.handlers,
            # One instance each, whatever the pool learns: these tests are about one
            # connection shared by several calls (AskingInstancesTests lift it).
            max_asking_instances=self.max_asking_instances,
        )
        self.pool.startService()
        self.askers: dict[str, RecordingAsker] = {}
        self.callers: dict[str, Call] = {}
        self.calls: list[Deferred[dict[str, Any]]] = []

    def tearDown(self) -> None:
        self.successResultOf(self.pool.stopService())
        for call in self.calls:
            # Calls a test left in flight are cut short by stopping: that is not its point.
            call.addErrback(lambda _: None)

    def owner(self, server: str, scope_key: str) -> Call | None:
        return self.pool.owner(server, scope_key)

    def lone(self, server: str, scope_key: str) -> NobodysRequest | None:
        return self.pool.lone_request(server, scope_key)

    def hold(self, server: str, scope_key: str) -> Callable[[], None]:
        return self.pool.hold_deadlines(server, scope_key)

    def arrived(self, upstream: FakeUpstream, params: Mapping[str, Any]) -> Deferred[Any]:
        text = str((params.get("arguments") or {}).get("text"))
        reply: Deferred[Any] = Deferred()
        self.replies[text] = reply
        if self.ask_on_arrival:
            for check in self.arrival_checks:
                check()
                self.arrival_checked += 1
        return reply

    def caller(self, name: str) -> Call:
        """A call whose client declared elicitation and can be asked."""
        if name not in self.callers:
            self.askers[name] = RecordingAsker()
            self.callers[name] = Call(name, {"elicitation": {}}, asker=self.askers[name])
        return self.callers[name]

    def call(
        self, text: str, caller: Call | None, server: str = "a", client: str = ""
    ) -> Deferred[dict[str, Any]]:
        call = Deferred.fromCoroutine(
            self.pool.call_tool(server, "echo", {"text": text}, call=caller, client=client)
        )
        self.calls.append(call)
        return call

    def finish(self, text: str) -> None:
        self.replies.pop(text).callback(text_result(text))

    def upstream(self, server: str = "a") -> FakeUpstream:
        return self.connector.started(server)[-1]

    def question(self, server: str = "a") -> tuple[Question, Deferred[Any]]:
        """The upstream asks an elicitation on its connection (not inside any result)."""
        before = {q.id for q in self.broker.questions()}
        answered = self.upstream(server).peer.request(ELICIT, FORM)
        [question] = [q for q in self.broker.questions() if q.id not in before]
        return question, answered

    def asked_counts(self) -> dict[str, int]:
        return {name: len(asker.asked) for name, asker in self.askers.items()}

    def check_question(self, expected: Call | None, server: str = "a") -> None:
        """
        Ask a question now: it must be attributed to C{expected} (and put to its client
        alone), or to nobody when C{expected} is C{None}; then answer it.
        """
        counts = self.asked_counts()
        question, answered = self.question(server)
        if expected is None:
            self.assertEqual((question.route, question.call_id), (ROUTE_BROKER, None))
            self.assertEqual(self.asked_counts(), counts)
            self.broker.decline(question.id, by="test")
            self.assertEqual(self.successResultOf(answered), DECLINED)
            return
        self.assertEqual((question.route, question.call_id), (ROUTE_CLIENT, expected.id))
        counts[expected.id] += 1
        self.assertEqual(self.asked_counts(), counts)
        self.askers[expected.id].asked[-1].callback(ACCEPTED)
        self.assertEqual(self.successResultOf(answered), ACCEPTED)

    def warm(self) -> None:
        """Start the shared instance (a call that finishes), so later calls do not wait."""
        self.ask_on_arrival = False
        done = self.call("warm", None)
        self.finish("warm")
        self.successResultOf(done)


class OwnerTests(AttributionTestCase):
    def test_one_caller_two_requests(self) -> None:
        """A call with two requests in flight owns the question: it is put to its client."""
        a = self.caller("A")
        first, second = self.call("a1", a), self.call("a2", a)
        self.assertIs(self.pool.owner("a", ""), a)
        self.check_question(a)
        self.finish("a1")
        self.finish("a2")
        self.successResultOf(first)
        self.successResultOf(second)

    def test_two_callers_ambiguous(self) -> None:
        """Two calls on one connection: nobody owns it, the question waits in the broker."""
        a, b = self.caller("A"), self.caller("B")
        self.call("a1", a)
        self.call("b1", b)
        self.assertIsNone(self.pool.owner("a", ""))
        self.check_question(None)

    def test_caller_and_nobody(self) -> None:
        """A call next to a request that is nobody's (a /v1 call): the broker takes it."""
        a = self.caller("A")
        self.call("a1", a)
        self.call("v1", None)
        self.assertIsNone(self.pool.owner("a", ""))
        self.check_question(None)

    def test_after_one_finishes(self) -> None:
        """Once the other call finishes, the one left owns the connection's questions."""
        a, b = self.caller("A"), self.caller("B")
        self.call("a1", a)
        done = self.call("b1", b)
        self.finish("b1")
        self.successResultOf(done)
        self.assertIs(self.pool.owner("a", ""), a)
        self.check_question(a)

    def test_nobody_in_flight(self) -> None:
        """A question on an idle connection (or an unknown one) belongs to no call."""
        self.assertIsNone(self.pool.owner("a", ""))
        self.assertIsNone(self.pool.owner("nowhere", ""))
        self.warm()
        self.assertIsNone(self.pool.owner("a", ""))
        self.check_question(None)

    def test_failed_request_unregisters(self) -> None:
        """A request that fails is no longer counted: it owns nothing afterwards."""
        a, b = self.caller("A"), self.caller("B")
        self.call("a1", a)
        failing = self.call("b1", b)
        self.replies.pop("b1").errback(RpcError(-32603, "upstream broke"))
        self.failureResultOf(failing, RpcError)
        self.assertIs(self.pool.owner("a", ""), a)

    def test_client_scopes_apart(self) -> None:
        """
        Client-scoped instances are separate connections: each call owns the questions
        asked on its own instance.
        """
        a, b = self.caller("A"), self.caller("B")
        self.call("a1", a, server="c", client="x")
        self.call("b1", b, server="c", client="y")
        self.assertIs(self.pool.owner("c", "x"), a)
        self.assertIs(self.pool.owner("c", "y"), b)
        [x, y] = self.connector.started("c")
        from_x = x.peer.request(ELICIT, FORM)
        self.assertEqual(self.asked_counts(), {"A": 1, "B": 0})
        from_y = y.peer.request(ELICIT, FORM)
        self.assertEqual(self.asked_counts(), {"A": 1, "B": 1})
        self.askers["A"].asked[0].callback(ACCEPTED)
        self.askers["B"].asked[0].callback(DECLINED)
        self.assertEqual(self.successResultOf(from_x), ACCEPTED)
        self.assertEqual(self.successResultOf(from_y), DECLINED)


class InterleavingTests(AttributionTestCase):
    """
    Two callers' requests interleaved in every order the test can drive, with their
    upstream replies held: a question arriving at any point (before, between, after
    each step, and in the instant a request reaches the upstream) goes to the one call
    in flight, or to nobody, never to the other.
    """

    EVENTS = (("start", "A"), ("finish", "A"), ("start", "B"), ("finish", "B"))

    def orders(self) -> list[tuple[tuple[str, str], ...]]:
        valid = []
        for order in itertools.permutations(self.EVENTS):
            if order.index(("start", "A")) < order.index(("finish", "A")) and order.index(
                ("start", "B")
            ) < order.index(("finish", "B")):
                valid.append(order)
        return valid

    def expected(self, in_flight: list[str]) -> Call | None:
        return self.callers[in_flight[0]] if len(set(in_flight)) == 1 else None

    def checker(self, in_flight: list[str]) -> Callable[[], None]:
        return lambda: self.check_question(self.expected(in_flight))

    def drive(self, order: tuple[tuple[str, str], ...], requests: int) -> None:
        """
        Play C{order}, each caller making C{requests} requests at its start and finishing
        them all at its finish, asking a question at every point.
        """
        in_flight: list[str] = []
        self.check_question(self.expected(in_flight))
        for step, name in order:
            caller = self.caller(name)
            if step == "start":
                for n in range(requests):
                    in_flight.append(name)
                    # Asked in the instant this request reaches the upstream: it is counted.
                    self.arrival_checks = [self.checker(list(in_flight))]
                    self.ask_on_arrival = True
                    self.call(f"{name}{n}", caller)
                    self.ask_on_arrival = False
            else:
                for n in range(requests):
                    self.check_question(self.expected(in_flight))
                    in_flight.remove(name)
                    self.finish(f"{name}{n}")
            self.check_question(self.expected(in_flight))
        self.assertEqual(self.replies, {})
        self.assertEqual(self.arrival_checked, 2 * requests)
        self.arrival_checked = 0

    def test_every_order(self) -> None:
        """Every order of two callers' single requests attributes each question rightly."""
        self.warm()
        orders = self.orders()
        self.assertEqual(len(orders), 6)
        for order in orders:
            self.drive(order, 1)

    def test_every_order_several_requests(self) -> None:
        """The same holds when each caller has several requests in flight at once."""
        self.warm()
        for order in self.orders():
            self.drive(order, 2)

    def test_both_owners_seen(self) -> None:
        """The orders drive questions to each caller's client and to the broker alike."""
        self.warm()
        for order in self.orders():
            self.drive(order, 1)
        routes = {(q.route, q.call_id) for q in self.broker.questions()}
        self.assertEqual(routes, {(ROUTE_BROKER, None), (ROUTE_CLIENT, "A"), (ROUTE_CLIENT, "B")})


class HoldDeadlinesTests(AttributionTestCase):
    def test_hold_pauses_call_timeout(self) -> None:
        """While held, a call outlives pool.callTimeout; once released, its time runs out."""
        self.warm()
        call = self.call("a1", None)
        self.clock.advance(10)
        release = self.pool.hold_deadlines("a", "")
        self.clock.advance(CALL_TIMEOUT * 10)
        self.assertNoResult(call)
        release()
        self.clock.advance(CALL_TIMEOUT - 10 - 0.5)
        self.assertNoResult(call)
        self.clock.advance(0.5)
        self.failureResultOf(call, CallTimedOut)

    def test_question_holds_call_timeout(self) -> None:
        """A question pending on the connection holds the call's clock until it is answered."""
        self.warm()
        call = self.call("a1", None)
        question, answered = self.question()
        self.clock.advance(CALL_TIMEOUT * 10)
        self.assertNoResult(call)
        self.broker.decline(question.id, by="test")
        self.assertEqual(self.successResultOf(answered), DECLINED)
        self.clock.advance(CALL_TIMEOUT - 0.5)
        self.assertNoResult(call)
        self.clock.advance(0.5)
        self.failureResultOf(call, CallTimedOut)

    def test_answered_call_finishes(self) -> None:
        """A call whose question was answered goes on to give its result."""
        self.warm()
        a = self.caller("A")
        call = self.call("a1", a)
        self.clock.advance(CALL_TIMEOUT - 1)
        _, answered = self.question()
        self.clock.advance(CALL_TIMEOUT * 2)
        self.askers["A"].asked[-1].callback(ACCEPTED)
        self.successResultOf(answered)
        self.finish("a1")
        self.assertEqual(self.successResultOf(call)["content"], text_result("a1")["content"])

    def test_two_questions_nest(self) -> None:
        """With two questions pending, the clock runs again only when both are answered."""
        self.warm()
        call = self.call("a1", None)
        first, _ = self.question()
        second, _ = self.question()
        self.broker.decline(first.id, by="test")
        self.clock.advance(CALL_TIMEOUT * 2)
        self.assertNoResult(call)
        self.broker.decline(second.id, by="test")
        self.clock.advance(CALL_TIMEOUT)
        self.failureResultOf(call, CallTimedOut)

    def test_release_idle(self) -> None:
        """Holding a connection with nothing in flight (or none at all) holds nothing."""
        self.pool.hold_deadlines("a", "")()
        self.pool.hold_deadlines("nowhere", "x")()
        self.warm()
        release = self.pool.hold_deadlines("a", "")
        call = self.call("a1", None)
        # A request that starts after the hold runs on its own clock.
        self.clock.advance(CALL_TIMEOUT)
        self.failureResultOf(call, CallTimedOut)
        release()


class LateQuestionTests(AttributionTestCase):
    """
    A request mcpx gave up on is still running at a server that does not stop: until it
    answers, or C{pool.cancelGrace} passes, it counts on the connection as nobody's, so
    a question asked then goes to the broker and never to the call that happens to be
    alone in flight.
    """

    def late_answer(self, text: str) -> None:
        """The upstream, which ignored the cancel, answers the call after all."""
        upstream = self.upstream()
        request = [
            r
            for r in upstream.requests
            if r.method == "tools/call"
            and isinstance(r.params, dict)
            and r.params["arguments"]["text"] == text
        ][-1]
        upstream._send(encode(Response(request.id, text_result(text))))

    def given_up(self, how: str) -> None:
        """Call C{A} for caller A and give up on it C{how}."""
        a = self.caller("A")
        if how == "timeout":
            call = Deferred.fromCoroutine(
                self.pool.call_tool("a", "echo", {"text": "A"}, call=a, timeout=1.0)
            )
            self.clock.advance(1.0)
            self.failureResultOf(call, CallTimedOut)
        else:
            call = self.call("A", a)
            call.cancel()
            self.failureResultOf(call, CancelledError)
        # The cancel reached the upstream (its handler was cancelled), which answers later.
        self.assertTrue(self.replies.pop("A").called)

    def test_question_after_cancel_goes_to_broker(self) -> None:
        """
        A's call is cancelled, B's is alone in flight: the upstream's next question may
        still be A's, so it goes to the broker, not to B, until the upstream answers A.
        """
        for how in ("cancel", "timeout"):
            self.warm()
            self.given_up(how)
            b = self.caller("B")
            self.call("B", b)
            self.assertIsNone(self.pool.owner("a", ""))
            self.check_question(None)
            self.late_answer("A")
            self.assertIs(self.pool.owner("a", ""), b)
            self.check_question(b)
            self.finish("B")

    def test_the_same_hosts_next_call_is_not_held_back(self) -> None:
        """
        A call of the host that gave up on A (same C{Call.host}) owns the server's next
        question at once, though A is never answered; another host's call does not.
        """
        self.warm()
        self.caller("A").host = "ada"
        self.given_up("cancel")
        again = self.caller("A again")
        again.host = "ada"
        self.call("A again", again)
        self.assertIs(self.pool.owner("a", ""), again)
        self.check_question(again)
        self.finish("A again")
        stranger = self.caller("B")
        stranger.host = "bob"
        self.call("B", stranger)
        self.assertIsNone(self.pool.owner("a", ""))
        self.finish("B")

    def test_grace_ends_it(self) -> None:
        """A server that never answers the cancelled call counts it for pool.cancelGrace."""
        self.warm()
        self.given_up("cancel")
        self.clock.advance(DEFAULT_CANCEL_GRACE - 2)
        b = self.caller("B")
        self.call("B", b)
        self.clock.advance(1)
        self.check_question(None)
        self.clock.advance(1)
        self.check_question(b)


class NobodysRequestTests(AttributionTestCase):
    """
    A request made for nobody (its client declared nothing it could be asked, so it
    runs with no caller) that is alone in flight owns its server's questions all the
    same: they wait in the broker named after it, and are withdrawn when it ends.
    """

    def test_questions_named_after_the_lone_request(self) -> None:
        """Both questions of the one request in flight carry its name; another's differ."""
        self.warm()
        first = self.call("v1", None)
        one, one_answered = self.question()
        two, two_answered = self.question()
        self.assertEqual(one.route, ROUTE_BROKER)
        self.assertIsNotNone(one.call_id)
        self.assertEqual(two.call_id, one.call_id)
        self.finish("v1")
        self.successResultOf(first)
        self.call("v2", None)
        three, three_answered = self.question()
        self.assertNotIn(three.call_id, (None, one.call_id))
        # Still pending when the pool stops: their upstream is gone by then.
        self.calls += [one_answered, two_answered, three_answered]

    def test_not_alone_is_nobodys(self) -> None:
        """With two requests made for nobody in flight, the question is named after neither."""
        self.warm()
        self.call("v1", None)
        self.call("v2", None)
        self.check_question(None)

    def test_cancel_withdraws_its_question(self) -> None:
        """
        The request's client cancels it (or goes): its question leaves the broker as
        cancelled, withdrawn, and the server is answered C{cancel} at once.
        """
        self.warm()
        call = self.call("v1", None)
        question, answered = self.question()
        call.cancel()
        self.failureResultOf(call, CancelledError)
        self.assertEqual(question.state, QuestionState.CANCELLED)
        self.assertEqual(question.answered_by, "withdrawn")
        self.assertEqual(self.successResultOf(answered), {"action": "cancel"})

    def test_finishing_withdraws_too(self) -> None:
        """
        A request that ends on its own withdraws what it asked that still waits, as a
        caller's call does: nothing waits for that answer any more.
        """
        self.warm()
        call = self.call("v1", None)
        question, answered = self.question()
        self.finish("v1")
        self.successResultOf(call)
        self.assertEqual(question.answered_by, "withdrawn")
        self.assertEqual(self.successResultOf(answered), {"action": "cancel"})

    def test_stopping_withdraws_nothing(self) -> None:
        """
        The daemon stopping cuts the request short without giving it up: its question
        stays pending, for the next daemon to list.
        """
        self.warm()
        self.call("v1", None)
        question, answered = self.question()
        self.broker.closing()
        self.successResultOf(self.pool.stopService())
        self.assertTrue(question.pending)
        self.calls.append(answered)

    def test_late_question_not_withdrawn_with_the_next(self) -> None:
        """
        A question asked while a cancelled request may still run is nobody's: cancelling
        the request alone in flight then does not withdraw it.
        """
        self.warm()
        first = self.call("v1", None)
        first.cancel()
        self.failureResultOf(first, CancelledError)
        second = self.call("v2", None)
        question, answered = self.question()
        self.assertIsNone(question.call_id)
        second.cancel()
        self.failureResultOf(second, CancelledError)
        self.assertTrue(question.pending)
        self.assertNoResult(answered)
        self.calls.append(answered)


class AskingInstancesTests(AttributionTestCase):
    """
    Once a shared server has asked a question during a call, each call made for a
    caller runs on an instance nobody else uses, so its questions are its own.
    """

    max_asking_instances = 3

    def learned(self, asking: Callable[[], None]) -> bool:
        """Whether the pool says, while C{asking} runs, that server C{a} asks."""
        with capturedLogs() as events:
            asking()
        told = [formatEvent(event) for event in events]
        return any(line.startswith("upstream a asked a question during a call") for line in told)

    def learn(self) -> None:
        self.warm()
        self.call("x", self.caller("X"))
        self.call("y", self.caller("Y"))
        self.assertTrue(self.learned(lambda: self.check_question(None)))
        self.finish("x")
        self.finish("y")

    def test_learned_with_one_call(self) -> None:
        """
        A question with one call in flight is that call's, and teaches the pool that
        the server asks: a call overlapping it runs on an instance of its own, where
        its question finds it, rather than where two calls' questions could meet.
        """
        self.warm()
        a, b = self.caller("A"), self.caller("B")
        self.call("a1", a)
        self.assertTrue(self.learned(lambda: self.check_question(a)))
        self.call("b1", b)
        self.assertEqual(len(self.connector.started("a")), 2)
        self.assertEqual(self.pool.owner("a", ""), a)
        self.assertEqual(self.pool.owner("a", "ask-1"), b)

    def test_not_learned_without_a_request(self) -> None:
        """A question asked outside any request teaches nothing: calls keep sharing."""
        self.warm()
        self.assertFalse(self.learned(lambda: self.check_question(None)))
        self.call("a1", self.caller("A"))
        self.call("b1", self.caller("B"))
        self.assertEqual(len(self.connector.started("a")), 1)

    def test_each_call_its_own_instance(self) -> None:
        """Overlapping calls run on instances of their own; each question finds its call."""
        self.learn()
        a, b = self.caller("A"), self.caller("B")
        self.call("a1", a)
        self.call("b1", b)
        # The server's own instance is idle, so A takes it; B gets one of its own.
        [base, _own] = self.connector.started("a")
        self.assertEqual(self.pool.owner("a", ""), a)
        self.assertEqual(self.pool.owner("a", "ask-1"), b)
        self.check_question(b, server="a")  # the newest instance, b's
        counts = self.asked_counts()
        from_first = base.peer.request(ELICIT, FORM)
        self.assertEqual(self.asked_counts(), {**counts, "A": counts["A"] + 1})
        self.askers["A"].asked[-1].callback(ACCEPTED)
        self.assertEqual(self.successResultOf(from_first), ACCEPTED)

    def test_idle_instance_reused(self) -> None:
        """A call takes an idle instance of the server before any new one is started."""
        self.learn()
        done = self.call("a1", self.caller("A"))
        self.finish("a1")
        self.successResultOf(done)
        started = len(self.connector.started("a"))
        self.call("b1", self.caller("B"))
        self.assertEqual(len(self.connector.started("a")), started)

    def test_cap_shares_again(self) -> None:
        """Past pool.maxAskingInstances, calls share instances and questions wait in the broker."""
        self.learn()
        for name in "ABC":
            self.call(f"{name}1", self.caller(name))
        self.assertEqual(len(self.connector.started("a")), 3)
        self.call("D1", self.caller("D"))
        self.assertEqual(len(self.connector.started("a")), 3)
        self.assertIsNone(self.pool.owner("a", ""))

    def test_strangers_stay_on_the_servers_own(self) -> None:
        """A call made for nobody (a /v1 call) does not take an instance of its own."""
        self.learn()
        started = len(self.connector.started("a"))
        self.call("v1", None)
        self.call("v2", None)
        self.assertEqual(len(self.connector.started("a")), started)


class NotifyTests(AttributionTestCase):
    """L{Pool.notify}: a notification reaches the running instances serving a client."""

    def heard(self, upstream: Any) -> list[str]:
        return [n.method for n in upstream.notifications if n.method != "notifications/initialized"]

    def test_shared_every_instance_client_its_own(self) -> None:
        self.warm()
        self.call("x", self.caller("X"), server="c", client="x")
        self.call("y", self.caller("Y"), server="c", client="y")
        self.assertEqual(self.pool.notify("a", "anyone", "notifications/roots/list_changed"), 1)
        self.assertEqual(self.pool.notify("c", "x", "notifications/roots/list_changed"), 1)
        self.assertEqual(self.pool.notify("c", "z", "notifications/roots/list_changed"), 0)
        self.assertEqual(self.pool.notify("nowhere", "x", "notifications/roots/list_changed"), 0)
        [x, y] = self.connector.started("c")
        self.assertEqual(self.heard(x), ["notifications/roots/list_changed"])
        self.assertEqual(self.heard(y), [])
        self.assertEqual(self.heard(self.upstream("a")), ["notifications/roots/list_changed"])
