# -*- test-case-name: tests.questions.test_record -*-
"""
One question an upstream server asked: what it asked, who may answer, and how it ended.

A question is kept as a mutable record because it changes state in place (pending, then
answered, declined, cancelled or expired); the broker owns every change.  L{Question.to_json}
and L{Question.from_json} are the store's format and what C{/v1/questions} shows.
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Mapping
from typing import Any

from attrs import define

from mcpx.spec.questions import CAPABILITY_FOR

#: The question waits in the broker for any consumer (C{mcpx elicit}, C{/v1}, a plugin).
ROUTE_BROKER = "broker"
#: The question was put to the calling client natively; the broker only records it.
ROUTE_CLIENT = "client"

ROUTES = (ROUTE_BROKER, ROUTE_CLIENT)


class QuestionState(enum.Enum):
    PENDING = "pending"
    ANSWERED = "answered"
    DECLINED = "declined"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


def new_question_id() -> str:
    """A fresh, unguessable question id: C{q_} and 16 hex digits."""
    return "q_" + secrets.token_hex(8)


@define(eq=False)
class Question:
    """
    A question from an upstream server.

    @ivar id: the question's id (see L{new_question_id}).
    @ivar server: the configured name of the upstream that asked.
    @ivar scope_key: the pool scope key of the instance that asked; C{""} when shared.
    @ivar method: one of L{mcpx.spec.questions.CAPABILITY_FOR} (the three questions).
    @ivar params: the question's params as shown and sent (already rewritten to name the asker).
    @ivar created: clock seconds when it was asked.
    @ivar deadline: clock seconds when it expires unless answered first.
    @ivar route: L{ROUTE_BROKER} or L{ROUTE_CLIENT}.
    @ivar call_id: the call the question is attributed to, if any.
    @ivar answer: the result that went (or goes) upstream, once there is one.
    @ivar answered_by: who ended it, in a word: C{"cli"}, C{"api"}, C{"client"}, C{"expiry"}...
    @ivar finished: clock seconds when it stopped being pending.
    @ivar orphaned: loaded after a daemon restart, so nothing upstream waits for the answer.
    @ivar owner: the caller identity of the access token's subject the call was made for
        (C{daemon.auth} C{oauth}), who alone may see and answer it over TCP; C{None} when
        the call came with no token.
    @ivar daemon: the id of the daemon whose call waits for the answer (on a shared store,
        the others leave its deadline to it); C{None} in records of earlier releases.
    """

    id: str
    server: str
    scope_key: str
    method: str
    params: dict[str, Any]
    created: float
    deadline: float
    route: str = ROUTE_BROKER
    call_id: str | None = None
    state: QuestionState = QuestionState.PENDING
    answer: dict[str, Any] | None = None
    answered_by: str | None = None
    finished: float | None = None
    orphaned: bool = False
    owner: str | None = None
    daemon: str | None = None

    @property
    def kind(self) -> str:
        """C{"elicitation"}, C{"sampling"} or C{"roots"}."""
        return CAPABILITY_FOR[self.method]

    @property
    def pending(self) -> bool:
        return self.state is QuestionState.PENDING

    def to_json(self) -> dict[str, Any]:
        """Every field, JSON-safe: the state as its value."""
        return {
            "id": self.id,
            "server": self.server,
            "scope_key": self.scope_key,
            "method": self.method,
            "params": self.params,
            "created": self.created,
            "deadline": self.deadline,
            "route": self.route,
            "call_id": self.call_id,
            "state": self.state.value,
            "answer": self.answer,
            "answered_by": self.answered_by,
            "finished": self.finished,
            "orphaned": self.orphaned,
            "owner": self.owner,
            "daemon": self.daemon,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Question:
        """
        Rebuild a question from L{to_json}'s output.

        @raise KeyError: a required field is missing.
        @raise ValueError: the state or method is not one this version knows.
        """
        method = data["method"]
        if method not in CAPABILITY_FOR:
            raise ValueError(f"unknown question method {method!r}")
        return cls(
            id=data["id"],
            server=data["server"],
            scope_key=data["scope_key"],
            method=method,
            params=dict(data["params"]),
            created=float(data["created"]),
            deadline=float(data["deadline"]),
            route=data.get("route", ROUTE_BROKER),
            call_id=data.get("call_id"),
            state=QuestionState(data.get("state", QuestionState.PENDING.value)),
            answer=data.get("answer"),
            answered_by=data.get("answered_by"),
            finished=data.get("finished"),
            orphaned=bool(data.get("orphaned", False)),
            owner=data.get("owner"),
            daemon=data.get("daemon"),
        )
