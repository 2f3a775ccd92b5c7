# -*- test-case-name: tests.tasks.test_journal -*-
"""
The tasks still running, written to the state directory, so that a daemon started after
one that stopped (or was killed) under them reports each as failed, saying why, instead
of answering that it never existed.

Only what a caller needs to recognise its task is kept (id, caller, server, tool,
origin, times), never arguments or results.  The file is written at most every
L{WRITE_DELAY} seconds, with the store's state at that moment, atomically and readable by
the owner only; writing a few hundred bytes is the only blocking work, and it is coalesced
so a burst of tasks costs one write.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Final

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from mcpx.tasks.store import TaskStore
from mcpx.tasks.task import Task

log = Logger()

#: The journal's file in the state directory.
JOURNAL_FILE: Final = "tasks.json"

#: Seconds a change waits before it is written, so that changes coming together are
#: written once.
WRITE_DELAY: Final = 0.2

#: What a restored task says of itself.
RESTARTED: Final = "the daemon stopped while this task ran (it was not finished); start it again"

_KEPT: Final = ("id", "created", "client", "server", "tool", "origin", "ttl")


class TaskJournal:
    """
    Keeps C{store}'s unfinished tasks in C{path}.

    L{restore} first (at start, before any task is made), then L{watch}; L{close} at stop,
    before the store forgets its tasks, so that the file still names them.
    """

    def __init__(self, path: Path, clock: IReactorTime) -> None:
        self.path = path
        self._clock = clock
        self._store: TaskStore | None = None
        self._pending: IDelayedCall | None = None
        self._closed = False

    def restore(self, store: TaskStore) -> int:
        """Enter the tasks a previous daemon left unfinished as failed; how many there were."""
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return 0
        except OSError as e:
            log.warn("the task journal {path} cannot be read: {why}", path=self.path, why=e)
            return 0
        try:
            entries = json.loads(raw)
        except ValueError:
            log.warn("the task journal {path} is not JSON; ignored", path=self.path)
            return 0
        restored = 0
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                store.restore_failed(entry, RESTARTED)
                restored += 1
        if restored:
            log.info(
                "{count} task(s) the previous daemon left unfinished are reported failed",
                count=restored,
            )
        return restored

    def watch(self, store: TaskStore) -> None:
        """Write the journal again whenever one of C{store}'s tasks is made or changes."""
        self._store = store
        store.on_change(self._changed)
        # What restore() entered is over; the file now says nothing is running.
        self._write()

    def _changed(self, task: Task) -> None:
        if self._closed or self._pending is not None:
            return
        self._pending = self._clock.callLater(WRITE_DELAY, self._due)

    def _due(self) -> None:
        self._pending = None
        if not self._closed:
            self._write()

    def _write(self) -> None:
        store = self._store
        if store is None:
            return
        running = [
            {key: getattr(task, key) for key in _KEPT}
            for task in store.tasks()
            if not task.status.terminal
        ]
        temporary = self.path.with_name(self.path.name + ".tmp")
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as out:
                json.dump(running, out)
            os.replace(temporary, self.path)
        except OSError as e:
            log.warn("the task journal {path} cannot be written: {why}", path=self.path, why=e)
            with contextlib.suppress(OSError):
                temporary.unlink()

    def close(self) -> None:
        """Write what is running now and stop: the tasks the stop cuts short stay named."""
        if self._closed:
            return
        pending, self._pending = self._pending, None
        if pending is not None and pending.active():
            pending.cancel()
        self._write()
        self._closed = True


def journal_for(state_dir: str | Path, clock: IReactorTime) -> TaskJournal:
    """The journal of the daemon whose state directory is C{state_dir}."""
    return TaskJournal(Path(state_dir) / JOURNAL_FILE, clock)
