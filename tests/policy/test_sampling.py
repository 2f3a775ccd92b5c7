"""A server's sampling requests through its policy: denied, confirmed, capped, checked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from mcpx.call import Call
from mcpx.policy.sampling import USER_REJECTED, SamplingGuard
from mcpx.settings.server_policy import ServerPolicy, parse_policy
from mcpx.spec.questions import ELICIT, SAMPLE
from mcpx.upstream.handlers import UpstreamHandlers
from mcpx.wire.errors import INTERNAL_ERROR, INVALID_PARAMS, RpcError

REQUEST = {
    "messages": [{"role": "user", "content": {"type": "text", "text": "summarise"}}],
    "maxTokens": 10_000,
}
GOOD = {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"}


class SamplingTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.relayed: list[tuple[str, Mapping[str, Any]]] = []
        self.asked: list[Mapping[str, Any]] = []
        self.askers: list[Call | None] = []
        self.events: list[str] = []
        self.yes = True
        self.host_answer: Any = GOOD

    def guard(self, **sampling: object) -> UpstreamHandlers:
        policy: ServerPolicy = parse_policy({"sampling": sampling}, {}, where="notes")

        async def relay(
            method: str, params: Mapping[str, Any], caller: Any, key: str | None
        ) -> Mapping[str, Any]:
            self.relayed.append((method, params))
            if isinstance(self.host_answer, Exception):
                raise self.host_answer
            return dict(self.host_answer)

        async def ask(
            server: str, scope: str, caller: Call | None, params: Mapping[str, Any]
        ) -> bool:
            self.asked.append(params)
            self.askers.append(caller)
            return self.yes

        def publish(kind: str, *_: Any, **__: Any) -> None:
            self.events.append(kind)

        guard = SamplingGuard(lambda server: policy, ask, publish)
        return guard.guarded("notes", "", UpstreamHandlers(relay=relay))

    def sample(
        self, handlers: UpstreamHandlers, params: Mapping[str, Any] = REQUEST
    ) -> Deferred[Any]:
        return Deferred.fromCoroutine(handlers.answer(SAMPLE, params))

    def test_allowed_passes_to_host(self) -> None:
        self.assertEqual(self.successResultOf(self.sample(self.guard())), GOOD)
        self.assertEqual(self.relayed[0][1]["maxTokens"], 10_000)
        self.assertEqual(self.events, ["sampling.requested", "sampling.answered"])

    def test_denied_never_reaches_host(self) -> None:
        failure = self.failureResultOf(self.sample(self.guard(mode="deny")), RpcError)
        self.assertEqual(failure.value.code, USER_REJECTED)
        self.assertIn("sampling.mode is deny", failure.value.message)
        self.assertEqual(self.relayed, [])
        self.assertIn("sampling.refused", self.events)

    def test_confirmed_asks_first(self) -> None:
        self.successResultOf(self.sample(self.guard(mode="confirm")))
        self.assertIn("'notes' asks the model", self.asked[0]["message"])
        self.assertEqual(len(self.relayed), 1)

    def test_confirmation_of_a_session_request_left_to_the_relay(self) -> None:
        """
        A handshake-era server samples on its session, naming no call: the confirmation
        is asked with no caller, so the relay finds whose call it is and asks that host
        (a stand-in caller would send it to the broker, where no host sees it).
        """
        self.successResultOf(self.sample(self.guard(mode="confirm")))
        self.assertEqual(self.askers, [None])

    def test_declined_never_reaches_host(self) -> None:
        self.yes = False
        failure = self.failureResultOf(self.sample(self.guard(mode="confirm")), RpcError)
        self.assertEqual(failure.value.code, USER_REJECTED)
        self.assertEqual(self.relayed, [])

    def test_max_tokens_capped(self) -> None:
        self.successResultOf(self.sample(self.guard(maxTokens=256)))
        self.assertEqual(self.relayed[0][1]["maxTokens"], 256)

    def test_smaller_request_kept(self) -> None:
        self.successResultOf(self.sample(self.guard(maxTokens=256), {**REQUEST, "maxTokens": 5}))
        self.assertEqual(self.relayed[0][1]["maxTokens"], 5)

    def test_include_context_refused_by_default(self) -> None:
        failure = self.failureResultOf(
            self.sample(self.guard(), {**REQUEST, "includeContext": "allServers"}), RpcError
        )
        self.assertEqual(failure.value.code, INVALID_PARAMS)
        self.assertIn("sampling.includeContext", failure.value.message)
        self.assertEqual(self.relayed, [])

    def test_include_context_allowed_when_set(self) -> None:
        handlers = self.guard(includeContext=True)
        self.successResultOf(self.sample(handlers, {**REQUEST, "includeContext": "thisServer"}))
        self.assertEqual(len(self.relayed), 1)

    def test_bad_host_result_not_returned(self) -> None:
        self.host_answer = {"role": "assistant"}
        failure = self.failureResultOf(self.sample(self.guard()), RpcError)
        self.assertEqual(failure.value.code, INTERNAL_ERROR)
        self.assertIn("not a valid CreateMessageResult", failure.value.message)

    def test_other_questions_untouched(self) -> None:
        handlers = self.guard(mode="deny")
        self.successResultOf(
            Deferred.fromCoroutine(handlers.answer(ELICIT, {"message": "x", "requestedSchema": {}}))
        )
        self.assertEqual(self.relayed[0][0], ELICIT)

    def test_host_refusal_is_counted_and_passed_on(self) -> None:
        """A host that declines is told to the server as it was, and is an event."""
        self.host_answer = RpcError(USER_REJECTED, "the user said no")
        refused = self.failureResultOf(self.sample(self.guard()), RpcError)
        self.assertEqual(refused.value.message, "the user said no")
        self.assertEqual(self.events, ["sampling.requested", "sampling.failed"])
