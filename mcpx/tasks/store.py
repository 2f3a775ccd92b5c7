# -*- test-case-name: tests.daemon.test_api -*-
"""
Calls that answer later: C{"task": true} on C{POST /v1/call}, and MCP calls whose
client was asked a question and may come back for the answer (L{TaskStore.adopt}).

A task runs in the daemon whether or not its caller stays connected; its outcome is kept
for a while on the clock so the caller can collect it from C{GET /v1/tasks/{id}}.  The
store is in memory: a restarted daemon forgets its tasks, as it forgets its sessions.
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.python.failure import Failure

#: How long a finished task is kept when nothing says otherwise (C{proto.askTTL}'s default).
DEFAULT_TTL = 900.0

#: How many tasks (running or waiting to be collected) the store holds at most.
DEFAULT_LIMIT = 1000


class TaskStatus(enum.Enum):
    WORKING = "working"
    COMPLETED = "completed"
    FAILED = "failed"


class TooManyTasks(Exception):
    """The store is full of tasks nobody has collected yet."""

    def __init__(self, limit: int, ttl: float) -> None:
        super().__init__(limit, ttl)
        self.limit = limit
        self.ttl = ttl


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

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"id": self.id, "status": self.status.value}
        if self.status is TaskStatus.COMPLETED:
            shown["result"] = self.result
        elif self.status is TaskStatus.FAILED:
            shown["error"] = self.error
        return shown


@define
class TaskStore:
    """
    The daemon's tasks, each kept C{ttl} seconds after it finishes.

    @ivar clock: times the expiry of finished tasks.
    @ivar ttl: seconds a finished task waits to be collected.
    @ivar limit: how many tasks may exist at once; beyond it L{start} refuses.
    """

    clock: IReactorTime
    ttl: float = DEFAULT_TTL
    limit: int = DEFAULT_LIMIT
    _tasks: dict[str, Task] = field(factory=dict, init=False)
    _running: dict[str, Deferred[None]] = field(factory=dict, init=False)
    _expiry: dict[str, IDelayedCall] = field(factory=dict, init=False)

    def start(
        self,
        work: Callable[[], Awaitable[Any]],
        describe_error: Callable[[Failure], Mapping[str, Any]],
    ) -> Task:
        """
        Run C{work} as a new task.

        @param describe_error: turns the failure of C{work} into the task's C{error}.
        @raise TooManyTasks: when L{limit} tasks already exist.
        """
        if len(self._tasks) >= self.limit:
            raise TooManyTasks(self.limit, self.ttl)
        task = Task(secrets.token_hex(12), self.clock.seconds())
        self._tasks[task.id] = task

        async def run() -> Any:
            return await work()

        running: Deferred[None] = Deferred.fromCoroutine(run()).addCallbacks(
            lambda result: self._finish(task, TaskStatus.COMPLETED, result=result),
            lambda failure: self._finish(task, TaskStatus.FAILED, error=describe_error(failure)),
        )
        # Work that finished at once is already done with; only a running task is tracked.
        if task.status is TaskStatus.WORKING:
            self._running[task.id] = running
        return task

    def adopt(
        self,
        task_id: str,
        work: Deferred[Any],
        describe_error: Callable[[Failure], Mapping[str, Any]],
    ) -> Task:
        """
        Keep C{work}, already running under the id C{task_id}, as a task: an MCP call
        that outlives the request that started it (a client asked to answer a question
        comes back later, or not at all) stays collectable at C{/v1/tasks/{id}}.

        C{work}'s outcome is taken: give it a Deferred of its own.

        @raise TooManyTasks: when L{limit} tasks already exist.
        """
        if len(self._tasks) >= self.limit:
            raise TooManyTasks(self.limit, self.ttl)
        task = Task(task_id, self.clock.seconds())
        self._tasks[task.id] = task

        def finished(result: Any) -> None:
            if isinstance(result, Failure):
                self._finish(task, TaskStatus.FAILED, error=describe_error(result))
            else:
                self._finish(task, TaskStatus.COMPLETED, result=result)

        work.addBoth(finished)
        return task

    def _finish(
        self,
        task: Task,
        status: TaskStatus,
        *,
        result: Any = None,
        error: Mapping[str, Any] | None = None,
    ) -> None:
        task.status = status
        task.result = result
        task.error = error
        task.finished = self.clock.seconds()
        self._running.pop(task.id, None)
        if task.id in self._tasks:
            self._expiry[task.id] = self.clock.callLater(self.ttl, self._expire, task.id)

    def _expire(self, task_id: str) -> None:
        self._expiry.pop(task_id, None)
        self._tasks.pop(task_id, None)

    def get(self, task_id: str) -> Task | None:
        return self._tasks.get(task_id)

    def __len__(self) -> int:
        return len(self._tasks)

    def close(self) -> None:
        """Forget every task: cancel the running ones and their expiry timers."""
        self._tasks = {}
        running, self._running = self._running, {}
        expiry, self._expiry = self._expiry, {}
        for call in expiry.values():
            if call.active():
                call.cancel()
        for deferred in running.values():
            deferred.cancel()
