# -*- test-case-name: tests.store.test_fleet_tasks,tests.store.test_shared -*-
"""
This daemon's tasks as the shared store holds them (C{store.url}): each change written
to the task's row in order, a write that failed written again after the next heartbeat,
and what other daemons write there (a cancel through them, the end of a task they run)
heard and acted on here.

L{mcpx.tasks.store.TaskStore} keeps the tasks; L{TaskRows} keeps their rows in step.
What any daemon writes into rows of tasks it does not run is L{mcpx.tasks.shared}.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from attrs import define, field
from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx.once import Waiters
from mcpx.store.records import TASKS, Principal, Record, RecordStore
from mcpx.store.unsaved import Unsaved
from mcpx.store.writes import Writes
from mcpx.tasks.task import Task, row_ended, task_from_record, task_record

log = Logger()

__all__ = ["RowsOwner", "TaskRows"]


class RowsOwner(Protocol):
    """The store whose tasks' rows these are (L{mcpx.tasks.store.TaskStore})."""

    #: The shared store; C{None} when tasks are kept in this daemon's memory alone.
    records: RecordStore | None
    #: This daemon's id in the shared store, written on each task it runs.
    daemon: str | None

    def get(self, task_id: str) -> Task | None: ...

    def tasks(self) -> list[Task]: ...

    def ended_elsewhere(self, task: Task, stored: Task) -> None:
        """The row says this daemon's unfinished C{task} ended (cancelled elsewhere)."""


@define
class TaskRows:
    """
    The rows of C{owner}'s tasks.

    @ivar writes: every write and read of a row still under way, so closing can wait
        for them; the store tracks its own (a forgotten task's delete) here too.
    """

    owner: RowsOwner
    writes: Writes = field(factory=Writes, init=False)
    #: The state each task was last written in: every write after the first is made
    #: only if the row is still in it, so a cancel (or a C{daemon_lost}) written by
    #: another daemon is never written over.
    _stored_as: dict[str, str] = field(factory=dict, init=False)
    #: The tasks whose write failed (cut off from the store, or the server down):
    #: written again, as they are then, after the next heartbeat (L{save_again}), and
    #: not before, so their writes stay in order.
    _unsaved: Unsaved = field(factory=lambda: Unsaved("task", "the shared store"), init=False)
    #: Those waiting for the end of a task another daemon runs, by its id.
    _awaiting: dict[str, Waiters[Task | None]] = field(factory=dict, init=False)
    #: Set by L{close}: what the shared store says from then on changes nothing here.
    _closed: bool = field(default=False, init=False)

    def save(self, records: RecordStore, task: Task) -> None:
        """Write C{task} as it is now, after its earlier writes."""
        if task.id in self._unsaved:
            # An earlier write of it failed: the next beat writes it as it is then.
            return
        record = task_record(task, self.owner.daemon)
        before = self._stored_as.get(task.id)
        self._stored_as[task.id] = record.state
        if before is None:
            saving = records.put(TASKS, record)
        else:
            # The writes of one record are made in order, so the row is in C{before}
            # unless another daemon ended the task meanwhile.
            saving = records.put_if(TASKS, record, before).addCallback(self._saved_if, task)
        saving.addErrback(self._not_saved, task)
        self.writes.track(saving, "save task " + task.id)

    def _not_saved(self, failure: Failure, task: Task) -> Failure:
        """Note C{task} for writing again; the failure goes on to be logged."""
        if not self._closed and self.owner.get(task.id) is not None:
            self._unsaved.note(task.id)
        return failure

    def _saved_if(self, written: bool, task: Task) -> Deferred[None] | None:
        if written:
            return None
        # Ended elsewhere (a cancel through another daemon, a daemon_lost): the row wins.
        return self.reread(task.id)

    async def save_again(self, records: RecordStore) -> None:
        """
        Write the tasks whose last write failed, as they are now: over the row as it is
        (a write that failed may have been committed), unless the row says the task
        ended meanwhile (a C{daemon_lost}, a cancel through another daemon), which wins.
        """
        for task_id in self._unsaved:
            task = self.owner.get(task_id)
            if task is None or self._closed:
                self._unsaved.written(task_id)
                continue
            changes = task.changes
            record = task_record(task, self.owner.daemon)
            try:
                stored = await records.get(TASKS, task_id)
                if stored is None:
                    await records.put(TASKS, record)
                    written = True
                elif row_ended(stored.state):
                    written = False
                else:
                    written = await records.put_if(TASKS, record, stored.state)
            except Exception as e:
                self._unsaved.failed_again(task_id, e)
                continue
            self._unsaved.written(task_id)
            self._stored_as[task_id] = record.state
            if not written:
                await self.reread(task_id)
            elif task.changes != changes:
                self.save(records, task)

    def forget(self, task_id: str) -> None:
        """C{task_id} expired here: its row goes, and nothing is remembered of it."""
        self._stored_as.pop(task_id, None)
        records = self.owner.records
        if records is not None:
            self.writes.track(records.delete(TASKS, task_id), "forget task " + task_id)

    def heard(self, kind: str | None, record_id: str | None) -> None:
        """The shared store changed C{record_id} of C{kind} (C{None}: changes may be missed)."""
        if self._closed:
            return
        if kind is None:
            # Changes may have been missed: every task of interest is read again.
            watched = {t.id for t in self.owner.tasks() if not t.status.terminal}
            watched.update(self._awaiting)
        elif kind == TASKS and record_id is not None and self._watched(record_id):
            watched = {record_id}
        else:
            return
        self._read_again(watched)

    def _watched(self, task_id: str) -> bool:
        task = self.owner.get(task_id)
        return (task is not None and not task.status.terminal) or task_id in self._awaiting

    def _read_again(self, task_ids: Iterable[str]) -> None:
        for task_id in task_ids:
            self.writes.track(self.reread(task_id), "read task " + task_id)

    def reread(self, task_id: str) -> Deferred[None]:
        """Read the row of C{task_id} again, and act on what it says."""
        records = self.owner.records
        if records is None:
            return succeed(None)
        return records.get(TASKS, task_id).addCallback(self._reread_as, task_id)

    def _reread_as(self, record: Record | None, task_id: str) -> None:
        if self._closed:
            return
        stored = None if record is None else task_from_record(record)
        local = self.owner.get(task_id)
        if local is not None and stored is not None and stored.status.terminal:
            self._stored_as[task_id] = stored.status.value
            self.owner.ended_elsewhere(local, stored)
        waiting = self._awaiting.get(task_id)
        if waiting is not None and not waiting:
            # Everyone waiting gave up (their requests ended): nothing to wake.
            del self._awaiting[task_id]
        elif waiting is not None and (stored is None or stored.status.terminal):
            del self._awaiting[task_id]
            waiting.fire(stored)

    def read(
        self, records: RecordStore, task_id: str, holds: Callable[[str | None], bool]
    ) -> Deferred[Task | None]:
        """The task of that id from its row, if C{holds} its caller; else C{None}."""

        def read(record: Record | None) -> Task | None:
            if record is None or not holds(record.principal):
                return None
            return task_from_record(record)

        return records.get(TASKS, task_id).addCallback(read)

    def read_all(
        self,
        records: RecordStore,
        principal: Principal,
        wanted: Callable[[Task], bool],
        local: list[Task],
    ) -> Deferred[list[Task]]:
        """The C{wanted} tasks of every daemon, with this daemon's own as they are here."""

        def merged(found_rows: list[Record]) -> list[Task]:
            found: dict[str, Task] = {}
            for record in found_rows:
                task = task_from_record(record)
                if task is not None and wanted(task):
                    found[task.id] = task
            # This daemon's own are as they are now (a write may still be under way).
            found.update((task.id, task) for task in local)
            return sorted(found.values(), key=lambda task: (task.created, task.id))

        return records.find(TASKS, principal=principal).addCallback(merged)

    def shown(
        self, records: RecordStore, task_id: str, principal: Principal
    ) -> Deferred[dict[str, Any] | None]:
        """The row's body as JSON, as the store holds it; C{None} for none or unreadable."""

        def read(record: Record | None) -> dict[str, Any] | None:
            if record is None:
                return None
            try:
                shown = json.loads(record.body)
            except ValueError:
                log.warn("skipped unreadable task {id} in the store", id=record.id)
                return None
            return shown if isinstance(shown, dict) else None

        return records.get(TASKS, task_id, principal).addCallback(read)

    def ended(self, task: Task) -> Deferred[Task | None]:
        """
        Fires with another daemon's C{task} as its row holds it once it ends there
        (C{None} if the row went); cancel to stop waiting.
        """
        waiting = self._awaiting.setdefault(task.id, Waiters())
        ended = waiting.wait()
        # It may have ended between its read and now.
        self._read_again((task.id,))
        return ended

    def awaited(self, task_id: str) -> bool:
        """Whether anyone here waits for the end of C{task_id}, another daemon's."""
        return task_id in self._awaiting

    def read_awaited(self) -> None:
        """Read the rows those waiting here wait on: a missed notice never leaves them hanging."""
        self._read_again(tuple(self._awaiting))

    def close(self) -> None:
        """From now on, what the shared store says changes nothing here."""
        self._closed = True
        self._awaiting = {}
