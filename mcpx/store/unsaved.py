# -*- test-case-name: tests.store.test_unsaved -*-
"""
The records of one kind (questions, tasks) whose write to the store failed, kept to be
written again after the next heartbeat: a beat that reaches the store says it answers
again, and writing them then (not at once) keeps one record's writes in order.

Each owner writes its records again in its own way (a question may have been ended
through another daemon meanwhile, a task's row may say it ended); what they share is
this list and what it says in the log, so an operator reads one story for both.
"""

from __future__ import annotations

from collections.abc import Iterator

from attrs import define, field
from twisted.logger import Logger

log = Logger()


@define
class Unsaved:
    """
    The ids of the records of one kind whose last write failed.

    @ivar kind: what a record is, for the log (C{"question"}, C{"task"}).
    @ivar store: the store it goes to, for the log (C{"the store"}).
    """

    kind: str
    store: str
    _ids: set[str] = field(factory=set, init=False)

    def note(self, record_id: str) -> None:
        """Keep C{record_id} to write again, saying so once."""
        if record_id in self._ids:
            return
        self._ids.add(record_id)
        log.info(
            "{kind} {id} is written to {store} again after the next heartbeat",
            kind=self.kind,
            id=record_id,
            store=self.store,
        )

    def written(self, record_id: str) -> None:
        """C{record_id} has reached the store (or needs writing no more)."""
        self._ids.discard(record_id)

    def failed_again(self, record_id: str, error: Exception) -> None:
        """Writing C{record_id} again failed too: it stays, for the next beat."""
        log.warn(
            "could not write {kind} {id} to {store} again ({error})",
            kind=self.kind,
            id=record_id,
            store=self.store,
            error=str(error).strip() or type(error).__name__,
        )

    def __contains__(self, record_id: object) -> bool:
        return record_id in self._ids

    def __bool__(self) -> bool:
        return bool(self._ids)

    def __iter__(self) -> Iterator[str]:
        """The ids as they are now: writing one may note or drop others meanwhile."""
        return iter(tuple(self._ids))
