# -*- test-case-name: tests.store.test_fleet_tasks,tests.tasks.test_journal -*-
"""
What any daemon of a fleet writes into the tasks' rows of the shared store: the end of a
task another daemon runs (L{cancel_row}), the failure of those whose daemon died
(L{fail_lost_rows}) and of one a restart left unfinished (L{fail_restored_row}).

Every write is made only over the state the row was read in (C{put_if}): a row that
moved on meanwhile (its own daemon finished it, another daemon cancelled it) keeps what
was written there first.  L{mcpx.tasks.store.TaskStore} calls these; they hold nothing.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from twisted.logger import Logger

from mcpx.store.records import TASKS, Record, RecordStore
from mcpx.tasks.task import Task, TaskIsOver, TaskStatus, task_from_record, task_record

log = Logger()

#: Seconds past the ttl after which a finished task's row is deleted by any daemon of a
#: shared store (its own daemon deletes it at its ttl; a dead one never does), leaving
#: room for clocks a little apart.
FORGOTTEN_AFTER = 60.0

#: The states a task's row may be failed from, and their values as rows hold them.
_UNFINISHED: Final = (TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED)
_UNFINISHED_STATES: Final = frozenset(status.value for status in _UNFINISHED)


def _row_body(record: Record) -> dict[str, Any] | None:
    """The JSON object of a task's row, or C{None} when it holds none: left as it is."""
    try:
        shown = json.loads(record.body)
    except ValueError:
        return None
    return shown if isinstance(shown, dict) else None


def _failed_row(
    record: Record, shown: dict[str, Any], error: Mapping[str, Any] | None, now: float
) -> Record:
    """C{record}, whose body is C{shown}, failed at C{now} with C{error}."""
    message = error.get("message") if error is not None else None
    shown.update(
        status=TaskStatus.FAILED.value,
        error=error,
        message=message,
        updated=now,
        finished=now,
    )
    return Record(
        id=record.id,
        principal=record.principal,
        state=TaskStatus.FAILED.value,
        finished=now,
        body=json.dumps(shown, separators=(",", ":")),
    )


async def fail_restored_row(
    records: RecordStore, task_id: str, error: Mapping[str, Any], at: float
) -> None:
    """
    Write the failure of a task a previous daemon left unfinished into its row
    (L{mcpx.tasks.store.TaskStore.restore_failed}), if the row is still unfinished.
    """
    record = await records.get(TASKS, task_id)
    if record is None or record.state not in _UNFINISHED_STATES:
        return
    shown = _row_body(record)
    if shown is not None:
        await records.put_if(TASKS, _failed_row(record, shown, error, at), record.state)


async def cancel_row(
    records: RecordStore,
    task_id: str,
    message: str,
    *,
    now: Callable[[], float],
    through: str | None,
    alive: Callable[[], Awaitable[set[str]]] | None,
) -> Task:
    """
    Cancel, in its row, a task another daemon runs; that daemon hears of it and stops the
    task's work.  The row is read again and the cancel retried until it is written over
    the state it was read in.

    @param through: this daemon's id, said in the task's message.
    @param alive: the daemons alive now, to say when the task's own daemon is gone.
    @return: the task as cancelled.
    @raise KeyError: for a task whose row went (or cannot be read).
    @raise TaskIsOver: for a task that already finished.
    """
    while True:
        record = await records.get(TASKS, task_id)
        found = None if record is None else task_from_record(record)
        if record is None or found is None:
            raise KeyError(task_id)
        if found.status.terminal:
            raise TaskIsOver(found)
        owner = found.daemon
        said = message if through is None else f"{message}, through daemon {through}"
        if alive is not None and owner is not None and owner not in await alive():
            said += (
                f"; the daemon that ran it ({owner}) has no heartbeat any more, so "
                "nothing was left running to stop"
            )
        found.status = TaskStatus.CANCELLED
        found.message = said
        found.error = None
        found.result = None
        found.finished = found.updated = now()
        # Only if it is still as read: else it moved on (or ended), and is read again.
        if await records.put_if(TASKS, task_record(found, owner), record.state):
            log.info(
                "task {id} of daemon {daemon} cancelled through this one",
                id=task_id,
                daemon=owner,
            )
            return found


async def fail_lost_rows(
    records: RecordStore,
    alive: set[str],
    *,
    now: Callable[[], float],
    own: str | None,
    ttl: float,
) -> int:
    """
    Fail the running tasks of the daemons not in C{alive} (they died without finishing
    them), saying so, and delete the rows of finished tasks long past any ttl.

    @param own: this daemon's id: its own tasks are never failed here.
    @param ttl: the longest a finished task is kept.
    @return: how many tasks were failed.
    """
    failed = 0
    for status in _UNFINISHED:
        for record in await records.find(TASKS, state=status.value):
            shown = _row_body(record)
            owner = shown.get("daemon") if shown is not None else None
            if shown is None or not isinstance(owner, str) or owner == own or owner in alive:
                continue
            message = (
                f"the daemon that ran this task ({owner}) stopped without finishing it "
                "(it has no heartbeat in the shared store any more)"
            )
            lost = _failed_row(record, shown, {"code": "daemon_lost", "message": message}, now())
            if await records.put_if(TASKS, lost, status.value):
                log.warn(
                    "task {id} failed: its daemon {daemon} is gone", id=record.id, daemon=owner
                )
                failed += 1
    # A dead daemon's finished tasks are never expired by it: every daemon's are long
    # past their ttl (none is kept longer than the store's) by then.
    await records.prune(TASKS, now() - ttl - FORGOTTEN_AFTER, keep=TaskStatus.WORKING.value)
    return failed
