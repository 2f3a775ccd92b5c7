"""
Explicit cancellation reaches the upstream, against a real daemon and an upstream that
records the C{notifications/cancelled} it receives (C{tests/fixtures/recording.py}):
C{POST /v1/tasks/{id}/cancel} (C{mcpx tasks cancel}), an MCP host's C{tasks/cancel} and
Ctrl-C of C{mcpx call}, each also for a call whose question is pending, which is
withdrawn with it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from twisted.internet.task import deferLater

from mcpx.cli.client import DaemonClient, socket_path
from tests.cli.test_real_daemon import RealDaemonCase
from tests.server.test_resource_updates import Host
from tests.support.processes import REPO, kill_on_cleanup, reactor, spawn

RECORDING = REPO / "tests" / "fixtures" / "recording.py"


class CancellationTests(RealDaemonCase):
    timeout = 90

    async def start(self) -> None:
        self.record = Path(self.state_dir) / "cancelled.jsonl"
        # The questions below wait in the broker before anyone looks at them.
        self.env["MCPX_PROTO_BROKER_WHEN_UNWATCHED"] = "wait"
        await self.start_daemon({"rec": [sys.executable, str(RECORDING), str(self.record)]})
        self.client = DaemonClient(socket_path(Path(self.state_dir)))
        await self.ok("tools", "rec")  # started: nothing below waits for a start

    def cancellations(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    async def eventually(self, check: Any, what: str) -> Any:
        for _ in range(200):
            value = check()
            if value:
                return value
            await deferLater(reactor, 0.05, lambda: None)
        raise AssertionError(f"never: {what}")

    def pending_questions(self) -> list[dict[str, Any]]:
        questions: list[dict[str, Any]] = self.client.get("/v1/questions")["questions"]
        return questions

    def task(self, tool: str) -> str:
        answer = self.client.post("/v1/call", {"server": "rec", "tool": tool, "task": True})
        task_id: str = answer["task"]["id"]
        return task_id

    async def test_task_cancel_reaches_the_upstream(self) -> None:
        """C{mcpx tasks cancel} of a running task: the upstream hears its tools/call cancelled."""
        await self.start()
        task_id = self.task("wait")
        await self.eventually(self.pool_busy, "the call is in flight")
        await self.ok("tasks", "cancel", task_id)
        [cancelled] = await self.eventually(self.cancellations, "the upstream heard a cancel")
        self.assertEqual(cancelled["method"], "tools/call")
        shown = self.client.get(f"/v1/tasks/{task_id}")
        self.assertEqual(shown["status"], "cancelled")

    async def test_task_cancel_withdraws_its_question(self) -> None:
        """A task whose upstream asked a question: cancelling it withdraws the question too."""
        await self.start()
        task_id = self.task("ask")
        [question] = await self.eventually(self.pending_questions, "the question is pending")
        self.client.post(f"/v1/tasks/{task_id}/cancel", {})
        [cancelled] = await self.eventually(self.cancellations, "the upstream heard a cancel")
        self.assertEqual(cancelled["method"], "tools/call")
        await self.eventually(lambda: not self.pending_questions(), "the question is withdrawn")
        shown = self.client.get(f"/v1/questions/{question['id']}")
        self.assertEqual(shown["state"], "cancelled")

    async def test_interrupted_call_reaches_the_upstream(self) -> None:
        """
        Ctrl-C of C{mcpx call}, plain and with a question pending: the upstream hears the
        cancellation, and the question is withdrawn.
        """
        await self.start()
        # The asking call first: a call given up on stays counted at the server for
        # pool.cancelGrace (its late questions are nobody's), so a question asked after
        # it could not be attributed to the next call, nor withdrawn with it.
        for tool, expected in (("ask", 1), ("wait", 2)):
            child = spawn(
                [sys.executable, "-m", "mcpx", "call", "rec", tool], env=self.env, cwd=str(REPO)
            )
            self.addCleanup(kill_on_cleanup, child)
            if tool == "ask":
                await self.eventually(self.pending_questions, "the question is pending")
            else:
                await self.eventually(self.pool_busy, "the call is in flight")
            child.signal("INT")
            self.assertNotEqual(await child.ended(timeout=15), 0)
            cancelled = await self.eventually(
                lambda n=expected: len(self.cancellations()) >= n and self.cancellations(),
                f"the upstream heard cancel {expected}",
            )
            self.assertEqual([c["method"] for c in cancelled], ["tools/call"] * expected)
            if tool == "ask":
                await self.eventually(
                    lambda: not self.pending_questions(), "the question is withdrawn"
                )

    async def test_mcp_tasks_cancel_reaches_the_upstream(self) -> None:
        """
        A 2025-11-25 host's task (tools/call with task, over mcpx serve) that asked a
        question: its tasks/cancel reaches the upstream and withdraws the question.
        """
        await self.start()
        host = Host(self)
        await host.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "task-host", "version": "1"},
            },
        )
        host.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        created = await host.request(
            "tools/call",
            {"name": "mcpx_call", "arguments": {"server": "rec", "tool": "ask"}, "task": {}},
        )
        task_id = created["task"]["taskId"]
        await self.eventually(self.pending_questions, "the question is pending")
        await host.request("tasks/cancel", {"taskId": task_id})
        [cancelled] = await self.eventually(self.cancellations, "the upstream heard a cancel")
        self.assertEqual(cancelled["method"], "tools/call")
        await self.eventually(lambda: not self.pending_questions(), "the question is withdrawn")

    def pool_busy(self) -> bool:
        [status] = self.client.get("/v1/servers")["servers"]
        return bool(status["in_flight"])
