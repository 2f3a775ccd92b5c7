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
from mcpx.store.records import ANYONE
from mcpx.tasks.task import Task, TaskIsOver, TaskStatus

_log = Logger()


def task_error(failure: Failure) -> dict[str, Any]:
    """The error a failed task reports, as C{/v1} spells errors; unexpected ones logged."""
    error = error_from(failure.value or Exception(failure.getErrorMessage()))
    if error.status == 500:
        _log.failure("a task failed unexpectedly", failure)
    return error.to_json()


def _unknown(host: OpHost, task_id: str) -> OpError:
    return OpError(
        404,
        "unknown_task",
        f"no task {task_id!r}: it never existed, or it finished more than "
        f"{host.tasks.ttl:g}s ago and was forgotten",
    )


async def _task(host: OpHost, call: Invocation, task_id: str) -> Task:
    # With a shared store (store.url), a task another daemon runs is found too.
    task = await host.tasks.lookup(task_id, call.holds)
    if task is None:
        # Another subject's task is answered as if it did not exist.
        raise _unknown(host, task_id)
    return task


async def get_task(host: OpHost, call: Invocation) -> dict[str, Any]:
    return (await _task(host, call, call.args["id"])).to_json()


async def list_tasks(host: OpHost, call: Invocation) -> dict[str, Any]:
    args = call.args
    state = args.get("state")
    client = args.get("client")

    # A subject lists its own tasks only, whatever client it names.
    def holds(owner: str | None) -> bool:
        return call.holds(owner) and (client is None or owner == client)

    found = await host.tasks.listed(
        holds,
        principal=client if client is not None else ANYONE,
        server=args.get("server"),
        status=TaskStatus(state) if state is not None else None,
    )
    return {"tasks": [task.summary() for task in found]}


async def cancel_task(host: OpHost, call: Invocation) -> dict[str, Any]:
    task = await _task(host, call, call.args["id"])
    try:
        task = await host.tasks.cancel_anywhere(
            task, "cancelled through the API (POST /v1/tasks/{id}/cancel)"
        )
    except KeyError:
        raise _unknown(host, task.id) from None
    except TaskIsOver as e:
        raise OpError(
            409,
            "task_finished",
            f"task {task.id!r} is already {e.task.status.value}: a finished task cannot be "
            "cancelled; collect it with GET /v1/tasks/{id}",
        ) from None
    return task.to_json()
