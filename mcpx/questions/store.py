# -*- test-case-name: tests.questions.test_store -*-
"""
The broker's questions on disk, so a daemon restart loses no pending question.

SQLite through L{twisted.enterprise.adbapi}: every query runs on the pool's single thread, so
the reactor never waits on the disk and writes happen in the order they were asked for.  Each
question is one row holding its L{Question.to_json} record; the state and finish time are
kept in columns of their own so pruning need not read the records.

The file holds what users typed in answer to servers, so it is created readable by its owner
only, before SQLite first opens it.

SQLite itself (the C{sqlite3} module and its library, about 2 MB of a daemon's memory) is
loaded only once there is something in the file: at L{QuestionStore.open} when an earlier
daemon left questions in it, else at the first question saved.  Until then the file is
empty and loading it gives nothing.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from twisted.enterprise import adbapi
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorCore
from twisted.logger import Logger

from mcpx.questions.record import Question, QuestionState

if TYPE_CHECKING:
    import sqlite3

_SCHEMA = """
CREATE TABLE IF NOT EXISTS questions (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    finished REAL,
    record TEXT NOT NULL
)
"""


log = Logger()


class StoreClosed(Exception):
    """The store was used before L{QuestionStore.open} or after L{QuestionStore.close}."""


class QuestionStore:
    """
    Questions kept in one SQLite file.

    @ivar path: the database file.
    """

    def __init__(self, path: str, reactor: IReactorCore) -> None:
        """
        @param reactor: starts and stops adbapi's thread pool with itself, and delivers
            its results (from its threads, C{IReactorFromThreads}).
        """
        self.path = path
        self._reactor = reactor
        self._pool: adbapi.ConnectionPool | None = None
        # Between open and close; the pool (and SQLite) may still be to come.
        self._open = False

    def open(self) -> Deferred[None]:
        """Create the file (mode 0600) and its table if they do not exist yet."""
        try:
            directory = os.path.dirname(self.path)
            if directory:
                os.makedirs(directory, mode=0o700, exist_ok=True)
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
            # An existing file keeps its old mode through os.open; tighten it too.
            os.chmod(self.path, 0o600)
            empty = os.path.getsize(self.path) == 0
        except OSError as e:
            return fail(e)
        self._open = True
        if empty:
            # Nothing to load: SQLite waits for the first question (see the module's doc).
            return succeed(None)
        self._connect()
        return self._interact(_create)

    def _connect(self) -> None:
        # adbapi imports sqlite3 here, by name.
        self._pool = adbapi.ConnectionPool(  # type: ignore[no-untyped-call]
            "sqlite3",
            self.path,
            check_same_thread=False,
            cp_min=1,
            cp_max=1,
            cp_reactor=self._reactor,
        )

    def save(self, question: Question) -> Deferred[None]:
        """Insert C{question}, or replace the stored one with the same id."""
        # Serialised here, on the reactor thread, so the row is the record as it is now.
        row = (
            question.id,
            question.state.value,
            question.finished,
            json.dumps(question.to_json(), separators=(",", ":")),
        )
        if self._open and self._pool is None:
            self._connect()
            # One interaction, so it stays in order with the saves queued after it.
            return self._interact(_create_and_save, row)
        return self._interact(_save, row)

    def load(self) -> Deferred[list[Question]]:
        """Every stored question, oldest first; unreadable rows are logged and skipped."""
        if self._open and self._pool is None:
            return succeed([])
        return self._interact(_load).addCallback(self._report_unreadable)

    def _report_unreadable(self, loaded: tuple[list[Question], list[str]]) -> list[Question]:
        questions, unreadable = loaded
        for question_id in unreadable:
            log.warn("skipped unreadable question {id} in {path}", id=question_id, path=self.path)
        return questions

    def prune(self, finished_before: float) -> Deferred[int]:
        """Delete the questions that finished before C{finished_before}; how many went."""
        if self._open and self._pool is None:
            return succeed(0)
        return self._interact(_prune, finished_before)

    def close(self) -> Deferred[None]:
        """Stop the pool; later calls fail with L{StoreClosed}."""
        pool, self._pool = self._pool, None
        self._open = False
        if pool is not None:
            pool.close()  # type: ignore[no-untyped-call]
        return succeed(None)

    def _interact(self, interaction: Any, *args: Any) -> Deferred[Any]:
        if self._pool is None:
            return fail(StoreClosed(self.path))
        result: Deferred[Any] = self._pool.runInteraction(  # type: ignore[no-untyped-call]
            interaction, *args
        )
        return result


def _create(cursor: sqlite3.Cursor) -> None:
    cursor.execute(_SCHEMA)


def _save(cursor: sqlite3.Cursor, row: tuple[str, str, float | None, str]) -> None:
    cursor.execute(
        "INSERT OR REPLACE INTO questions (id, state, finished, record) VALUES (?, ?, ?, ?)", row
    )


def _create_and_save(cursor: sqlite3.Cursor, row: tuple[str, str, float | None, str]) -> None:
    _create(cursor)
    _save(cursor, row)


def _load(cursor: sqlite3.Cursor) -> tuple[list[Question], list[str]]:
    cursor.execute("SELECT id, record FROM questions")
    questions: list[Question] = []
    unreadable: list[str] = []
    for question_id, record in cursor.fetchall():
        try:
            questions.append(Question.from_json(json.loads(record)))
        except (ValueError, KeyError, TypeError):
            # A row this version cannot read (or a damaged one) must not stop the daemon.
            unreadable.append(question_id)
    questions.sort(key=lambda question: question.created)
    return questions, unreadable


def _prune(cursor: sqlite3.Cursor, finished_before: float) -> int:
    cursor.execute(
        "DELETE FROM questions WHERE state != ? AND finished IS NOT NULL AND finished < ?",
        (QuestionState.PENDING.value, finished_before),
    )
    return cursor.rowcount
