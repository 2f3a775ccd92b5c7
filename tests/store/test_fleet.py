"""
Several daemons' brokers on one PostgreSQL database (a throw-away cluster,
L{tests.support.postgres}), each with its own heartbeat: a question ends once, whichever
daemon answers it; an answer given through one daemon wakes the call waiting on the
daemon that asked; a starting daemon leaves a live daemon's questions to it; a lost
listening connection is made again and misses no answer.

The stores run on the real reactor's threads; each broker keeps time by a L{Clock} of its
own, so deadlines and heartbeats move only when a test says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from twisted.internet import reactor
from twisted.internet.defer import Deferred, DeferredList, fail, gatherResults
from twisted.internet.task import Clock, deferLater
from twisted.internet.threads import deferToThread
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase

from mcpx.questions.broker import Broker, QuestionClosed
from mcpx.questions.record import Question, QuestionState
from mcpx.questions.store import QuestionStore
from mcpx.spec.questions import ELICIT
from mcpx.store.heartbeat import EVERY, Heartbeat
from mcpx.store.postgres import PostgresRecords
from mcpx.store.records import Kind
from mcpx.tasks.store import TaskStore
from tests.support.postgres import PASSWORD, PostgresCluster, shared_cluster

FORM = {
    "message": "demo (via mcpx) asks: name?",
    "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
}

#: Clock seconds the tests start at (heartbeats at 0 would look ancient to nobody).
START = 1_000_000.0


def named(name: str) -> dict[str, Any]:
    """An accepting answer to L{FORM}."""
    return {"action": "accept", "content": {"name": name}}


T = TypeVar("T")


class CutOffRecords(PostgresRecords):
    """
    A daemon's store whose writes and heartbeats fail while L{cut}, as they do when the
    daemon is cut off from the database.  (Its reads go on, so that what a daemon reads
    as it starts, at moments the test does not choose, cannot fail a test.)
    """

    cut = False

    def _write(
        self, kind: Kind, record_id: str, query: Callable[..., T], *args: Any
    ) -> Deferred[T]:
        if self.cut:
            return fail(psycopg.OperationalError("connection timeout expired"))
        return super()._write(kind, record_id, query, *args)

    def beat(self, daemon: str, now: float) -> Deferred[None]:
        if self.cut:
            return fail(psycopg.OperationalError("connection timeout expired"))
        return super().beat(daemon, now)


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait (at most ten seconds) for C{condition}, which the store's threads make true."""
    for _ in range(400):
        if condition():
            return
        await deferLater(reactor, 0.025, lambda: None)
    raise AssertionError("never happened: " + what)


class FleetBrokerTests(TestCase):
    timeout = 60

    def setUp(self) -> None:
        self.cluster: PostgresCluster = shared_cluster()
        self.url = self.cluster.url(self.cluster.database())

    def records(self) -> PostgresRecords:
        return PostgresRecords(self.url, reactor, password=PASSWORD, threads=2)

    async def daemon(
        self, name: str, clock: Clock | None = None, records: PostgresRecords | None = None
    ) -> tuple[Broker, Clock]:
        """A started broker of a daemon called C{name}, on this test's database."""
        if clock is None:
            clock = Clock()
            clock.advance(START)
        if records is None:
            records = self.records()
        broker = Broker(
            clock,
            store=QuestionStore(records=records),
            heartbeat=Heartbeat(clock, records, name),
            ttl=60.0,
        )
        await broker.start()
        self.addCleanup(broker.stop)
        return broker, clock

    def ask(self, broker: Broker) -> tuple[Question, Deferred[dict[str, Any]]]:
        return broker.ask(server="demo", scope_key="", method=ELICIT, params=FORM)

    async def test_question_ends_once(self) -> None:
        """
        Two daemons answering one question at the same moment: one answer is taken, the
        other is refused as already answered, and both daemons then list the one taken;
        the asker gets that one.
        """
        first, _ = await self.daemon("d_first")
        asked, answered = self.ask(first)
        second, _ = await self.daemon("d_second")
        await until(lambda: second.get(asked.id) is not None, "the second daemon lists it")
        results = await DeferredList(
            [
                first.reply(asked.id, "accept", named("Ada"), by="api"),
                second.reply(asked.id, "accept", named("Bo"), by="cli"),
            ],
            consumeErrors=True,
        )
        outcomes = [ok for ok, _ in results]
        self.assertEqual(sorted(outcomes), [False, True])
        [failure] = [value for ok, value in results if not ok]
        assert isinstance(failure, Failure)
        refused = failure.trap(QuestionClosed) and failure.value
        assert isinstance(refused, QuestionClosed)
        winner = "Ada" if outcomes[0] else "Bo"
        self.assertIn("already answered", str(refused))
        self.assertEqual(refused.question.answer, named(winner))
        self.assertEqual(await answered, {"action": "accept", "content": {"name": winner}})
        await until(lambda: not getattr(second.get(asked.id), "pending", True), "heard")
        for broker in (first, second):
            shown = broker.get(asked.id)
            assert shown is not None
            self.assertEqual(
                (shown.state, shown.answer),
                (QuestionState.ANSWERED, {"action": "accept", "content": {"name": winner}}),
            )

    async def test_answer_through_another_daemon_wakes_the_asker(self) -> None:
        """
        A question asked on one daemon after a second one started is listed by the
        second (not as an orphan); answered there, the first daemon's asker gets the
        answer.
        """
        first, _ = await self.daemon("d_first")
        second, _ = await self.daemon("d_second")
        asked, answered = self.ask(first)
        await until(lambda: second.get(asked.id) is not None, "the second daemon lists it")
        listed = second.get(asked.id)
        assert listed is not None
        self.assertEqual((listed.orphaned, listed.daemon), (False, "d_first"))
        await second.reply(asked.id, "accept", named("Ada"), by="cli")
        self.assertEqual(await answered, {"action": "accept", "content": {"name": "Ada"}})
        shown = first.get(asked.id)
        assert shown is not None
        self.assertEqual((shown.state, shown.answered_by), (QuestionState.ANSWERED, "cli"))

    def cut_off(self) -> CutOffRecords:
        return CutOffRecords(self.url, reactor, password=PASSWORD, threads=2)

    async def test_question_asked_while_cut_off_answered_there_once_back(self) -> None:
        """
        A question asked on a daemon that cannot reach the shared store is answered
        through that daemon once the store is back, before its next beat: the asker
        gets the answer, and the store has it.
        """
        records = self.cut_off()
        first, _ = await self.daemon("d_first", records=records)
        records.cut = True
        asked, answered = self.ask(first)
        await first._writes.settled()
        records.cut = False
        await first.reply(asked.id, "accept", named("Ada"), by="cli")
        self.assertEqual(await answered, named("Ada"))
        second, _ = await self.daemon("d_second")
        shown = second.get(asked.id)
        assert shown is not None
        self.assertEqual((shown.state, shown.answer), (QuestionState.ANSWERED, named("Ada")))
        # The write that failed was logged.
        self.assertTrue(self.flushLoggedErrors(psycopg.OperationalError))

    async def test_question_asked_while_cut_off_shared_at_next_beat(self) -> None:
        """
        A question asked on a daemon cut off from the shared store is not seen by
        another daemon; at the first daemon's first beat once the store is back it is,
        and an answer through the other daemon wakes the asker.
        """
        records = self.cut_off()
        first, first_clock = await self.daemon("d_first", records=records)
        second, _ = await self.daemon("d_second")
        records.cut = True
        asked, answered = self.ask(first)
        await first._writes.settled()
        first_clock.advance(EVERY)
        await first._writes.settled()
        self.assertIsNone(second.get(asked.id))
        records.cut = False
        first_clock.advance(EVERY)
        await until(lambda: second.get(asked.id) is not None, "the second daemon lists it")
        await second.reply(asked.id, "accept", named("Bo"), by="cli")
        self.assertEqual(await answered, named("Bo"))
        # The writes and the beat made while cut off failed, and said so.
        self.assertTrue(self.flushLoggedErrors(psycopg.OperationalError))

    async def test_starting_daemon_leaves_live_daemons_questions(self) -> None:
        """
        A daemon starting on the database lists a live daemon's pending question as that
        daemon's (not orphaned, and it does not expire it when its deadline passes here),
        while a question whose daemon has stopped beating is adopted as an orphan and
        expires at its deadline.
        """
        live, live_clock = await self.daemon("d_live")
        theirs, _ = self.ask(live)
        dead_clock = Clock()
        dead_clock.advance(START - 3600)
        dead = Broker(
            dead_clock,
            store=QuestionStore(records=self.records()),
            heartbeat=Heartbeat(dead_clock, self.records(), "d_dead"),
            ttl=3610.0,
        )
        await dead.start()
        # Never stopped (as if killed): its last beat, an hour old, is all that is left.
        self.addCleanup(dead.stop)
        abandoned, _ = self.ask(dead)
        starting_clock = Clock()
        starting_clock.advance(START)
        starting, _ = await self.daemon("d_new", starting_clock)
        kept = starting.get(theirs.id)
        adopted = starting.get(abandoned.id)
        assert kept is not None and adopted is not None
        self.assertEqual((kept.orphaned, kept.daemon), (False, "d_live"))
        self.assertEqual((adopted.orphaned, adopted.daemon), (True, "d_new"))
        starting_clock.advance(11)
        self.assertTrue(kept.pending)
        self.assertEqual(adopted.state, QuestionState.EXPIRED)
        live_clock.advance(61)
        await until(lambda: not kept.pending, "the owner's expiry is heard")
        self.assertEqual((kept.state, kept.answered_by), (QuestionState.EXPIRED, "expiry"))

    async def test_running_daemon_adopts_a_gone_daemons_questions(self) -> None:
        """
        A daemon listing another daemon's pending question adopts it once that daemon
        is gone (here, stopped): at its next heartbeat the question becomes its orphan,
        and it expires at its deadline there.
        """
        first, _ = await self.daemon("d_first")
        second, clock = await self.daemon("d_second")
        asked, _ = self.ask(first)
        await until(lambda: second.get(asked.id) is not None, "the second daemon lists it")
        await first.stop()
        clock.advance(EVERY)
        listed = second.get(asked.id)
        assert listed is not None
        await until(lambda: listed.orphaned, "the second daemon adopts it")
        self.assertEqual(listed.daemon, "d_second")
        clock.advance(60)
        self.assertEqual(listed.state, QuestionState.EXPIRED)

    async def test_listening_survives_a_restart(self) -> None:
        """
        PostgreSQL restarted while a daemon's call waits for an answer: the daemon listens
        again by itself, and an answer given through another daemon just after the restart
        still wakes the call.
        """
        first, _ = await self.daemon("d_first")
        second, _ = await self.daemon("d_second")
        asked, answered = self.ask(first)
        await until(lambda: second.get(asked.id) is not None, "the second daemon lists it")
        await deferToThread(self.cluster.restart)
        await second.reply(asked.id, "accept", named("Ada"), by="cli")
        self.assertEqual(await answered, {"action": "accept", "content": {"name": "Ada"}})


class LostDaemonTaskTests(TestCase):
    timeout = 60

    def setUp(self) -> None:
        self.cluster: PostgresCluster = shared_cluster()
        self.url = self.cluster.url(self.cluster.database())

    def records(self) -> PostgresRecords:
        records = PostgresRecords(self.url, reactor, password=PASSWORD, threads=2)
        self.addCleanup(records.close)
        return records

    async def daemon(self, name: str, at: float) -> tuple[TaskStore, Heartbeat]:
        """A daemon's task store and heartbeat (not started), its clock at C{at}."""
        clock = Clock()
        clock.advance(at)
        records = self.records()
        await records.open()
        tasks = TaskStore(clock, records=records, daemon=name)
        heartbeat = Heartbeat(clock, records, name, watchers=[tasks.fail_lost])
        self.addCleanup(tasks.close)
        return tasks, heartbeat

    async def test_dead_daemons_running_tasks_fail(self) -> None:
        """
        A task left running by a daemon that stopped beating (killed) is failed, with
        that reason, by a daemon that beats after it; a live daemon's running task is
        left running.
        """
        dead_tasks, dead_beat = await self.daemon("d_dead", START - 3600)
        await dead_beat.start()
        abandoned = dead_tasks.open("alice", server="demo", tool="slow")
        live_tasks, live_beat = await self.daemon("d_live", START)
        await live_beat.start()
        self.addCleanup(live_beat.stop)
        running = live_tasks.open("bob", server="demo", tool="slow")
        await gatherResults([dead_tasks.saved(), live_tasks.saved()])
        checker, checker_beat = await self.daemon("d_checker", START)
        await checker_beat.start()
        self.addCleanup(checker_beat.stop)
        shown = await checker.stored(abandoned.id)
        assert shown is not None
        self.assertEqual((shown["status"], shown["error"]["code"]), ("failed", "daemon_lost"))
        self.assertIn("d_dead", shown["error"]["message"])
        kept = await checker.stored(running.id)
        assert kept is not None
        self.assertEqual(kept["status"], "working")
