# -*- test-case-name: tests.questions.test_broker -*-
"""
What an answer to a question must look like (L{judged}): an elicitation's action and its
form's content, a sampling result, a list of C{file://} roots; and what goes upstream
for a question however it ended (L{upstream_outcome}).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcpx.questions.forms import check_content
from mcpx.questions.record import Question, QuestionState
from mcpx.spec.questions import ELICIT, SAMPLE
from mcpx.wire.errors import RpcError

#: The JSON-RPC error code for a sampling or roots request nobody answered (as MCP SDKs use).
REFUSED = -1


class InvalidAnswer(ValueError):
    """The answer does not fit the question; the message says why."""


def judged(
    question: Question, result: Mapping[str, Any] | None
) -> tuple[QuestionState, dict[str, Any] | None]:
    """
    How an answer C{result} ends C{question}, and what goes upstream for it, checked.

    @raise InvalidAnswer: C{result} does not fit the question.
    """
    if not isinstance(result, Mapping):
        raise InvalidAnswer("the answer is not an object")
    if question.method == ELICIT:
        return _elicitation_answer(question, result)
    if question.method == SAMPLE:
        return QuestionState.ANSWERED, _sampling_answer(result)
    return QuestionState.ANSWERED, _roots_answer(result)


def upstream_outcome(
    question: Question, state: QuestionState, result: dict[str, Any] | None
) -> dict[str, Any] | RpcError:
    """What goes upstream for C{question} ended in C{state} with C{result}."""
    if question.method == ELICIT:
        if state is QuestionState.ANSWERED and result is not None:
            return result
        if state is QuestionState.DECLINED:
            return {"action": "decline"}
        return {"action": "cancel"}
    if state is QuestionState.ANSWERED and result is not None:
        return result
    return RpcError(REFUSED, f"{question.kind} request {state.value}")


def _elicitation_answer(
    question: Question, result: Mapping[str, Any]
) -> tuple[QuestionState, dict[str, Any] | None]:
    action = result.get("action")
    if action == "decline":
        return QuestionState.DECLINED, None
    if action == "cancel":
        return QuestionState.CANCELLED, None
    if action != "accept":
        raise InvalidAnswer('action must be "accept", "decline" or "cancel"')
    if question.params.get("mode") == "url":
        # The person acted on the page; the server hears the outcome from there, not from us.
        return QuestionState.ANSWERED, {"action": "accept"}
    content = result.get("content", {})
    reason = check_content(question.params.get("requestedSchema", {}), content)
    if reason is not None:
        raise InvalidAnswer(reason)
    return QuestionState.ANSWERED, {"action": "accept", "content": dict(content)}


def _sampling_answer(result: Mapping[str, Any]) -> dict[str, Any]:
    if result.get("role") not in ("user", "assistant"):
        raise InvalidAnswer('role must be "assistant" or "user"')
    if not isinstance(result.get("content"), Mapping | list):
        raise InvalidAnswer("content must be a content block or a list of them")
    if not isinstance(result.get("model"), str):
        raise InvalidAnswer("model must be the name of the model that answered")
    return dict(result)


def _roots_answer(result: Mapping[str, Any]) -> dict[str, Any]:
    roots = result.get("roots")
    if not isinstance(roots, list):
        raise InvalidAnswer("roots must be a list")
    for index, root in enumerate(roots):
        if not isinstance(root, Mapping) or not isinstance(root.get("uri"), str):
            raise InvalidAnswer(f"roots[{index}]: not an object with a uri")
        if not root["uri"].startswith("file://"):
            raise InvalidAnswer(f"roots[{index}]: {root['uri']} is not a file:// URI")
    return dict(result)
