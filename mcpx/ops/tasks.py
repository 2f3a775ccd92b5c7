# -*- test-case-name: tests.daemon.test_tasks_api -*-
"""
The operations on the tasks C{/v1/call} with C{"task": true} and the MCP calls leave:
get one, list them, cancel one.
"""

from __future__ import annotations

from typing import Any

from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx.ops.errors import OpError, error_from
from mcpx.ops.host import Invocation, OpHost
from mcpx.tasks.store import Task, TaskIsOver, TaskStatus

_log = Logger()


def task_error(failure: Failure) -> dict[str, Any]:
    """The error a failed task reports, as C{/v1} spells errors; unexpected ones logged."""
    error = error_from(failure.value or Exception(failure.getErrorMessage()))
    if error.status == 500:
        _log.failure("a task failed unexpectedly", failure)
    return error.to_json()


def _task(host: OpHost, call: Invocation, task_id: str) -> Task:
    task = host.tasks.get(task_id)
    if task is None or not call.holds(task.client):
        # Another subject's task is answered as if it did not exist.
        raise OpError(
            404,
            "unknown_task",
            f"no task {task_id!r}: it never existed, or it finished more than "
            f"{host.tasks.ttl:g}s ago and was forgotten",
        )
    return task


async def get_task(host: OpHost, call: Invocation) -> dict[str, Any]:
    return _task(host, call, call.args["id"]).to_json()


async def list_tasks(host: OpHost, call: Invocation) -> dict[str, Any]:
    args = call.args
    state = args.get("state")
    found = host.tasks.tasks(
        client=args.get("client"),
        server=args.get("server"),
        status=TaskStatus(state) if state is not None else None,
    )
    # A subject lists its own tasks only, whatever client it names.
    return {"tasks": [task.summary() for task in found if call.holds(task.client)]}


async def cancel_task(host: OpHost, call: Invocation) -> dict[str, Any]:
    task = _task(host, call, call.args["id"])
    try:
        host.tasks.cancel(task.id, "cancelled through the API (POST /v1/tasks/{id}/cancel)")
    except TaskIsOver:
        raise OpError(
            409,
            "task_finished",
            f"task {task.id!r} is already {task.status.value}: a finished task cannot be "
            "cancelled; collect it with GET /v1/tasks/{id}",
        ) from None
    return task.to_json()
