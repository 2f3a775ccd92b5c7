"""
A daemon whose C{store.url} names a PostgreSQL database (a throw-away cluster,
L{tests.support.postgres}): the demo's question, asked through C{mcpx call demo ask},
lives in the database with the rest of the daemon's work, is answered with
C{mcpx elicit}, and outlives the daemon and its state directory.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import psycopg
import treq
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase
from twisted.web.http_headers import Headers

from tests.questions.support import Daemon, demo_server
from tests.support.http import TestClient
from tests.support.postgres import PASSWORD, PostgresCluster, shared_cluster
from tests.support.processes import REPO, kill_on_cleanup, reactor, spawn


class DaemonOnPostgresTests(TestCase):
    timeout = 120

    def setUp(self) -> None:
        self.cluster: PostgresCluster = shared_cluster()
        self.url = self.cluster.url(self.cluster.database())
        self.settings = {
            "MCPX_STORE_URL": self.url,
            "MCPX_STORE_PASSWORD_FILE": str(self.cluster.password_file),
        }

    def rows(self, table: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url, password=PASSWORD) as connection:
            return connection.execute(
                f"SELECT id, principal, state, record FROM {table} ORDER BY id"
            ).fetchall()

    async def test_demo_question_answered_through_postgres(self) -> None:
        """
        The demo's question is a pending row in PostgreSQL while C{mcpx call demo ask}
        waits; C{mcpx elicit} answers it, the call completes with the answer, and the row
        says who answered what.  The daemon logs where its records are, without the
        password, and nothing at error level.
        """
        daemon = await Daemon(self, {"demo": demo_server()}, settings=self.settings).start()
        call = spawn(
            [sys.executable, "-m", "mcpx", "call", "demo", "ask"], env=daemon.env, cwd=str(REPO)
        )
        self.addCleanup(kill_on_cleanup, call)
        pending = await daemon.wait_for_question("demo")
        [(row_id, _, state, _)] = await deferToThread(self.rows, "mcpx_questions")
        self.assertEqual((row_id, state), (pending["id"], "pending"))
        answered = await daemon.mcpx("elicit", pending["id"], "--answer", '{"answer": "Ada"}')
        self.assertEqual(answered.code, 0, answered)
        self.assertEqual(await call.ended(timeout=30), 0, call.text())
        self.assertIn("Ada", call.text(1))
        self.assertEqual(await daemon.stop(), 0, daemon.log()[-4000:])
        [(_, _, state, record)] = await deferToThread(self.rows, "mcpx_questions")
        stored = json.loads(record)
        self.assertEqual(
            (state, stored["answered_by"], stored["answer"]),
            ("answered", "cli", {"action": "accept", "content": {"answer": "Ada"}}),
        )
        self.assertIn(f"kept in {self.url}", daemon.log())
        self.assertNotIn(PASSWORD, daemon.log())
        self.assertEqual(daemon.log_lines("error") + daemon.log_lines("critical"), [])

    async def test_pending_question_outlives_its_daemon_and_state_directory(self) -> None:
        """
        A question still pending when its daemon stops is listed, orphaned, by a daemon
        started on another state directory on the same database, which answers it.
        """
        first = await Daemon(self, {"demo": demo_server()}, settings=self.settings).start()
        call = spawn(
            [sys.executable, "-m", "mcpx", "call", "demo", "ask"], env=first.env, cwd=str(REPO)
        )
        self.addCleanup(kill_on_cleanup, call)
        pending = await first.wait_for_question("demo")
        self.assertEqual(await first.stop(), 0, first.log()[-4000:])
        # The call ends with its daemon; how it fails is the CLI's business.
        await call.ended(timeout=30)
        second = await Daemon(self, {"demo": demo_server()}, settings=self.settings).start()
        self.assertNotEqual(second.state_dir, first.state_dir)
        listed = await second.mcpx("elicit", "--json")
        self.assertEqual(listed.code, 0, listed)
        self.assertEqual(
            [(q["id"], q["state"], q["orphaned"]) for q in listed.json()["questions"]],
            [(pending["id"], "pending", True)],
        )
        answered = await second.mcpx("elicit", pending["id"], "--answer", '{"answer": "Bo"}')
        self.assertEqual(answered.code, 0, answered)
        await second.stop()
        [(_, _, state, _)] = await deferToThread(self.rows, "mcpx_questions")
        self.assertEqual(state, "answered")

    async def test_question_answered_through_another_daemon_resumes_the_call(self) -> None:
        """
        Two daemons on one database: the demo's question, asked during a call made on
        the first, is listed by the second (as the first's, not as an orphan) and
        answered there with C{mcpx elicit}; the call on the first resumes with the
        answer.  Answering it again through the first daemon is refused: it was
        already answered.
        """
        first = await Daemon(self, {"demo": demo_server()}, settings=self.settings).start()
        second = await Daemon(self, {"demo": demo_server()}, settings=self.settings).start()
        call = spawn(
            [sys.executable, "-m", "mcpx", "call", "demo", "ask"], env=first.env, cwd=str(REPO)
        )
        self.addCleanup(kill_on_cleanup, call)
        pending = await second.wait_for_question("demo")
        self.assertFalse(pending["orphaned"], pending)
        answered = await second.mcpx("elicit", pending["id"], "--answer", '{"answer": "Ada"}')
        self.assertEqual(answered.code, 0, answered)
        self.assertEqual(await call.ended(timeout=30), 0, call.text())
        self.assertIn("Ada", call.text(1))
        again = await first.mcpx("elicit", pending["id"], "--answer", '{"answer": "Bo"}')
        self.assertEqual(again.code, 1, again)
        self.assertIn("no longer pending: it was answered by cli", again.err)
        self.assertEqual(await first.stop(), 0, first.log()[-4000:])
        self.assertEqual(await second.stop(), 0, second.log()[-4000:])
        for daemon in (first, second):
            self.assertEqual(daemon.log_lines("error") + daemon.log_lines("critical"), [])

    async def test_call_resumes_after_postgres_restarted(self) -> None:
        """
        PostgreSQL restarted while a call on the first daemon waits for its question:
        answered through the second daemon afterwards, the call still resumes (both
        daemons reconnect, and the first listens again by itself).
        """
        first = await Daemon(self, {"demo": demo_server()}, settings=self.settings).start()
        second = await Daemon(self, {"demo": demo_server()}, settings=self.settings).start()
        call = spawn(
            [sys.executable, "-m", "mcpx", "call", "demo", "ask"], env=first.env, cwd=str(REPO)
        )
        self.addCleanup(kill_on_cleanup, call)
        pending = await second.wait_for_question("demo")
        await deferToThread(self.cluster.restart)
        answered = await second.mcpx("elicit", pending["id"], "--answer", '{"answer": "Ada"}')
        self.assertEqual(answered.code, 0, answered)
        self.assertEqual(await call.ended(timeout=30), 0, call.text())
        self.assertIn("Ada", call.text(1))
        self.assertEqual(await first.stop(), 0, first.log()[-4000:])
        self.assertEqual(await second.stop(), 0, second.log()[-4000:])
        self.assertIn(f"listening to {self.url} again", first.log())

    async def test_task_written_to_postgres(self) -> None:
        """
        A task started with C{POST /v1/call} (C{"task": true}) is a row in PostgreSQL,
        completed with its result and the caller identity it belongs to.
        """
        daemon = await Daemon(self, {"demo": demo_server()}, settings=self.settings).start()
        client = TestClient(reactor, unix_socket=daemon.socket)
        self.addCleanup(client.close)
        response = await client.http.post(
            "http://mcpx/v1/call",
            json={"server": "demo", "tool": "echo", "arguments": {"text": "hi"}, "task": True},
            headers=Headers({"Mcpx-Client": ["alice"]}),
        )
        body = json.loads(await treq.content(response))
        self.assertEqual(response.code, 202, body)
        task_id = body["task"]["id"]
        rows: list[tuple[Any, ...]] = []
        for _ in range(400):
            try:
                rows = await deferToThread(self.rows, "mcpx_tasks")
            except psycopg.errors.UndefinedTable:
                # The daemon's schema is made as it starts, on a thread of its own.
                rows = []
            if rows and rows[0][2] == "completed":
                break
            await deferLater(reactor, 0.05, lambda: None)
        self.assertEqual(await daemon.stop(), 0, daemon.log()[-4000:])
        [(row_id, principal, state, record)] = rows
        stored = json.loads(record)
        self.assertEqual(
            (row_id, principal, state, stored["tool"], stored["result"]["content"][0]["text"]),
            (task_id, "alice", "completed", "echo", "hi"),
        )

    async def test_task_read_and_cancelled_through_another_daemon(self) -> None:
        """
        Two daemons on one database: a C{/v1/call} task of alice's running on the
        first (a long countdown) is read working through the second's C{/v1/tasks}
        and cancelled there; the first stops the call and reads it cancelled, with
        the second's reason.
        """
        first = await Daemon(self, {"demo": demo_server()}, settings=self.settings).start()
        second = await Daemon(self, {"demo": demo_server()}, settings=self.settings).start()
        alice = Headers({"Mcpx-Client": ["alice"]})
        clients = {}
        for daemon in (first, second):
            client = TestClient(reactor, unix_socket=daemon.socket)
            self.addCleanup(client.close)
            clients[daemon] = client

        async def send(daemon: Daemon, method: str, path: str, **given: Any) -> tuple[int, Any]:
            response = await clients[daemon].http.request(
                method, f"http://mcpx{path}", headers=alice, **given
            )
            return response.code, json.loads(await treq.content(response))

        code, body = await send(
            first,
            "POST",
            "/v1/call",
            json={
                "server": "demo",
                "tool": "countdown",
                "arguments": {"steps": 100, "interval": 10},
                "task": True,
            },
        )
        self.assertEqual(code, 202, body)
        task_id = body["task"]["id"]
        for _ in range(400):
            code, shown = await send(second, "GET", f"/v1/tasks/{task_id}")
            if code == 200:
                break
            await deferLater(reactor, 0.05, lambda: None)
        self.assertEqual((code, shown["status"]), (200, "working"), shown)
        code, listed = await send(second, "GET", "/v1/tasks")
        self.assertEqual([t["id"] for t in listed["tasks"]], [task_id])
        code, cancelled = await send(second, "POST", f"/v1/tasks/{task_id}/cancel")
        self.assertEqual((code, cancelled["status"]), (200, "cancelled"), cancelled)
        for _ in range(400):
            code, there = await send(first, "GET", f"/v1/tasks/{task_id}")
            if there["status"] != "working":
                break
            await deferLater(reactor, 0.05, lambda: None)
        self.assertEqual(there["status"], "cancelled", there)
        self.assertIn("POST /v1/tasks/{id}/cancel", there["error"]["message"])
        self.assertIn("through daemon d_", there["error"]["message"])
        self.assertEqual(await first.stop(), 0, first.log()[-4000:])
        self.assertEqual(await second.stop(), 0, second.log()[-4000:])
        self.assertIn("was cancelled through another daemon", first.log())
        for daemon in (first, second):
            self.assertEqual(daemon.log_lines("error") + daemon.log_lines("critical"), [])
