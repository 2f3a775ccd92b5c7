"""
Tests for L{mcpx.questions.record}.
"""

from __future__ import annotations

import json
import re

from twisted.trial.unittest import SynchronousTestCase

from mcpx.questions.record import ROUTE_CLIENT, Question, QuestionState, new_question_id
from mcpx.spec.questions import ELICIT, LIST_ROOTS, SAMPLE


def finished_question() -> Question:
    return Question(
        id="q_0123456789abcdef",
        server="github",
        scope_key="session:1",
        method=ELICIT,
        params={"message": "github (via mcpx) asks: name?", "requestedSchema": {}},
        created=10.5,
        deadline=130.5,
        route=ROUTE_CLIENT,
        call_id="call-7",
        state=QuestionState.ANSWERED,
        answer={"action": "accept", "content": {"name": "Ada"}},
        answered_by="cli",
        finished=20.0,
        orphaned=True,
    )


class QuestionTests(SynchronousTestCase):
    def test_round_trip(self) -> None:
        """A question read back from its JSON form has every field it was saved with."""
        question = finished_question()
        copy = Question.from_json(json.loads(json.dumps(question.to_json())))
        self.assertEqual(copy.to_json(), question.to_json())
        self.assertIs(copy.state, QuestionState.ANSWERED)
        self.assertTrue(copy.orphaned)

    def test_json_shows_state_value(self) -> None:
        """The JSON form names the state by its value, as /v1 and the store show it."""
        shown = finished_question().to_json()
        self.assertEqual(shown["state"], "answered")
        self.assertEqual(shown["answered_by"], "cli")
        self.assertEqual(shown["call_id"], "call-7")

    def test_defaults_when_read(self) -> None:
        """A minimal record reads as a pending, broker-routed question with no answer."""
        question = Question.from_json(
            {
                "id": "q_1",
                "server": "s",
                "scope_key": "",
                "method": SAMPLE,
                "params": {},
                "created": 1,
                "deadline": 2,
            }
        )
        self.assertIs(question.state, QuestionState.PENDING)
        self.assertEqual(question.route, "broker")
        self.assertIsNone(question.answer)
        self.assertFalse(question.orphaned)

    def test_unknown_method_refused(self) -> None:
        """A record with a method that is not a question is refused rather than listed."""
        data = finished_question().to_json()
        data["method"] = "tools/call"
        self.assertRaises(ValueError, Question.from_json, data)

    def test_kind(self) -> None:
        """Each method has its short kind name."""
        question = finished_question()
        kinds = {}
        for method in (ELICIT, SAMPLE, LIST_ROOTS):
            question.method = method
            kinds[method] = question.kind
        self.assertEqual(kinds, {ELICIT: "elicitation", SAMPLE: "sampling", LIST_ROOTS: "roots"})

    def test_new_ids(self) -> None:
        """Question ids are q_ and 16 hex digits, and differ each time."""
        ids = {new_question_id() for _ in range(50)}
        self.assertEqual(len(ids), 50)
        for question_id in ids:
            self.assertTrue(re.fullmatch(r"q_[0-9a-f]{16}", question_id), question_id)
