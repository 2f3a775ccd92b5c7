"""
A 2026-07-28 request in pass-through (a strict L{Caller}) is refused with -32021 when
its upstream asks something the client did not declare, instead of the question
waiting in the broker: the client could never answer it, and the upstream itself
would have refused the request so.
"""

from __future__ import annotations

from mcpx.spec.questions import LIST_ROOTS, SAMPLE
from mcpx.wire.errors import MISSING_REQUIRED_CLIENT_CAPABILITY, RpcError
from tests.questions.test_relay import ACCEPTED, RelayTests


class StrictCallerTests(RelayTests):
    def test_undeclared_kind_is_refused(self) -> None:
        """Sampling asked of a strict caller that declared only elicitation is -32021."""
        caller = self.caller({"elicitation": {}}, asker=None, strict=True)
        refused = self.failureResultOf(
            self.ask(SAMPLE, {"messages": [], "maxTokens": 5}, call=caller), RpcError
        )
        self.assertEqual(refused.value.code, MISSING_REQUIRED_CLIENT_CAPABILITY)
        self.assertEqual(refused.value.data, {"requiredCapabilities": {"sampling": {}}})
        self.assertIs(caller.refused, refused.value)
        self.assertEqual(self.broker.questions(), [])

    def test_a_lenient_caller_still_waits_in_the_broker(self) -> None:
        """Outside a strict request the question is left with the broker, as before."""
        caller = self.caller({"elicitation": {}}, asker=None)
        waiting = self.ask(SAMPLE, {"messages": [], "maxTokens": 5}, call=caller)
        self.assertNoResult(waiting)
        self.assertEqual(len(self.broker.questions()), 1)
        self.assertIsNone(caller.refused)

    def test_declared_kind_is_asked(self) -> None:
        """A strict caller that declared the kind is asked as any other."""
        caller = self.caller(strict=True)
        asked = self.ask(call=caller)
        self.asker.last().callback(ACCEPTED)
        self.assertEqual(self.successResultOf(asked), ACCEPTED)

    def test_roots_asked_mid_call_are_answered_by_mcpx(self) -> None:
        """
        A server that asks for roots while a strict caller without C{roots} is in flight
        gets mcpx's own roots, and the call is not refused: roots are the daemon's to
        give, not the client's, so the client lacks nothing.
        """
        relay = self.make_relay(roots=("/srv/project",))
        caller = self.caller({"sampling": {}}, asker=None, strict=True)
        answered = self.ask(LIST_ROOTS, {}, relay=relay, call=caller)
        self.assertEqual(
            self.successResultOf(answered),
            {"roots": [{"uri": "file:///srv/project", "name": "project"}]},
        )
        self.assertIsNone(caller.refused)
