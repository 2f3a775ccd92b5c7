# -*- test-case-name: tests.store.test_shared -*-
"""
Records in a PostgreSQL database that several daemons share (C{store.url}).

psycopg 3, synchronous connections, every query on a thread pool of this store's own
(C{store.threads} threads, one connection each at most), never on the reactor; results come
back to the reactor through L{deferToThreadPool}.  This module is imported only when a
PostgreSQL URL is configured (L{mcpx.store.config}), so a daemon on SQLite never loads
psycopg.

The schema is mcpx's own: created and migrated at L{PostgresRecords.open}, versioned in
C{mcpx_schema_version} (one row per migration applied), each migration in a transaction of
its own, all of it under a session advisory lock, so daemons starting at once migrate one
after the other and the later ones find nothing to do.  The migrations and each operation's
statements are L{mcpx.store.postgres_sql}.

A connection the server dropped (PostgreSQL restarted, a network cut) is thrown away; a
query that failed on a connection taken idle from the pool is run once more on a new one.
A query made while the server is down fails, and the next one after it comes back connects
again (and opens the store first, if it could not be opened when the daemon started):
nothing is kept in memory to be lost, every write is committed before its Deferred fires.
Every connection sends TCP keepalives after a few seconds of silence (L{KEEPALIVES}), so
one whose server is gone without a word (a network partition) is found dead in seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorCore, IReactorFromThreads
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from mcpx.store import postgres_sql as statements
from mcpx.store.postgres_sql import (
    CHANNEL,
    MIGRATION_LOCK,
    MIGRATIONS,
    SCHEMA_VERSION,
    VERSIONS_TABLE,
)
from mcpx.store.records import (
    ANYONE,
    Heard,
    Kind,
    Principal,
    Record,
    StoreClosed,
)

log = Logger()

T = TypeVar("T")

#: Seconds between tries to listen again after the listening connection was lost, doubling
#: up to L{LISTEN_BACKOFF_MAX}.
LISTEN_BACKOFF: Final = 0.5
LISTEN_BACKOFF_MAX: Final = 30.0

#: libpq's TCP keepalives on every connection: a connection idle for this many seconds is
#: probed, every L{KEEPALIVE_INTERVAL} seconds, and given up after L{KEEPALIVE_COUNT}
#: probes go unanswered.  Without them (the system's default is two hours of silence) a
#: connection the server forgot while the network was cut (its machine rebooted, a
#: failover, a middlebox that dropped its state) is never found dead: the listening one
#: waits on it forever, hearing nothing.  A URL that sets any of these keeps its own.
KEEPALIVE_IDLE: Final = 5
KEEPALIVE_INTERVAL: Final = 2
KEEPALIVE_COUNT: Final = 3
KEEPALIVES: Final = {
    "keepalives": 1,
    "keepalives_idle": KEEPALIVE_IDLE,
    "keepalives_interval": KEEPALIVE_INTERVAL,
    "keepalives_count": KEEPALIVE_COUNT,
}


class PostgresRecords:
    """
    Records in PostgreSQL (L{mcpx.store.records.RecordStore}).

    @ivar schema_found: the schema version the database had when this store opened it.
    """

    def __init__(
        self,
        conninfo: str,
        reactor: IReactorCore,
        *,
        password: str | None = None,
        threads: int = 4,
        connect_timeout: int = 5,
        description: str = "PostgreSQL",
    ) -> None:
        """
        @param conninfo: a libpq connection string or C{postgresql://} URL, with no password.
        @param password: given to libpq apart from C{conninfo}, so it is never shown with it.
        @param reactor: runs the thread pool and gets the results (C{IReactorFromThreads}).
        @param threads: how many queries may run at once (and connections be open).
        @param description: what L{describe} says: the URL without any password.
        """
        self._conninfo = conninfo
        try:
            given = conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError:
            # Not readable: psycopg says why when it connects.
            given = {}
        self._keepalives = {k: v for k, v in KEEPALIVES.items() if k not in given}
        self._password = password
        self._connect_timeout = connect_timeout
        self._description = description
        self._reactor = reactor
        # Adapted, as Twisted advises for an interface a reactor may or may not provide:
        # every reactor that runs threads hands their results back this way.
        self._from_threads = IReactorFromThreads(reactor)
        self._threads = ThreadPool(minthreads=0, maxthreads=threads, name="mcpx-store")
        self._idle: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        #: The last write asked for to each record, until it ends (see L{_write}).
        self._writing: dict[tuple[str, str], Deferred[None]] = {}
        self._opening: Deferred[None] | None = None
        self._closed = False
        #: Whether the schema is migrated (queries wait for it).
        self._ready = False
        self._trigger: Any = None
        self._listener: _Listener | None = None
        #: Everyone told of what the listener hears (the question store, the task store).
        self._hearers: list[Heard] = []
        self.schema_found: int | None = None

    def describe(self) -> str:
        return self._description

    def open(self) -> Deferred[None]:
        if self._closed:
            return fail(StoreClosed(self._description))
        if self._opening is not None:
            # Opened (or opening) already: the second opener waits for the same migration.
            return _follow(self._opening)
        if not self._threads.started:
            self._threads.start()
        # As adbapi does: threads still running at shutdown would keep the process alive.
        if self._trigger is None:
            self._trigger = self._reactor.addSystemEventTrigger(
                "during", "shutdown", self._stop_threads
            )
        self._opening = deferToThreadPool(
            self._from_threads,
            self._threads,
            self._migrate,
        ).addCallbacks(self._migrated, self._not_migrated)
        return _follow(self._opening)

    def _not_migrated(self, failure: Failure) -> Failure:
        # The next open tries again (the server may be starting up).
        self._opening = None
        return failure

    def _migrated(self, found: int) -> None:
        self.schema_found = found
        self._ready = True
        if found > SCHEMA_VERSION:
            log.warn(
                "the store {store} has schema version {found}, newer than this mcpx's "
                "{ours}: it is used as it is",
                store=self._description,
                found=found,
                ours=SCHEMA_VERSION,
            )

    def close(self) -> Deferred[None]:
        if self._closed:
            return succeed(None)
        self._closed = True
        if self._listener is not None:
            self._listener.stop()
            self._listener = None
        if not self._threads.started:
            return succeed(None)

        def stop(_: object) -> None:
            if self._trigger is not None:
                self._reactor.removeSystemEventTrigger(self._trigger)
                self._trigger = None
            self._stop_threads()

        closing: Deferred[None] = deferToThreadPool(
            self._from_threads,
            self._threads,
            self._close_idle,
        )
        return closing.addBoth(stop)

    def _stop_threads(self) -> None:
        if self._threads.started:
            self._threads.stop()

    def put(self, kind: Kind, record: Record) -> Deferred[None]:
        return self._write(kind, record.id, statements.put, statements.table_of(kind), record)

    def put_if(self, kind: Kind, record: Record, state: str) -> Deferred[bool]:
        return self._write(
            kind, record.id, statements.put_if, statements.table_of(kind), record, state
        )

    def get(
        self, kind: Kind, record_id: str, principal: Principal = ANYONE
    ) -> Deferred[Record | None]:
        return self._run(statements.get, statements.table_of(kind), record_id, principal)

    def find(
        self, kind: Kind, *, principal: Principal = ANYONE, state: str | None = None
    ) -> Deferred[list[Record]]:
        return self._run(statements.find, statements.table_of(kind), principal, state)

    def delete(self, kind: Kind, record_id: str) -> Deferred[None]:
        return self._write(kind, record_id, statements.delete, statements.table_of(kind), record_id)

    def prune(self, kind: Kind, finished_before: float, *, keep: str) -> Deferred[int]:
        return self._run(statements.prune, statements.table_of(kind), finished_before, keep)

    def listen(self, heard: Heard) -> None:
        # One listening connection, whoever listens: each is told all it hears.
        if self._closed:
            return
        self._hearers.append(heard)
        if self._listener is not None:
            # It already listens: tell this one to read everything, as a new listen would.
            self._from_threads.callFromThread(heard, None, None)
            return
        self._listener = _Listener(self._connect, self._from_threads, self._tell, self._description)
        self._listener.start()

    def _tell(self, kind: str | None, record_id: str | None) -> None:
        for heard in tuple(self._hearers):
            try:
                heard(kind, record_id)
            except Exception:
                log.failure("telling of a change of {kind}:{id} failed", kind=kind, id=record_id)

    def beat(self, daemon: str, now: float) -> Deferred[None]:
        return self._run(statements.beat, daemon, now)

    def depart(self, daemon: str) -> Deferred[None]:
        return self._run(statements.depart, daemon)

    def alive(self, since: float) -> Deferred[set[str]]:
        return self._run(statements.alive, since)

    def _write(
        self, kind: Kind, record_id: str, query: Callable[..., T], *args: Any
    ) -> Deferred[T]:
        """
        Run a write after the writes to the same record asked for before it: the threads
        would otherwise commit a task's C{completed} before its C{working}.
        """
        key = (kind, record_id)
        before = self._writing.get(key)
        written: Deferred[T]
        if before is None:
            written = self._run(query, *args)
        else:
            written = Deferred()

            def go(_: object) -> None:
                self._run(query, *args).chainDeferred(written)

            before.addCallback(go)
        mark = _ended(written)
        self._writing[key] = mark

        def done(_: object) -> None:
            if self._writing.get(key) is mark:
                del self._writing[key]

        mark.addCallback(done)
        return written

    def _run(self, query: Callable[..., T], *args: Any) -> Deferred[T]:
        if self._closed:
            return fail(StoreClosed(self._description))
        if not self._ready:
            # Not before the schema is there.  And if the open failed (PostgreSQL was down
            # when the daemon started), it is tried again now, so the daemon's records are
            # kept from the moment the server is back.
            return self.open().addCallback(lambda _: self._run(query, *args))
        return deferToThreadPool(
            self._from_threads,
            self._threads,
            self._in_transaction,
            query,
            *args,
        )

    # What follows runs on the pool's threads.

    def _connect(self) -> psycopg.Connection[Any]:
        extra: dict[str, Any] = {"connect_timeout": self._connect_timeout, **self._keepalives}
        if self._password is not None:
            extra["password"] = self._password
        return psycopg.connect(self._conninfo, autocommit=True, application_name="mcpx", **extra)

    def _take(self) -> tuple[psycopg.Connection[Any], bool]:
        """A connection, and whether it was taken idle (it may have gone stale)."""
        with self._lock:
            while self._idle:
                connection = self._idle.pop()
                if not connection.closed:
                    return connection, True
        return self._connect(), False

    def _give(self, connection: psycopg.Connection[Any]) -> None:
        if connection.closed or connection.broken:
            connection.close()
            return
        with self._lock:
            if not self._closed:
                self._idle.append(connection)
                return
        connection.close()

    def _in_transaction(self, query: Callable[..., T], *args: Any) -> T:
        while True:
            connection, reused = self._take()
            try:
                with connection.transaction(), connection.cursor() as cursor:
                    result = query(cursor, *args)
            except psycopg.OperationalError:
                broken = connection.broken or connection.closed
                connection.close()
                if broken and reused:
                    # Dropped while idle (the server restarted): once more, connected anew.
                    continue
                raise
            except BaseException:
                self._give(connection)
                raise
            self._give(connection)
            return result

    def _migrate(self) -> int:
        """Bring the schema to L{SCHEMA_VERSION}; the version it had before."""
        with self._connect() as connection:
            connection.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
            try:
                connection.execute(VERSIONS_TABLE)
                row = connection.execute(
                    "SELECT coalesce(max(version), 0) FROM mcpx_schema_version"
                ).fetchone()
                found = int(row[0]) if row is not None else 0
                for version, statements in MIGRATIONS:
                    if version <= found:
                        continue
                    with connection.transaction():
                        for statement in statements:
                            connection.execute(sql.SQL(statement))
                        connection.execute(
                            "INSERT INTO mcpx_schema_version (version) VALUES (%s)", (version,)
                        )
            finally:
                if not connection.broken:
                    connection.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
        return found

    def _close_idle(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


class _Listener:
    """
    One connection of its own, on a thread of its own, running C{LISTEN} on L{CHANNEL}
    and handing each notification to the reactor (C{callFromThread}).

    A lost connection is made again, after L{LISTEN_BACKOFF} seconds and twice as long at
    each failure after it; each time it listens (the first time too), C{heard} is told
    C{(None, None)}, since notifications sent while nobody listened are lost.
    """

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        reactor: IReactorFromThreads,
        heard: Heard,
        description: str,
    ) -> None:
        self._connect = connect
        self._reactor = reactor
        self._heard = heard
        self._description = description
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mcpx-store-listen", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop listening within a second (the thread sees it between two waits)."""
        self._stopping.set()

    def _tell(self, kind: str | None, record_id: str | None) -> None:
        if not self._stopping.is_set():
            self._reactor.callFromThread(self._heard, kind, record_id)

    def _run(self) -> None:
        delay = LISTEN_BACKOFF
        lost = False
        while not self._stopping.is_set():
            try:
                with self._connect() as connection:
                    connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
                    if lost:
                        self._reactor.callFromThread(
                            log.info,
                            "listening to {store} again",
                            store=self._description,
                        )
                    lost, delay = False, LISTEN_BACKOFF
                    self._tell(None, None)
                    while not self._stopping.is_set():
                        for notice in connection.notifies(timeout=1.0):
                            kind, _, record_id = notice.payload.partition(":")
                            self._tell(kind, record_id)
            except psycopg.Error as e:
                if self._stopping.is_set():
                    return
                if not lost:
                    self._reactor.callFromThread(
                        log.warn,
                        "lost the connection listening to {store} ({error}); trying again",
                        store=self._description,
                        error=str(e).strip(),
                    )
                lost = True
                self._stopping.wait(delay)
                delay = min(delay * 2, LISTEN_BACKOFF_MAX)


def _follow(deferred: Deferred[None]) -> Deferred[None]:
    """A Deferred that fires as C{deferred} did or will, leaving C{deferred} as it is."""
    follower: Deferred[None] = Deferred()

    def passed(result: object) -> object:
        if isinstance(result, Failure):
            follower.errback(result)
        else:
            follower.callback(None)
        # Each follower carries the outcome on; the original keeps none to go unhandled.
        return None

    deferred.addBoth(passed)
    return follower


def _ended(deferred: Deferred[Any]) -> Deferred[None]:
    """A Deferred that fires with C{None} once C{deferred} has fired, whichever way."""
    mark: Deferred[None] = Deferred()

    def passed(result: object) -> object:
        mark.callback(None)
        return result

    deferred.addBoth(passed)
    return mark
