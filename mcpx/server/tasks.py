# -*- test-case-name: tests.server.test_tasks -*-
"""
2025-11-25 core tasks, as mcpx serves them to legacy clients.

A C{tools/call} carrying a C{task} field is answered at once with C{{"task": Task}};
the call runs as a task of the daemon's one L{TaskStore}, counted against the caller's
identity (C{tasks.maxPerClient}).  C{tasks/get}, C{tasks/result} (which waits for the
end and answers exactly what the call would have, with the related-task C{_meta}),
C{tasks/list} (the caller's own tasks, a page at a time) and C{tasks/cancel} follow the
2025-11-25 tasks page.  A client mcpx can push to hears C{notifications/tasks/status}
on each change of state.

The field is honoured from any legacy client ("accept liberally"), while the C{tasks}
capability is declared only where the revision has it.  Only a tool that declares
C{execution.taskSupport} may run as a task; for any other the call is C{-32601}, as the
tasks page asks.  Of mcpx's own tools that is C{mcpx_call}; in pass-through the
upstream tool's own declaration, carried on C{tools/list}, decides.

While a question the call asked its client is out, the task is C{input_required} and
the question carries the related-task C{_meta} (L{TaskAsker}).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from attrs import evolve
from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx import tracing
from mcpx.server.conn import Conn, Context
from mcpx.spec.matrix import capability_in, notification_in
from mcpx.spec.meta_keys import RELATED_TASK_KEY
from mcpx.spec.methods import TASK_STATUS
from mcpx.spec.revision import Revision
from mcpx.tasks.store import PER_CLIENT_SETTING, TaskStore, TooManyTasks, TooManyTasksForClient
from mcpx.tasks.task import Task, TaskIsOver, TaskStatus
from mcpx.wire.errors import INTERNAL_ERROR, RpcError

if TYPE_CHECKING:
    from mcpx.call import Asker

log = Logger()


#: What mcpx suggests between two C{tasks/get} of one task, in milliseconds.
POLL_INTERVAL_MS: Final = 1000


#: The tool-level declarations that allow a task (C{execution.taskSupport}).
_ALLOWS_TASK: Final = frozenset(("optional", "required"))

#: The C{tasks} capability mcpx declares where the revision has it.
CAPABILITY: Final[Mapping[str, Any]] = {
    "list": {},
    "cancel": {},
    "requests": {"tools": {"call": {}}},
}

_Call = Callable[[Conn, Context, dict[str, Any]], Awaitable[Mapping[str, Any]]]


def declares_tasks(revision: Revision, *, modern: bool) -> bool:
    """Whether the C{tasks} capability is declared to a client on C{revision}."""
    return not modern and capability_in("server", "tasks", revision)


def _iso(seconds: float) -> str:
    return (
        datetime.fromtimestamp(seconds, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def task_json(task: Task, ttl: float, *, extension: bool = False) -> dict[str, Any]:
    """
    A store task as 2025-11-25's C{Task}, or as the tasks extension's (C{extension}),
    whose durations are named in C{Ms} and whose failure's error is told apart.
    """
    ms = "Ms" if extension else ""
    shown: dict[str, Any] = {
        "taskId": task.id,
        "status": task.status.value,
        "createdAt": _iso(task.created),
        "lastUpdatedAt": _iso(task.updated or task.created),
        f"ttl{ms}": round((task.ttl if task.ttl is not None else ttl) * 1000),
    }
    if not task.status.terminal:
        shown[f"pollInterval{ms}"] = POLL_INTERVAL_MS
    if task.message is not None:
        shown["statusMessage"] = task.message
    elif not extension and task.status is TaskStatus.FAILED and task.error is not None:
        shown["statusMessage"] = str(task.error.get("message", "the call failed"))
    return shown


def _call_error(failure: Failure) -> dict[str, Any]:
    """The JSON-RPC error a task's call failed with, as C{tasks/result} answers it."""
    error = failure.value
    if isinstance(error, RpcError):
        return error.to_json()
    if isinstance(error, CancelledError):
        return {"code": INTERNAL_ERROR, "message": "the call was cancelled before it finished"}
    log.failure("a task's call failed unexpectedly", failure)
    return {"code": INTERNAL_ERROR, "message": failure.getErrorMessage()}


def _is_error_result(result: Any) -> bool:
    # 2025-11-25: a tool call whose result has isError is a failed task.
    return isinstance(result, Mapping) and result.get("isError") is True


class TaskAsker:
    """
    The asker of a task's call: the client's own (a
    L{mcpx.server.resumable.ConnAsker}), with the task shown C{input_required} while any
    of its questions is out and each question tied to the task by the related-task
    C{_meta}.
    """

    __slots__ = ("_inner", "_out", "_store", "_task")

    def __init__(self, inner: Asker, task: Task, store: TaskStore) -> None:
        self._inner = inner
        self._task = task
        self._store = store
        self._out = 0

    def ask(self, method: str, params: dict[str, Any], key: str) -> Deferred[Any]:
        meta = params.get("_meta")
        tagged = dict(meta) if isinstance(meta, Mapping) else {}
        tagged[RELATED_TASK_KEY] = {"taskId": self._task.id}
        self._out += 1
        self._store.mark(self._task, TaskStatus.INPUT_REQUIRED)
        asking = self._inner.ask(method, {**params, "_meta": tagged}, key)

        def answered(outcome: object) -> object:
            self._out -= 1
            if self._out == 0:
                self._store.mark(self._task, TaskStatus.WORKING)
            return outcome

        return asking.addBoth(answered)

    def tell(self, method: str, params: dict[str, Any]) -> bool:
        return self._inner.tell(method, params)


class CoreTasks:
    """
    The core tasks of one L{mcpx.server.dispatch.McpServer}.

    @ivar store: the daemon's tasks.
    @ivar page_size: how many tasks a C{tasks/list} page holds.
    """

    def __init__(self, store: TaskStore, *, page_size: int) -> None:
        self.store = store
        self.page_size = page_size
        #: The connection each running MCP task was made on, for its notifications.
        self._conns: dict[str, Conn] = {}
        store.on_change(self._changed)

    # Creating

    async def create(
        self,
        conn: Conn,
        context: Context,
        params: dict[str, Any],
        call: _Call,
        support: tuple[str | None, str | None, str | None],
    ) -> dict[str, Any]:
        """
        Start a task-augmented C{tools/call} and answer its C{CreateTaskResult}.

        @param call: runs the call (C{tools/call} without the task).
        @param support: the named tool's C{execution.taskSupport} (or C{None}), and
            the server and tool it calls upstream, where known.
        @raise RpcError: C{-32601} for a tool that does not run as a task; C{-32602} for
            a malformed C{task}; C{-32603} when the caller holds as many tasks as it may.
        """
        requested = params.get("task")
        if type(requested) is not dict:
            raise RpcError.invalid_params("params.task must be an object")
        ttl = requested.get("ttl")
        if ttl is not None and (type(ttl) is not int or ttl < 0):
            raise RpcError.invalid_params("params.task.ttl must be a whole number of milliseconds")
        name = params.get("name")
        if not isinstance(name, str):
            raise RpcError.invalid_params("params.name must be a string")
        declared, server, tool = support
        if declared not in _ALLOWS_TASK:
            raise RpcError(
                -32601,
                f"tool {name!r} does not run as a task (its execution.taskSupport is "
                f"{declared or 'absent'}): call it without params.task",
                {"name": name},
            )
        # mcpx keeps a finished task at most as long as any other (proto.askTTL).
        kept = self.store.ttl if ttl is None else min(ttl / 1000, self.store.ttl)
        try:
            task = self.store.open(
                context.identity, ttl=kept, server=server, tool=tool or name, origin="mcp"
            )
        except TooManyTasksForClient as e:
            raise RpcError(
                INTERNAL_ERROR,
                f"this client already holds {e.limit} tasks running or kept for collection "
                f"({PER_CLIENT_SETTING}); collect them with tasks/result or cancel some, "
                f"and try again in {e.retry_in:.0f}s",
            ) from None
        except TooManyTasks as e:
            raise RpcError(
                INTERNAL_ERROR,
                f"{e.limit} tasks are running or waiting to be collected; try again once "
                "some have finished",
            ) from None
        if conn.can_push:
            self._conns[task.id] = conn
        plain = {key: value for key, value in params.items() if key != "task"}
        # Its questions and log messages go where its connection sends the rest: the
        # request is answered now, and with it the stream it was answered on.
        task_context = evolve(context, task=task, reply=None)

        def work() -> Awaitable[Mapping[str, Any]]:
            return call(conn, task_context, plain)

        # Outside the request's context: the request is answered now, so what the call
        # sends later (questions, progress) goes where its connection sends the rest.
        # (Its spans are still the request's children: mcpx.tracing.)
        tracing.fresh_context().run(
            self.store.run, task, work, _call_error, failed_result=_is_error_result
        )
        return {"task": task_json(task, self.store.ttl)}

    def asker_for(self, task: Task, inner: Asker) -> TaskAsker:
        """The asker a task's call puts its questions to its client with."""
        return TaskAsker(inner, task, self.store)

    # tasks/*

    async def _own(self, context: Context, params: Mapping[str, Any]) -> Task:
        task_id = params.get("taskId")
        if not isinstance(task_id, str):
            raise RpcError.invalid_params("params.taskId must be a string")
        identity = context.identity
        # With a shared store (store.url), a task another daemon runs is found too.
        task = await self.store.lookup(task_id, lambda client: client == identity)
        # Another caller's task is as unknown as one that never was, and so is a task
        # of another kind (the 2026-07-28 extension's, /v1/call's).
        if task is None or task.origin != "mcp":
            raise _unknown(task_id)
        return task

    async def get(self, conn: Conn, context: Context, params: dict[str, Any]) -> dict[str, Any]:
        return task_json(await self._own(context, params), self.store.ttl)

    async def result(self, conn: Conn, context: Context, params: dict[str, Any]) -> dict[str, Any]:
        own = await self._own(context, params)
        try:
            task = await self.store.finished(own)
        except KeyError:
            # Another daemon's task, forgotten there while this one waited.
            raise _unknown(own.id) from None
        related = {"taskId": task.id}
        if task.status is TaskStatus.CANCELLED:
            raise RpcError(
                INTERNAL_ERROR,
                f"task {task.id!r} was cancelled: {task.message or 'no reason given'}",
                {"taskId": task.id},
            )
        if task.error is not None:
            error = _rpc_error(task.error)
            data = error.data if isinstance(error.data, dict) else {}
            raise RpcError(error.code, error.message, {**data, "taskId": task.id})
        result = task.result
        out = dict(result) if isinstance(result, Mapping) else {}
        meta = out.get("_meta")
        out["_meta"] = {**(meta if isinstance(meta, Mapping) else {}), RELATED_TASK_KEY: related}
        return out

    async def list_tasks(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> dict[str, Any]:
        identity = context.identity
        listed = await self.store.listed(lambda client: client == identity, principal=identity)
        tasks = [t for t in listed if t.origin == "mcp"]
        start = 0
        cursor = params.get("cursor")
        if cursor is not None:
            start = self._position(tasks, cursor)
        page = tasks[start : start + self.page_size]
        result: dict[str, Any] = {"tasks": [task_json(task, self.store.ttl) for task in page]}
        if start + self.page_size < len(tasks):
            result["nextCursor"] = _cursor(page[-1].id)
        return result

    def _position(self, tasks: list[Task], cursor: object) -> int:
        """Where the page after C{cursor} starts."""
        after = _uncursor(cursor)
        for index, task in enumerate(tasks):
            if task.id == after:
                return index + 1
        raise RpcError.invalid_params(
            "params.cursor names a task that was forgotten since: list again without it"
        )

    async def cancel(self, conn: Conn, context: Context, params: dict[str, Any]) -> dict[str, Any]:
        task = await self._own(context, params)
        try:
            task = await self.store.cancel_anywhere(task, "cancelled by the client (tasks/cancel)")
        except KeyError:
            raise _unknown(task.id) from None
        except TaskIsOver as e:
            raise RpcError.invalid_params(
                f"task {task.id!r} is already {e.task.status.value}: a finished task cannot be "
                "cancelled",
                {"taskId": task.id, "status": e.task.status.value},
            ) from None
        return task_json(task, self.store.ttl)

    # Notifications

    def _changed(self, task: Task) -> None:
        conn = self._conns.get(task.id)
        if conn is None:
            return
        if task.status.terminal:
            del self._conns[task.id]
        push = conn.push
        revision = conn.revision
        if push is None or conn.closed or revision is None:
            return
        if not notification_in(TASK_STATUS, revision):
            return
        # Outside any request: a legacy HTTP session sends it on its GET stream.
        push(TASK_STATUS, task_json(task, self.store.ttl))


def _unknown(task_id: str) -> RpcError:
    return RpcError.invalid_params(
        f"no task {task_id!r}: it never existed, is another client's, or finished "
        f"and was forgotten after its ttl",
        {"taskId": task_id},
    )


def _rpc_error(error: Mapping[str, Any]) -> RpcError:
    """
    A failed task's error as JSON-RPC: its call's own, or (a task another daemon ran,
    failed by the shared store's C{daemon_lost}) an internal error saying so.
    """
    code = error.get("code")
    message = str(error.get("message", "the call failed"))
    if type(code) is int:
        return RpcError(code, message, error.get("data"))
    return RpcError(INTERNAL_ERROR, message, {"reason": code} if isinstance(code, str) else None)


def _cursor(task_id: str) -> str:
    return base64.urlsafe_b64encode(f"task:{task_id}".encode()).decode().rstrip("=")


def _uncursor(cursor: object) -> str:
    if not isinstance(cursor, str):
        raise RpcError.invalid_params("params.cursor must be a string")
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        text = ""
    if not text.startswith("task:"):
        raise RpcError.invalid_params("params.cursor is no cursor of tasks/list")
    return text[len("task:") :]
