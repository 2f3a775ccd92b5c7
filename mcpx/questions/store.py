# -*- test-case-name: tests.questions.test_store -*-
"""
The broker's questions in the daemon's record store, so a daemon restart loses no pending
question (and, on a shared store, so other daemons see them).

Each question is one record (L{mcpx.store.records}) holding its L{Question.to_json}; its
state, finish time and owner are kept in columns of their own so pruning and filtering need
not read the bodies.  By default the records are a SQLite file in the state directory
(L{mcpx.store.sqlite}); C{store.url} puts them in PostgreSQL (L{mcpx.store.postgres}).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorCore
from twisted.logger import Logger

from mcpx.questions.record import Question, QuestionState
from mcpx.store.records import ANYONE, QUESTIONS, Principal, Record, RecordStore, StoreClosed
from mcpx.store.sqlite import SQLiteRecords

__all__ = ["QuestionStore", "StoreClosed"]

log = Logger()


class QuestionStore:
    """Questions kept as records of a L{RecordStore}."""

    def __init__(
        self,
        path: str | None = None,
        reactor: IReactorCore | None = None,
        *,
        records: RecordStore | None = None,
    ) -> None:
        """
        @param path: the SQLite file to keep them in, when no C{records} are given.
        @param reactor: runs that file's thread pool (see L{SQLiteRecords}).
        @param records: the store to keep them in instead (a shared one).
        """
        if records is None:
            if path is None or reactor is None:
                raise TypeError("a question store needs a path and a reactor, or records")
            records = SQLiteRecords(path, reactor)
        self.records = records

    def open(self) -> Deferred[None]:
        """Make the store ready (create the file and its tables if need be)."""
        return self.records.open()

    def save(self, question: Question) -> Deferred[None]:
        """Insert C{question}, or replace the stored one with the same id."""
        # Serialised here, on the reactor thread, so the row is the record as it is now.
        return self.records.put(QUESTIONS, _record(question))

    def save_if_pending(self, question: Question) -> Deferred[bool]:
        """
        Store C{question} (just finished) only if the stored one is still pending, so that
        of two daemons ending one question only one does; whether this one did.
        """
        return self.records.put_if(QUESTIONS, _record(question), QuestionState.PENDING.value)

    def listen(self, changed: Callable[[str | None], None]) -> None:
        """
        Tell C{changed} the id of every question written by any daemon sharing the store,
        or C{None} when some may have been missed (all should be read again).
        """

        def heard(kind: str | None, record_id: str | None) -> None:
            if kind is None:
                changed(None)
            elif kind == QUESTIONS and record_id is not None:
                changed(record_id)

        self.records.listen(heard)

    def load(self, principal: Principal = ANYONE) -> Deferred[list[Question]]:
        """
        Every stored question (C{principal}'s only, if given), oldest first; unreadable
        rows are logged and skipped.
        """
        return self.records.find(QUESTIONS, principal=principal).addCallback(self._read)

    def get(self, question_id: str, principal: Principal = ANYONE) -> Deferred[Question | None]:
        """The stored question of that id, if C{principal} may see it."""

        def read(record: Record | None) -> Question | None:
            if record is None:
                return None
            found = self._read([record])
            return found[0] if found else None

        return self.records.get(QUESTIONS, question_id, principal).addCallback(read)

    def _read(self, records: list[Record]) -> list[Question]:
        questions: list[Question] = []
        for record in records:
            try:
                questions.append(Question.from_json(json.loads(record.body)))
            except (ValueError, KeyError, TypeError):
                # A row this version cannot read (or a damaged one) must not stop the daemon.
                log.warn(
                    "skipped unreadable question {id} in {store}",
                    id=record.id,
                    store=self.describe(),
                )
        questions.sort(key=lambda question: question.created)
        return questions

    def describe(self) -> str:
        return self.records.describe()

    def prune(self, finished_before: float) -> Deferred[int]:
        """Delete the questions that finished before C{finished_before}; how many went."""
        return self.records.prune(QUESTIONS, finished_before, keep=QuestionState.PENDING.value)

    def close(self) -> Deferred[None]:
        """Let the records go; later calls fail with L{StoreClosed}."""
        return self.records.close()


def _record(question: Question) -> Record:
    return Record(
        id=question.id,
        principal=question.owner,
        state=question.state.value,
        finished=question.finished,
        body=json.dumps(question.to_json(), separators=(",", ":")),
    )
