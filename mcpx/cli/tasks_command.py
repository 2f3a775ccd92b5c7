# -*- test-case-name: tests.cli.test_tasks_command -*-
"""
C{mcpx tasks}: the daemon's tasks (C{/v1/call}'s, hosts' task-augmented MCP calls, and
MCP calls kept after a question), listed, shown, waited for or cancelled.

C{wait} polls C{GET /v1/tasks/{id}} until the task is over, drawing its state on stderr
when that is a terminal, and then prints its result as C{mcpx call} would, with the same
exit statuses: 0 for a result, 1 for a tool's error result, a failed or cancelled task.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any, Final

import click

from mcpx.cli.client import DaemonClient, segment
from mcpx.cli.commands import asks_the_daemon, echo_json
from mcpx.cli.failures import EXIT_FAILED, CommandFailed
from mcpx.cli.render import MediaDirectory, content_text, error_text, first_line, table
from mcpx.cli.terminal import echo, printable
from mcpx.ops import routes

#: The states a task never leaves.
TERMINAL: Final = frozenset(("completed", "failed", "cancelled"))

#: Seconds between two polls of C{mcpx tasks wait} unless told otherwise.
POLL_INTERVAL: Final = 0.5

#: Back to the start of the line and clear it, to draw the task's state again.
_REDRAW: Final = "\r\x1b[K"


def tasks_text(answer: Mapping[str, Any], now: float) -> str:
    """The tasks of C{GET /v1/tasks} as a table, or a line saying there are none."""
    listed = answer.get("tasks")
    if not isinstance(listed, list) or not listed:
        return "no tasks\n"
    rows = []
    for task in listed:
        if not isinstance(task, dict):
            continue
        created = task.get("created")
        age = f"{max(0.0, now - created):.0f}s" if isinstance(created, int | float) else "-"
        rows.append(
            [
                str(task.get("id", "?")),
                str(task.get("status", "?")),
                str(task.get("origin", "-")),
                str(task.get("server") or "-"),
                str(task.get("tool") or "-"),
                age,
                first_line(task.get("message") or ""),
            ]
        )
    return table(["TASK", "STATE", "ORIGIN", "SERVER", "TOOL", "AGE", "MESSAGE"], rows)


def _show_outcome(task: Mapping[str, Any], as_json: bool) -> None:
    """Print a task as it stands; exit 1 when it is over without a good result."""
    if as_json:
        echo_json(task)
    status = task.get("status")
    result = task.get("result")
    error = task.get("error")
    failed = status in ("failed", "cancelled")
    if not as_json:
        if isinstance(result, dict):
            failed = failed or result.get("isError") is True
            stem = f"task-{task.get('id', 'result')}"
            for line in content_text(result, MediaDirectory(), stem=stem):
                echo(line, err=failed)
        elif isinstance(error, dict):
            echo(f"task {task.get('id')} {status}: {error_text(error)}", err=True)
        else:
            echo(f"task {task.get('id')} is {status}")
    elif isinstance(result, dict) and result.get("isError") is True:
        failed = True
    if failed:
        raise SystemExit(EXIT_FAILED)


@click.group("tasks")
def tasks() -> None:
    """The daemon's tasks: list them, show, wait for or cancel one."""


@asks_the_daemon("list")
@click.option("--server", metavar="SERVER", help="Only the tasks calling this server.")
@click.option(
    "--state",
    type=click.Choice(["working", "input_required", "completed", "failed", "cancelled"]),
    help="Only the tasks in this state.",
)
def list_tasks(client: DaemonClient, as_json: bool, server: str | None, state: str | None) -> None:
    """List the tasks running or kept for collection, oldest first."""
    query = "&".join(
        f"{name}={segment(value)}"
        for name, value in (("server", server), ("state", state))
        if value
    )
    answer = client.get(routes.path("list_tasks") + (f"?{query}" if query else ""))
    if as_json:
        echo_json(answer)
    else:
        echo(tasks_text(answer, time.time()), nl=False)


@asks_the_daemon("show")
@click.argument("task_id", metavar="TASK")
def show(client: DaemonClient, as_json: bool, task_id: str) -> None:
    """Show TASK: its state, or its result once it has one."""
    _show_outcome(client.get(routes.path("get_task", id=task_id)), as_json)


@asks_the_daemon("wait")
@click.argument("task_id", metavar="TASK")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=POLL_INTERVAL,
    show_default=True,
    help="Seconds between two looks at the task.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    help="Give up after this many seconds (the task runs on).",
)
def wait(
    client: DaemonClient, as_json: bool, task_id: str, interval: float, timeout: float | None
) -> None:
    """Wait for TASK to finish, showing its state, then print its result."""
    drawing = sys.stderr.isatty() and not as_json
    started = time.monotonic()
    shown: str | None = None
    while True:
        task = client.get(routes.path("get_task", id=task_id))
        status = str(task.get("status", "?")) if isinstance(task, dict) else "?"
        if drawing and status != shown:
            elapsed = time.monotonic() - started
            # Back to the line's start and clear it (mcpx's own), then the line, printable.
            sys.stderr.write(_REDRAW + printable(f"task {task_id}: {status} ({elapsed:.0f}s)"))
            sys.stderr.flush()
            shown = status
        if status in TERMINAL:
            if drawing:
                echo("", err=True)
            _show_outcome(task, as_json)
            return
        if timeout is not None and time.monotonic() - started >= timeout:
            if drawing:
                echo("", err=True)
            raise CommandFailed(
                f"task {task_id} is still {status} after {timeout:g}s; it runs on: "
                f"`mcpx tasks wait {task_id}` again, or `mcpx tasks cancel {task_id}`"
            )
        time.sleep(interval)


@asks_the_daemon("cancel")
@click.argument("task_id", metavar="TASK")
def cancel(client: DaemonClient, as_json: bool, task_id: str) -> None:
    """Cancel TASK, and the upstream request it waits on."""
    answer = client.post(routes.path("cancel_task", id=task_id), None)
    if as_json:
        echo_json(answer)
    else:
        echo(f"task {answer.get('id', task_id)} cancelled")


for _command in (list_tasks, show, wait, cancel):
    tasks.add_command(_command)
