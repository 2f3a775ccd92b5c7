# -*- test-case-name: tests.daemon.test_api -*-
"""
Calls that answer later: C{"task": true} on C{POST /v1/call}, MCP calls whose client
was asked a question and may come back for the answer (L{TaskStore.adopt}), and the
task-augmented C{tools/call}s of MCP clients (L{mcpx.server.tasks}).

A task runs in the daemon whether or not its caller stays connected; its outcome is kept
for a while on the clock so the caller can collect it from C{GET /v1/tasks/{id}}.  The
store is in memory; what is still running is also named in the state directory
(L{mcpx.tasks.journal}), so a restarted daemon reports those tasks failed, saying why,
rather than unknown.

A task moves from C{working} (and back and forth through C{input_required} while one of
its questions is out) to one of three terminal states, C{completed}, C{failed} or
C{cancelled}, and never leaves a terminal state: a task cancelled while its call was
finishing stays cancelled.  Whoever watches the store (L{TaskStore.on_change}: the
event bus, MCP status notifications) hears of each move.

Two caps bound it: C{tasks.maxPerClient} tasks per caller identity (the C{Mcpx-Client}
of the call), so one caller cannot take every slot, and L{DEFAULT_LIMIT} in all.  A caller
at its cap is refused (L{TooManyTasksForClient}) while others still get tasks.

What a task is, and its row in a shared store, is L{mcpx.tasks.task}; keeping this
daemon's rows in step with its tasks, and hearing what other daemons write there, is
L{mcpx.tasks.rows}; what any daemon of a fleet writes into the rows of tasks it does not
run is L{mcpx.tasks.shared}.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from attrs import define, field
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx.auth.caller import principal_of
from mcpx.lasting import Lasting
from mcpx.store.records import ANYONE, Principal, RecordStore
from mcpx.tasks.rows import TaskRows
from mcpx.tasks.shared import cancel_row, fail_lost_rows, fail_restored_row
from mcpx.tasks.task import (
    Task,
    TaskIsOver,
    TaskStatus,
)

log = Logger()

#: How long a finished task is kept when nothing says otherwise (C{proto.askTTL}'s default).
DEFAULT_TTL = 900.0

#: How many tasks (running or waiting to be collected) the store holds at most.
DEFAULT_LIMIT = 1000

#: How many of them one caller identity may hold when nothing says otherwise.
DEFAULT_PER_CLIENT = 200

#: The setting that caps the tasks of one caller.
PER_CLIENT_SETTING = "tasks.maxPerClient"


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


def cap_key(client: str) -> str:
    """
    What a caller's tasks count against (C{tasks.maxPerClient}): an access token's
    subject, for its own identity and every session or request scope under it
    (L{mcpx.auth.caller.principal_of}), so no name the subject makes up gets it more;
    any other caller identity is its own.
    """
    return principal_of(client) or client


@define
class TaskStore:
    """
    The daemon's tasks, each kept C{ttl} seconds after it finishes.

    @ivar clock: times the expiry of finished tasks.
    @ivar ttl: seconds a finished task waits to be collected, unless it has its own.
    @ivar limit: how many tasks may exist at once; beyond it L{start} refuses.
    @ivar per_client: how many of them one caller identity may hold.
    @ivar on_change: told of each change from the start (L{on_change}).
    """

    clock: IReactorTime
    ttl: float = DEFAULT_TTL
    limit: int = DEFAULT_LIMIT
    per_client: int = DEFAULT_PER_CLIENT
    _on_change: list[Callable[[Task], None]] = field(factory=list)
    #: The shared store each task is also written to (C{store.url}), so other daemons can
    #: read it (L{stored}); C{None} keeps tasks in this daemon's memory alone.
    records: RecordStore | None = None
    #: This daemon's id in the shared store (L{mcpx.store.heartbeat}), written on each
    #: task it runs, so the others can fail its running tasks if it dies.
    daemon: str | None = None
    _tasks: dict[str, Task] = field(factory=dict, init=False)
    _by_client: dict[str, dict[str, Task]] = field(factory=dict, init=False)
    #: The tasks each cap (L{cap_key}) holds: an access token's subject's, whatever
    #: session or request scope under it made them, count together.
    _by_cap: dict[str, dict[str, Task]] = field(factory=dict, init=False)
    #: The callers refused since they were last below their cap (each logged once).
    _refused: Lasting[str] = field(factory=Lasting, init=False)
    _full: bool = field(default=False, init=False)
    _running: dict[str, Deferred[Any]] = field(factory=dict, init=False)
    _expiry: dict[str, IDelayedCall] = field(factory=dict, init=False)
    #: The daemons alive now (L{mcpx.store.heartbeat.Heartbeat.alive}), to say in a
    #: cancel through this daemon whether the task's own daemon is there to stop it.
    alive: Callable[[], Deferred[set[str]]] | None = None
    #: The rows of its tasks in the shared store, kept in step with them.
    _rows: TaskRows = field(init=False)

    @_rows.default
    def _rows_of_these(self) -> TaskRows:
        return TaskRows(self)

    def start(
        self,
        work: Callable[[], Awaitable[Any]],
        describe_error: Callable[[Failure], Mapping[str, Any]],
        client: str | None = None,
        *,
        server: str | None = None,
        tool: str | None = None,
    ) -> Task:
        """
        Run C{work} as a new task.

        @param describe_error: turns the failure of C{work} into the task's C{error}.
        @param client: the caller identity it counts against (L{per_client}).
        @raise TooManyTasksForClient: when C{client} already holds L{per_client} tasks.
        @raise TooManyTasks: when L{limit} tasks already exist.
        """
        task = self.open(client, server=server, tool=tool)
        self.run(task, work, describe_error)
        return task

    def open(
        self,
        client: str | None,
        *,
        ttl: float | None = None,
        server: str | None = None,
        tool: str | None = None,
        origin: str = "v1",
    ) -> Task:
        """
        A new C{working} task with nothing running yet (L{run} gives it its work): for
        work that must know its task's id before it starts.

        @param ttl: seconds it is kept once finished, instead of L{ttl}.
        @raise TooManyTasksForClient: when C{client} already holds L{per_client} tasks.
        @raise TooManyTasks: when L{limit} tasks already exist.
        """
        self._check_room(client)
        now = self.clock.seconds()
        task = Task(
            secrets.token_hex(12),
            now,
            client=client,
            updated=now,
            ttl=ttl,
            server=server,
            tool=tool,
            origin=origin,
        )
        self._add(task)
        self._changed(task)
        return task

    def run(
        self,
        task: Task,
        work: Callable[[], Awaitable[Any]],
        describe_error: Callable[[Failure], Mapping[str, Any]],
        *,
        failed_result: Callable[[Any], bool] | None = None,
    ) -> None:
        """
        Run C{work} as C{task}'s work (see L{open}).

        @param failed_result: whether a result C{work} answered with means the task
            failed all the same (a tool's C{isError} result); the result is kept.
        """

        async def run() -> Any:
            return await work()

        def done(result: Any) -> None:
            failed = failed_result is not None and failed_result(result)
            status = TaskStatus.FAILED if failed else TaskStatus.COMPLETED
            self._finish(task, status, result=result)

        def failed(failure: Failure) -> None:
            if not task.status.terminal:
                # (A cancelled task's work fails with CancelledError: nothing to describe.)
                self._finish(task, TaskStatus.FAILED, error=describe_error(failure))

        running: Deferred[None] = Deferred.fromCoroutine(run()).addCallbacks(done, failed)
        # Work that finished at once is already done with; only a running task is tracked.
        if not task.status.terminal:
            self._running[task.id] = running

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
        now = self.clock.seconds()
        task = Task(task_id, now, updated=now, origin="resumable")
        self._add(task)
        self._changed(task)

        def finished(result: Any) -> None:
            if isinstance(result, Failure):
                self._finish(task, TaskStatus.FAILED, error=describe_error(result))
            else:
                self._finish(task, TaskStatus.COMPLETED, result=result)

        work.addBoth(finished)
        return task

    def _check_room(self, client: str | None) -> None:
        if client is not None:
            client = cap_key(client)
            held = self._by_cap.get(client)
            if held is not None and len(held) >= self.per_client:
                if self._refused.begins(client):
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

    def _kept(self, task: Task) -> float:
        return self.ttl if task.ttl is None else task.ttl

    def _next_free(self, held: Mapping[str, Task]) -> float:
        """Seconds until one of C{held} expires: the soonest finished one's, or L{ttl}."""
        ends = [t.finished + self._kept(t) for t in held.values() if t.finished is not None]
        if not ends:
            return self.ttl
        return max(0.0, min(ends) - self.clock.seconds())

    def _add(self, task: Task) -> None:
        self._tasks[task.id] = task
        if task.client is not None:
            self._by_client.setdefault(task.client, {})[task.id] = task
            self._by_cap.setdefault(cap_key(task.client), {})[task.id] = task

    def _changed(self, task: Task) -> None:
        task.changes += 1
        if self.records is not None:
            self._rows.save(self.records, task)
        for told in tuple(self._on_change):
            try:
                told(task)
            except Exception:
                log.failure("telling of task {task}'s change failed", task=task.id)

    def on_change(self, told: Callable[[Task], None]) -> None:
        """
        Tell C{told} of every task made and every change of state, after the change
        (the event bus, MCP status notifications); it must not raise.
        """
        self._on_change.append(told)

    def listen(self) -> None:
        """
        Hear of the shared store's changes to tasks: a cancel of one of this daemon's
        running tasks written through another daemon stops it here, and a task another
        daemon runs wakes those waiting here for its end (L{finished}).
        """
        if self.records is not None:
            self.records.listen(self._rows.heard)

    def ended_elsewhere(self, task: Task, stored: Task) -> None:
        """
        The shared store says this daemon's C{task} ended (a cancel through another
        daemon): it ends so here too, and its work is stopped (its upstream call with it).
        """
        if task.status.terminal:
            if task.status is not stored.status:
                # Finished here while it was cancelled there: the store's end is kept.
                task.status, task.message = stored.status, stored.message
                task.error, task.result = stored.error, stored.result
            return
        log.info(
            "task {id} was {status} through another daemon: {message}",
            id=task.id,
            status=stored.status.value,
            message=stored.message,
        )
        running = self._running.pop(task.id, None)
        self._finish(
            task,
            stored.status,
            result=stored.result,
            error=stored.error,
            message=stored.message,
        )
        if running is not None:
            running.cancel()

    def mark(self, task: Task, status: TaskStatus, message: str | None = None) -> None:
        """
        Move a running task between C{working} and C{input_required}; a task that is
        over is left as it is (its question's answer can arrive after a cancel).
        """
        if status.terminal:
            raise ValueError(f"{status.value} is reached by finishing or cancelling")
        if task.status.terminal or (task.status is status and task.message == message):
            return
        task.status = status
        task.message = message
        task.updated = self.clock.seconds()
        self._changed(task)

    def cancel(self, task_id: str, message: str = "cancelled at the caller's request") -> Task:
        """
        Cancel a running task: it is C{cancelled} at once, and its work is stopped
        (the upstream request it waits on is cancelled with it).

        @raise KeyError: for a task the store does not hold.
        @raise TaskIsOver: for a task that already finished.
        """
        task = self._tasks[task_id]
        if task.status.terminal:
            raise TaskIsOver(task)
        running = self._running.pop(task.id, None)
        self._finish(task, TaskStatus.CANCELLED, message=message)
        if running is not None:
            running.cancel()
        return task

    def _finish(
        self,
        task: Task,
        status: TaskStatus,
        *,
        result: Any = None,
        error: Mapping[str, Any] | None = None,
        message: str | None = None,
    ) -> None:
        if task.status.terminal:
            # Cancelled first: what the work did afterwards changes nothing.
            return
        task.status = status
        task.result = result
        task.error = error
        task.message = message
        task.finished = task.updated = self.clock.seconds()
        self._running.pop(task.id, None)
        if task.id in self._tasks:
            self._expiry[task.id] = self.clock.callLater(self._kept(task), self._expire, task.id)
        self._changed(task)
        task._done.fire(task)

    def finished(self, task: Task) -> Deferred[Task]:
        """
        Fires with C{task} once it is over (at once if it is); cancel to stop waiting.
        For a task another daemon runs (L{lookup}), it fires with the task as the shared
        store holds it once it ends there: finished, cancelled, or failed with
        C{daemon_lost} when its daemon died; L{KeyError} if its row went meanwhile.
        """
        if task.status.terminal:
            return succeed(task)
        if task.daemon is None or self.records is None:
            return task._done.wait()
        ended = self._rows.ended(task)

        def found(stored: Task | None) -> Task:
            if stored is None:
                raise KeyError(task.id)
            return stored

        return ended.addCallback(found)

    def _expire(self, task_id: str) -> None:
        self._expiry.pop(task_id, None)
        task = self._tasks.pop(task_id, None)
        self._rows.forget(task_id)
        if len(self._tasks) < self.limit:
            self._full = False
        if task is None or task.client is None:
            return
        listed = self._by_client.get(task.client)
        if listed is not None:
            listed.pop(task_id, None)
            if not listed:
                del self._by_client[task.client]
        key = cap_key(task.client)
        held = self._by_cap.get(key)
        if held is not None:
            held.pop(task_id, None)
            if len(held) < self.per_client:
                self._refused.ends(key)
            if not held:
                del self._by_cap[key]

    def restore_failed(self, entry: Mapping[str, Any], message: str) -> Task:
        """
        Enter a task a previous daemon left unfinished (L{mcpx.tasks.journal}) as failed,
        saying why, kept like any finished task; it counts against its caller's cap.

        With a shared store the task's row is the task, for every daemon: the failure
        is written there (only over the state the previous daemon left, so a cancel or
        a C{daemon_lost} written meanwhile by another daemon stands), and this daemon
        reads the task from the store like any other daemon's, rather than keeping a
        copy of its own that would say otherwise.
        """
        now = self.clock.seconds()

        def text(key: str) -> str | None:
            value = entry.get(key)
            return value if isinstance(value, str) else None

        created = entry.get("created")
        ttl = entry.get("ttl")
        error = {"code": "daemon_restarted", "message": message}
        task = Task(
            id=str(entry["id"]),
            created=float(created) if isinstance(created, int | float) else now,
            status=TaskStatus.FAILED,
            error=error,
            finished=now,
            client=text("client"),
            updated=now,
            ttl=float(ttl) if isinstance(ttl, int | float) else None,
            server=text("server"),
            tool=text("tool"),
            origin=text("origin") or "v1",
            message=message,
        )
        if self.records is not None:
            failing = Deferred.fromCoroutine(fail_restored_row(self.records, task.id, error, now))
            self._rows.writes.track(failing, "fail restored task " + task.id)
            return task
        self._add(task)
        self._expiry[task.id] = self.clock.callLater(self._kept(task), self._expire, task.id)
        return task

    def get(self, task_id: str) -> Task | None:
        return self._tasks.get(task_id)

    def lookup(self, task_id: str, holds: Callable[[str | None], bool]) -> Deferred[Task | None]:
        """
        The task of that id if C{holds} its caller identity: this daemon's own, or else
        (with a shared store) the one another daemon runs or ran, read from the store
        (its L{Task.daemon} set).  C{None} for an unknown id and for a task another
        caller's, alike.
        """
        local = self._tasks.get(task_id)
        if local is not None or self.records is None:
            return succeed(local if local is not None and holds(local.client) else None)
        return self._rows.read(self.records, task_id, holds)

    def listed(
        self,
        holds: Callable[[str | None], bool],
        *,
        principal: Principal = ANYONE,
        server: str | None = None,
        status: TaskStatus | None = None,
    ) -> Deferred[list[Task]]:
        """
        The tasks whose caller C{holds}, oldest first: this daemon's and, with a shared
        store, every daemon's (C{principal} narrows what is read from it).
        """

        def wanted(task: Task) -> bool:
            return (
                holds(task.client)
                and (server is None or task.server == server)
                and (status is None or task.status is status)
            )

        local = [task for task in self._tasks.values() if wanted(task)]
        if self.records is None:
            return succeed(local)
        return self._rows.read_all(self.records, principal, wanted, local)

    def cancel_anywhere(
        self, task: Task, message: str = "cancelled at the caller's request"
    ) -> Deferred[Task]:
        """
        Cancel C{task} (from L{lookup}): this daemon's own as L{cancel} does; another
        daemon's by writing its end to the shared store, which that daemon hears and
        stops the task's work by.  Fires with the task as cancelled.

        @raise KeyError: (in the Deferred) for a task whose row went meanwhile.
        @raise TaskIsOver: (in the Deferred) for a task that already finished.
        """
        if task.daemon is None or self.records is None:
            try:
                return succeed(self.cancel(task.id, message))
            except (KeyError, TaskIsOver) as e:
                return fail(e)
        cancelling = cancel_row(
            self.records,
            task.id,
            message,
            now=self.clock.seconds,
            through=self.daemon,
            alive=self.alive,
        )
        return Deferred.fromCoroutine(cancelling)

    def stored(
        self, task_id: str, principal: Principal = ANYONE
    ) -> Deferred[dict[str, Any] | None]:
        """
        The task of that id as the shared store holds it (made by this daemon or another):
        its L{Task.summary} and L{Task.to_json} fields in one object, or C{None} when there
        is none that C{principal} may see, or no shared store.
        """
        if self.records is None:
            return succeed(None)
        return self._rows.shown(self.records, task_id, principal)

    def fail_lost(self, alive: set[str]) -> Deferred[int]:
        """
        Fail, in the shared store, the running tasks of daemons that are not in C{alive}
        (they died without finishing them), saying so; how many were.  A task that
        moved on meanwhile is left as it is (each is failed only if still in its state).
        """
        if self.records is None:
            return succeed(0)
        failing = Deferred.fromCoroutine(self._fail_lost(self.records, alive))

        def again(failed: int) -> int:
            # A missed notice never leaves a waiter hanging: each beat reads its task.
            self._rows.read_awaited()
            return failed

        return failing.addCallback(again)

    async def _fail_lost(self, records: RecordStore, alive: set[str]) -> int:
        # The beat was written: the store is reachable again, if it was not.
        await self._rows.save_again(records)
        return await fail_lost_rows(
            records, alive, now=self.clock.seconds, own=self.daemon, ttl=self.ttl
        )

    def saved(self) -> Deferred[None]:
        """Fires once the writes to the shared store under way now have ended."""
        return self._rows.writes.settled()

    def tasks(
        self,
        *,
        client: str | None = None,
        server: str | None = None,
        status: TaskStatus | None = None,
    ) -> list[Task]:
        """The tasks held, oldest first: those of C{client}, C{server} and C{status}."""
        found: Iterable[Task]
        if client is not None:
            found = self._by_client.get(client, {}).values()
        else:
            found = self._tasks.values()
        return [
            task
            for task in found
            if (server is None or task.server == server)
            and (status is None or task.status is status)
        ]

    def __len__(self) -> int:
        return len(self._tasks)

    def close(self) -> None:
        """Forget every task: cancel the running ones and their expiry timers."""
        self._rows.close()
        self._tasks = {}
        self._by_client = {}
        self._by_cap = {}
        self._refused.clear()
        self._full = False
        running, self._running = self._running, {}
        expiry, self._expiry = self._expiry, {}
        for call in expiry.values():
            if call.active():
                call.cancel()
        for deferred in running.values():
            deferred.cancel()
