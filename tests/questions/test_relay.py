"""
Tests for L{mcpx.questions.relay}: a question goes to the calling client when it may be
asked, to the broker otherwise, and the broker records every one either way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from twisted.internet.defer import CancelledError, Deferred, fail
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.call import Call as Caller
from mcpx.call import ClientUnreachable
from mcpx.questions.broker import Broker
from mcpx.questions.record import ROUTE_BROKER, ROUTE_CLIENT, Question, QuestionState
from mcpx.questions.relay import Relay, own_root, rewritten
from mcpx.spec.questions import ELICIT, LIST_ROOTS, SAMPLE
from mcpx.wire.errors import RpcError

SERVER = "github"
SCOPE = "host-1"
TTL = 120.0
CLIENT_WAIT = 300.0

FORM: dict[str, Any] = {
    "message": "who are you?",
    "requestedSchema": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    },
}
ACCEPTED = {"action": "accept", "content": {"name": "ada"}}
SAMPLING: dict[str, Any] = {
    "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
    "maxTokens": 10,
}
SAMPLED = {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m"}
EVERYTHING: dict[str, Any] = {"elicitation": {}, "sampling": {}, "roots": {}}


class FakeAsker:
    """A client that is asked questions and answers when the test says."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, Any], str, Deferred[Any]]] = []
        self.cancelled: list[str] = []
        self.told: list[tuple[str, dict[str, Any]]] = []
        self.unreachable = False

    def ask(self, method: str, params: dict[str, Any], key: str) -> Deferred[Any]:
        if self.unreachable:
            return fail(ClientUnreachable("gone"))
        answer: Deferred[Any] = Deferred(lambda _: self.cancelled.append(key))
        self.asked.append((method, params, key, answer))
        return answer

    def last(self) -> Deferred[Any]:
        return self.asked[-1][3]

    def tell(self, method: str, params: dict[str, Any]) -> bool:
        self.told.append((method, params))
        return True


class RaisingAsker:
    """A client whose connection is found closed while the question is being put."""

    def ask(self, method: str, params: dict[str, Any], key: str) -> Deferred[Any]:
        raise ClientUnreachable("closed before sending")

    def tell(self, method: str, params: dict[str, Any]) -> bool:
        return False


class RelayTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.broker = Broker(self.clock, store=None, ttl=TTL)
        self.owners: dict[tuple[str, str], Caller] = {}
        self.holds: list[tuple[str, str]] = []
        self.releases = 0
        self.asker = FakeAsker()
        self.relay = self.make_relay()

    def make_relay(self, native: bool = True, roots: tuple[str, ...] = ()) -> Relay:
        return Relay(
            self.broker,
            self.clock,
            owner=self.owner,
            hold=self.hold,
            native=native,
            client_wait=CLIENT_WAIT,
            roots=roots,
        )

    def owner(self, server: str, scope_key: str) -> Caller | None:
        return self.owners.get((server, scope_key))

    def hold(self, server: str, scope_key: str) -> Callable[[], None]:
        self.holds.append((server, scope_key))

        def release() -> None:
            self.releases += 1

        return release

    def caller(self, capabilities: Mapping[str, Any] = EVERYTHING, **kw: Any) -> Caller:
        kw.setdefault("asker", self.asker)
        return Caller("call-1", capabilities, **kw)

    def ask(
        self,
        method: str = ELICIT,
        params: Mapping[str, Any] = FORM,
        relay: Relay | None = None,
        **kw: Any,
    ) -> Deferred[dict[str, Any]]:
        relay = relay or self.relay
        return Deferred.fromCoroutine(relay.ask(SERVER, SCOPE, method, params, **kw))

    def only_question(self) -> Question:
        questions = self.broker.questions()
        self.assertEqual(len(questions), 1)
        return questions[0]

    def assert_held_and_released(self) -> None:
        self.assertEqual(self.holds, [(SERVER, SCOPE)])
        self.assertEqual(self.releases, 1)


class NativeTests(RelayTests):
    def test_client_answers(self) -> None:
        """
        A client that declared elicitation is asked; its answer goes upstream, and the broker
        records the question as put to the client and answered by it.
        """
        answered = self.ask(call=self.caller())
        self.assertNoResult(answered)
        question = self.only_question()
        self.assertEqual(question.route, ROUTE_CLIENT)
        self.assertEqual(question.call_id, "call-1")
        self.assertTrue(question.pending)
        [(method, params, key, reply)] = self.asker.asked
        self.assertEqual(method, ELICIT)
        self.assertEqual(params["message"], f"{SERVER} (via mcpx) asks: who are you?")
        self.assertEqual(key, question.id)
        reply.callback(ACCEPTED)
        self.assertEqual(self.successResultOf(answered), ACCEPTED)
        self.assertIs(question.state, QuestionState.ANSWERED)
        self.assertEqual(question.answered_by, "client")
        self.assertEqual(question.answer, ACCEPTED)
        self.assertEqual(self.asker.cancelled, [])

    def test_owner_attributes(self) -> None:
        """A question that came without its call goes to the pool's owner of the connection."""
        self.owners[(SERVER, SCOPE)] = self.caller()
        answered = self.ask()
        self.assertEqual(self.only_question().route, ROUTE_CLIENT)
        self.asker.last().callback(ACCEPTED)
        self.assertEqual(self.successResultOf(answered), ACCEPTED)

    def test_given_caller_beats_owner(self) -> None:
        """The call a question came with is the one asked, whatever the pool's owner is."""
        other = FakeAsker()
        self.owners[(SERVER, SCOPE)] = Caller("call-2", EVERYTHING, asker=other)
        self.ask(call=self.caller())
        self.assertEqual(len(self.asker.asked), 1)
        self.assertEqual(other.asked, [])
        self.assertEqual(self.only_question().call_id, "call-1")

    def test_attributed_call_marked(self) -> None:
        """A call a question is attributed to is marked as asked; a call that is not, is not."""
        mine, stranger = self.caller(), Caller("call-2", EVERYTHING, asker=FakeAsker())
        self.assertFalse(mine.asked)
        self.ask(call=mine)
        self.assertTrue(mine.asked)
        self.assertFalse(stranger.asked)
        broker_routed = self.caller({}, asker=None)
        self.ask(call=broker_routed)
        self.assertTrue(broker_routed.asked)

    def test_key_used(self) -> None:
        """A question from an C{inputRequests} round is put to the client under its key."""
        self.ask(call=self.caller(), key="who")
        self.assertEqual(self.asker.asked[0][2], "who")

    def test_sampling_and_roots(self) -> None:
        """Sampling and roots go to a client that declared them, and back with its answer."""
        sampled = self.ask(SAMPLE, SAMPLING, call=self.caller())
        self.asker.last().callback(SAMPLED)
        self.assertEqual(self.successResultOf(sampled), SAMPLED)
        self.assertEqual(self.asker.asked[-1][1], SAMPLING)
        roots = {"roots": [{"uri": "file:///work"}]}
        listed = self.ask(LIST_ROOTS, {}, call=self.caller())
        self.asker.last().callback(roots)
        self.assertEqual(self.successResultOf(listed), roots)
        self.assertEqual([q.answered_by for q in self.broker.questions()], ["client", "client"])

    def test_deadlines_held_until_answered(self) -> None:
        """The pool's call deadlines are held while the client thinks, released once after."""
        answered = self.ask(call=self.caller())
        self.assertEqual(self.holds, [(SERVER, SCOPE)])
        self.assertEqual(self.releases, 0)
        self.asker.last().callback(ACCEPTED)
        self.successResultOf(answered)
        self.assert_held_and_released()

    def test_client_error_relayed(self) -> None:
        """A JSON-RPC error from the client goes upstream as that error."""
        answered = self.ask(call=self.caller())
        self.asker.last().errback(RpcError(-32603, "the client broke"))
        error = self.failureResultOf(answered, RpcError).value
        assert isinstance(error, RpcError)
        self.assertEqual((error.code, error.message), (-32603, "the client broke"))
        question = self.only_question()
        self.assertIs(question.state, QuestionState.CANCELLED)
        self.assertEqual(question.answered_by, "client")
        self.assert_held_and_released()

    def test_answered_in_broker_first(self) -> None:
        """
        A question put to the client can be answered in the broker too; the first answer
        wins and the client's ask is cancelled.
        """
        answered = self.ask(call=self.caller())
        question = self.only_question()
        self.broker.answer(question.id, ACCEPTED, by="cli")
        self.assertEqual(self.successResultOf(answered), ACCEPTED)
        self.assertEqual(self.asker.cancelled, [question.id])
        self.assertEqual(question.answered_by, "cli")
        self.assert_held_and_released()

    def test_deadline_cancels(self) -> None:
        """
        A client that stays silent past the wait answers C{cancel} upstream: the question
        expires and the client's ask is cancelled.
        """
        answered = self.ask(call=self.caller())
        question = self.only_question()
        self.assertEqual(question.deadline, CLIENT_WAIT)
        self.clock.advance(CLIENT_WAIT - 1)
        self.assertNoResult(answered)
        self.clock.advance(1)
        self.assertEqual(self.successResultOf(answered), {"action": "cancel"})
        self.assertEqual(self.asker.cancelled, [question.id])
        self.assertIs(question.state, QuestionState.EXPIRED)
        self.assertEqual(question.answered_by, "expiry")
        self.assert_held_and_released()

    def test_deadline_refuses_sampling(self) -> None:
        """An expired sampling question is refused upstream with an error, never answered."""
        answered = self.ask(SAMPLE, SAMPLING, call=self.caller())
        self.clock.advance(CLIENT_WAIT)
        self.failureResultOf(answered, RpcError)
        self.assertEqual(len(self.asker.cancelled), 1)
        self.assert_held_and_released()

    def test_withdrawn(self) -> None:
        """
        When the upstream gives up on its question, the client's ask is cancelled and the
        question ends as withdrawn.
        """
        answered = self.ask(call=self.caller())
        question = self.only_question()
        answered.cancel()
        self.failureResultOf(answered, CancelledError)
        self.assertEqual(self.asker.cancelled, [question.id])
        self.assertIs(question.state, QuestionState.CANCELLED)
        self.assertEqual(question.answered_by, "withdrawn")
        self.assert_held_and_released()
        # Its deadline passing later changes nothing.
        self.clock.advance(CLIENT_WAIT)
        self.assertEqual(question.answered_by, "withdrawn")

    def test_unfit_client_answer_goes_to_the_server(self) -> None:
        """
        A client's form answer that does not fit the requested schema goes upstream all
        the same, for the server to judge as it would directly: it is not held in a
        broker nobody may watch (issue 43, item 7).
        """
        unfit = {"action": "accept", "content": {"name": 7}}
        answered = self.ask(call=self.caller())
        self.asker.last().callback(unfit)
        self.assertEqual(self.successResultOf(answered), unfit)
        question = self.only_question()
        self.assertFalse(question.pending)
        self.assertEqual(question.answered_by, "client")
        self.assert_held_and_released()

    def test_client_decline_unchecked(self) -> None:
        """A client declining a form needs no content: it goes upstream as it is."""
        answered = self.ask(call=self.caller())
        self.asker.last().callback({"action": "decline"})
        self.assertEqual(self.successResultOf(answered), {"action": "decline"})
        self.assertEqual(self.only_question().answered_by, "client")


class BrokerRouteTests(RelayTests):
    def test_client_did_not_declare(self) -> None:
        """A client that did not declare the kind is not asked; the broker's answer goes up."""
        answered = self.ask(call=self.caller({"sampling": {}}))
        self.assertEqual(self.asker.asked, [])
        question = self.only_question()
        self.assertEqual(question.route, ROUTE_BROKER)
        self.assertEqual(question.call_id, "call-1")
        self.assertNoResult(answered)
        self.broker.answer(question.id, ACCEPTED, by="cli")
        self.assertEqual(self.successResultOf(answered), ACCEPTED)
        self.assertEqual(question.answered_by, "cli")
        self.assert_held_and_released()

    def test_url_only_client_not_sent_form(self) -> None:
        """A client that declared only url elicitation leaves a form to the broker."""
        self.ask(call=self.caller({"elicitation": {"url": {}}}))
        self.assertEqual(self.asker.asked, [])
        self.assertEqual(self.only_question().route, ROUTE_BROKER)

    def test_no_asker(self) -> None:
        """A caller mcpx cannot reach (a sessionless POST) leaves the question to the broker."""
        self.ask(call=self.caller(asker=None))
        self.assertEqual(self.only_question().route, ROUTE_BROKER)

    def test_native_off(self) -> None:
        """With C{proto.native} off even a client that declared everything is not asked."""
        relay = self.make_relay(native=False)
        answered = self.ask(relay=relay, call=self.caller())
        self.assertEqual(self.asker.asked, [])
        question = self.only_question()
        self.assertEqual(question.route, ROUTE_BROKER)
        self.broker.decline(question.id, by="api")
        self.assertEqual(self.successResultOf(answered), {"action": "decline"})
        self.assert_held_and_released()

    def test_no_caller(self) -> None:
        """A question nobody's call owns waits in the broker, attributed to no call."""
        answered = self.ask()
        question = self.only_question()
        self.assertEqual((question.route, question.call_id), (ROUTE_BROKER, None))
        self.assertEqual(question.deadline, TTL)
        self.clock.advance(TTL)
        self.assertEqual(self.successResultOf(answered), {"action": "cancel"})
        self.assertIs(question.state, QuestionState.EXPIRED)
        self.assert_held_and_released()

    def test_withdrawn(self) -> None:
        """The upstream giving up on a broker question withdraws it."""
        answered = self.ask()
        answered.cancel()
        self.failureResultOf(answered, CancelledError)
        question = self.only_question()
        self.assertIs(question.state, QuestionState.CANCELLED)
        self.assertEqual(question.answered_by, "withdrawn")
        self.assert_held_and_released()

    def test_roots_nobody_asked(self) -> None:
        """Roots nobody can be asked for are answered by mcpx: no roots, and recorded so."""
        for caller in (None, self.caller({"elicitation": {}})):
            self.broker = Broker(self.clock, store=None, ttl=TTL)
            relay = self.make_relay()
            answered = self.ask(LIST_ROOTS, {}, relay=relay, call=caller)
            self.assertEqual(self.successResultOf(answered), {"roots": []})
            question = self.only_question()
            self.assertIs(question.state, QuestionState.ANSWERED)
            self.assertEqual(question.answered_by, "mcpx")
            self.assertEqual(question.answer, {"roots": []})
        self.assertEqual(self.asker.asked, [])

    def test_configured_roots(self) -> None:
        """
        With C{proto.roots} set, mcpx answers a roots question nobody can be asked with
        those roots: directories as C{file://} URIs, URIs as given.
        """
        relay = self.make_relay(roots=("/srv/my project", "file:///home/me/code/"))
        answered = self.ask(LIST_ROOTS, {}, relay=relay)
        self.assertEqual(
            self.successResultOf(answered),
            {
                "roots": [
                    {"uri": "file:///srv/my%20project", "name": "my project"},
                    {"uri": "file:///home/me/code/", "name": "code"},
                ]
            },
        )

    def test_configured_roots_relative(self) -> None:
        """A relative directory in C{proto.roots} is taken from where the daemon started."""
        root = own_root("work")
        self.assertEqual(root["uri"], Path("work").resolve().as_uri())

    def test_roots_native_off(self) -> None:
        """With C{proto.native} off, mcpx answers roots itself even for a declaring client."""
        relay = self.make_relay(native=False)
        answered = self.ask(LIST_ROOTS, {}, relay=relay, call=self.caller())
        self.assertEqual(self.successResultOf(answered), {"roots": []})
        self.assertEqual(self.asker.asked, [])


class UnreachableTests(RelayTests):
    def assert_rerouted_and_answerable(self, answered: Deferred[dict[str, Any]]) -> None:
        question = self.only_question()
        self.assertEqual(question.route, ROUTE_BROKER)
        self.assertTrue(question.pending)
        self.assertEqual(question.call_id, "call-1")
        self.assertNoResult(answered)
        self.broker.answer(question.id, ACCEPTED, by="cli")
        self.assertEqual(self.successResultOf(answered), ACCEPTED)
        self.assertEqual(question.answered_by, "cli")
        self.assert_held_and_released()

    def test_unreachable_at_once(self) -> None:
        """A client whose connection is gone when asked: the question goes to the broker."""
        self.asker.unreachable = True
        self.assert_rerouted_and_answerable(self.ask(call=self.caller()))

    def test_unreachable_raised(self) -> None:
        """An asker that raises L{ClientUnreachable} is rerouted the same way."""
        self.assert_rerouted_and_answerable(self.ask(call=self.caller(asker=RaisingAsker())))

    def test_unreachable_later(self) -> None:
        """A client whose connection goes while it is being asked: the broker takes over."""
        answered = self.ask(call=self.caller())
        self.assertEqual(self.only_question().route, ROUTE_CLIENT)
        self.asker.last().errback(ClientUnreachable("the connection went"))
        self.assert_rerouted_and_answerable(answered)

    def test_rerouted_keeps_deadline(self) -> None:
        """A rerouted question keeps the deadline it had, and expiry answers cancel."""
        answered = self.ask(call=self.caller())
        self.clock.advance(10)
        self.asker.last().errback(ClientUnreachable("the connection went"))
        self.clock.advance(CLIENT_WAIT - 10)
        self.assertEqual(self.successResultOf(answered), {"action": "cancel"})
        self.assertIs(self.only_question().state, QuestionState.EXPIRED)


class UrlCompletionTests(RelayTests):
    """C{notifications/elicitation/complete} reaches the client that was asked."""

    URL_ASK: Mapping[str, Any] = {
        "mode": "url",
        "message": "sign in",
        "url": "https://example.com/login",
        "elicitationId": "e-1",
    }
    URL_CLIENT: Mapping[str, Any] = {"elicitation": {"url": {}}}

    def test_completion_told_to_the_client_asked(self) -> None:
        """
        Once the client accepted a url-mode elicitation, the server's completion of it is
        passed on to that client, once, and to nobody for another server's id.
        """
        answered = self.ask(ELICIT, self.URL_ASK, call=self.caller(self.URL_CLIENT))
        self.asker.last().callback({"action": "accept"})
        self.successResultOf(answered)
        self.assertFalse(self.relay.completed("other", {"elicitationId": "e-1"}))
        self.assertTrue(self.relay.completed(SERVER, {"elicitationId": "e-1"}))
        self.assertEqual(
            self.asker.told, [("notifications/elicitation/complete", {"elicitationId": "e-1"})]
        )
        self.assertFalse(self.relay.completed(SERVER, {"elicitationId": "e-1"}))

    def test_declined_not_remembered(self) -> None:
        """A declined url elicitation has nothing to complete: nothing is told."""
        answered = self.ask(ELICIT, self.URL_ASK, call=self.caller(self.URL_CLIENT))
        self.asker.last().callback({"action": "decline"})
        self.successResultOf(answered)
        self.assertFalse(self.relay.completed(SERVER, {"elicitationId": "e-1"}))
        self.assertEqual(self.asker.told, [])

    def test_forgotten_after_the_wait(self) -> None:
        """A completion that never comes is forgotten after the client wait."""
        answered = self.ask(ELICIT, self.URL_ASK, call=self.caller(self.URL_CLIENT))
        self.asker.last().callback({"action": "accept"})
        self.successResultOf(answered)
        self.clock.advance(CLIENT_WAIT + 1)
        self.assertFalse(self.relay.completed(SERVER, {"elicitationId": "e-1"}))

    def test_handlers_route_the_notification(self) -> None:
        """The instance's handlers pass the notification on, after telling the client."""
        heard: list[str] = []
        handlers = self.relay.handlers(SERVER, "", lambda method, params: heard.append(method))
        answered = self.ask(ELICIT, self.URL_ASK, call=self.caller(self.URL_CLIENT))
        self.asker.last().callback({"action": "accept"})
        self.successResultOf(answered)
        handlers.notify("notifications/elicitation/complete", {"elicitationId": "e-1"})
        self.assertEqual(len(self.asker.told), 1)
        self.assertEqual(heard, ["notifications/elicitation/complete"])


class RewrittenTests(RelayTests):
    def test_message_names_server(self) -> None:
        """An elicitation's message names the server that asks; the original is untouched."""
        params = dict(FORM)
        shown = rewritten(SERVER, ELICIT, params)
        self.assertEqual(shown["message"], "github (via mcpx) asks: who are you?")
        self.assertEqual(shown["requestedSchema"], FORM["requestedSchema"])
        self.assertEqual(params, FORM)

    def test_other_kinds_unchanged(self) -> None:
        """Sampling and roots are passed on as they were asked."""
        self.assertEqual(rewritten(SERVER, SAMPLE, SAMPLING), SAMPLING)
        self.assertEqual(rewritten(SERVER, LIST_ROOTS, {}), {})

    def test_broker_shows_rewritten(self) -> None:
        """The broker lists the question as it is shown: with the server named."""
        self.ask()
        self.assertEqual(
            self.only_question().params["message"], "github (via mcpx) asks: who are you?"
        )


class HeldResponsesTests(RelayTests):
    def test_held_answer_given(self) -> None:
        """
        An answer the client sent ahead under a question's key answers it without asking
        anyone, and the broker records it as the client's.
        """
        caller = self.caller(held={"who": ACCEPTED})
        answered = self.ask(call=caller, key="who")
        self.assertEqual(self.successResultOf(answered), ACCEPTED)
        self.assertEqual(self.asker.asked, [])
        question = self.only_question()
        self.assertEqual(question.route, ROUTE_CLIENT)
        self.assertIs(question.state, QuestionState.ANSWERED)
        self.assertEqual(question.answered_by, "client")
        self.assertEqual(question.answer, ACCEPTED)
        # Nothing is left behind: no expiry fires later.
        self.clock.advance(CLIENT_WAIT * 2)
        self.assertIs(question.state, QuestionState.ANSWERED)

    def test_held_answer_without_asker(self) -> None:
        """A held answer is given even when the client could not otherwise be asked."""
        caller = self.caller({}, asker=None, held={"who": ACCEPTED})
        self.assertEqual(self.successResultOf(self.ask(call=caller, key="who")), ACCEPTED)

    def test_held_answer_once(self) -> None:
        """A held answer answers one question: the next with that key is asked."""
        caller = self.caller(held={"who": ACCEPTED})
        self.successResultOf(self.ask(call=caller, key="who"))
        self.ask(call=caller, key="who")
        self.assertEqual([key for _, _, key, _ in self.asker.asked], ["who"])

    def test_unfit_held_answer_goes_to_the_server(self) -> None:
        """
        A held (2026-07-28 C{inputResponses}) form answer that does not fit the
        requested schema goes upstream for the server to judge, not asked again.
        """
        unfit = {"action": "accept", "content": {"name": 7}}
        answered = self.ask(call=self.caller(held={"who": unfit}), key="who")
        self.assertEqual(self.successResultOf(answered), unfit)
        self.assertEqual(self.asker.asked, [])

    def test_other_key_asked(self) -> None:
        """A question whose key matches nothing held is asked as usual."""
        caller = self.caller(held={"who": ACCEPTED})
        answered = self.ask(call=caller, key="where")
        self.assertNoResult(answered)
        self.assertEqual([key for _, _, key, _ in self.asker.asked], ["where"])
        self.assertEqual(caller.held, {"who": ACCEPTED})


class HandlersTests(RelayTests):
    def test_handlers_relay(self) -> None:
        """The handlers of an instance relay its questions with its server and scope key."""
        handlers = self.relay.handlers(SERVER, SCOPE)
        self.assertTrue(handlers.can_answer(ELICIT))
        answered = Deferred.fromCoroutine(
            handlers.answer(ELICIT, FORM, call=self.caller(), key="k")
        )
        question = self.only_question()
        self.assertEqual((question.server, question.scope_key), (SERVER, SCOPE))
        self.asker.last().callback(ACCEPTED)
        self.assertEqual(self.successResultOf(answered), ACCEPTED)


class RootsSourceTests(RelayTests):
    """
    A C{roots/list} no one call's client can answer goes to the roots source: the latest
    client that declared roots and uses the server.
    """

    def setUp(self) -> None:
        super().setUp()
        self.source = FakeAsker()
        self.sources: list[tuple[str, str]] = []
        self.relay.roots_source = self.roots_source

    def roots_source(self, server: str, scope_key: str) -> FakeAsker | None:
        self.sources.append((server, scope_key))
        return self.source

    def test_outside_any_call(self) -> None:
        """Asked outside any call, the source's client is asked and its roots go upstream."""
        answered = self.ask(LIST_ROOTS, {})
        [(method, _, _, reply)] = self.source.asked
        self.assertEqual((method, self.sources), (LIST_ROOTS, [(SERVER, SCOPE)]))
        reply.callback({"roots": [{"uri": "file:///srv/a"}]})
        self.assertEqual(self.successResultOf(answered), {"roots": [{"uri": "file:///srv/a"}]})
        question = self.only_question()
        self.assertEqual((question.route, question.call_id), (ROUTE_CLIENT, None))

    def test_call_without_roots(self) -> None:
        """A call whose client declared no roots leaves the question to the source."""
        self.owners[(SERVER, SCOPE)] = self.caller({"elicitation": {}})
        self.ask(LIST_ROOTS, {})
        self.assertEqual((len(self.asker.asked), len(self.source.asked)), (0, 1))

    def test_call_with_roots_asks_its_own(self) -> None:
        """A call whose client declared roots is asked itself, whoever is the source."""
        self.owners[(SERVER, SCOPE)] = self.caller()
        self.ask(LIST_ROOTS, {})
        self.assertEqual((len(self.asker.asked), len(self.source.asked)), (1, 0))

    def test_unreachable_source(self) -> None:
        """A source that cannot be reached leaves mcpx's own roots, at once."""
        self.source.unreachable = True
        relay = self.make_relay(roots=("/srv/own",))
        relay.roots_source = self.roots_source
        answered = self.ask(LIST_ROOTS, {}, relay=relay)
        self.assertEqual(
            self.successResultOf(answered), {"roots": [{"uri": "file:///srv/own", "name": "own"}]}
        )

    def test_native_off(self) -> None:
        """With C{proto.native} off nobody is asked: mcpx answers with its own roots."""
        relay = self.make_relay(native=False)
        relay.roots_source = self.roots_source
        self.assertEqual(self.successResultOf(self.ask(LIST_ROOTS, {}, relay=relay)), {"roots": []})
        self.assertEqual(self.source.asked, [])


class WithdrawTests(RelayTests):
    """A call given up on withdraws its questions: from its client, or from the broker."""

    def test_from_the_client(self) -> None:
        """The client is told (its question cancelled), the server answered cancel."""
        call = self.caller()
        answered = self.ask(call=call)
        call.withdraw()
        self.assertEqual(self.successResultOf(answered), {"action": "cancel"})
        question = self.only_question()
        self.assertEqual(self.asker.cancelled, [question.id])
        self.assertEqual(
            (question.state, question.answered_by), (QuestionState.CANCELLED, "withdrawn")
        )

    def test_late_answer_dropped(self) -> None:
        """What the client answers after the withdrawal goes nowhere."""
        call = self.caller()
        answered = self.ask(call=call)
        reply = self.asker.last()
        call.withdraw()
        self.assertTrue(reply.called)  # cancelled: a late answer has nothing to fire
        self.assertEqual(self.successResultOf(answered), {"action": "cancel"})
        self.assertEqual(self.only_question().answer, {"action": "cancel"})

    def test_from_the_broker(self) -> None:
        """A question of the call that waits in the broker ends as withdrawn."""
        call = self.caller({})
        answered = self.ask(call=call)
        self.assertEqual(self.only_question().route, ROUTE_BROKER)
        call.withdraw()
        self.assertEqual(self.successResultOf(answered), {"action": "cancel"})
        self.assertEqual(self.only_question().answered_by, "withdrawn")

    def test_asked_after_withdrawal(self) -> None:
        """A question for a call already given up on is withdrawn before anyone sees it."""
        call = self.caller()
        call.withdraw()
        answered = self.ask(SAMPLE, SAMPLING, call=call)
        self.failureResultOf(answered, RpcError)
        self.assertEqual(self.asker.asked, [])


class TellCandidatesTests(RelayTests):
    """An unattributed question: each caller in flight is told it may be theirs."""

    def test_told_not_shown(self) -> None:
        first, second = self.caller(), self.caller(asker=FakeAsker())
        relay = Relay(
            self.broker,
            self.clock,
            owner=self.owner,
            hold=self.hold,
            candidates=lambda server, scope: [first, None, second, first],
        )
        self.ask(relay=relay)
        question = self.only_question()
        self.assertEqual(question.route, ROUTE_BROKER)
        for asker in (self.asker, second.asker):
            assert isinstance(asker, FakeAsker)
            self.assertEqual(asker.asked, [])
            [(method, params)] = asker.told
            self.assertEqual(method, "notifications/message")
            self.assertIn(f"mcpx elicit {question.id}", params["data"])


class FakeLoneRequest:
    """The pool's request made for nobody, alone in flight: it ends when the test says."""

    id = "request-0a1b2c3d-7"

    def __init__(self) -> None:
        self.withdrawals: list[Callable[[], None]] = []

    def on_end(self, withdraw: Callable[[], None]) -> None:
        self.withdrawals.append(withdraw)

    def end(self) -> None:
        for withdraw in self.withdrawals:
            withdraw()


class LoneRequestTests(RelayTests):
    """
    A question with no caller to put it to (its client declared nothing it could be
    asked), asked while the pool says one request made for nobody is alone in flight,
    is that request's: named after it in the broker, and withdrawn when it ends.
    """

    def setUp(self) -> None:
        super().setUp()
        self.lone: FakeLoneRequest | None = FakeLoneRequest()
        self.looked_up = 0
        self.relay = Relay(
            self.broker, self.clock, owner=self.owner, hold=self.hold, lone=self.lone_request
        )

    def lone_request(self, server: str, scope_key: str) -> FakeLoneRequest | None:
        self.looked_up += 1
        return self.lone

    def test_inside_a_result(self) -> None:
        """
        A 2026-07-28 upstream's question (an C{inputRequests} entry, the call given as
        nobody) is named after the lone request, and withdrawn with it.
        """
        assert self.lone is not None
        answered = self.ask(key="name")
        question = self.only_question()
        self.assertEqual((question.route, question.call_id), (ROUTE_BROKER, self.lone.id))
        self.assertNoResult(answered)
        self.lone.end()
        self.assertEqual(self.successResultOf(answered), {"action": "cancel"})
        self.assertEqual(
            (question.state, question.answered_by), (QuestionState.CANCELLED, "withdrawn")
        )

    def test_on_the_connection(self) -> None:
        """A 2025-11-25 upstream's question on its connection is named after it too."""
        assert self.lone is not None
        answered = self.ask()
        self.assertEqual(self.only_question().call_id, self.lone.id)
        self.lone.end()
        self.assertEqual(self.successResultOf(answered), {"action": "cancel"})

    def test_a_caller_comes_first(self) -> None:
        """A call that owns the connection is asked as ever; the pool is not asked for more."""
        self.owners[(SERVER, SCOPE)] = self.caller()
        self.ask()
        self.assertEqual(self.only_question().call_id, "call-1")
        self.assertEqual(self.looked_up, 0)

    def test_none_alone(self) -> None:
        """When no such request is alone in flight, the question is nobody's."""
        self.lone = None
        answered = self.ask()
        self.assertIsNone(self.only_question().call_id)
        self.assertNoResult(answered)
        self.broker.decline(self.only_question().id, by="test")
        self.assertEqual(self.successResultOf(answered), {"action": "decline"})
