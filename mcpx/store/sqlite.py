# -*- test-case-name: tests.store.test_shared -*-
"""
The records of one daemon, in one SQLite file of its state directory (the default store).

SQLite through L{twisted.enterprise.adbapi}: every query runs on the pool's single thread,
so the reactor never waits on the disk and writes happen in the order they were asked for.

The file holds what users typed in answer to servers, so it is created readable by its
owner only, before SQLite first opens it.

SQLite itself (the C{sqlite3} module and its library, about 2 MB of a daemon's memory) is
loaded only once there is something in the file: at L{SQLiteRecords.open} when an earlier
daemon left records in it, else at the first record put.  Until then the file is empty, and
reading it gives nothing.  Its schema is versioned with SQLite's
C{user_version}: version 1 is the question table of earlier releases (it had no principal
column; a file of that version is migrated in place, the principal read from each
question's C{owner}), version 2 adds the principal column and the task table, version 3
the tables of C{requestState} rounds and of configuration notices.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from twisted.enterprise import adbapi
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorCore

from mcpx.store.records import (
    ANYONE,
    KINDS,
    Heard,
    Kind,
    Principal,
    Record,
    StoreClosed,
    checked_kind,
)

if TYPE_CHECKING:
    import sqlite3

#: The schema version this module writes.
SCHEMA_VERSION = 3

_TABLE = """
CREATE TABLE IF NOT EXISTS {kind} (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    finished REAL,
    record TEXT NOT NULL,
    principal TEXT
)
"""


class SQLiteRecords:
    """
    Records kept in one SQLite file (L{mcpx.store.records.RecordStore}).

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

    def describe(self) -> str:
        return self.path

    def open(self) -> Deferred[None]:
        """Create the file (mode 0600) and its tables if they do not exist yet."""
        if self._open:
            return succeed(None)
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
            # Nothing to read: SQLite waits for the first record (see the module's doc).
            return succeed(None)
        self._connect()
        return self._interact(_migrate)

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

    @property
    def _waiting(self) -> bool:
        """Open on a file still empty: nothing to read, SQLite not loaded yet."""
        return self._open and self._pool is None

    def close(self) -> Deferred[None]:
        self._open = False
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()  # type: ignore[no-untyped-call]
        return succeed(None)

    def put(self, kind: Kind, record: Record) -> Deferred[None]:
        kind = checked_kind(kind)
        if self._waiting:
            self._connect()
            # One interaction, so it stays in order with the puts queued after it.
            return self._interact(_migrate_then, _put, kind, record)
        return self._interact(_put, kind, record)

    def put_if(self, kind: Kind, record: Record, state: str) -> Deferred[bool]:
        return self._read(False, _put_if, checked_kind(kind), record, state)

    def get(
        self, kind: Kind, record_id: str, principal: Principal = ANYONE
    ) -> Deferred[Record | None]:
        return self._read(None, _get, checked_kind(kind), record_id, principal)

    def find(
        self, kind: Kind, *, principal: Principal = ANYONE, state: str | None = None
    ) -> Deferred[list[Record]]:
        return self._read([], _find, checked_kind(kind), principal, state)

    def delete(self, kind: Kind, record_id: str) -> Deferred[None]:
        return self._read(None, _delete, checked_kind(kind), record_id)

    def prune(self, kind: Kind, finished_before: float, *, keep: str) -> Deferred[int]:
        return self._read(0, _prune, checked_kind(kind), finished_before, keep)

    def _read(self, nothing: Any, interaction: Any, *args: Any) -> Deferred[Any]:
        """
        Run C{interaction}; on a file still empty, answer C{nothing} without loading
        SQLite, unless another store on the same file (another daemon, a test) has
        written to it meanwhile.
        """
        if self._waiting:
            try:
                empty = os.path.getsize(self.path) == 0
            except OSError as e:
                return fail(e)
            if empty:
                return succeed(nothing)
            self._connect()
            return self._interact(_migrate_then, interaction, *args)
        return self._interact(interaction, *args)

    def listen(self, heard: Heard) -> None:
        # One daemon has the file: nobody else writes to tell it of.
        return None

    def beat(self, daemon: str, now: float) -> Deferred[None]:
        return succeed(None)

    def depart(self, daemon: str) -> Deferred[None]:
        return succeed(None)

    def alive(self, since: float) -> Deferred[set[str]]:
        # No other daemon shares the file; this one's questions of an earlier run are
        # nobody's now.
        return succeed(set())

    def _interact(self, interaction: Any, *args: Any) -> Deferred[Any]:
        if not self._open or self._pool is None:
            return fail(StoreClosed(self.path))
        result: Deferred[Any] = self._pool.runInteraction(  # type: ignore[no-untyped-call]
            interaction, *args
        )
        return result


def _migrate(cursor: sqlite3.Cursor) -> None:
    cursor.execute("PRAGMA user_version")
    (version,) = cursor.fetchone()
    if version >= SCHEMA_VERSION:
        return
    cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'questions'")
    if cursor.fetchone() is not None:
        # A file of version 1: its questions gain the principal column, filled from the
        # owner each record names.
        cursor.execute("PRAGMA table_info(questions)")
        if "principal" not in {row[1] for row in cursor.fetchall()}:
            cursor.execute("ALTER TABLE questions ADD COLUMN principal TEXT")
            cursor.execute("SELECT id, record FROM questions")
            for question_id, body in cursor.fetchall():
                cursor.execute(
                    "UPDATE questions SET principal = ? WHERE id = ?",
                    (_owner_of(body), question_id),
                )
    for kind in sorted(KINDS):
        cursor.execute(_TABLE.format(kind=kind))
    cursor.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _migrate_then(cursor: sqlite3.Cursor, interaction: Any, *args: Any) -> Any:
    """The schema made current, then C{interaction}: the first use of a new file."""
    _migrate(cursor)
    return interaction(cursor, *args)


def _owner_of(body: str) -> str | None:
    try:
        owner = json.loads(body).get("owner")
    except (ValueError, AttributeError):
        return None
    return owner if isinstance(owner, str) else None


def _row(record: Record) -> tuple[str, str, float | None, str, str | None]:
    return (record.id, record.state, record.finished, record.body, record.principal)


def _put(cursor: sqlite3.Cursor, kind: Kind, record: Record) -> None:
    cursor.execute(
        f"INSERT OR REPLACE INTO {kind} (id, state, finished, record, principal) "
        "VALUES (?, ?, ?, ?, ?)",
        _row(record),
    )


def _put_if(cursor: sqlite3.Cursor, kind: Kind, record: Record, state: str) -> bool:
    cursor.execute(
        f"UPDATE {kind} SET state = ?, finished = ?, record = ?, principal = ? "
        "WHERE id = ? AND state = ?",
        (record.state, record.finished, record.body, record.principal, record.id, state),
    )
    return cursor.rowcount == 1


def _whose(principal: Principal) -> tuple[str, tuple[Any, ...]]:
    if principal is ANYONE:
        return "", ()
    if principal is None:
        return " AND principal IS NULL", ()
    return " AND principal = ?", (principal,)


def _get(cursor: sqlite3.Cursor, kind: Kind, record_id: str, principal: Principal) -> Record | None:
    clause, args = _whose(principal)
    cursor.execute(
        f"SELECT id, principal, state, finished, record FROM {kind} WHERE id = ?{clause}",
        (record_id, *args),
    )
    row = cursor.fetchone()
    return None if row is None else Record(*row)


def _find(
    cursor: sqlite3.Cursor, kind: Kind, principal: Principal, state: str | None
) -> list[Record]:
    clause, args = _whose(principal)
    if state is not None:
        clause += " AND state = ?"
        args = (*args, state)
    cursor.execute(
        f"SELECT id, principal, state, finished, record FROM {kind} WHERE 1 = 1{clause}", args
    )
    return [Record(*row) for row in cursor.fetchall()]


def _delete(cursor: sqlite3.Cursor, kind: Kind, record_id: str) -> None:
    cursor.execute(f"DELETE FROM {kind} WHERE id = ?", (record_id,))


def _prune(cursor: sqlite3.Cursor, kind: Kind, finished_before: float, keep: str) -> int:
    cursor.execute(
        f"DELETE FROM {kind} WHERE state != ? AND finished IS NOT NULL AND finished < ?",
        (keep, finished_before),
    )
    return cursor.rowcount
