# -*- test-case-name: tests.daemon.test_questions_ops -*-
"""
The operations on the questions upstream servers asked: list them, show one, answer it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcpx.ops.errors import OpError
from mcpx.ops.host import Invocation, OpHost, required
from mcpx.ops.schemas import DEFAULT_ANSWERER
from mcpx.questions.answers import InvalidAnswer
from mcpx.questions.broker import Broker, QuestionClosed, UnknownQuestion
from mcpx.questions.record import Question, QuestionState
from mcpx.spec.questions import ELICIT, SAMPLE


def _broker(host: OpHost) -> Broker:
    return required(
        host.broker,
        "questions_unavailable",
        "this daemon runs without its question broker, so it holds no questions to "
        "list or answer; restart it with `mcpx daemon`",
    )


def question_json(question: Question) -> dict[str, Any]:
    """A question as the API shows it: its record, and its C{kind}."""
    shown = question.to_json()
    shown["kind"] = question.kind
    return shown


def _unknown_question(question_id: str) -> OpError:
    return OpError(
        404,
        "unknown_question",
        f"no question {question_id!r}: it never existed, or it ended long enough ago to be "
        "forgotten; GET /v1/questions?all=true lists the ones kept",
    )


def _closed_question(question: Question) -> OpError:
    how = (
        "expired at its deadline"
        if question.state is QuestionState.EXPIRED
        else (f"{question.state.value} by {question.answered_by or 'someone else'}")
    )
    return OpError(
        409,
        "question_closed",
        f"question {question.id!r} is no longer pending: it was {how} before this answer "
        "came (through this daemon or another one sharing its store), so this answer was "
        "not used; GET /v1/questions lists the pending ones",
    )


def _visible(question: Question, call: Invocation) -> bool:
    """
    Whether C{call}'s caller may see C{question}: an access token's subject sees only
    the questions asked for its own calls; the owner's socket and a daemon without
    tokens see them all.
    """
    return call.holds(question.owner)


async def list_questions(host: OpHost, call: Invocation) -> dict[str, Any]:
    broker = _broker(host)
    # Someone is watching the broker (proto.brokerWhenUnwatched).
    broker.looked()
    state = call.args.get("state")
    if state is not None:
        found = broker.questions(state=QuestionState(state))
    elif call.args.get("all") == "true":
        found = broker.questions()
    else:
        found = broker.questions(state=QuestionState.PENDING)
    found = [question for question in found if _visible(question, call)]
    run = call.args.get("run")
    if run is not None:
        # A run's calls are made for a caller named after it, unless the run had the
        # host's own caller (an MCP mcpx_exec), whose questions go to that host.
        found = [question for question in found if question.call_id == run]
    return {"questions": [question_json(question) for question in found]}


async def get_question(host: OpHost, call: Invocation) -> dict[str, Any]:
    question = _broker(host).get(call.args["id"])
    if question is None or not _visible(question, call):
        raise _unknown_question(call.args["id"])
    return question_json(question)


def _accepting(question: Question, args: Mapping[str, Any]) -> dict[str, Any]:
    """What the broker is given for an accepting answer: checked for the right field."""
    if question.method == ELICIT:
        if "result" in args:
            raise OpError(
                400,
                "invalid_input",
                'result: an elicitation is answered with "content" (the form\'s values), '
                "not result",
                field="result",
            )
        accepted: dict[str, Any] = {"action": "accept"}
        if "content" in args:
            accepted["content"] = args["content"]
        return accepted
    what = (
        "a CreateMessageResult"
        if question.method == SAMPLE
        else 'a ListRootsResult, {"roots": [...]}'
    )
    if "content" in args:
        raise OpError(
            400,
            "invalid_input",
            f'content: a {question.kind} question is answered with "result" ({what}), not content',
            field="content",
        )
    if "result" not in args:
        raise OpError(
            400,
            "invalid_input",
            f'result: accepting a {question.kind} question needs "result": {what}',
            field="result",
        )
    result: dict[str, Any] = args["result"]
    return result


async def answer_question(host: OpHost, call: Invocation) -> dict[str, Any]:
    """
    Accept, decline or cancel a pending question.

    The broker checks an accepting answer against what was asked; a refused answer
    leaves the question pending, so the caller can try again.
    """
    broker = _broker(host)
    args = call.args
    question_id: str = args["id"]
    action: str = args["action"]
    by: str = args.get("by", DEFAULT_ANSWERER)
    question = broker.get(question_id)
    if question is None or not _visible(question, call):
        # Another subject's question is answered as if it did not exist.
        raise _unknown_question(question_id)
    if action != "accept":
        for name in ("content", "result"):
            if name in args:
                raise OpError(
                    400,
                    "invalid_input",
                    f"{name}: only an accepting answer carries {name}; drop it to {action}",
                    field=name,
                )
    try:
        # Ended in the store first: of two daemons answering it, the second is refused.
        closed = await broker.reply(
            question_id,
            action,
            _accepting(question, args) if action == "accept" else None,
            by=by,
        )
    except UnknownQuestion:
        raise _unknown_question(question_id) from None
    except QuestionClosed as e:
        raise _closed_question(e.question) from None
    except InvalidAnswer as e:
        raise OpError(
            400,
            "invalid_answer",
            f"{e}; the question is still pending: answer it again "
            f"(GET /v1/questions/{question_id} shows what it asks)",
        ) from None
    return question_json(closed)
