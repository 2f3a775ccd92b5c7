# -*- test-case-name: tests.store.test_shared -*-
"""
What L{mcpx.store.postgres} says to PostgreSQL: the schema with its migrations, and the
statement of each record operation, one function each, run on a cursor in the
transaction the store opened for it.

Each write that changes a row announces it on L{CHANNEL} in the same transaction, so a
listener hears of a change only once it is committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import psycopg
from psycopg import sql

from mcpx.store.records import ANYONE, Kind, Principal, Record, checked_kind

#: The key of the advisory lock held while the schema is migrated ("mcpx" in ASCII).
MIGRATION_LOCK: Final = 0x6D637078

#: The migrations, in order: (version, statements).  Never edit one that shipped; add one.
MIGRATIONS: Final[Sequence[tuple[int, Sequence[str]]]] = (
    (
        1,
        tuple(
            statement
            for kind in ("questions", "tasks")
            for statement in (
                f"CREATE TABLE mcpx_{kind} ("
                "id text PRIMARY KEY, principal text, state text NOT NULL, "
                "finished double precision, record text NOT NULL)",
                f"CREATE INDEX mcpx_{kind}_principal ON mcpx_{kind} (principal)",
                f"CREATE INDEX mcpx_{kind}_finished ON mcpx_{kind} (finished) "
                "WHERE finished IS NOT NULL",
            )
        ),
    ),
    (
        2,
        ("CREATE TABLE mcpx_daemons (id text PRIMARY KEY, beat double precision NOT NULL)",),
    ),
    (
        3,
        (
            "CREATE TABLE mcpx_rounds ("
            "id text PRIMARY KEY, principal text, state text NOT NULL, "
            "finished double precision, record text NOT NULL)",
            "CREATE INDEX mcpx_rounds_finished ON mcpx_rounds (finished) "
            "WHERE finished IS NOT NULL",
            "CREATE TABLE mcpx_config ("
            "id text PRIMARY KEY, principal text, state text NOT NULL, "
            "finished double precision, record text NOT NULL)",
        ),
    ),
)

#: The channel every write is announced on, C{kind:id} (C{pg_notify}, in the write's own
#: transaction: a listener hears of a change only once it is committed).
CHANNEL: Final = "mcpx_records"

#: The schema version this release writes.
SCHEMA_VERSION: Final = MIGRATIONS[-1][0]

VERSIONS_TABLE = sql.SQL(
    "CREATE TABLE IF NOT EXISTS mcpx_schema_version ("
    "version integer PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now())"
)

Cursor = psycopg.Cursor[Any]


def table_of(kind: Kind) -> sql.Identifier:
    return sql.Identifier("mcpx_" + checked_kind(kind))


_COLUMNS = sql.SQL("id, principal, state, finished, record")


def record_of(row: Sequence[Any]) -> Record:
    return Record(
        id=row[0],
        principal=row[1],
        state=row[2],
        finished=None if row[3] is None else float(row[3]),
        body=row[4],
    )


def put(cursor: Cursor, table: sql.Identifier, record: Record) -> None:
    cursor.execute(
        sql.SQL(
            "INSERT INTO {table} ({columns}) VALUES (%s, %s, %s, %s, %s) "
            "ON CONFLICT (id) DO UPDATE SET principal = EXCLUDED.principal, "
            "state = EXCLUDED.state, finished = EXCLUDED.finished, record = EXCLUDED.record"
        ).format(table=table, columns=_COLUMNS),
        (record.id, record.principal, record.state, record.finished, record.body),
    )
    notify(cursor, table, record.id)


def notify(cursor: Cursor, table: sql.Identifier, record_id: str) -> None:
    """Announce a change on L{CHANNEL}, sent when (and only if) the transaction commits."""
    kind = table.as_string().strip('"').removeprefix("mcpx_")
    cursor.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{kind}:{record_id}"))


def beat(cursor: Cursor, daemon: str, now: float) -> None:
    cursor.execute(
        "INSERT INTO mcpx_daemons (id, beat) VALUES (%s, %s) "
        "ON CONFLICT (id) DO UPDATE SET beat = EXCLUDED.beat",
        (daemon, now),
    )


def depart(cursor: Cursor, daemon: str) -> None:
    cursor.execute("DELETE FROM mcpx_daemons WHERE id = %s", (daemon,))


def alive(cursor: Cursor, since: float) -> set[str]:
    cursor.execute("SELECT id FROM mcpx_daemons WHERE beat >= %s", (since,))
    return {row[0] for row in cursor.fetchall()}


def put_if(cursor: Cursor, table: sql.Identifier, record: Record, state: str) -> bool:
    cursor.execute(
        sql.SQL(
            "UPDATE {table} SET principal = %s, state = %s, finished = %s, record = %s "
            "WHERE id = %s AND state = %s"
        ).format(table=table),
        (record.principal, record.state, record.finished, record.body, record.id, state),
    )
    if cursor.rowcount != 1:
        return False
    notify(cursor, table, record.id)
    return True


def _whose(principal: Principal) -> tuple[sql.Composable, tuple[Any, ...]]:
    if principal is ANYONE:
        return sql.SQL(""), ()
    if principal is None:
        return sql.SQL(" AND principal IS NULL"), ()
    return sql.SQL(" AND principal = %s"), (principal,)


def get(
    cursor: Cursor, table: sql.Identifier, record_id: str, principal: Principal
) -> Record | None:
    clause, args = _whose(principal)
    cursor.execute(
        sql.SQL("SELECT {columns} FROM {table} WHERE id = %s{clause}").format(
            columns=_COLUMNS, table=table, clause=clause
        ),
        (record_id, *args),
    )
    row = cursor.fetchone()
    return None if row is None else record_of(row)


def find(
    cursor: Cursor, table: sql.Identifier, principal: Principal, state: str | None
) -> list[Record]:
    clause, args = _whose(principal)
    if state is not None:
        clause = sql.Composed([clause, sql.SQL(" AND state = %s")])
        args = (*args, state)
    cursor.execute(
        sql.SQL("SELECT {columns} FROM {table} WHERE true{clause}").format(
            columns=_COLUMNS, table=table, clause=clause
        ),
        args,
    )
    return [record_of(row) for row in cursor.fetchall()]


def delete(cursor: Cursor, table: sql.Identifier, record_id: str) -> None:
    cursor.execute(sql.SQL("DELETE FROM {table} WHERE id = %s").format(table=table), (record_id,))
    if cursor.rowcount:
        notify(cursor, table, record_id)


def prune(cursor: Cursor, table: sql.Identifier, finished_before: float, keep: str) -> int:
    cursor.execute(
        sql.SQL(
            "DELETE FROM {table} WHERE state <> %s AND finished IS NOT NULL AND finished < %s"
        ).format(table=table),
        (keep, finished_before),
    )
    return cursor.rowcount
