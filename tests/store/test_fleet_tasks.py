"""
Tasks read and cancelled through a daemon other than the one running them, on one
PostgreSQL database (a throw-away cluster, L{tests.support.postgres}): each daemon an MCP
server over a held pool (L{tests.server.Harness}) with its task store on the database, a
heartbeat of its own and a clock of its own.

A core task (2025-11-25) started on daemon A is listed, read and cancelled through daemon
B, and A's upstream call is cancelled; C{tasks/result} on B waits for A to finish; another
client sees nothing of it on either daemon; a dead daemon's task reads C{daemon_lost}, and
a result waiting for it wakes with that.  The same through C{/v1/tasks}'s operations.
"""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
from twisted.internet import reactor
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock, deferLater
from twisted.trial.unittest import TestCase

from mcpx.ops.errors import OpError
from mcpx.ops.host import Invocation
from mcpx.ops.tasks import cancel_task, get_task, list_tasks
from mcpx.server.conn import Conn
from mcpx.server.ext_tasks import SUPPORTING_TOOL_AFTER
from mcpx.spec.feature import TASKS_EXTENSION as EXTENSION
from mcpx.spec.revision import NEWEST, Revision
from mcpx.store.heartbeat import EVERY, TIMEOUT, Heartbeat
from mcpx.store.postgres import PostgresRecords
from mcpx.tasks.journal import RESTARTED
from mcpx.tasks.shared import FORGOTTEN_AFTER
from mcpx.tasks.store import TaskStore
from mcpx.wire.errors import INTERNAL_ERROR, INVALID_PARAMS, RpcError
from tests.daemon.fake_pool import FakePool, text_result
from tests.server import Harness, Session, gateway_servers
from tests.store.test_fleet import START, CutOffRecords, until
from tests.support.postgres import PASSWORD, PostgresCluster, shared_cluster

V4 = Revision.V2025_11_25

#: A 2026-07-28 request's _meta declaring the tasks extension.
WITH_EXTENSION: dict[str, Any] = {
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}}
}

MCPX_CALL: dict[str, Any] = {
    "name": "mcpx_call",
    "arguments": {"server": "search", "tool": "web_search", "arguments": {"q": "mcpx"}},
}


class Daemon:
    """One daemon: an MCP server over a held pool, its tasks in the shared store."""

    def __init__(
        self, test: TestCase, url: str, name: str, records: type[PostgresRecords] = PostgresRecords
    ) -> None:
        self.name = name
        self.clock = Clock()
        self.clock.advance(START)
        self.pool = FakePool(gateway_servers(), hold=True)
        self.harness = Harness(self.pool, clock=self.clock)
        self.records = records(url, reactor, password=PASSWORD, threads=2)
        self.tasks: TaskStore = self.harness.host.tasks
        self.tasks.records = self.records
        self.tasks.daemon = name
        self.heartbeat = Heartbeat(self.clock, self.records, name, watchers=[self.tasks.fail_lost])
        self.tasks.alive = self.heartbeat.alive
        self.tasks.listen()
        self.initialized = False
        test.addCleanup(self.records.close)
        test.addCleanup(self.tasks.close)

    def client(self, identity: str) -> None:
        """Talk as the host C{identity} from now on."""
        harness = self.harness
        harness.conn = harness.server.open(Conn("stdio", identity, push=harness.server_peer.notify))
        self.initialized = False

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        if not self.initialized:
            await self.harness.request(
                "initialize",
                {
                    "protocolVersion": V4.value,
                    "capabilities": {},
                    "clientInfo": {"name": "test-client", "version": "1"},
                },
            )
            self.harness.client.notify("notifications/initialized")
            self.initialized = True
        return await self.harness.request(method, params)

    async def error(self, method: str, params: dict[str, Any]) -> RpcError:
        try:
            await self.request(method, params)
        except RpcError as e:
            return e
        raise AssertionError(f"{method} did not fail")


class FleetTaskTests(TestCase):
    timeout = 60

    def setUp(self) -> None:
        self.cluster: PostgresCluster = shared_cluster()
        self.url = self.cluster.url(self.cluster.database())

    async def daemon(self, name: str, records: type[PostgresRecords] = PostgresRecords) -> Daemon:
        daemon = Daemon(self, self.url, name, records)
        await daemon.records.open()
        await daemon.heartbeat.start()
        self.addCleanup(daemon.heartbeat.stop)
        return daemon

    async def started(self, daemon: Daemon) -> str:
        """The id of a core task of L{MCPX_CALL} started on C{daemon}, once it is stored."""
        created = await daemon.request("tools/call", {**MCPX_CALL, "task": {"ttl": 60_000}})
        task_id: str = created["task"]["taskId"]
        await daemon.tasks.saved()
        return task_id

    async def test_read_and_cancelled_through_another_daemon(self) -> None:
        """
        A task started on daemon A is listed and read through daemon B as working, and
        cancelled there: B answers it cancelled, A hears of it and cancels its upstream
        call, and both daemons then read it cancelled, with B's reason.
        """
        a = await self.daemon("d_aaaaaaaaaaaa")
        b = await self.daemon("d_bbbbbbbbbbbb")
        task_id = await self.started(a)
        [held] = a.pool.held
        listed = await b.request("tasks/list", {})
        self.assertEqual(
            [(t["taskId"], t["status"]) for t in listed["tasks"]], [(task_id, "working")]
        )
        shown = await b.request("tasks/get", {"taskId": task_id})
        self.assertEqual(shown["status"], "working")
        cancelled = await b.request("tasks/cancel", {"taskId": task_id})
        self.assertEqual(cancelled["status"], "cancelled")
        self.assertIn("through daemon d_bbbbbbbbbbbb", cancelled["statusMessage"])
        await until(lambda: held.result.called, "A cancels its upstream call")
        held.result.addErrback(lambda f: f.trap(CancelledError))
        for daemon in (a, b):
            got = await daemon.request("tasks/get", {"taskId": task_id})
            self.assertEqual(got["status"], "cancelled", daemon.name)
            self.assertIn("tasks/cancel", got["statusMessage"])
        error = await b.error("tasks/result", {"taskId": task_id})
        self.assertEqual(error.code, INTERNAL_ERROR)
        self.assertIn("was cancelled", error.message)
        again = await b.error("tasks/cancel", {"taskId": task_id})
        self.assertEqual(again.code, INVALID_PARAMS)
        self.assertIn("already cancelled", again.message)
        await a.tasks.saved()

    async def test_result_through_another_daemon_waits_for_the_end(self) -> None:
        """
        C{tasks/result} through daemon B for a task A runs waits; when A's call
        finishes, B answers the call's result, tied to the task.
        """
        a = await self.daemon("d_aaaaaaaaaaaa")
        b = await self.daemon("d_bbbbbbbbbbbb")
        task_id = await self.started(a)
        waiting = Deferred.fromCoroutine(b.request("tasks/result", {"taskId": task_id}))
        await until(lambda: b.tasks._rows.awaited(task_id), "B waits for the task")
        self.assertFalse(waiting.called)
        a.pool.held[0].result.callback(text_result("found"))
        result = await waiting
        self.assertEqual(result["content"][0]["text"], "found")
        self.assertEqual(
            result["_meta"]["io.modelcontextprotocol/related-task"], {"taskId": task_id}
        )

    async def test_extension_task_read_and_cancelled_through_another_daemon(self) -> None:
        """
        2026-07-28 extension tasks made on daemon A: through daemon B, tasks/get reads
        one working and, once A's call finished, completed with its result inlined;
        tasks/cancel through B of another stops A's upstream call.
        """
        a = await self.daemon("d_aaaaaaaaaaaa")
        b = await self.daemon("d_bbbbbbbbbbbb")
        on_a, on_b = Session(NEWEST, a.harness), Session(NEWEST, b.harness)

        async def made() -> str:
            answering = a.harness.request("tools/call", on_a.params(MCPX_CALL, **WITH_EXTENSION))
            a.clock.advance(SUPPORTING_TOOL_AFTER)
            created = await answering
            self.assertEqual(created["resultType"], "task")
            await a.tasks.saved()
            return str(created["taskId"])

        async def got(task_id: str) -> Any:
            return await b.harness.request(
                "tasks/get", on_b.params({"taskId": task_id}, **WITH_EXTENSION)
            )

        finishing, cancelling = await made(), await made()
        self.assertEqual((await got(finishing))["status"], "working")
        a.pool.held[0].result.callback(text_result("found"))
        await a.tasks.saved()
        done = await got(finishing)
        self.assertEqual(done["status"], "completed")
        self.assertEqual(done["result"]["content"], [{"type": "text", "text": "found"}])
        held = a.pool.held[1].result
        answer = await b.harness.request(
            "tasks/cancel", on_b.params({"taskId": cancelling}, **WITH_EXTENSION)
        )
        self.assertEqual(answer["resultType"], "complete")
        await until(lambda: held.called, "A cancels its upstream call")
        held.addErrback(lambda f: f.trap(CancelledError))
        self.assertEqual((await got(cancelling))["status"], "cancelled")
        await a.tasks.saved()

    async def test_another_client_sees_nothing(self) -> None:
        """
        Another client, on either daemon, is told the task does not exist (as for an id
        that never was), lists nothing, and cannot cancel it: the call runs on.
        """
        a = await self.daemon("d_aaaaaaaaaaaa")
        b = await self.daemon("d_bbbbbbbbbbbb")
        task_id = await self.started(a)
        for daemon in (a, b):
            daemon.client("another-host")
            for method in ("tasks/get", "tasks/result", "tasks/cancel"):
                error = await daemon.error(method, {"taskId": task_id})
                unknown = await daemon.error(method, {"taskId": "0" * 24})
                self.assertEqual(error.code, INVALID_PARAMS, (daemon.name, method))
                self.assertEqual(
                    error.message.replace(task_id, "?"),
                    unknown.message.replace("0" * 24, "?"),
                )
            self.assertEqual((await daemon.request("tasks/list", {}))["tasks"], [])
        self.assertFalse(a.pool.held[0].result.called)
        stored = await b.tasks.stored(task_id)
        assert stored is not None
        self.assertEqual(stored["status"], "working")

    async def test_task_made_while_cut_off_written_once_back(self) -> None:
        """
        A task started and finished on daemon A while A cannot reach the shared store is
        unknown to daemon B; at A's first beat once the store is back, the task is
        written, as it is then: B reads it completed, with its result.
        """
        a = await self.daemon("d_aaaaaaaaaaaa", CutOffRecords)
        b = await self.daemon("d_bbbbbbbbbbbb")
        assert isinstance(a.records, CutOffRecords)
        a.records.cut = True
        created = await a.request("tools/call", {**MCPX_CALL, "task": {"ttl": 60_000}})
        task_id = created["task"]["taskId"]
        [held] = a.pool.held
        held.result.callback(text_result("found while cut off"))
        await a.tasks.saved()
        self.assertEqual((await a.request("tasks/get", {"taskId": task_id}))["status"], "completed")
        unknown = await b.error("tasks/get", {"taskId": task_id})
        self.assertEqual(unknown.code, INVALID_PARAMS)
        a.records.cut = False
        a.clock.advance(EVERY)
        shown: dict[str, Any] = {}

        async def read() -> None:
            with contextlib.suppress(RpcError):
                shown.update(await b.request("tasks/get", {"taskId": task_id}))

        for _ in range(200):
            await read()
            if shown:
                break
            await deferLater(reactor, 0.025, lambda: None)
        self.assertEqual(shown.get("status"), "completed", shown)
        result = await b.request("tasks/result", {"taskId": task_id})
        self.assertEqual(result["content"][0]["text"], "found while cut off")
        await a.tasks.saved()
        # The writes that failed were logged.
        self.assertTrue(self.flushLoggedErrors(psycopg.OperationalError))

    async def test_dead_daemons_task_reads_daemon_lost(self) -> None:
        """
        Daemon A dies (it stops beating) with a task running and a result waiting for it
        on daemon B: after B's next beats past the timeout, the waiting result is the
        error C{daemon_lost} names, and tasks/get through B says why it failed.
        """
        a = await self.daemon("d_aaaaaaaaaaaa")
        b = await self.daemon("d_bbbbbbbbbbbb")
        task_id = await self.started(a)
        waiting = Deferred.fromCoroutine(b.request("tasks/result", {"taskId": task_id}))
        await until(lambda: b.tasks._rows.awaited(task_id), "B waits for the task")
        # A is killed: no beat after its first.
        a.heartbeat._stopped = True
        b.clock.advance(TIMEOUT + EVERY)
        try:
            await waiting
        except RpcError as e:
            error = e
        else:
            raise AssertionError("the result did not fail")
        self.assertIn("d_aaaaaaaaaaaa", error.message)
        self.assertIn("stopped without finishing it", error.message)
        self.assertEqual(error.data["reason"], "daemon_lost")
        shown = await b.request("tasks/get", {"taskId": task_id})
        self.assertEqual(shown["status"], "failed")
        self.assertIn("stopped without finishing it", shown["statusMessage"])
        # (This A is not really dead: told its task failed, it stops its call too.)
        held = a.pool.held[0].result
        await until(lambda: held.called, "A cancels its upstream call")
        held.addErrback(lambda f: f.trap(CancelledError))
        await a.tasks.saved()

    async def restarted(self, dead: Daemon, task_id: str, name: str) -> Daemon:
        """
        Daemon C{name}, started in C{dead}'s place: its task journal names C{task_id}
        as running (L{mcpx.tasks.journal}), so it restores it as failed.
        """
        task = dead.tasks.get(task_id)
        assert task is not None
        again = await self.daemon(name)
        # What the journal keeps of a running task.
        entry = {key: getattr(task, key) for key in ("id", "created", "client", "origin")}
        entry.update(server=task.server, tool=task.tool, ttl=task.ttl)
        again.tasks.restore_failed(entry, RESTARTED)
        await again.tasks.saved()
        return again

    async def test_restarted_daemon_fails_its_task_for_every_daemon(self) -> None:
        """
        Daemon A killed under a task and started again at once (as systemd does), under
        a new id: what it restores as failed from its journal is failed in the shared
        store, so daemon B reads it failed at once, a result waiting on B wakes with
        that error, and both daemons say the same.
        """
        a = await self.daemon("d_aaaaaaaaaaaa")
        b = await self.daemon("d_bbbbbbbbbbbb")
        task_id = await self.started(a)
        waiting = Deferred.fromCoroutine(b.request("tasks/result", {"taskId": task_id}))
        await until(lambda: b.tasks._rows.awaited(task_id), "B waits for the task")
        # A is killed (its last beat is still recent) and started again at once.
        a.heartbeat._stopped = True
        again = await self.restarted(a, task_id, "d_cccccccccccc")
        await until(lambda: waiting.called, "the result waiting on B ends")
        try:
            await waiting
        except RpcError as e:
            error = e
        else:
            raise AssertionError("the result did not fail")
        self.assertEqual(error.message, RESTARTED)
        self.assertEqual(error.data["reason"], "daemon_restarted")
        on_b = await b.request("tasks/get", {"taskId": task_id})
        on_again = await again.request("tasks/get", {"taskId": task_id})
        self.assertEqual(on_b["status"], "failed")
        self.assertEqual(on_b, on_again)
        self.assertEqual(on_b["statusMessage"], RESTARTED)
        a.pool.held[0].result.addErrback(lambda f: f.trap(CancelledError))
        a.tasks.close()

    async def test_restarted_daemon_leaves_a_task_ended_meanwhile(self) -> None:
        """
        Daemon A's task was cancelled through daemon B while A was down: A, started
        again, reads it cancelled as B does, not failed by its restart.
        """
        a = await self.daemon("d_aaaaaaaaaaaa")
        b = await self.daemon("d_bbbbbbbbbbbb")
        task_id = await self.started(a)
        a.tasks.records = None
        await a.heartbeat.stop()
        cancelled = await b.request("tasks/cancel", {"taskId": task_id})
        self.assertEqual(cancelled["status"], "cancelled")
        again = await self.restarted(a, task_id, "d_cccccccccccc")
        on_again = await again.request("tasks/get", {"taskId": task_id})
        self.assertEqual(on_again["status"], "cancelled")
        self.assertEqual(on_again, await b.request("tasks/get", {"taskId": task_id}))
        a.pool.held[0].result.addErrback(lambda f: f.trap(CancelledError))
        a.tasks.close()

    async def test_cancel_of_a_dead_daemons_task_says_so(self) -> None:
        """
        Cancelled through daemon B after A died (before any beat noticed): the task ends
        cancelled, saying its daemon is gone and nothing was left to stop.
        """
        a = await self.daemon("d_aaaaaaaaaaaa")
        b = await self.daemon("d_bbbbbbbbbbbb")
        task_id = await self.started(a)
        await a.heartbeat.stop()
        cancelled = await b.request("tasks/cancel", {"taskId": task_id})
        self.assertEqual(cancelled["status"], "cancelled")
        self.assertIn("d_aaaaaaaaaaaa", cancelled["statusMessage"])
        self.assertIn("has no heartbeat any more", cancelled["statusMessage"])
        # (This A is not really dead: it still hears the cancel, and stops its call.)
        held = a.pool.held[0].result
        await until(lambda: held.called, "A cancels its upstream call")
        held.addErrback(lambda f: f.trap(CancelledError))
        await a.tasks.saved()

    async def test_dead_daemons_finished_task_forgotten(self) -> None:
        """
        A task that finished on daemon A, which then died before its ttl passed (so
        it never deleted it), is deleted from the store by daemon B once the ttl is
        well past; until then B still reads it.
        """
        a = await self.daemon("d_aaaaaaaaaaaa")
        b = await self.daemon("d_bbbbbbbbbbbb")
        task_id = await self.started(a)
        a.pool.held[0].result.callback(text_result("found"))
        await a.tasks.saved()
        await a.heartbeat.stop()
        b.clock.advance(EVERY)
        self.assertEqual((await b.request("tasks/get", {"taskId": task_id}))["status"], "completed")
        b.clock.advance(b.tasks.ttl + FORGOTTEN_AFTER)
        for _ in range(400):
            if await b.tasks.stored(task_id) is None:
                break
            await deferLater(reactor, 0.025, lambda: None)
            # A beat still writing when the clock moved schedules the next one only once
            # it is done: time goes on, so that next beat (and its sweep) comes.
            b.clock.advance(EVERY)
        error = await b.error("tasks/get", {"taskId": task_id})
        self.assertEqual(error.code, INVALID_PARAMS)


class FleetApiTaskTests(TestCase):
    """The same through C{/v1/tasks}'s operations (list, get, cancel)."""

    timeout = 60

    def setUp(self) -> None:
        self.cluster: PostgresCluster = shared_cluster()
        self.url = self.cluster.url(self.cluster.database())

    async def daemon(self, name: str, records: type[PostgresRecords] = PostgresRecords) -> Daemon:
        daemon = Daemon(self, self.url, name, records)
        await daemon.records.open()
        await daemon.heartbeat.start()
        self.addCleanup(daemon.heartbeat.stop)
        return daemon

    async def test_v1_tasks_from_another_daemon(self) -> None:
        """
        A C{/v1/call} task of alice's on daemon A: B lists and gets it for alice, and
        cancels it, which stops A's call; bob (another token's subject) gets 404 for it
        on both daemons, as for an id that never was, and lists nothing.
        """
        a = await self.daemon("d_aaaaaaaaaaaa")
        b = await self.daemon("d_bbbbbbbbbbbb")
        work: Deferred[Any] = Deferred()
        task = a.tasks.start(lambda: work, lambda failure: {"code": "x"}, "alice", server="s")
        await a.tasks.saved()
        alice = Invocation({"id": task.id}, holder="alice")
        bob = Invocation({"id": task.id}, holder="bob")
        listed = await list_tasks(b.harness.host, Invocation({}, holder="alice"))
        self.assertEqual([t["id"] for t in listed["tasks"]], [task.id])
        self.assertEqual((await get_task(b.harness.host, alice))["status"], "working")
        for daemon in (a, b):
            host = daemon.harness.host
            self.assertEqual((await list_tasks(host, Invocation({}, holder="bob")))["tasks"], [])
            for op in (get_task, cancel_task):
                with self.assertRaises(OpError) as refused:
                    await op(host, bob)
                self.assertEqual(refused.exception.status, 404)
                with self.assertRaises(OpError) as unknown:
                    await op(host, Invocation({"id": "0" * 24}, holder="bob"))
                self.assertEqual(
                    str(refused.exception).replace(task.id, "?"),
                    str(unknown.exception).replace("0" * 24, "?"),
                )
        self.assertFalse(work.called)
        cancelled = await cancel_task(b.harness.host, alice)
        self.assertEqual(cancelled["error"]["code"], "cancelled")
        await until(lambda: work.called, "A cancels the task's work")
        work.addErrback(lambda f: f.trap(CancelledError))
        self.assertEqual(task.status.value, "cancelled")
        with self.assertRaises(OpError) as over:
            await cancel_task(a.harness.host, alice)
        self.assertEqual(over.exception.status, 409)
        await a.tasks.saved()
