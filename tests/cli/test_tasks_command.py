"""
Tests for C{mcpx tasks}, run as real processes against the daemon's own C{/v1} routes
(L{DaemonHTTP} over a L{FakePool}) served on the state directory's socket.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.defer import Deferred
from twisted.web.server import Site

from mcpx.tasks.task import Task
from tests.cli.test_commands import CommandRunner
from tests.daemon.fake_pool import (
    FakePool,
    daemon_http,
    default_servers,
    default_settings,
    servers_config,
)
from tests.support.processes import reactor


class TasksCommandTests(CommandRunner):
    def setUp(self) -> None:
        super().setUp()
        pool = FakePool(default_servers())
        self.http = daemon_http(
            clock=reactor,
            pid=4242,
            pool=pool,
            settings=default_settings(),
            servers=servers_config(*pool.servers),
        )
        self.addCleanup(self.http.close)
        port = reactor.listenUNIX(self.socket, Site(self.http.resource()))
        self.addCleanup(port.stopListening)

    def task(self, server: str = "files", tool: str = "read_file") -> tuple[Task, Deferred[Any]]:
        """A task of the daemon whose call answers when the test fires the Deferred."""
        store = self.http.host.tasks
        task = store.open("me", server=server, tool=tool)
        answer: Deferred[Any] = Deferred()

        async def work() -> Any:
            return await answer

        store.run(task, work, lambda failure: {"code": "upstream_error", "message": "boom"})
        return task, answer

    async def test_list(self) -> None:
        """C{mcpx tasks list} prints a row per task; --state filters, --json is the API's."""
        first, _ = self.task()
        second, answer = self.task("search", "web_search")
        answer.callback({"content": [{"type": "text", "text": "found"}], "isError": False})
        done = await self.mcpx("tasks", "list")
        self.assertEqual(done.code, 0, done)
        header, *rows = done.out.splitlines()
        self.assertEqual(header.split()[:5], ["TASK", "STATE", "ORIGIN", "SERVER", "TOOL"])
        self.assertEqual(
            [row.split()[:5] for row in rows],
            [
                [first.id, "working", "v1", "files", "read_file"],
                [second.id, "completed", "v1", "search", "web_search"],
            ],
        )
        done = await self.mcpx("tasks", "list", "--state", "completed", "--json")
        self.assertEqual([t["id"] for t in json.loads(done.out)["tasks"]], [second.id])

    async def test_show(self) -> None:
        """C{mcpx tasks show} says a task's state, prints its result, or exits 3 for none."""
        task, answer = self.task()
        done = await self.mcpx("tasks", "show", task.id)
        self.assertEqual((done.code, done.out), (0, f"task {task.id} is working\n"), done)
        answer.callback({"content": [{"type": "text", "text": "hello"}], "isError": False})
        done = await self.mcpx("tasks", "show", task.id)
        self.assertEqual((done.code, done.out), (0, "hello\n"), done)
        done = await self.mcpx("tasks", "show", "nope")
        self.assertEqual(done.code, 3, done)
        self.assertIn("no task 'nope'", done.err)

    async def test_wait(self) -> None:
        """C{mcpx tasks wait} polls until the task finishes, then prints its result."""
        task, answer = self.task()
        reactor.callLater(
            0.5,
            answer.callback,
            {"content": [{"type": "text", "text": "at last"}], "isError": False},
        )
        done = await self.mcpx("tasks", "wait", task.id, "--interval", "0.1")
        self.assertEqual((done.code, done.out), (0, "at last\n"), done)

    async def test_wait_failed_and_timeout(self) -> None:
        """
        Waiting for a task that fails exits 1 with its error; one that outlasts
        --timeout exits 1 saying it runs on.
        """
        task, answer = self.task()
        slow, _ = self.task()
        answer.errback(RuntimeError("boom"))
        done = await self.mcpx("tasks", "wait", task.id)
        self.assertEqual(done.code, 1, done)
        self.assertIn("failed", done.err)
        self.assertIn("boom", done.err)
        done = await self.mcpx("tasks", "wait", slow.id, "--interval", "0.1", "--timeout", "0.3")
        self.assertEqual(done.code, 1, done)
        self.assertIn("still working", done.err)
        self.assertEqual(self.http.host.tasks.get(slow.id).status.value, "working")  # type: ignore[union-attr]

    async def test_cancel(self) -> None:
        """C{mcpx tasks cancel} cancels the task; a second cancel fails saying it finished."""
        task, answer = self.task()
        done = await self.mcpx("tasks", "cancel", task.id)
        self.assertEqual((done.code, done.out), (0, f"task {task.id} cancelled\n"), done)
        self.assertTrue(answer.called)
        self.assertEqual(task.status.value, "cancelled")
        done = await self.mcpx("tasks", "cancel", task.id)
        self.assertNotEqual(done.code, 0, done)
        self.assertIn("already cancelled", done.err)
