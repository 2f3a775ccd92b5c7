# -*- test-case-name: tests.server.test_ext_tasks -*-
"""
The 2026-07-28 tasks extension (C{io.modelcontextprotocol/tasks}), as mcpx serves it.

Server-directed: a client that declares the extension on a C{tools/call} lets mcpx
answer with a C{CreateTaskResult} instead of the tool's result, and mcpx does so once
the call has run a while: 250 ms for a tool that declares C{execution.taskSupport},
C{protoMessages.taskAfter} for one that declares nothing.  A call that finishes, or
asks its client a question, before then is answered inline as usual (its question as
C{input_required}, before any task exists).  The C{task} field of core tasks means
nothing here.

Once a task, the call belongs to the daemon's one L{TaskStore} (counted against the
caller, listed at C{/v1/tasks}): C{tasks/get} answers its C{DetailedTask} (the result
or error inlined; the questions it waits on as C{inputRequests} while it is
C{input_required}), C{tasks/update} gives those questions their answers, and
C{tasks/cancel} stops it.  A client listening with C{taskIds} hears each change as
C{notifications/tasks} (L{mcpx.server.listen}).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from attrs import define
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from mcpx.server.conn import Context
from mcpx.server.resumable import ResumableCall
from mcpx.server.tasks import task_json
from mcpx.spec.feature import TASKS_EXTENSION
from mcpx.tasks.store import TaskStore
from mcpx.tasks.task import Task, TaskIsOver, TaskStatus
from mcpx.upstream.tasks import SUPPORTS_TASKS
from mcpx.wire.errors import INTERNAL_ERROR, RpcError

#: What the store's C{origin} calls these tasks (core tasks are C{"mcp"}).
ORIGIN: Final = "extension"

#: How long a call to a tool that declares task support runs before it becomes a task.
SUPPORTING_TOOL_AFTER: Final = 0.25


def task_owner(context: Context, connection_identity: str) -> str:
    """
    Who an extension task belongs to: the request's named session, else the identity
    behind its connection.  A 2026-07-28 request's own caller scope ends with the
    request, and the task must outlive it; its id, unguessable, does the rest.
    """
    if context.identity.startswith(f"{connection_identity}/request-"):
        return connection_identity
    return context.identity


#: What a 2026-07-28 client must declare for the extension's methods and tools.
REQUIRED: Final[Mapping[str, Any]] = {"extensions": {TASKS_EXTENSION: {}}}


def client_declares(context: Context) -> bool:
    """Whether the request's client declared the extension on it."""
    extensions = context.capabilities.get("extensions")
    # Asked of every 2026-07-28 call: most declare no extensions, told without the ABC.
    return (
        extensions is not None
        and isinstance(extensions, Mapping)
        and isinstance(extensions.get(TASKS_EXTENSION), Mapping)
    )


def becomes_task_after(support: str | None, task_after: float) -> float:
    """Seconds a call runs before it is made a task, by its tool's C{taskSupport}."""
    return SUPPORTING_TOOL_AFTER if support in SUPPORTS_TASKS else task_after


@define(eq=False)
class _Held:
    task: Task
    call: ResumableCall


Describe = Callable[[Failure], Mapping[str, Any]]
Spell = Callable[[Mapping[str, Any]], Mapping[str, Any]]


class ExtensionTasks:
    """
    The extension tasks of one L{mcpx.server.dispatch.McpServer}.

    @ivar store: the daemon's tasks.
    """

    def __init__(
        self, store: TaskStore, on_change: Callable[[str, Callable[[], dict[str, Any]]], object]
    ) -> None:
        """
        @param on_change: told of each change of an extension task, with a maker of its
            C{DetailedTask} (the listens that name it, L{mcpx.server.listen}).
        """
        self.store = store
        #: The calls of the running tasks, by task id.
        self._held: dict[str, _Held] = {}
        self._on_change = on_change
        store.on_change(self._changed)

    def _changed(self, task: Task) -> None:
        if task.origin != ORIGIN:
            return
        self._on_change(task.id, lambda: self.detailed(task))
        if task.status.terminal:
            self._held.pop(task.id, None)

    def adopt(
        self,
        owner: str,
        call: ResumableCall,
        *,
        server: str | None,
        tool: str | None,
        spell: Spell,
        describe_error: Describe,
    ) -> dict[str, Any]:
        """
        Make the running C{call} a task of C{owner} and answer its C{CreateTaskResult}.

        @param owner: who may see the task: the caller identity behind the connection
            (a 2026-07-28 request's own scope lasts one request; see L{task_owner}).

        @raise TooManyTasksForClient: see L{TaskStore.open}.
        @raise TooManyTasks: see L{TaskStore.open}.
        """
        task = self.store.open(owner, server=server, tool=tool, origin=ORIGIN)
        held = _Held(task, call)
        self._held[task.id] = held

        async def outcome() -> Any:
            try:
                result = await call.outcome()
            except CancelledError:
                call.cancel()
                raise
            # Kept as the task's client gets it: tasks/get inlines it as it is.
            return spell(result)

        self.store.run(task, outcome, describe_error)
        self._watch(held)
        return {"resultType": "task", **task_json(task, self.store.ttl, extension=True)}

    def _watch(self, held: _Held) -> None:
        """Mark the task C{input_required} when its call asks, once it does."""
        call, task = held.call, held.task
        if call.done or task.status.terminal:
            return
        if call.asking():
            self.store.mark(task, TaskStatus.INPUT_REQUIRED)
            return
        call.next().addCallback(lambda _: self._watch(held))

    def detailed(self, task: Task) -> dict[str, Any]:
        """The task as C{tasks/get} answers it and C{notifications/tasks} tells it."""
        shown = task_json(task, self.store.ttl, extension=True)
        status = task.status
        if status is TaskStatus.COMPLETED:
            shown["result"] = dict(task.result or {})
        elif status is TaskStatus.FAILED:
            shown["error"] = dict(task.error or {"code": INTERNAL_ERROR, "message": "failed"})
        elif status is TaskStatus.INPUT_REQUIRED:
            held = self._held.get(task.id)
            shown["inputRequests"] = held.call.asking() if held is not None else {}
        return shown

    def visible(self, owner: str, task_id: object) -> Task | None:
        """C{owner}'s own extension task of that id (another's is as unknown)."""
        if not isinstance(task_id, str):
            return None
        task = self.store.get(task_id)
        if task is None or task.client != owner or task.origin != ORIGIN:
            return None
        return task

    async def _own(self, owner: str, params: Mapping[str, Any]) -> Task:
        task_id = params.get("taskId")
        if not isinstance(task_id, str):
            raise RpcError.invalid_params("params.taskId must be a string")
        # With a shared store (store.url), a task another daemon runs is found too.
        task = await self.store.lookup(task_id, lambda client: client == owner)
        if task is None or task.origin != ORIGIN:
            raise RpcError.invalid_params(
                f"no task {task_id!r}: it never existed, is another client's, or finished "
                "and was forgotten after its ttl",
                {"taskId": task_id},
            )
        return task

    # tasks/*

    async def get(self, owner: str, params: Mapping[str, Any]) -> dict[str, Any]:
        return self.detailed(await self._own(owner, params))

    async def update(self, owner: str, params: Mapping[str, Any]) -> dict[str, Any]:
        task = await self._own(owner, params)
        responses = params.get("inputResponses")
        if not isinstance(responses, Mapping):
            raise RpcError.invalid_params("params.inputResponses must be an object")
        held = self._held.get(task.id)
        if held is None or task.status.terminal:
            # The answers are for questions nobody waits on any more (or, for a task
            # another daemon runs, on that daemon): ignored, as the extension allows for
            # keys that ask nothing.
            return {}
        held.call.answer(responses)
        if not held.call.asking():
            self.store.mark(task, TaskStatus.WORKING)
            self._watch(held)
        return {}

    async def cancel(self, owner: str, params: Mapping[str, Any]) -> dict[str, Any]:
        task = await self._own(owner, params)
        held = self._held.get(task.id)
        try:
            # Another daemon's task: its daemon hears of the cancel and stops the call.
            await self.store.cancel_anywhere(task, "cancelled by the client (tasks/cancel)")
        except (KeyError, TaskIsOver):
            # Idempotent: a finished task stays as it ended, and the answer is the same.
            return {}
        if held is not None:
            held.call.cancel()
        return {}


def race(
    call: ResumableCall, after: float, clock: IReactorTime
) -> tuple[Deferred[bool], Callable[[], None]]:
    """
    Fires C{True} once C{call} has run C{after} seconds without finishing or asking,
    or when the second of the pair is called (the upstream made the call a task),
    C{False} as soon as it finishes or asks.  Cancelling it stops the race only.
    """
    watcher = call.next()

    def ran_long() -> None:
        if not decided.called:
            if timer.active():
                timer.cancel()
            decided.callback(True)

    timer = clock.callLater(after, ran_long)

    def stop(_: Deferred[bool]) -> None:
        if timer.active():
            timer.cancel()
        watcher.cancel()

    decided: Deferred[bool] = Deferred(stop)

    def came_back(_: object) -> None:
        if timer.active():
            timer.cancel()
        if not decided.called:
            decided.callback(False)

    def stopped(failure: Failure) -> None:
        failure.trap(CancelledError)

    watcher.addCallbacks(came_back, stopped)
    return decided, ran_long
