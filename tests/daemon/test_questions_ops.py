"""
The C{/v1/questions} routes, driven in memory over a real L{Broker} on a fake clock.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from mcpx.ops.openapi import openapi_document
from mcpx.ops.schemas import ERROR_SCHEMA
from mcpx.ops.table import BY_NAME, OPS
from mcpx.questions.broker import Broker
from mcpx.questions.record import Question
from mcpx.spec.questions import ELICIT, LIST_ROOTS, SAMPLE
from mcpx.wire.errors import RpcError
from tests.daemon.fake_pool import Answer, Harness, swap_part

FORM = {
    "message": "github (via mcpx) asks: which repository?",
    "requestedSchema": {
        "type": "object",
        "properties": {
            "repo": {"type": "string", "minLength": 1, "title": "Repository"},
            "private": {"type": "boolean", "default": False},
        },
        "required": ["repo"],
    },
}

SAMPLING = {
    "messages": [{"role": "user", "content": {"type": "text", "text": "Say hello"}}],
    "maxTokens": 50,
}

REPLY = {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "human"}


def conforms(case: SynchronousTestCase, schema: Any, body: Any) -> None:
    errors = sorted(Draft202012Validator(schema).iter_errors(body), key=str)
    case.assertEqual([e.message for e in errors], [], body)


class Outcome:
    """What an ask Deferred fired with, if it has."""

    def __init__(self, answered: Deferred[dict[str, Any]]) -> None:
        self.results: list[dict[str, Any] | Failure] = []
        answered.addBoth(self.results.append)

    @property
    def fired(self) -> bool:
        return bool(self.results)

    @property
    def result(self) -> dict[str, Any] | Failure:
        [only] = self.results
        return only


class QuestionRoutesCase(SynchronousTestCase):
    """A harness whose daemon has a broker, and a way to ask questions of it."""

    def setUp(self) -> None:
        self.harness = Harness()
        self.clock = self.harness.clock
        self.broker = Broker(self.clock, ttl=120.0, keep=900.0)
        self.broker.start()
        swap_part(self.harness.http.host, broker=self.broker)

    def ask(
        self, method: str = ELICIT, params: dict[str, Any] | None = None, server: str = "github"
    ) -> tuple[Question, Outcome]:
        question, answered = self.broker.ask(
            server=server, scope_key="", method=method, params=params or FORM
        )
        return question, Outcome(answered)

    def answer(self, question_id: str, body: dict[str, Any]) -> Answer:
        answer = self.harness.post(f"/v1/questions/{question_id}/answer", body)
        schema = BY_NAME["answer_question"].output_schema if answer.code == 200 else ERROR_SCHEMA
        conforms(self, schema, answer.json)
        return answer


class ListTests(QuestionRoutesCase):
    def test_pending_listed(self) -> None:
        """GET /v1/questions lists the pending questions, oldest first, each with its kind."""
        first, _ = self.ask()
        self.clock.advance(1)
        second, _ = self.ask(SAMPLE, SAMPLING, server="writer")
        answer = self.harness.get("/v1/questions")
        self.assertEqual(answer.code, 200)
        conforms(self, BY_NAME["list_questions"].output_schema, answer.json)
        listed = answer.json["questions"]
        self.assertEqual([q["id"] for q in listed], [first.id, second.id])
        self.assertEqual([q["kind"] for q in listed], ["elicitation", "sampling"])
        self.assertEqual(listed[0]["params"], FORM)
        self.assertEqual(listed[1]["server"], "writer")
        self.assertEqual(listed[0]["state"], "pending")

    def test_finished_only_on_request(self) -> None:
        """
        Finished questions are left out by default; all=true lists every kept one, and
        state= keeps one state.
        """
        pending, _ = self.ask()
        declined, _ = self.ask()
        self.broker.decline(declined.id, by="api")
        self.assertEqual(
            [q["id"] for q in self.harness.get("/v1/questions").json["questions"]], [pending.id]
        )
        everything = self.harness.get("/v1/questions?all=true").json["questions"]
        self.assertEqual({q["id"] for q in everything}, {pending.id, declined.id})
        only = self.harness.get("/v1/questions?state=declined").json["questions"]
        self.assertEqual([(q["id"], q["state"]) for q in only], [(declined.id, "declined")])

    def test_empty(self) -> None:
        """With nothing asked, the list is empty."""
        self.assertEqual(self.harness.get("/v1/questions").json, {"questions": []})

    def test_unknown_state(self) -> None:
        """A state that does not exist is refused, naming the field."""
        answer = self.harness.get("/v1/questions?state=lost")
        self.assertEqual(answer.code, 400)
        self.assertEqual(answer.json["error"]["field"], "state")


class GetTests(QuestionRoutesCase):
    def test_found(self) -> None:
        """GET /v1/questions/{id} answers the question, pending or finished."""
        question, _ = self.ask(LIST_ROOTS, {})
        answer = self.harness.get(f"/v1/questions/{question.id}")
        self.assertEqual(answer.code, 200)
        conforms(self, BY_NAME["get_question"].output_schema, answer.json)
        self.assertEqual(answer.json["kind"], "roots")
        self.broker.cancel(question.id, by="api")
        self.assertEqual(
            self.harness.get(f"/v1/questions/{question.id}").json["state"], "cancelled"
        )

    def test_unknown(self) -> None:
        """An id the broker does not know is a 404 that says where to look."""
        answer = self.harness.get("/v1/questions/q_nope")
        self.assertEqual(answer.code, 404)
        conforms(self, ERROR_SCHEMA, answer.json)
        self.assertEqual(answer.json["error"]["code"], "unknown_question")
        self.assertIn("GET /v1/questions", answer.json["error"]["message"])


class ElicitationAnswerTests(QuestionRoutesCase):
    def test_accept(self) -> None:
        """
        Accepting with content answers the question: the asker gets an accept with the
        content, and the answer shows the question answered, by the API.
        """
        question, outcome = self.ask()
        answer = self.answer(question.id, {"action": "accept", "content": {"repo": "mcpx"}})
        self.assertEqual(answer.code, 200)
        self.assertEqual((answer.json["state"], answer.json["answered_by"]), ("answered", "api"))
        self.assertEqual(outcome.result, {"action": "accept", "content": {"repo": "mcpx"}})

    def test_by(self) -> None:
        """The caller may say who answers; the broker records it."""
        question, _ = self.ask()
        answer = self.answer(question.id, {"action": "decline", "by": "cli"})
        self.assertEqual(answer.json["answered_by"], "cli")
        self.assertEqual(self.broker.questions()[0].answered_by, "cli")

    def test_invalid_content(self) -> None:
        """
        Content that does not fit the requested schema is refused with the reason, and
        the question stays pending: a second, good answer goes through.
        """
        question, outcome = self.ask()
        answer = self.answer(question.id, {"action": "accept", "content": {"repo": ""}})
        self.assertEqual(answer.code, 400)
        error = answer.json["error"]
        self.assertEqual(error["code"], "invalid_answer")
        self.assertIn("repo", error["message"])
        self.assertIn("still pending", error["message"])
        self.assertFalse(outcome.fired)
        self.assertTrue(question.pending)
        again = self.answer(question.id, {"action": "accept", "content": {"repo": "x"}})
        self.assertEqual(again.code, 200)
        self.assertTrue(outcome.fired)

    def test_missing_content(self) -> None:
        """Accepting a form without content is refused: a required field is missing."""
        question, outcome = self.ask()
        answer = self.answer(question.id, {"action": "accept"})
        self.assertEqual(answer.json["error"]["code"], "invalid_answer")
        self.assertFalse(outcome.fired)

    def test_decline_and_cancel(self) -> None:
        """Decline and cancel reach the asker as the elicitation's own actions."""
        declined, declined_outcome = self.ask()
        cancelled, cancelled_outcome = self.ask()
        self.assertEqual(self.answer(declined.id, {"action": "decline"}).json["state"], "declined")
        self.assertEqual(self.answer(cancelled.id, {"action": "cancel"}).json["state"], "cancelled")
        self.assertEqual(declined_outcome.result, {"action": "decline"})
        self.assertEqual(cancelled_outcome.result, {"action": "cancel"})

    def test_url_mode(self) -> None:
        """A URL elicitation is accepted without content."""
        question, outcome = self.ask(
            params={"mode": "url", "url": "https://example.com/auth", "message": "sign in"}
        )
        self.assertEqual(self.answer(question.id, {"action": "accept"}).code, 200)
        self.assertEqual(outcome.result, {"action": "accept"})

    def test_result_refused(self) -> None:
        """An elicitation is answered with content; a result is refused, naming the field."""
        question, outcome = self.ask()
        answer = self.answer(question.id, {"action": "accept", "result": {"repo": "x"}})
        self.assertEqual(answer.code, 400)
        self.assertEqual(answer.json["error"]["field"], "result")
        self.assertFalse(outcome.fired)

    def test_content_with_decline(self) -> None:
        """A decline carrying content is refused rather than silently dropping the content."""
        question, outcome = self.ask()
        answer = self.answer(question.id, {"action": "decline", "content": {"repo": "x"}})
        self.assertEqual(answer.code, 400)
        self.assertEqual(answer.json["error"]["field"], "content")
        self.assertFalse(outcome.fired)

    def test_unknown_action(self) -> None:
        """An action other than accept, decline or cancel is refused by the input schema."""
        question, _ = self.ask()
        answer = self.answer(question.id, {"action": "maybe"})
        self.assertEqual((answer.code, answer.json["error"]["field"]), (400, "action"))


class ClosedTests(QuestionRoutesCase):
    def test_already_answered(self) -> None:
        """Answering a question someone else answered is a 409 saying how and by whom."""
        question, _ = self.ask()
        self.broker.decline(question.id, by="client")
        answer = self.answer(question.id, {"action": "accept", "content": {"repo": "x"}})
        self.assertEqual(answer.code, 409)
        self.assertEqual(answer.json["error"]["code"], "question_closed")
        self.assertIn("declined by client", answer.json["error"]["message"])

    def test_expired(self) -> None:
        """A question past its deadline has expired: answering it is a 409 that says so."""
        question, outcome = self.ask()
        self.clock.advance(121)
        self.assertEqual(outcome.result, {"action": "cancel"})
        answer = self.answer(question.id, {"action": "decline"})
        self.assertEqual(answer.code, 409)
        self.assertIn("expired", answer.json["error"]["message"])

    def test_unknown(self) -> None:
        """Answering an unknown id is a 404."""
        answer = self.answer("q_nope", {"action": "cancel"})
        self.assertEqual((answer.code, answer.json["error"]["code"]), (404, "unknown_question"))


class SamplingAndRootsTests(QuestionRoutesCase):
    def test_sampling_result(self) -> None:
        """A sampling question is accepted with a result, which the asker gets as it is."""
        question, outcome = self.ask(SAMPLE, SAMPLING)
        answer = self.answer(question.id, {"action": "accept", "result": REPLY})
        self.assertEqual(answer.code, 200)
        self.assertEqual(answer.json["answer"], REPLY)
        self.assertEqual(outcome.result, REPLY)

    def test_sampling_needs_result(self) -> None:
        """Accepting sampling without a result, or with content, is refused naming the field."""
        question, outcome = self.ask(SAMPLE, SAMPLING)
        missing = self.answer(question.id, {"action": "accept"})
        self.assertEqual((missing.code, missing.json["error"]["field"]), (400, "result"))
        content = self.answer(question.id, {"action": "accept", "content": {"text": "hi"}})
        self.assertEqual((content.code, content.json["error"]["field"]), (400, "content"))
        self.assertFalse(outcome.fired)

    def test_sampling_bad_result(self) -> None:
        """A result without the shape of a CreateMessageResult is refused with the reason."""
        question, _ = self.ask(SAMPLE, SAMPLING)
        answer = self.answer(question.id, {"action": "accept", "result": {"text": "hi"}})
        self.assertEqual(answer.json["error"]["code"], "invalid_answer")
        self.assertIn("role", answer.json["error"]["message"])

    def test_sampling_declined(self) -> None:
        """Declining sampling fails the asker's request with a JSON-RPC error."""
        question, outcome = self.ask(SAMPLE, SAMPLING)
        self.assertEqual(self.answer(question.id, {"action": "decline"}).code, 200)
        failure = outcome.result
        assert isinstance(failure, Failure)
        self.assertIsInstance(failure.value, RpcError)

    def test_roots(self) -> None:
        """Roots are accepted as a ListRootsResult of file URIs; other URIs are refused."""
        question, outcome = self.ask(LIST_ROOTS, {})
        bad = self.answer(
            question.id, {"action": "accept", "result": {"roots": [{"uri": "https://x"}]}}
        )
        self.assertEqual(bad.json["error"]["code"], "invalid_answer")
        roots = {"roots": [{"uri": "file:///work"}]}
        self.assertEqual(self.answer(question.id, {"action": "accept", "result": roots}).code, 200)
        self.assertEqual(outcome.result, roots)


class NoBrokerTests(SynchronousTestCase):
    def test_unavailable(self) -> None:
        """Without a broker, every question route answers 503 with a message saying why."""
        harness = Harness()
        for answer in (
            harness.get("/v1/questions"),
            harness.get("/v1/questions/q_1"),
            harness.post("/v1/questions/q_1/answer", {"action": "cancel"}),
        ):
            self.assertEqual(answer.code, 503)
            self.assertEqual(answer.json["error"]["code"], "questions_unavailable")
            self.assertIn("broker", answer.json["error"]["message"])


class DocumentTests(SynchronousTestCase):
    def test_documented(self) -> None:
        """The OpenAPI document has the three routes; answering documents its 404 and 409."""
        paths = openapi_document(OPS)["paths"]
        self.assertEqual(paths["/v1/questions"]["get"]["operationId"], "list_questions")
        self.assertEqual(paths["/v1/questions/{id}"]["get"]["operationId"], "get_question")
        answer = paths["/v1/questions/{id}/answer"]["post"]
        self.assertEqual(answer["operationId"], "answer_question")
        self.assertLessEqual({"400", "404", "409", "503"}, set(answer["responses"]))
        body = answer["requestBody"]["content"]["application/json"]["schema"]
        self.assertEqual(body["required"], ["action"])
        self.assertEqual(set(body["properties"]), {"action", "content", "result", "by"})
