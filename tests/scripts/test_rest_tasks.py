"""
A REST caller runs C{/v1/exec} as a task on a real daemon: the answer names the task and
the run at once, the run's questions are listed under its id and answered there, the
result is collected from the task store, and cancelling the task stops the program.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import treq
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase
from twisted.web.http_headers import Headers

from tests.questions.support import Daemon, demo_server
from tests.support.http import TestClient
from tests.support.processes import reactor

ASKS = 'r = await demo.ask(question="Who runs this?")\nprint("asked")\nf"hello {r}"'


def _workers_of(pid: int) -> list[int]:
    """The daemon's sandbox workers still alive (C{python -I -c ...} children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if stat[0] != "Z" and int(stat[1]) == pid and argv[1:3] == [b"-I", b"-c"]:
            found.append(int(entry.name))
    return found


class RestTaskTests(TestCase):
    timeout = 120

    async def post(self, daemon: Daemon, path: str, body: object) -> tuple[int, Any, Headers]:
        client = TestClient(reactor, unix_socket=daemon.socket)
        try:
            response = await client.http.post(
                f"http://mcpx{path}",
                data=json.dumps(body).encode(),
                headers=Headers({"Content-Type": ["application/json"]}),
            )
            answer = json.loads(await treq.content(response))
        finally:
            await client.close()
        return response.code, answer, response.headers

    async def until(self, daemon: Daemon, path: str, done: Any) -> Any:
        for _ in range(400):
            answer = await daemon.api(path)
            if done(answer):
                return answer
            await deferLater(reactor, 0.05, lambda: None)
        self.fail(f"GET {path} never got there: {answer}\n{daemon.log()[-3000:]}")

    async def test_questions_by_run_and_result_from_the_task_store(self) -> None:
        daemon = await Daemon(self, {"demo": demo_server()}).start()
        code, started, headers = await self.post(
            daemon, "/v1/exec", {"program": ASKS, "task": True}
        )
        self.assertEqual(code, 202, started)
        task_id, run = started["task"]["id"], started["run"]
        self.assertEqual(started["task"]["status"], "working")
        self.assertEqual(headers.getRawHeaders("location"), [f"/v1/tasks/{task_id}"])

        listed = await self.until(daemon, f"/v1/questions?run={run}", lambda a: a["questions"])
        [question] = listed["questions"]
        self.assertEqual(question["call_id"], run)
        self.assertEqual(question["state"], "pending")
        self.assertEqual((await daemon.api("/v1/questions?run=run-000000000000"))["questions"], [])
        pending = await daemon.api(f"/v1/tasks/{task_id}")
        self.assertIn(pending["status"], ("working", "input_required"))

        code, answered, _ = await self.post(
            daemon,
            f"/v1/questions/{question['id']}/answer",
            {"action": "accept", "content": {"answer": "Ada"}},
        )
        self.assertEqual(code, 200, answered)
        finished = await self.until(
            daemon, f"/v1/tasks/{task_id}", lambda a: a["status"] not in ("working",)
        )
        self.assertEqual(finished["status"], "completed", finished)
        self.assertEqual(finished["result"]["run"], run)
        self.assertEqual(finished["result"]["output"], "asked\n")
        self.assertIn("Ada", json.dumps(finished["result"]))

    async def test_cancelling_the_task_stops_the_program(self) -> None:
        daemon = await Daemon(self, {"demo": demo_server()}).start()
        assert daemon.child is not None and daemon.child.transport is not None
        pid = daemon.child.transport.pid
        assert pid is not None
        code, started, _ = await self.post(daemon, "/v1/exec", {"program": ASKS, "task": True})
        self.assertEqual(code, 202, started)
        task_id, run = started["task"]["id"], started["run"]
        await self.until(daemon, f"/v1/questions?run={run}", lambda a: a["questions"])
        self.assertEqual(len(_workers_of(pid)), 1)

        code, cancelled, _ = await self.post(daemon, f"/v1/tasks/{task_id}/cancel", {})
        self.assertEqual((code, cancelled["status"]), (200, "cancelled"), cancelled)
        await self.until(
            daemon, f"/v1/questions?run={run}", lambda a: not a["questions"]
        )  # withdrawn: no longer pending
        for _ in range(100):
            if not _workers_of(pid):
                break
            await deferLater(reactor, 0.05, lambda: None)
        self.assertEqual(_workers_of(pid), [])

    async def test_too_many_runs_is_refused_before_a_task_is_made(self) -> None:
        daemon = Daemon(self, {"demo": demo_server()}, settings={"MCPX_EXEC_MAX_RUNS": "1"})
        await daemon.start()
        code, first, _ = await self.post(daemon, "/v1/exec", {"program": ASKS, "task": True})
        self.assertEqual(code, 202, first)
        code, refused, _ = await self.post(daemon, "/v1/exec", {"program": "1", "task": True})
        self.assertEqual(code, 429, refused)
        self.assertEqual(refused["error"]["code"], "too_many_runs")
        tasks = (await daemon.api("/v1/tasks"))["tasks"]
        self.assertEqual([t["id"] for t in tasks], [first["task"]["id"]])
        await self.post(daemon, f"/v1/tasks/{first['task']['id']}/cancel", {})
