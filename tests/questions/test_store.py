"""
Tests for L{mcpx.questions.store}, and for the broker's durability through it.

These use the real reactor: adbapi runs its queries on a thread pool.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from twisted.internet import reactor
from twisted.internet.task import Clock
from twisted.trial.unittest import TestCase

from mcpx.questions.broker import Broker
from mcpx.questions.record import ROUTE_BROKER, ROUTE_CLIENT, Question, QuestionState
from mcpx.questions.store import QuestionStore, StoreClosed
from mcpx.spec.questions import ELICIT, SAMPLE
from mcpx.wire.errors import RpcError

FORM = {
    "message": "github (via mcpx) asks: age?",
    "requestedSchema": {"type": "object", "properties": {"age": {"type": "integer"}}},
}


def question(question_id: str, created: float, **kw: Any) -> Question:
    return Question(
        id=question_id,
        server="github",
        scope_key="",
        method=ELICIT,
        params=FORM,
        created=created,
        deadline=created + 60,
        **kw,
    )


class QuestionStoreTests(TestCase):
    def setUp(self) -> None:
        directory = self.mktemp()
        self.path = os.path.join(directory, "questions.sqlite")

    async def opened(self) -> QuestionStore:
        store = QuestionStore(self.path, reactor)
        await store.open()
        self.addCleanup(store.close)
        return store

    async def test_file_mode(self) -> None:
        """The database file is readable and writable by its owner only."""
        await self.opened()
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o600)

    async def test_sqlite_waits_for_the_first_question(self) -> None:
        """
        A new store's file stays empty (SQLite has not opened it) and loads as nothing
        until a question is saved; then that question loads, also in a store opened
        afterwards on the same file.
        """
        store = await self.opened()
        self.assertEqual(await store.load(), [])
        self.assertEqual(await store.prune(100.0), 0)
        self.assertEqual(os.path.getsize(self.path), 0)
        await store.save(question("q_1", 1.0))
        await store.save(question("q_2", 2.0))
        self.assertGreater(os.path.getsize(self.path), 0)
        self.assertEqual([q.id for q in await store.load()], ["q_1", "q_2"])
        await store.close()
        again = await self.opened()
        self.assertEqual([q.id for q in await again.load()], ["q_1", "q_2"])

    async def test_existing_file_mode_tightened(self) -> None:
        """An existing database file open to others is made owner-only on open."""
        os.makedirs(os.path.dirname(self.path))
        with open(self.path, "wb"):
            pass
        os.chmod(self.path, 0o644)
        await self.opened()
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o600)

    async def test_open_failure(self) -> None:
        """A path that cannot be created fails the open rather than raising."""
        # A file where the directory should be stops even a superuser.
        with open(os.path.dirname(self.path), "wb"):
            pass
        opening = QuestionStore(self.path, reactor).open()
        self.failureResultOf(opening, OSError)

    async def test_save_and_load(self) -> None:
        """Saved questions load back, oldest first, with every field."""
        store = await self.opened()
        second = question("q_2", 20.0, route="client", call_id="c")
        first = question(
            "q_1",
            10.0,
            state=QuestionState.ANSWERED,
            answer={"action": "accept", "content": {"age": 3}},
            answered_by="cli",
            finished=12.0,
        )
        await store.save(second)
        await store.save(first)
        loaded = await store.load()
        self.assertEqual([q.to_json() for q in loaded], [first.to_json(), second.to_json()])

    async def test_save_replaces(self) -> None:
        """Saving a question again replaces its stored record."""
        store = await self.opened()
        saved = question("q_1", 10.0)
        await store.save(saved)
        saved.state = QuestionState.DECLINED
        saved.finished = 11.0
        await store.save(saved)
        loaded = await store.load()
        self.assertEqual([(q.id, q.state) for q in loaded], [("q_1", QuestionState.DECLINED)])

    async def test_prune(self) -> None:
        """Pruning deletes finished questions older than the limit, never pending ones."""
        store = await self.opened()
        await store.save(question("q_old", 1.0, state=QuestionState.EXPIRED, finished=5.0))
        await store.save(question("q_new", 1.0, state=QuestionState.ANSWERED, finished=50.0))
        await store.save(question("q_pending", 0.0))
        self.assertEqual(await store.prune(10.0), 1)
        loaded = await store.load()
        self.assertEqual([q.id for q in loaded], ["q_pending", "q_new"])

    async def test_unreadable_row_skipped(self) -> None:
        """A row that cannot be read is skipped, and the others still load."""
        store = await self.opened()
        await store.save(question("q_1", 1.0))
        bad = question("q_bad", 2.0)
        bad.method = "tools/call"
        await store.save(bad)
        loaded = await store.load()
        self.assertEqual([q.id for q in loaded], ["q_1"])

    async def test_closed(self) -> None:
        """A closed store fails every call with StoreClosed."""
        store = await self.opened()
        await store.close()
        with self.assertRaises(StoreClosed):
            await store.save(question("q_1", 1.0))
        with self.assertRaises(StoreClosed):
            await store.load()


class DurableBrokerTests(TestCase):
    def setUp(self) -> None:
        self.path = os.path.join(self.mktemp(), "questions.sqlite")
        self.clock = Clock()

    async def started(self, **kw: Any) -> Broker:
        broker = Broker(self.clock, store=QuestionStore(self.path, reactor), **kw)
        await broker.start()
        return broker

    async def test_restart_keeps_pending(self) -> None:
        """
        A question pending when the daemon stops is listed again after a restart, pending and
        orphaned, and still expires at its deadline.
        """
        first = await self.started(ttl=60.0)
        self.clock.advance(5)
        pending, answered = first.ask(server="github", scope_key="", method=ELICIT, params=FORM)
        done, refused = first.ask(server="github", scope_key="", method=SAMPLE, params={})
        first.decline(done.id, by="cli")
        self.failureResultOf(refused, RpcError)
        await first.stop()
        self.assertNoResult(answered)
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o600)

        self.clock.advance(10)
        second = await self.started()
        listed = second.questions(state=QuestionState.PENDING)
        self.assertEqual([(q.id, q.orphaned) for q in listed], [(pending.id, True)])
        self.assertEqual((listed[0].params, listed[0].deadline), (FORM, 65.0))
        self.assertEqual([q.id for q in second.questions(state=QuestionState.DECLINED)], [done.id])

        self.clock.advance(50)
        self.assertEqual(
            (listed[0].state, listed[0].answered_by), (QuestionState.EXPIRED, "expiry")
        )
        await second.stop()

        third = await self.started()
        reloaded = third.get(pending.id)
        assert reloaded is not None
        self.assertIs(reloaded.state, QuestionState.EXPIRED)
        await third.stop()

    async def test_orphan_that_was_with_a_client(self) -> None:
        """
        A question that was with a client when the daemon stopped is, after the restart,
        in the broker (route broker, announced so) and expires by the broker's deadline,
        not the client's longer one; one already in the broker keeps its own.
        """
        first = await self.started(ttl=60.0)
        with_client, _ = first.ask(
            server="github",
            scope_key="",
            method=ELICIT,
            params=FORM,
            route=ROUTE_CLIENT,
            call_id="call-1",
            deadline=600.0,
        )
        in_broker, _ = first.ask(
            server="github", scope_key="", method=ELICIT, params=FORM, deadline=30.0
        )
        await first.stop()
        self.clock.advance(10)
        second = await self.started(ttl=60.0)
        moved, kept = second.get(with_client.id), second.get(in_broker.id)
        assert moved is not None and kept is not None
        self.assertEqual(
            (moved.route, moved.deadline, moved.orphaned, moved.call_id),
            (ROUTE_BROKER, 70.0, True, "call-1"),
        )
        self.assertEqual((kept.route, kept.deadline), (ROUTE_BROKER, 30.0))
        await second.stop()
        third = await self.started(ttl=60.0)
        reloaded = third.get(with_client.id)
        assert reloaded is not None
        self.assertEqual((reloaded.route, reloaded.deadline), (ROUTE_BROKER, 70.0))
        await third.stop()

    async def test_restart_after_deadline(self) -> None:
        """A stored question whose deadline passed while the daemon was down expires on start."""
        first = await self.started(ttl=60.0)
        pending, _ = first.ask(server="github", scope_key="", method=ELICIT, params=FORM)
        await first.stop()
        self.clock.advance(61)
        second = await self.started()
        reloaded = second.get(pending.id)
        assert reloaded is not None
        self.assertEqual(
            (reloaded.state, reloaded.answer, reloaded.orphaned),
            (QuestionState.EXPIRED, {"action": "cancel"}, True),
        )
        await second.stop()

    async def test_answered_orphan(self) -> None:
        """An orphaned question can still be answered, and its answer is stored."""
        first = await self.started()
        pending, _ = first.ask(server="github", scope_key="", method=ELICIT, params=FORM)
        await first.stop()
        second = await self.started()
        second.answer(pending.id, {"action": "accept", "content": {"age": 4}}, by="cli")
        await second.stop()
        store = QuestionStore(self.path, reactor)
        await store.open()
        self.addCleanup(store.close)
        [stored] = await store.load()
        self.assertEqual(
            (stored.state, stored.answer),
            (QuestionState.ANSWERED, {"action": "accept", "content": {"age": 4}}),
        )

    async def test_pruned_from_store(self) -> None:
        """Finished questions older than `keep` are deleted from the store too."""
        broker = await self.started(keep=100.0)
        done, refused = broker.ask(server="github", scope_key="", method=SAMPLE, params={})
        broker.cancel(done.id, by="cli")
        self.failureResultOf(refused, RpcError)
        self.clock.advance(101)
        self.assertIsNone(broker.get(done.id))
        await broker.stop()
        store = QuestionStore(self.path, reactor)
        await store.open()
        self.addCleanup(store.close)
        self.assertEqual(await store.load(), [])

    async def test_store_failure_does_not_block_answers(self) -> None:
        """When saving fails the failure is logged, and asking and answering still work."""
        store = QuestionStore(self.path, reactor)
        broker = Broker(self.clock, store=store)
        await broker.start()
        await store.close()
        question, answered = broker.ask(server="github", scope_key="", method=ELICIT, params=FORM)
        broker.answer(question.id, {"action": "accept", "content": {"age": 9}}, by="cli")
        self.assertEqual(
            self.successResultOf(answered), {"action": "accept", "content": {"age": 9}}
        )
        await broker.stop()
        self.assertEqual(len(self.flushLoggedErrors(StoreClosed)), 2)
