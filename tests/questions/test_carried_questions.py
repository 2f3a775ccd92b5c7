"""
A question a Streamable HTTP server asks on the reply stream of one of mcpx's requests
belongs to the call that request was made for, however many other calls are in flight
on the connection: found with the TypeScript SDK 1.x fixture, where a 2026-07-28
client's second call of an eliciting tool was never answered while its first call
(answered with C{input_required} and not retried) still waited upstream.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from tests.interop.peers import SDK1_SERVER, start_fixture
from tests.questions.support import Daemon, modern_post
from tests.support.processes import reactor

#: Seconds a call may take to come back with its question; a question left with the
#: broker instead would keep it waiting for the broker's two minutes.
ANSWER_WITHIN = 30.0


class CarriedQuestionTests(TestCase):
    timeout = 120

    async def test_second_call_gets_its_own_question(self) -> None:
        """
        Two 2026-07-28 calls of the fixture's eliciting tool, the first left unanswered:
        each comes back with C{input_required} carrying its own elicitation, and the
        broker holds neither.
        """
        url = await start_fixture(self, SDK1_SERVER)
        daemon = await Daemon(self, {"ts": {"url": url}}, passthrough=["ts"]).start()
        answers = []
        for request_id, message in ((1, "first caller"), (2, "second caller")):
            call = Deferred.fromCoroutine(
                modern_post(
                    daemon,
                    request_id,
                    "test_elicitation",
                    {"arguments": {"message": message}},
                )
            )
            call.addTimeout(ANSWER_WITHIN, reactor)
            status, answer = await call
            self.assertEqual(status, 200, answer)
            answers.append(answer)
        for answer, message in zip(answers, ("first caller", "second caller"), strict=True):
            result: dict[str, Any] = answer.get("result", {})
            self.assertEqual(result.get("resultType"), "input_required", answer)
            [request] = result["inputRequests"].values()
            self.assertEqual(request["method"], "elicitation/create")
            self.assertIn(message, request["params"]["message"])
        listed = await daemon.api("/v1/questions")
        self.assertEqual(
            [q for q in listed["questions"] if q["route"] == "broker"], [], "none left waiting"
        )
