# -*- test-case-name: tests.upstream.test_tasks -*-
"""
Task-augmented calls upstream: mcpx as the requestor of a server's tasks.

A tool call that runs as a task upstream is still one call to whoever made it: the
functions here start the task in the server's own era, wait for its end and answer
the tool's result (or raise its error), so a caller that knows nothing of tasks gets
a plain answer, within the pool's bound on the call.

  - 2025-11-25 (core tasks, client-directed): the C{tools/call} carries C{task}; the
    server answers C{{"task": Task}} and mcpx waits on C{tasks/result}, the request
    through which such a server delivers the questions of the task (an elicitation
    tied to it by the related-task C{_meta}), which reach the question relay like any
    other.  C{notifications/tasks/status} about the task is acted on: a task the server
    says failed or was cancelled ends the wait at once.
  - 2026-07-28 (the C{io.modelcontextprotocol/tasks} extension, server-directed):
    mcpx declares the extension on C{tools/call}; a C{CreateTaskResult}
    (C{resultType: "task"}) is polled with C{tasks/get} at the server's
    C{pollIntervalMs}; the C{inputRequests} of a task in C{input_required} are answered
    through the handlers (so the relay) and sent back with C{tasks/update}.

Either way, cancelling the wait cancels the task upstream (C{tasks/cancel}), and a task
that outlives the C{ttl} the server gave it is given up on with a clear error: the
server may have forgotten it by then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger

from mcpx.call import Call
from mcpx.spec.feature import TASKS_EXTENSION
from mcpx.spec.meta_keys import RELATED_TASK_KEY
from mcpx.upstream.records import InputRound
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import is_mapping, without_member

log = Logger()


class TaskSession(Protocol):
    """What following a task needs of its session (an L{mcpx.upstream.session.UpstreamSession})."""

    @property
    def name(self) -> str:
        """The server's configured name."""

    @property
    def clock(self) -> IReactorTime:
        """The session's clock, for polling and deadlines."""

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        call: Call | None = None,
    ) -> dict[str, Any]:
        """Send a request and return its result."""

    async def answer_inputs(self, round_: InputRound, call: Call | None = None) -> dict[str, Any]:
        """Answer every question of a 2026-07-28 input round."""


#: The C{ttl} mcpx asks a 2025-11-25 server to keep a task for, in milliseconds: as long
#: as a client's request may be held (C{proto.askTimeout}'s default), so a task whose
#: questions wait for a person is not forgotten while they do.
REQUESTED_TTL_MS: Final = 600_000

#: Bounds on the poll interval a server suggests, in seconds: a server asking for 0 ms
#: must not make mcpx spin, one asking for an hour must not stall a call.
MIN_POLL: Final = 0.1
MAX_POLL: Final = 30.0
#: The interval when the server suggests none.
DEFAULT_POLL: Final = 1.0

#: The C{taskSupport} values of a tool whose calls may be tasks.
SUPPORTS_TASKS: Final = frozenset(("optional", "required"))

StatusWatcher = Callable[[Mapping[str, Any]], None]


def task_support(tool: Mapping[str, Any]) -> str | None:
    """
    A tool definition's task support, or C{None} when it names none: its
    C{execution.taskSupport} (2025-11-25), else, as 2026-07-28's C{Tool} has no
    C{execution}, the C{taskSupport} under the tasks extension's id in its C{_meta}.
    """
    execution = tool.get("execution")
    support = execution.get("taskSupport") if is_mapping(execution) else None
    if support is None:
        meta = tool.get("_meta")
        declared = meta.get(TASKS_EXTENSION) if is_mapping(meta) else None
        support = declared.get("taskSupport") if is_mapping(declared) else None
    return support if isinstance(support, str) else None


def runs_as_task(support: str | None, wanted: bool) -> bool:
    """Whether a call to a tool declaring C{support} is made as a task upstream."""
    return support == "required" or (wanted and support in SUPPORTS_TASKS)


def declares_extension(capabilities: Mapping[str, Any]) -> bool:
    """Whether a 2026-07-28 server's capabilities declare the tasks extension."""
    extensions = capabilities.get("extensions")
    # Asked of every 2026-07-28 call: most servers declare no extensions, told without
    # the ABC.
    return (
        extensions is not None
        and isinstance(extensions, Mapping)
        and isinstance(extensions.get(TASKS_EXTENSION), Mapping)
    )


def declares_tool_tasks(capabilities: Mapping[str, Any]) -> bool:
    """Whether a 2025-11-25 server takes task-augmented C{tools/call}s."""
    node: Any = capabilities
    # Asked of every 2025-11-25 call: a dict is told without the ABC.
    for part in ("tasks", "requests", "tools", "call"):
        if not (type(node) is dict or isinstance(node, Mapping)) or part not in node:
            return False
        node = node[part]
    return type(node) is dict or isinstance(node, Mapping)


def _poll_seconds(milliseconds: object) -> float:
    if type(milliseconds) not in (int, float) or isinstance(milliseconds, bool):
        return DEFAULT_POLL
    assert isinstance(milliseconds, int | float)
    return min(MAX_POLL, max(MIN_POLL, milliseconds / 1000))


def _ttl_seconds(milliseconds: object) -> float | None:
    if type(milliseconds) is not int or milliseconds < 0:
        return None
    return milliseconds / 1000


def without_related_task(message: Mapping[str, Any]) -> dict[str, Any]:
    """
    A result or question of an upstream task as mcpx passes it on: the upstream's
    task is mcpx's business, so its id does not leak to a caller that may hold a task
    of its own (whose id mcpx adds where it belongs).
    """
    meta = message.get("_meta")
    if not isinstance(meta, Mapping) or RELATED_TASK_KEY not in meta:
        return message if isinstance(message, dict) else dict(message)
    return without_member(message, "_meta", RELATED_TASK_KEY)


class UpstreamTaskEnded(RpcError):
    """
    The server's task ended without a result: it was cancelled on the server's side,
    failed without a JSON-RPC error, or outlived its ttl.
    """


def _tell_call(call: Call | None) -> None:
    """Tell the call mcpx makes this request for that the upstream made it a task."""
    if call is not None and call.on_upstream_task is not None:
        call.on_upstream_task()


def _cancel_upstream(session: TaskSession, task_id: str, why: str) -> None:
    """Tell the server to stop the task; the wait is over already, so nobody awaits it."""
    cancelling = Deferred.fromCoroutine(session.request("tasks/cancel", {"taskId": task_id}))

    def failed(failure: Any) -> None:
        log.info(
            "upstream {server}: cancelling its task {task} ({why}) failed: {error}",
            server=session.name,
            task=task_id,
            why=why,
            error=failure.getErrorMessage(),
        )

    cancelling.addErrback(failed)


def _ended(session: TaskSession, task_id: str, status: str, message: object) -> RpcError:
    said = f": {message}" if isinstance(message, str) and message else ""
    return UpstreamTaskEnded(
        -32603,
        f"upstream {session.name!r}: its task {task_id} ended {status} without a result{said}",
        {"taskId": task_id, "status": status},
    )


def _outlived(session: TaskSession, task_id: str, ttl: float) -> RpcError:
    return UpstreamTaskEnded(
        -32603,
        f"upstream {session.name!r}: its task {task_id} did not finish within the ttl of "
        f"{ttl:g}s it was given, after which the server may forget it",
        {"taskId": task_id},
    )


async def call_legacy_task(
    session: TaskSession,
    params: Mapping[str, Any],
    *,
    timeout: float | None = None,
    call: Call | None = None,
    watch: Callable[[str, StatusWatcher | None], None],
) -> dict[str, Any]:
    """
    Make a C{tools/call} as a 2025-11-25 task and answer its result.

    @param watch: registers (or, with C{None}, removes) what the session's
        C{notifications/tasks/status} about a task id are given to.
    @raise RpcError: the error the task's C{tasks/result} answered, or
        L{UpstreamTaskEnded}.
    """
    created = await session.request(
        "tools/call",
        {**params, "task": {"ttl": REQUESTED_TTL_MS}},
        timeout=timeout,
        call=call,
    )
    task = created.get("task")
    if not isinstance(task, Mapping) or not isinstance(task.get("taskId"), str):
        if "content" in created:
            # A server may answer a task-augmented call inline; that is its result.
            return created
        raise RpcError(-32603, f"upstream {session.name!r} answered a task call without a task")
    task_id: str = task["taskId"]
    _tell_call(call)
    waiting = Deferred.fromCoroutine(
        session.request("tasks/result", {"taskId": task_id}, call=call)
    )
    #: Why the wait was ended early, and whether the server must still be told to stop.
    ended: list[tuple[RpcError, bool]] = []

    def heard(status: Mapping[str, Any]) -> None:
        state = status.get("status")
        if state in ("failed", "cancelled") and not waiting.called:
            # tasks/result would say so too; a server that only notifies is not waited on.
            message = status.get("statusMessage")
            ended.append((_ended(session, task_id, str(state), message), False))
            waiting.cancel()

    ttl = _ttl_seconds(task.get("ttl"))
    expiry: IDelayedCall | None = None
    if ttl is not None:

        def outlive() -> None:
            ended.append((_outlived(session, task_id, ttl), True))
            waiting.cancel()

        expiry = session.clock.callLater(ttl, outlive)
    watch(task_id, heard)
    try:
        result = await waiting
    except CancelledError:
        if ended:
            error, still_running = ended[0]
            if still_running:
                _cancel_upstream(session, task_id, "it outlived its ttl")
            raise error from None
        _cancel_upstream(session, task_id, "its caller stopped waiting")
        raise
    finally:
        watch(task_id, None)
        if expiry is not None and expiry.active():
            expiry.cancel()
    return without_related_task(result)


async def follow_modern_task(
    session: TaskSession,
    created: Mapping[str, Any],
    params: Mapping[str, Any],
    *,
    timeout: float | None = None,
    call: Call | None = None,
) -> dict[str, Any]:
    """
    Poll a 2026-07-28 C{CreateTaskResult} to its end and answer the tool's result.

    @param params: the C{tools/call}'s parameters (its questions are asked as its own).
    @raise RpcError: the error of a failed task, or L{UpstreamTaskEnded}.
    """
    task_id = created.get("taskId")
    if not isinstance(task_id, str):
        raise RpcError(-32603, f"upstream {session.name!r} answered a task without a taskId")
    _tell_call(call)
    clock = session.clock
    ttl = _ttl_seconds(created.get("ttlMs"))
    deadline = None if ttl is None else clock.seconds() + ttl
    interval = _poll_seconds(created.get("pollIntervalMs"))
    answered: set[str] = set()
    state: Mapping[str, Any] = created
    try:
        while True:
            status = state.get("status")
            if status == "completed":
                result = state.get("result")
                if not isinstance(result, Mapping):
                    raise RpcError(
                        -32603,
                        f"upstream {session.name!r}: its task {task_id} completed without a "
                        "result object",
                    )
                done = dict(result)
                done["resultType"] = "complete"
                return without_related_task(done)
            if status == "failed":
                error = state.get("error")
                if isinstance(error, Mapping) and type(error.get("code")) is int:
                    raise RpcError.from_json(dict(error))
                raise _ended(session, task_id, "failed", state.get("statusMessage"))
            if status == "cancelled":
                raise _ended(session, task_id, "cancelled", state.get("statusMessage"))
            if status == "input_required":
                requests = state.get("inputRequests")
                fresh = {
                    key: asked
                    for key, asked in (requests.items() if isinstance(requests, Mapping) else ())
                    if key not in answered
                }
                if fresh:
                    # Keys are unique over a task's life: each is asked once, however
                    # many polls show it before the server takes the answer in.
                    round_ = InputRound("tools/call", params, fresh, None)
                    responses = await session.answer_inputs(round_, call)
                    answered.update(fresh)
                    await session.request(
                        "tasks/update",
                        {"taskId": task_id, "inputResponses": responses},
                        timeout=timeout,
                    )
            if deadline is not None and clock.seconds() >= deadline:
                assert ttl is not None
                _cancel_upstream(session, task_id, "it outlived its ttl")
                raise _outlived(session, task_id, ttl)
            await deferLater(clock, interval, lambda: None)
            state = await session.request("tasks/get", {"taskId": task_id}, timeout=timeout)
            interval = _poll_seconds(state.get("pollIntervalMs", interval * 1000))
    except CancelledError:
        _cancel_upstream(session, task_id, "its caller stopped waiting")
        raise
