"""
The record store's behaviour, the same for both implementations: two store instances on
one database stand for two daemons (for SQLite, two opens of one file), and whatever one
writes the other reads.  The PostgreSQL tests run against a throw-away cluster
(L{tests.support.postgres}); they also cover what only a server can do to a daemon:
several daemons migrating at once, and the server restarting under them.

These use the real reactor: both stores run their queries on threads.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
from typing import Any

import psycopg
from twisted.internet import reactor
from twisted.internet.defer import gatherResults
from twisted.internet.task import Clock, deferLater
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from mcpx.questions.record import Question, QuestionState
from mcpx.questions.store import QuestionStore
from mcpx.spec.questions import ELICIT
from mcpx.store.postgres import (
    KEEPALIVE_COUNT,
    KEEPALIVE_IDLE,
    KEEPALIVE_INTERVAL,
    PostgresRecords,
)
from mcpx.store.postgres_sql import MIGRATIONS, SCHEMA_VERSION
from mcpx.store.records import QUESTIONS, TASKS, Record, RecordStore
from mcpx.store.sqlite import SQLiteRecords
from mcpx.tasks.store import TaskStore
from mcpx.tasks.task import TaskStatus
from tests.support.postgres import PASSWORD, PostgresCluster, shared_cluster

FORM = {
    "message": "github (via mcpx) asks: age?",
    "requestedSchema": {"type": "object", "properties": {"age": {"type": "integer"}}},
}


def question(question_id: str, created: float, owner: str | None = None, **kw: Any) -> Question:
    return Question(
        id=question_id,
        server="github",
        scope_key="",
        method=ELICIT,
        params=FORM,
        created=created,
        deadline=created + 60,
        owner=owner,
        **kw,
    )


def answered(pending: Question, age: int, at: float) -> Question:
    done = Question.from_json(pending.to_json())
    done.state = QuestionState.ANSWERED
    done.answer = {"action": "accept", "content": {"age": age}}
    done.answered_by = "api"
    done.finished = at
    return done


class SharedStoreBehaviour:
    """What both implementations do; a subclass says how to make a daemon's store."""

    def records(self) -> RecordStore:
        """A new, unopened store on this test's database (another daemon's)."""
        raise NotImplementedError

    async def opened(self) -> RecordStore:
        records = self.records()
        await records.open()
        self.addCleanup(records.close)  # type: ignore[attr-defined]
        return records

    async def test_question_answered_from_another_daemon(self: Any) -> None:
        """
        A question one daemon asked is listed by a second one, which answers it; the
        first then sees the answer, and cannot end the question a second time.
        """
        first = QuestionStore(records=await self.opened())
        second = QuestionStore(records=await self.opened())
        asked = question("q_1", 10.0, owner="alice")
        await first.save(asked)
        [listed] = await second.load()
        self.assertEqual(listed.to_json(), asked.to_json())
        self.assertTrue(await second.save_if_pending(answered(listed, 7, 12.0)))
        late = Question.from_json(asked.to_json())
        late.state, late.finished, late.answered_by = QuestionState.DECLINED, 13.0, "cli"
        self.assertFalse(await first.save_if_pending(late))
        seen = await first.get("q_1")
        assert seen is not None
        self.assertEqual(
            (seen.state, seen.answer, seen.answered_by),
            (QuestionState.ANSWERED, {"action": "accept", "content": {"age": 7}}, "api"),
        )

    async def test_task_read_from_another_daemon(self: Any) -> None:
        """A task one daemon ran is read, finished and with its result, by a second one."""
        clock = Clock()
        first = TaskStore(clock, records=await self.opened())
        second = TaskStore(clock, records=await self.opened())

        async def work() -> dict[str, Any]:
            return {"content": [{"type": "text", "text": "done"}]}

        task = first.start(work, lambda failure: {"code": "x"}, "alice", server="s", tool="t")
        await first.saved()
        shown = await second.stored(task.id)
        assert shown is not None
        self.assertEqual(
            (shown["status"], shown["result"], shown["server"], shown["tool"], shown["client"]),
            ("completed", {"content": [{"type": "text", "text": "done"}]}, "s", "t", "alice"),
        )
        self.assertIsNone(await second.stored(task.id, "bob"))

    async def test_running_task_cancelled_state_shared(self: Any) -> None:
        """A running task is stored as working, and as cancelled once it is cancelled."""
        clock = Clock()
        first = TaskStore(clock, records=await self.opened())
        second = TaskStore(clock, records=await self.opened())
        task = first.open("alice", server="s", tool="t")
        await first.saved()
        shown = await second.stored(task.id, "alice")
        assert shown is not None
        self.assertEqual(shown["status"], "working")
        first.cancel(task.id)
        await first.saved()
        shown = await second.stored(task.id, "alice")
        assert shown is not None
        self.assertEqual((shown["status"], shown["error"]["code"]), ("cancelled", "cancelled"))
        cancelled = first.get(task.id)
        self.assertEqual(cancelled.status if cancelled else None, TaskStatus.CANCELLED)

    async def test_expired_task_forgotten_everywhere(self: Any) -> None:
        """A finished task that expires on its daemon is gone from the shared store too."""
        clock = Clock()
        first = TaskStore(clock, ttl=10.0, records=await self.opened())
        second = TaskStore(clock, records=await self.opened())

        async def work() -> int:
            return 1

        task = first.start(work, lambda failure: {"code": "x"}, "alice")
        clock.advance(11)
        await first.saved()
        self.assertIsNone(await second.stored(task.id))

    async def test_principals_kept_apart(self: Any) -> None:
        """Each principal sees only its own rows; the daemon's own view sees them all."""
        store = QuestionStore(records=await self.opened())
        await store.save(question("q_a", 1.0, owner="alice"))
        await store.save(question("q_b", 2.0, owner="bob"))
        await store.save(question("q_n", 3.0))
        self.assertEqual([q.id for q in await store.load("alice")], ["q_a"])
        self.assertEqual([q.id for q in await store.load(None)], ["q_n"])
        self.assertEqual([q.id for q in await store.load()], ["q_a", "q_b", "q_n"])
        self.assertIsNone(await store.get("q_b", "alice"))
        found = await store.get("q_b", "bob")
        self.assertEqual(found.id if found else None, "q_b")
        # An answer given in another principal's name replaces nothing either.
        records = store.records
        self.assertEqual(
            [r.principal for r in await records.find(QUESTIONS, principal="bob")], ["bob"]
        )

    async def test_prune_keeps_pending(self: Any) -> None:
        """Pruning deletes finished rows older than the limit, never pending ones."""
        records = await self.opened()
        await records.put(TASKS, Record("t_old", "a", "completed", 5.0, "{}"))
        await records.put(TASKS, Record("t_new", "a", "completed", 50.0, "{}"))
        await records.put(TASKS, Record("t_run", "a", "working", None, "{}"))
        self.assertEqual(await records.prune(TASKS, 10.0, keep="working"), 1)
        left = await records.find(TASKS, state="completed")
        self.assertEqual([r.id for r in left], ["t_new"])

    async def test_opened_twice_and_at_once(self: Any) -> None:
        """
        Daemons opening one database one after another, and several at the same moment,
        all open it, and what was stored stays.
        """
        first = await self.opened()
        await first.put(QUESTIONS, Record("q_1", None, "pending", None, "{}"))
        more = [self.records() for _ in range(3)]
        for records in more:
            self.addCleanup(records.close)
        await gatherResults([records.open() for records in more])
        for records in more:
            found = await records.get(QUESTIONS, "q_1")
            self.assertEqual(found, Record("q_1", None, "pending", None, "{}"))


class SQLiteSharedTests(SharedStoreBehaviour, TestCase):
    def setUp(self) -> None:
        self.path = os.path.join(self.mktemp(), "questions.sqlite3")

    def records(self) -> RecordStore:
        return SQLiteRecords(self.path, reactor)

    async def test_file_of_earlier_release_migrated(self) -> None:
        """
        A question file written before principals had a column opens, and its questions
        are found by their owners.
        """
        os.makedirs(os.path.dirname(self.path))
        with sqlite3.connect(self.path) as old:
            old.execute(
                "CREATE TABLE questions (id TEXT PRIMARY KEY, state TEXT NOT NULL, "
                "finished REAL, record TEXT NOT NULL)"
            )
            old.execute(
                "INSERT INTO questions VALUES (?, ?, ?, ?)",
                ("q_1", "pending", None, json.dumps(question("q_1", 1.0, "alice").to_json())),
            )
        old.close()
        store = QuestionStore(records=await self.opened())
        self.assertEqual([q.id for q in await store.load("alice")], ["q_1"])
        self.assertEqual(await store.load("bob"), [])


def keepalives_to(port: int) -> dict[tuple[str, int], tuple[int, int, int, int]]:
    """
    This process's TCP connections to loopback C{port}, by their local address: whether
    each sends keepalives, and after how many seconds idle, how often, how many probes.
    """
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            sock = socket.socket(fileno=os.dup(int(name)))
        except OSError:
            continue
        with sock:
            try:
                if sock.type != socket.SOCK_STREAM or sock.getpeername() != ("127.0.0.1", port):
                    continue
            except OSError:
                continue
            found[sock.getsockname()] = (
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            )
    return found


class PostgresSharedTests(SharedStoreBehaviour, TestCase):
    def setUp(self) -> None:
        self.cluster: PostgresCluster = shared_cluster()
        self.database = self.cluster.database()

    def records(self) -> RecordStore:
        return PostgresRecords(
            self.cluster.url(self.database), reactor, password=PASSWORD, threads=2
        )

    def _versions(self) -> list[int]:
        with psycopg.connect(self.cluster.url(self.database), password=PASSWORD) as connection:
            rows = connection.execute(
                "SELECT version FROM mcpx_schema_version ORDER BY version"
            ).fetchall()
        return [row[0] for row in rows]

    async def test_write_waits_for_the_schema(self) -> None:
        """A write asked for while the store is still being migrated is kept."""
        records = self.records()
        self.addCleanup(records.close)
        opening = records.open()
        writing = records.put(TASKS, Record("t_1", "alice", "working", None, "{}"))
        await gatherResults([opening, writing])
        self.assertEqual(
            await records.get(TASKS, "t_1", "alice"),
            Record("t_1", "alice", "working", None, "{}"),
        )

    async def test_schema_versioned_once(self) -> None:
        """
        Four daemons migrating one new database at once apply each migration once; a
        daemon opening it later finds it at the current version.
        """
        first = [self.records() for _ in range(4)]
        for records in first:
            self.addCleanup(records.close)
        await gatherResults([records.open() for records in first])
        self.assertEqual(await deferToThread(self._versions), [v for v, _ in MIGRATIONS])
        later = self.records()
        self.addCleanup(later.close)
        await later.open()
        assert isinstance(later, PostgresRecords)
        self.assertEqual(later.schema_found, SCHEMA_VERSION)

    async def test_connections_probe_a_silent_server(self) -> None:
        """
        Every connection of a store, the listening one among them, sends TCP keepalives
        after a few seconds of silence (so one the server forgot behind a network cut is
        found dead within seconds, not hours); a URL that sets its own keeps them.
        """
        before = keepalives_to(self.cluster.port)
        records = await self.opened()
        assert isinstance(records, PostgresRecords)
        records.listen(lambda kind, record_id: None)
        await records.get(TASKS, "t_1")
        wanted = (1, KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT)
        ours: dict[tuple[str, int], tuple[int, int, int, int]] = {}
        for _ in range(200):
            ours = {k: v for k, v in keepalives_to(self.cluster.port).items() if k not in before}
            if len(ours) >= 2:
                break
            await deferLater(reactor, 0.025, lambda: None)
        self.assertGreaterEqual(len(ours), 2, "a pool connection and the listening one")
        self.assertEqual(set(ours.values()), {wanted})
        own = PostgresRecords(
            self.cluster.url(self.database) + "?keepalives_idle=60", reactor, password=PASSWORD
        )
        self.addCleanup(own.close)
        await own.get(TASKS, "t_1")
        theirs = {
            v for k, v in keepalives_to(self.cluster.port).items() if k not in before | ours.keys()
        }
        self.assertEqual(theirs, {(1, 60, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT)})

    async def test_server_restarted_mid_run(self) -> None:
        """
        PostgreSQL restarted under two daemons: both reconnect by themselves, what was
        written before is all there, and what is written after is shared again.
        """
        first = QuestionStore(records=await self.opened())
        second = QuestionStore(records=await self.opened())
        await first.save(question("q_1", 1.0, owner="alice"))
        self.assertEqual([q.id for q in await second.load()], ["q_1"])
        await deferToThread(self.cluster.restart)
        await first.save(question("q_2", 2.0, owner="alice"))
        self.assertEqual([q.id for q in await second.load("alice")], ["q_1", "q_2"])

    async def test_server_down_then_back(self) -> None:
        """
        While PostgreSQL is down a write fails (the broker logs it and carries on); once
        it is back the same store writes again, and nothing written before is lost.
        """
        store = QuestionStore(records=await self.opened())
        await store.save(question("q_1", 1.0))
        await deferToThread(self.cluster.stop)
        try:
            with self.assertRaises(psycopg.OperationalError):
                await store.save(question("q_2", 2.0))
        finally:
            await deferToThread(self.cluster.resume)
        await store.save(question("q_3", 3.0))
        self.assertEqual([q.id for q in await store.load()], ["q_1", "q_3"])

    async def test_daemon_started_while_server_down(self) -> None:
        """
        A store that could not be opened because PostgreSQL was down opens by itself at
        the first write after the server is back, and keeps what is written from then on.
        """
        records = self.records()
        self.addCleanup(records.close)
        await deferToThread(self.cluster.stop)
        try:
            with self.assertRaises(psycopg.OperationalError):
                await records.open()
        finally:
            await deferToThread(self.cluster.resume)
        store = QuestionStore(records=records)
        await store.save(question("q_1", 1.0, owner="alice"))
        other = QuestionStore(records=await self.opened())
        self.assertEqual([q.id for q in await other.load("alice")], ["q_1"])
