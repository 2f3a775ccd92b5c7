# -*- test-case-name: tests.server.test_asking -*-
"""
Tests for the question relay where it meets L{mcpx.server.dispatch.McpServer}: which
requests carry a L{Call} to the pool and with what asker, the C{input_required}
rounds of a 2026-07-28 client, the C{requestState}s it sends back, and the calls that
outlive their client's request once they have asked something.

The upstream's questions are simulated the way the relay puts them: through
C{caller.asker.ask(...)} on the caller the L{FakePool} recorded for the call.
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Mapping
from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.call import Call, CallState, ClientUnreachable
from mcpx.server.conn import Conn
from mcpx.server.dispatch import McpServer
from mcpx.server.request_state import RequestState, binding, state_keys
from mcpx.server.resumable import ConnAsker, ResumableCall
from mcpx.server.roots import Roots
from mcpx.spec.questions import ELICIT, SAMPLE
from mcpx.tasks.task import Task, TaskStatus
from mcpx.wire.errors import INTERNAL_ERROR, INVALID_PARAMS, RpcError
from mcpx.wire.messages import Request
from tests.daemon.fake_pool import FakePool, HeldCall, default_settings, ops_host, text_result
from tests.server import gateway_servers, modern_meta, result_of, servers_config

FORM: dict[str, Any] = {
    "message": "search (via mcpx) asks: which site?",
    "requestedSchema": {
        "type": "object",
        "properties": {"site": {"type": "string"}},
        "required": ["site"],
    },
}
OTHER_FORM: dict[str, Any] = {
    "message": "search (via mcpx) asks: how many pages?",
    "requestedSchema": {"type": "object", "properties": {"pages": {"type": "integer"}}},
}
ACCEPTED: dict[str, Any] = {"action": "accept", "content": {"site": "example.com"}}
PAGES: dict[str, Any] = {"action": "accept", "content": {"pages": 3}}
ELICITING: dict[str, Any] = {"elicitation": {}}

#: The three methods whose upstream may ask, each as mcpx's gateway serves it.
GATEWAY_REQUESTS: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "tools/call",
        {
            "name": "mcpx_call",
            "arguments": {"server": "search", "tool": "web_search", "arguments": {}},
        },
    ),
    ("prompts/get", {"name": "files_review", "arguments": {"path": "a"}}),
    ("resources/read", {"uri": "mcpx://files/file:///a b.txt"}),
)


def call_params(capabilities: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A 2026-07-28 C{tools/call} of C{search}'s C{web_search} through C{mcpx_call}."""
    params: dict[str, Any] = {
        "name": "mcpx_call",
        "arguments": {"server": "search", "tool": "web_search", "arguments": {"q": "mcpx"}},
        "_meta": modern_meta(capabilities),
    }
    params.update(extra)
    return params


def rounds_of(state: str) -> int:
    """The round count a C{requestState} carries (its payload is base64url JSON)."""
    payload = state.partition(".")[0]
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    rounds: int = body["r"]
    return rounds


class FakeClient:
    """A legacy client's end of a connection: records the requests it is sent."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, Any]]] = []
        self.replies: list[Deferred[Any]] = []

    def ask(self, method: str, params: dict[str, Any]) -> Deferred[Any]:
        self.asked.append((method, params))
        reply: Deferred[Any] = Deferred()
        self.replies.append(reply)
        return reply


class Gateway:
    """
    An L{McpServer} over a L{FakePool} whose tool calls are held until the test
    finishes them.
    """

    def __init__(
        self,
        *,
        hold: bool = True,
        passthrough: tuple[str, ...] = (),
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.clock = Clock()
        self.pool = FakePool(gateway_servers(), hold=hold)
        resolved = default_settings(**(settings or {}))
        self.host = ops_host(
            clock=self.clock,
            pid=4242,
            pool=self.pool,
            settings=resolved,
            servers=servers_config("files", "search"),
        )
        self.server = McpServer(
            self.host,
            self.clock,
            passthrough=passthrough,
            state_keys=state_keys(resolved, self.clock.seconds()),
        )
        self._ids = itertools.count(1)

    def modern_conn(self) -> Conn:
        """A 2026-07-28 HTTP request's connection (nothing to push or ask on)."""
        return self.server.open(Conn("http-modern", "host"))

    def legacy_conn(
        self,
        capabilities: dict[str, Any],
        *,
        transport: str = "stdio",
        client: FakeClient | None = None,
    ) -> Conn:
        """A connection whose client shook hands declaring C{capabilities}."""
        conn = self.server.open(
            Conn(transport, "host", ask=client.ask if client is not None else None)
        )
        result_of(
            self.handle(
                conn,
                "initialize",
                {"protocolVersion": "2025-11-25", "capabilities": capabilities},
            )
        )
        return conn

    def handle(self, conn: Conn, method: str, params: dict[str, Any]) -> Deferred[Any]:
        request = Request(next(self._ids), method, params)
        return Deferred.fromCoroutine(self.server.handle(conn, request))

    def caller(self, index: int = -1) -> Call:
        """The caller the pool was given for a call (the latest, unless told)."""
        found = self.pool.callers[index]
        assert isinstance(found, Call), found
        return found

    def held(self, index: int = -1) -> HeldCall:
        """A tool call the pool holds (the latest, unless told)."""
        return self.pool.held[index]

    def task(self, call_id: str) -> Task:
        found = self.host.tasks.get(call_id)
        assert found is not None, f"no task {call_id}"
        return found


def resumable(caller: Call) -> ResumableCall:
    """The 2026-07-28 call C{caller} is asked through; fails if it has another asker."""
    asker = caller.asker
    assert isinstance(asker, ResumableCall), asker
    return asker


def error_of(testcase: SynchronousTestCase, deferred: Deferred[Any]) -> RpcError:
    """The RpcError C{deferred} has already failed with."""
    failure = testcase.failureResultOf(deferred, RpcError)
    error = failure.value
    assert isinstance(error, RpcError)
    return error


class FastPathTests(SynchronousTestCase):
    def test_legacy_undeclared(self) -> None:
        """
        A legacy client that declared none of elicitation, sampling and roots (whatever
        else it declared) reaches the pool with no caller, for a tool call, a prompt and a
        resource read alike, even on a connection mcpx could ask on.
        """
        gateway = Gateway(hold=False)
        conn = gateway.legacy_conn({"experimental": {"x": {}}}, client=FakeClient())
        for method, params in GATEWAY_REQUESTS:
            result_of(gateway.handle(conn, method, params))
        self.assertEqual(gateway.pool.callers, [None, None, None])

    def test_modern_undeclared(self) -> None:
        """
        A 2026-07-28 request whose clientCapabilities hold none of the three reaches the
        pool with no caller, for each method whose upstream may ask.
        """
        gateway = Gateway(hold=False)
        conn = gateway.modern_conn()
        undeclared: tuple[dict[str, Any], ...] = ({}, {"experimental": {"x": {}}})
        for capabilities in undeclared:
            for method, params in GATEWAY_REQUESTS:
                given = {**params, "_meta": modern_meta(capabilities)}
                result = result_of(gateway.handle(conn, method, given))
                self.assertEqual(result["resultType"], "complete")
        self.assertEqual(gateway.pool.callers, [None] * 6)


class CallerTests(SynchronousTestCase):
    def test_modern_declared(self) -> None:
        """
        A 2026-07-28 request that declared elicitation gets a caller named C{call-...},
        with the capabilities as declared, asked through a L{ResumableCall} of that id;
        each request gets a caller of its own.
        """
        gateway = Gateway()
        conn = gateway.modern_conn()
        declared: dict[str, Any] = {
            "elicitation": {"form": {}, "url": {}},
            "experimental": {"y": {}},
        }
        gateway.handle(conn, "tools/call", call_params(declared))
        gateway.handle(conn, "tools/call", call_params(declared))
        first, second = gateway.caller(0), gateway.caller(1)
        self.assertTrue(first.id.startswith("call-"), first.id)
        self.assertNotEqual(first.id, second.id)
        self.assertEqual(first.capabilities, declared)
        self.assertFalse(first.narrow)
        self.assertIsNone(first.held)
        self.assertFalse(first.asked)
        call = resumable(first)
        self.assertEqual((call.id, call.method), (first.id, "tools/call"))

    def test_each_question_kind(self) -> None:
        """Declaring sampling, or roots, is enough for a caller too."""
        gateway = Gateway()
        conn = gateway.modern_conn()
        kinds: tuple[dict[str, Any], ...] = ({"sampling": {}}, {"roots": {"listChanged": True}})
        for capabilities in kinds:
            gateway.handle(conn, "tools/call", call_params(capabilities))
            self.assertEqual(gateway.caller().capabilities, capabilities)
            resumable(gateway.caller())

    def test_method_of_each_request(self) -> None:
        """The resumable call of a prompt or a resource read knows its own method."""
        gateway = Gateway(hold=False)
        conn = gateway.modern_conn()
        for method, params in GATEWAY_REQUESTS[1:]:
            given = {**params, "_meta": modern_meta(ELICITING)}
            result_of(gateway.handle(conn, method, given))
            self.assertEqual(resumable(gateway.caller()).method, method)

    def test_legacy_conn_asker(self) -> None:
        """
        A legacy client that declared elicitation, on a connection mcpx can send
        requests on, gets a L{ConnAsker}: a question put through it goes to that client.
        """
        gateway = Gateway()
        client = FakeClient()
        conn = gateway.legacy_conn(ELICITING, client=client)
        gateway.handle(conn, "tools/call", call_params(None, _meta={}))
        caller = gateway.caller()
        self.assertTrue(caller.id.startswith("call-"), caller.id)
        self.assertEqual(caller.capabilities, ELICITING)
        self.assertIsInstance(caller.asker, ConnAsker)
        assert caller.asker is not None
        answer = caller.asker.ask(ELICIT, FORM, "q1")
        self.assertEqual(client.asked, [(ELICIT, FORM)])
        client.replies[0].callback(ACCEPTED)
        self.assertEqual(self.successResultOf(answer), ACCEPTED)

    def test_legacy_conn_that_cannot_ask(self) -> None:
        """
        A legacy client on a connection mcpx cannot send requests on (a sessionless
        POST) gets a caller with its capabilities but no asker: the broker takes its
        questions.
        """
        gateway = Gateway()
        conn = gateway.legacy_conn(ELICITING, transport="http-post")
        gateway.handle(conn, "tools/call", call_params(None, _meta={}))
        caller = gateway.caller()
        self.assertEqual(caller.capabilities, ELICITING)
        self.assertIsNone(caller.asker)

    def test_passthrough_narrows(self) -> None:
        """
        In pass-through a request that declared nothing still gets a caller, marked to
        declare upstream only what its client declared (nothing), and with no asker.
        """
        gateway = Gateway(passthrough=("search",))
        modern = gateway.modern_conn()
        legacy = gateway.legacy_conn({}, client=FakeClient())
        gateway.handle(
            modern, "tools/call", {"name": "web_search", "arguments": {}, "_meta": modern_meta()}
        )
        gateway.handle(legacy, "tools/call", {"name": "web_search", "arguments": {}})
        self.assertEqual([held.tool for held in gateway.pool.held], ["web_search"] * 2)
        for index in (0, 1):
            caller = gateway.caller(index)
            self.assertTrue(caller.narrow)
            self.assertIsNone(caller.asker)
            self.assertEqual(caller.declared, {})

    def test_passthrough_declared(self) -> None:
        """In pass-through a client that declared elicitation gets narrowed and asked."""
        gateway = Gateway(passthrough=("search",))
        conn = gateway.modern_conn()
        gateway.handle(
            conn,
            "tools/call",
            {"name": "web_search", "arguments": {}, "_meta": modern_meta(ELICITING)},
        )
        caller = gateway.caller()
        self.assertTrue(caller.narrow)
        self.assertEqual(caller.declared, ELICITING)
        resumable(caller)

    def test_native_off(self) -> None:
        """
        With C{proto.native} off no client is asked: a declared client outside
        pass-through takes the fast path, and one in pass-through is only narrowed.
        """
        off = {"proto.native": "false"}
        gateway = Gateway(settings=off)
        gateway.handle(gateway.modern_conn(), "tools/call", call_params(ELICITING))
        legacy = gateway.legacy_conn(ELICITING, client=FakeClient())
        gateway.handle(legacy, "tools/call", call_params(None, _meta={}))
        self.assertEqual(gateway.pool.callers, [None, None])

        passing = Gateway(passthrough=("search",), settings=off)
        passing.handle(
            passing.modern_conn(),
            "tools/call",
            {"name": "web_search", "arguments": {}, "_meta": modern_meta(ELICITING)},
        )
        caller = passing.caller()
        self.assertTrue(caller.narrow)
        self.assertIsNone(caller.asker)

    def test_answers_sent_ahead_are_held(self) -> None:
        """
        A 2026-07-28 request with inputResponses but no requestState resumes nothing:
        its caller holds those answers, whether or not its client may be asked.
        """
        gateway = Gateway()
        conn = gateway.modern_conn()
        responses = {"q1": ACCEPTED, "other": {"action": "decline"}}
        gateway.handle(conn, "tools/call", call_params(None, inputResponses=responses))
        plain = gateway.caller()
        self.assertEqual(plain.held, responses)
        self.assertIsNone(plain.asker)
        gateway.handle(conn, "tools/call", call_params(ELICITING, inputResponses=responses))
        asking = gateway.caller()
        self.assertEqual(asking.held, responses)
        resumable(asking)
        self.assertEqual(asking.take_held("q1"), ACCEPTED)
        self.assertIsNone(asking.take_held("q1"))

    def test_legacy_input_responses_ignored(self) -> None:
        """inputResponses mean nothing in a legacy request: it takes the fast path."""
        gateway = Gateway()
        conn = gateway.legacy_conn({}, client=FakeClient())
        gateway.handle(conn, "tools/call", call_params(None, _meta={}, inputResponses={"q": {}}))
        self.assertEqual(gateway.pool.callers, [None])


class RoundTripTests(SynchronousTestCase):
    """A 2026-07-28 client asked with input_required, and its retries."""

    def setUp(self) -> None:
        self.gateway = Gateway()
        self.conn = self.gateway.modern_conn()
        self.params = call_params(ELICITING)

    def first_round(self) -> tuple[dict[str, Any], Deferred[Any]]:
        """Call, and have the upstream ask L{FORM} as C{q1}: the answer, the question."""
        answering = self.gateway.handle(self.conn, "tools/call", self.params)
        self.assertNoResult(answering)
        asked = resumable(self.gateway.caller()).ask(ELICIT, FORM, "q1")
        self.gateway.clock.advance(0)
        answer: dict[str, Any] = self.successResultOf(answering)
        return answer, asked

    def retry(self, state: str, responses: dict[str, Any]) -> Deferred[Any]:
        params = {**self.params, "inputResponses": responses, "requestState": state}
        return self.gateway.handle(self.conn, "tools/call", params)

    def test_input_required(self) -> None:
        """
        A call whose upstream asks is answered input_required with the question under
        its key and a requestState of round 1, spelled as 2026-07-28 spells an interim
        result (no cache hints); the questions of one turn come together.
        """
        answering = self.gateway.handle(self.conn, "tools/call", self.params)
        call = resumable(self.gateway.caller())
        call.ask(ELICIT, FORM, "q1")
        call.ask(SAMPLE, {"messages": [], "maxTokens": 5}, "q2")
        self.gateway.clock.advance(0)
        answer = self.successResultOf(answering)
        self.assertEqual(answer["resultType"], "input_required")
        self.assertEqual(
            answer["inputRequests"],
            {
                "q1": {"method": ELICIT, "params": FORM},
                "q2": {"method": SAMPLE, "params": {"messages": [], "maxTokens": 5}},
            },
        )
        self.assertIsInstance(answer["requestState"], str)
        self.assertEqual(rounds_of(answer["requestState"]), 1)
        self.assertIn("io.modelcontextprotocol/serverInfo", answer["_meta"])
        self.assertNotIn("ttlMs", answer)
        self.assertNotIn("cacheScope", answer)
        # The upstream call runs on: nothing cancelled it.
        self.assertFalse(self.gateway.held().result.called)

    def test_retry_answers_and_gets_result(self) -> None:
        """
        The retry with inputResponses and the state delivers the answer to the
        question, waits, and gets the final result once the upstream call finishes.
        """
        answer, asked = self.first_round()
        retrying = self.retry(answer["requestState"], {"q1": ACCEPTED})
        self.assertEqual(self.successResultOf(asked), ACCEPTED)
        self.assertNoResult(retrying)
        self.gateway.held().result.callback(text_result("found it"))
        final = self.successResultOf(retrying)
        self.assertEqual(final["resultType"], "complete")
        self.assertEqual(final["content"], [{"type": "text", "text": "found it"}])
        self.assertEqual(len(self.gateway.pool.calls), 1)

    def test_unknown_keys_ignored(self) -> None:
        """
        Answers under keys nothing asked are ignored; the unanswered question is asked
        again in the next round.
        """
        answer, asked = self.first_round()
        again = self.successResultOf(self.retry(answer["requestState"], {"nope": ACCEPTED}))
        self.assertNoResult(asked)
        self.assertEqual(again["resultType"], "input_required")
        self.assertEqual(list(again["inputRequests"]), ["q1"])
        self.assertEqual(rounds_of(again["requestState"]), 2)

    def test_second_round(self) -> None:
        """
        A second question while the retry waits is a second input_required, of round 2,
        with only the new question; answering it finishes the call.
        """
        answer, asked = self.first_round()
        retrying = self.retry(answer["requestState"], {"q1": ACCEPTED})
        self.successResultOf(asked)
        second = resumable(self.gateway.caller()).ask(ELICIT, OTHER_FORM, "q2")
        self.gateway.clock.advance(0)
        again = self.successResultOf(retrying)
        self.assertEqual(again["resultType"], "input_required")
        self.assertEqual(again["inputRequests"], {"q2": {"method": ELICIT, "params": OTHER_FORM}})
        self.assertEqual(rounds_of(again["requestState"]), 2)
        last = self.retry(again["requestState"], {"q2": PAGES})
        self.assertEqual(self.successResultOf(second), PAGES)
        self.gateway.held().result.callback(text_result("two pages"))
        self.assertEqual(self.successResultOf(last)["content"][0]["text"], "two pages")

    def test_retry_after_the_call_finished(self) -> None:
        """A retry that comes after the call finished gets its result at once."""
        answer, asked = self.first_round()
        asked.addErrback(lambda _: None)
        self.gateway.held().result.callback(text_result("done anyway"))
        final = self.successResultOf(self.retry(answer["requestState"], {}))
        self.assertEqual(final["content"][0]["text"], "done anyway")

    def test_too_many_rounds(self) -> None:
        """
        A call that asks in more rounds than C{proto.askRounds} allows is answered with
        an error naming the setting, and the upstream call is cancelled.
        """
        self.gateway = Gateway(settings={"proto.askRounds": "2"})
        self.conn = self.gateway.modern_conn()
        answer, asked = self.first_round()
        call = resumable(self.gateway.caller())
        retrying = self.retry(answer["requestState"], {"q1": ACCEPTED})
        self.assertEqual(self.successResultOf(asked), ACCEPTED)
        call.ask(ELICIT, OTHER_FORM, "q2")
        self.gateway.clock.advance(0)
        second = self.successResultOf(retrying)
        self.assertEqual(rounds_of(second["requestState"]), 2)
        retrying = self.retry(second["requestState"], {"q2": PAGES})
        third = call.ask(ELICIT, FORM, "q3")
        self.gateway.clock.advance(0)
        error = error_of(self, retrying)
        self.assertEqual(error.code, INTERNAL_ERROR)
        self.assertIn("proto.askRounds", error.message)
        held = self.gateway.held()
        # Fired, and not by the test: the pool call was cancelled.
        self.assertTrue(held.result.called)
        self.assertTrue(call.done)
        self.failureResultOf(third, ClientUnreachable)
        task = self.gateway.task(call.id)
        self.assertEqual(task.status, TaskStatus.FAILED)
        assert task.error is not None
        self.assertIn("proto.askRounds", task.error["message"])
        # The state that retry carried is used: sent again, it is refused as used.
        again = error_of(self, self.retry(second["requestState"], {"q3": ACCEPTED}))
        self.assertEqual(again.code, INVALID_PARAMS)
        self.assertIn("already used", again.message)

    def test_old_state_refused(self) -> None:
        """
        A requestState is used once: sending the first round's state again (to reset the
        count, or by mistake) is refused as already used, its answers are not delivered,
        and the call still waits for the answer of its latest round.
        """
        answer, asked = self.first_round()
        call = resumable(self.gateway.caller())
        first_state = answer["requestState"]
        retrying = self.retry(first_state, {"q1": ACCEPTED})
        self.assertEqual(self.successResultOf(asked), ACCEPTED)
        second = call.ask(ELICIT, OTHER_FORM, "q2")
        self.gateway.clock.advance(0)
        latest = self.successResultOf(retrying)
        self.assertEqual(rounds_of(latest["requestState"]), 2)
        error = error_of(self, self.retry(first_state, {"q2": PAGES}))
        self.assertEqual(error.code, INVALID_PARAMS)
        self.assertIn("already used", error.message)
        self.assertNoResult(second)
        self.assertEqual(call.rounds, 2)
        finishing = self.retry(latest["requestState"], {"q2": PAGES})
        self.assertEqual(self.successResultOf(second), PAGES)
        self.gateway.held().result.callback(text_result("done"))
        self.assertEqual(self.successResultOf(finishing)["content"][0]["text"], "done")


class RequestStateTests(SynchronousTestCase):
    """Retries whose state cannot resume anything."""

    def setUp(self) -> None:
        self.gateway = Gateway()
        self.conn = self.gateway.modern_conn()
        self.params = call_params(ELICITING)

    def asked(self) -> tuple[str, Deferred[Any]]:
        answering = self.gateway.handle(self.conn, "tools/call", self.params)
        asked = resumable(self.gateway.caller()).ask(ELICIT, FORM, "q1")
        self.gateway.clock.advance(0)
        state: str = self.successResultOf(answering)["requestState"]
        return state, asked

    def retry(self, state: object, params: dict[str, Any] | None = None) -> Deferred[Any]:
        given = {**(params or self.params), "inputResponses": {"q1": ACCEPTED}}
        given["requestState"] = state
        return self.gateway.handle(self.conn, "tools/call", given)

    def test_call_never_held(self) -> None:
        """
        A genuine state naming a call the server never held (never promoted) is -32602
        saying the call is no longer held.
        """
        # Only the server's own signer can make a genuine state for an id of our choosing.
        state = self.gateway.server.asking._signer.issue(
            RequestState(
                "call-00000000-99",
                binding("tools/call", self.params),
                1,
                self.gateway.clock.seconds() + 60,
            )
        )
        error = error_of(self, self.retry(state))
        self.assertEqual(error.code, INVALID_PARAMS)
        self.assertIn("no longer holds", error.message)
        self.assertEqual(self.gateway.pool.calls, [])

    def test_call_forgotten(self) -> None:
        """
        A state whose call finished more than C{proto.askTTL} ago (but which has not
        itself expired) is -32602 saying the call is no longer held.
        """
        state, asked = self.asked()
        asked.addErrback(lambda _: None)
        self.gateway.held().result.callback(text_result("done"))
        self.gateway.clock.advance(901)
        error = error_of(self, self.retry(state))
        self.assertEqual(error.code, INVALID_PARAMS)
        self.assertIn("no longer holds", error.message)

    def test_tampered(self) -> None:
        """
        A state altered in its signature, or in its payload (its round count reset), is
        -32602, and the call it named is left as it was.
        """
        state, asked = self.asked()
        payload, _, mac = state.partition(".")
        flipped = f"{payload}.{'A' if mac[0] != 'A' else 'B'}{mac[1:]}"
        body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        body["r"] = 0
        reset = base64.urlsafe_b64encode(json.dumps(body).encode()).rstrip(b"=").decode()
        for bad in (flipped, f"{reset}.{mac}", "not a state", 7):
            error = error_of(self, self.retry(bad))
            self.assertEqual(error.code, INVALID_PARAMS, bad)
            self.assertNotIn("no longer holds", error.message)
        self.assertNoResult(asked)
        self.assertFalse(self.gateway.held().result.called)

    def test_other_request(self) -> None:
        """A state sent with other arguments than its request's is -32602."""
        state, asked = self.asked()
        other = call_params(ELICITING)
        other["arguments"] = {"server": "search", "tool": "web_search", "arguments": {"q": "x"}}
        error = error_of(self, self.retry(state, other))
        self.assertEqual(error.code, INVALID_PARAMS)
        self.assertNoResult(asked)


class PromotionTests(SynchronousTestCase):
    """A 2026-07-28 call outlives its client's request once it has asked."""

    def setUp(self) -> None:
        self.gateway = Gateway()
        self.conn = self.gateway.modern_conn()
        self.params = call_params(ELICITING)

    def test_asked_call_survives_retry_going(self) -> None:
        """
        Once the call has asked, a retry that goes away leaves the upstream call
        running; its result is collectable from the daemon's tasks under the call's id.
        """
        answering = self.gateway.handle(self.conn, "tools/call", self.params)
        caller = self.gateway.caller()
        asked = resumable(caller).ask(ELICIT, FORM, "q1")
        self.gateway.clock.advance(0)
        state = self.successResultOf(answering)["requestState"]
        self.assertEqual(self.gateway.task(caller.id).status, TaskStatus.WORKING)
        retrying = self.gateway.handle(
            self.conn,
            "tools/call",
            {**self.params, "inputResponses": {"q1": ACCEPTED}, "requestState": state},
        )
        self.successResultOf(asked)
        retrying.cancel()
        self.failureResultOf(retrying, CancelledError)
        held = self.gateway.held()
        self.assertFalse(held.result.called)
        held.result.callback(text_result("kept"))
        task = self.gateway.task(caller.id)
        self.assertEqual(task.status, TaskStatus.COMPLETED)
        self.assertEqual(task.result, text_result("kept"))

    def test_client_never_returns(self) -> None:
        """A call whose client never retries is collectable when it finishes."""
        answering = self.gateway.handle(self.conn, "tools/call", self.params)
        caller = self.gateway.caller()
        asked = resumable(caller).ask(ELICIT, FORM, "q1")
        self.gateway.clock.advance(0)
        self.successResultOf(answering)
        self.gateway.held().result.callback(text_result("late"))
        self.assertEqual(self.gateway.task(caller.id).to_json()["result"], text_result("late"))
        self.failureResultOf(asked, ClientUnreachable)

    def test_unasked_call_goes_with_request(self) -> None:
        """
        A request that goes away before its call asked anything cancels the upstream
        call, and leaves no task behind.
        """
        answering = self.gateway.handle(self.conn, "tools/call", self.params)
        caller = self.gateway.caller()
        answering.cancel()
        self.failureResultOf(answering, CancelledError)
        self.assertTrue(self.gateway.held().result.called)
        self.assertTrue(resumable(caller).done)
        self.assertIsNone(self.gateway.host.tasks.get(caller.id))


class LegacyTests(SynchronousTestCase):
    """A legacy client asked on its connection, and its request going away."""

    def setUp(self) -> None:
        self.gateway = Gateway()
        self.conn = self.gateway.legacy_conn(ELICITING, client=FakeClient())
        self.params = call_params(None, _meta={})

    def test_result(self) -> None:
        """A call on the ask path answers as any legacy call does, when it finishes."""
        answering = self.gateway.handle(self.conn, "tools/call", self.params)
        self.assertNoResult(answering)
        self.gateway.held().result.callback(text_result("plain"))
        result = self.successResultOf(answering)
        self.assertEqual(result["content"], [{"type": "text", "text": "plain"}])
        self.assertNotIn("resultType", result)

    def test_asked_call_runs_on(self) -> None:
        """
        A call that asked its client something keeps running when the client's request
        goes away, as a task under the call's id, collectable when it finishes; its
        L{Call} is a task until then, and then ends.
        """
        answering = self.gateway.handle(self.conn, "tools/call", self.params)
        caller = self.gateway.caller()
        caller.question_asked()
        answering.cancel()
        self.failureResultOf(answering, CancelledError)
        held = self.gateway.held()
        self.assertFalse(held.result.called)
        self.assertEqual(self.gateway.task(caller.id).status, TaskStatus.WORKING)
        self.assertIs(caller.state, CallState.TASK)
        held.result.callback(text_result("after all"))
        self.assertIs(caller.state, CallState.ENDED)
        task = self.gateway.task(caller.id)
        self.assertEqual(task.status, TaskStatus.COMPLETED)
        self.assertEqual(task.result, text_result("after all"))

    def test_unasked_call_goes_with_request(self) -> None:
        """A call that never asked is cancelled with its request; no task is kept."""
        answering = self.gateway.handle(self.conn, "tools/call", self.params)
        caller = self.gateway.caller()
        answering.cancel()
        self.failureResultOf(answering, CancelledError)
        self.assertTrue(self.gateway.held().result.called)
        self.assertIsNone(self.gateway.host.tasks.get(caller.id))


class RootsClientTests(SynchronousTestCase):
    """Which connections L{Roots} keeps as roots clients, and for how long."""

    def test_kept_until_closed(self) -> None:
        """
        A connection that can ask and declared roots is a roots client of the servers it
        uses until it closes; one that cannot ask (a 2026-07-28 request's own) is never
        kept, and closing it leaves the others.
        """
        roots = Roots(ops_host(Clock()))
        declared: dict[str, Any] = {"roots": {}}
        asker = Conn(
            "stdio", "host", ask=lambda method, params: Deferred(), client_capabilities=declared
        )
        modern = Conn("http-modern", "http", client_capabilities=declared)
        roots.uses(asker, ("alpha", "beta"))
        roots.uses(modern, ("alpha",))
        self.assertEqual(roots._users, {"alpha": [asker], "beta": [asker]})
        roots.closed(modern)
        self.assertEqual(roots._users, {"alpha": [asker], "beta": [asker]})
        roots.closed(asker)
        self.assertEqual(roots._users, {})
