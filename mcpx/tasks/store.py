# -*- test-case-name: tests.daemon.test_api -*-
"""
Calls that answer later: C{"task": true} on C{POST /v1/call}, and MCP calls whose
client was asked a question and may come back for the answer (L{TaskStore.adopt}).

A task runs in the daemon whether or not its caller stays connected; its outcome is kept
for a while on the clock so the caller can collect it from C{GET /v1/tasks/{id}}.  The
store is in memory: a restarted daemon forgets its tasks, as it forgets its sessions.

Two caps bound it: C{tasks.maxPerClient} tasks per caller identity (the C{Mcpx-Client}
of the call), so one caller cannot take every slot, and L{DEFAULT_LIMIT} in all.  A caller
at its cap is refused (L{TooManyTasksForClient}) while others still get tasks.
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

log = Logger()

#: How long a finished task is kept when nothing says otherwise (C{proto.askTTL}'s default).
DEFAULT_TTL = 900.0

#: How many tasks (running or waiting to be collected) the store holds at most.
DEFAULT_LIMIT = 1000

#: How many of them one caller identity may hold when nothing says otherwise.
DEFAULT_PER_CLIENT = 200

#: The setting that caps the tasks of one caller.
PER_CLIENT_SETTING = "tasks.maxPerClient"


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


class TooManyTasksForClient(Exception):
    """
    One caller holds as many tasks (running or waiting to be collected) as it may.

    @ivar client: the caller identity.
    @ivar limit: its cap, C{tasks.maxPerClient}.
    @ivar retry_in: seconds until its oldest finished task expires and frees a slot (or
        the time a finished task is kept, when none has finished yet).
    """

    def __init__(self, client: str, limit: int, retry_in: float) -> None:
        super().__init__(client, limit, retry_in)
        self.client = client
        self.limit = limit
        self.retry_in = retry_in


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
    @ivar per_client: how many of them one caller identity may hold.
    """

    clock: IReactorTime
    ttl: float = DEFAULT_TTL
    limit: int = DEFAULT_LIMIT
    per_client: int = DEFAULT_PER_CLIENT
    _tasks: dict[str, Task] = field(factory=dict, init=False)
    _by_client: dict[str, dict[str, Task]] = field(factory=dict, init=False)
    #: The callers refused since they were last below their cap (each logged once).
    _refused: set[str] = field(factory=set, init=False)
    _full: bool = field(default=False, init=False)
    _running: dict[str, Deferred[None]] = field(factory=dict, init=False)
    _expiry: dict[str, IDelayedCall] = field(factory=dict, init=False)

    def start(
        self,
        work: Callable[[], Awaitable[Any]],
        describe_error: Callable[[Failure], Mapping[str, Any]],
        client: str | None = None,
    ) -> Task:
        """
        Run C{work} as a new task.

        @param describe_error: turns the failure of C{work} into the task's C{error}.
        @param client: the caller identity it counts against (L{per_client}).
        @raise TooManyTasksForClient: when C{client} already holds L{per_client} tasks.
        @raise TooManyTasks: when L{limit} tasks already exist.
        """
        self._check_room(client)
        task = Task(secrets.token_hex(12), self.clock.seconds(), client=client)
        self._add(task)

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
        self._check_room(None)
        task = Task(task_id, self.clock.seconds())
        self._add(task)

        def finished(result: Any) -> None:
            if isinstance(result, Failure):
                self._finish(task, TaskStatus.FAILED, error=describe_error(result))
            else:
                self._finish(task, TaskStatus.COMPLETED, result=result)

        work.addBoth(finished)
        return task

    def _check_room(self, client: str | None) -> None:
        if client is not None:
            held = self._by_client.get(client)
            if held is not None and len(held) >= self.per_client:
                if client not in self._refused:
                    self._refused.add(client)
                    log.warn(
                        "caller {client!r} holds {limit} tasks ({setting}): refusing its "
                        "new tasks until some are collected or expire",
                        client=client,
                        limit=self.per_client,
                        setting=PER_CLIENT_SETTING,
                    )
                raise TooManyTasksForClient(client, self.per_client, self._next_free(held))
        if len(self._tasks) >= self.limit:
            if not self._full:
                self._full = True
                log.warn(
                    "{limit} tasks are running or waiting to be collected: refusing new "
                    "tasks until some expire",
                    limit=self.limit,
                )
            raise TooManyTasks(self.limit, self.ttl)

    def _next_free(self, held: Mapping[str, Task]) -> float:
        """Seconds until one of C{held} expires: the soonest finished one's, or L{ttl}."""
        ends = [t.finished + self.ttl for t in held.values() if t.finished is not None]
        if not ends:
            return self.ttl
        return max(0.0, min(ends) - self.clock.seconds())

    def _add(self, task: Task) -> None:
        self._tasks[task.id] = task
        if task.client is not None:
            self._by_client.setdefault(task.client, {})[task.id] = task

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
        task = self._tasks.pop(task_id, None)
        if len(self._tasks) < self.limit:
            self._full = False
        if task is None or task.client is None:
            return
        held = self._by_client.get(task.client)
        if held is not None:
            held.pop(task_id, None)
            if len(held) < self.per_client:
                self._refused.discard(task.client)
            if not held:
                del self._by_client[task.client]

    def get(self, task_id: str) -> Task | None:
        return self._tasks.get(task_id)

    def __len__(self) -> int:
        return len(self._tasks)

    def close(self) -> None:
        """Forget every task: cancel the running ones and their expiry timers."""
        self._tasks = {}
        self._by_client = {}
        self._refused = set()
        self._full = False
        running, self._running = self._running, {}
        expiry, self._expiry = self._expiry, {}
        for call in expiry.values():
            if call.active():
                call.cancel()
        for deferred in running.values():
            deferred.cancel()
