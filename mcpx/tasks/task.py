# -*- test-case-name: tests.daemon.test_api,tests.store.test_fleet_tasks -*-
"""
What a task is (L{Task}): a call running in the background or its outcome, the states it
moves through (L{TaskStatus}), what the API shows of it, and its row in a shared store
(L{task_record}, L{task_from_record}).  The store that holds them is
L{mcpx.tasks.store.TaskStore}.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any, Final

from attrs import define, field
from twisted.logger import Logger

from mcpx.once import Waiters
from mcpx.store.records import Record

log = Logger()


class TaskStatus(enum.Enum):
    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """Whether a task in this state is over (it never leaves it)."""
        return self in _TERMINAL


_TERMINAL: Final = frozenset((TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED))


class TaskIsOver(Exception):
    """A task in a terminal state cannot be cancelled (or moved at all)."""

    def __init__(self, task: Task) -> None:
        super().__init__(task.id, task.status.value)
        self.task = task


@define
class Task:
    """
    One call running in the background, or its outcome.

    @ivar error: the API error object (C{{"code", "message", ...}}) of a failed task.
    """

    id: str
    created: float
    status: TaskStatus = TaskStatus.WORKING
    result: Any = None
    error: Mapping[str, Any] | None = None
    finished: float | None = None
    #: The caller identity it counts against, or C{None} for nobody's.
    client: str | None = None
    #: When its state last changed.
    updated: float = 0.0
    #: Seconds it is kept once finished: its own, or C{None} for the store's.
    ttl: float | None = None
    #: The server and tool it calls, where known (what C{GET /v1/tasks} filters by).
    server: str | None = None
    tool: str | None = None
    #: Who made it: C{"v1"} (C{/v1/call}), C{"mcp"} (a client's task-augmented call),
    #: C{"resumable"} (a 2026-07-28 call kept after it asked its client).
    origin: str = "v1"
    #: Why it is in its state, for people (a cancelled or failed task says why).
    message: str | None = None
    #: How many times the store has told of it (1: it was just made).
    changes: int = 0
    #: For a task read from the shared store (run by another daemon, or by none any
    #: more): the id of the daemon that runs it; C{None} for one of this daemon's.
    daemon: str | None = None
    _done: Waiters[Task] = field(factory=Waiters, repr=False, eq=False)

    def summary(self) -> dict[str, Any]:
        """What C{GET /v1/tasks} lists of it: its state, never its result."""
        shown: dict[str, Any] = {
            "id": self.id,
            "status": self.status.value,
            "origin": self.origin,
            "created": self.created,
            "updated": self.updated or self.created,
        }
        if self.server is not None:
            shown["server"] = self.server
        if self.tool is not None:
            shown["tool"] = self.tool
        if self.message is not None:
            shown["message"] = self.message
        return shown

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"id": self.id, "status": self.status.value}
        if self.status is TaskStatus.COMPLETED:
            shown["result"] = self.result
        elif self.status is TaskStatus.FAILED:
            error = self.error
            if error is not None and type(error.get("code")) is int:
                # An MCP call's JSON-RPC error, in the API's own error shape.
                shown["error"] = {
                    "code": "upstream_error",
                    "message": str(error.get("message", "the call failed")),
                    "rpc": dict(error),
                }
            elif error is not None:
                shown["error"] = error
            else:
                # A tool's own error result (isError): the call answered, and failed.
                shown["result"] = self.result
        elif self.status is TaskStatus.CANCELLED:
            shown["error"] = {"code": "cancelled", "message": self.message or "cancelled"}
        return shown


def task_record(task: Task, daemon: str | None = None) -> Record:
    """C{task} as the shared store keeps it: what its caller may read, by its caller."""
    shown = {**task.summary(), **task.to_json()}
    shown["daemon"] = daemon
    shown["client"] = task.client
    shown["finished"] = task.finished
    shown["ttl"] = task.ttl
    try:
        body = json.dumps(shown, separators=(",", ":"))
    except (TypeError, ValueError):
        # A result that is not JSON (never from an upstream): stored without it.
        shown.pop("result", None)
        body = json.dumps(shown, separators=(",", ":"), default=str)
    return Record(
        id=task.id,
        principal=task.client,
        state=task.status.value,
        finished=task.finished,
        body=body,
    )


def task_from_record(record: Record) -> Task | None:
    """A task as the shared store keeps it (L{task_record}), or C{None} if unreadable."""
    try:
        shown = json.loads(record.body)
    except ValueError:
        shown = None
    if not isinstance(shown, dict):
        log.warn("skipped unreadable task {id} in the store", id=record.id)
        return None

    def text(key: str) -> str | None:
        value = shown.get(key)
        return value if isinstance(value, str) else None

    def number(key: str) -> float | None:
        value = shown.get(key)
        return float(value) if isinstance(value, int | float) else None

    try:
        status = TaskStatus(shown.get("status", record.state))
    except ValueError:
        log.warn("skipped task {id} in an unknown state in the store", id=record.id)
        return None
    error = shown.get("error")
    result = shown.get("result")
    if status is TaskStatus.CANCELLED:
        error = None
    elif isinstance(error, Mapping) and isinstance(error.get("rpc"), Mapping):
        # An MCP call's own JSON-RPC error, as Task.to_json wraps it.
        error = dict(error["rpc"])
    created = number("created") or 0.0
    return Task(
        id=record.id,
        created=created,
        status=status,
        result=result,
        error=error if isinstance(error, Mapping) else None,
        finished=number("finished"),
        client=record.principal,
        updated=number("updated") or created,
        ttl=number("ttl"),
        server=text("server"),
        tool=text("tool"),
        origin=text("origin") or "v1",
        message=text("message"),
        daemon=text("daemon") or "",
    )


def row_ended(state: str) -> bool:
    """Whether a row's state is a task's end (an unknown one is taken for an end)."""
    try:
        return TaskStatus(state).terminal
    except ValueError:
        return True
