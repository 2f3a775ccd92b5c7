"""
Tests for the daemon's task routes beyond collecting one (tests.daemon.test_api's
L{TaskTests}): C{GET /v1/tasks} with its filters, C{POST /v1/tasks/{id}/cancel}, and
the C{task.*} events every task's life publishes.
"""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from mcpx.ops.events import Event
from mcpx.ops.table import BY_NAME
from mcpx.wire.errors import RpcError
from tests.daemon.fake_pool import Harness, text_result
from tests.daemon.test_api import conforms


class TaskRoutesTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.harness = Harness()
        self.pool = self.harness.pool
        self.pool.hold = True
        self.events: list[Event] = []
        self.harness.http.host.events.subscribe(self.events.append, kinds=("task.*",))

    def start_task(self, server: str = "files", tool: str = "read_file") -> str:
        body = {"server": server, "tool": tool, "arguments": {}, "task": True}
        answer = self.harness.post("/v1/call", body, headers={"mcpx-client": "me"})
        self.assertEqual(answer.code, 202)
        task_id: str = answer.json["task"]["id"]
        return task_id

    def listed(self, query: str = "") -> list[dict[str, Any]]:
        answer = self.harness.get("/v1/tasks" + query)
        self.assertEqual(answer.code, 200, answer.json)
        conforms(self, BY_NAME["list_tasks"].output_schema, answer.json)
        tasks: list[dict[str, Any]] = answer.json["tasks"]
        return tasks

    def test_list_and_filters(self) -> None:
        """
        GET /v1/tasks lists every task oldest first with its server, tool and state;
        server, state and client keep only those.
        """
        first = self.start_task("files", "read_file")
        second = self.start_task("search", "web_search")
        self.pool.held[1].result.callback(text_result("found"))
        everything = self.listed()
        self.assertEqual([t["id"] for t in everything], [first, second])
        self.assertEqual(
            [(t["server"], t["tool"], t["status"], t["origin"]) for t in everything],
            [("files", "read_file", "working", "v1"), ("search", "web_search", "completed", "v1")],
        )
        self.assertEqual([t["id"] for t in self.listed("?server=search")], [second])
        self.assertEqual([t["id"] for t in self.listed("?state=working")], [first])
        self.assertEqual(len(self.listed("?client=me")), 2)
        self.assertEqual(self.listed("?client=someone-else"), [])

    def test_list_refuses_unknown_state(self) -> None:
        """A state that is no task state is 400 naming the field."""
        answer = self.harness.get("/v1/tasks?state=sleeping")
        self.assertEqual(answer.code, 400)
        self.assertEqual(answer.json["error"]["field"], "state")

    def test_cancel(self) -> None:
        """
        POST /v1/tasks/{id}/cancel cancels a running task and its upstream call; the
        task then reads cancelled, and a second cancel is 409.
        """
        task_id = self.start_task()
        held = self.pool.held[0].result
        answer = self.harness.post(f"/v1/tasks/{task_id}/cancel")
        self.assertEqual(answer.code, 200, answer.json)
        conforms(self, BY_NAME["cancel_task"].output_schema, answer.json)
        self.assertEqual(answer.json["status"], "cancelled")
        self.assertEqual(answer.json["error"]["code"], "cancelled")
        self.assertTrue(held.called)
        self.assertEqual(self.harness.get(f"/v1/tasks/{task_id}").json["status"], "cancelled")
        again = self.harness.post(f"/v1/tasks/{task_id}/cancel")
        self.assertEqual(again.code, 409)
        self.assertEqual(again.json["error"]["code"], "task_finished")

    def test_cancel_unknown(self) -> None:
        """Cancelling a task the daemon does not hold is 404 unknown_task."""
        answer = self.harness.post("/v1/tasks/nope/cancel")
        self.assertEqual(answer.code, 404)
        self.assertEqual(answer.json["error"]["code"], "unknown_task")

    def test_events(self) -> None:
        """A task's life is published: task.created, then each state it reaches."""
        first = self.start_task()
        second = self.start_task()
        self.pool.held[0].result.errback(RpcError(-32603, "disk full"))
        self.harness.post(f"/v1/tasks/{second}/cancel")
        told = [(event.kind, event.data["id"], event.server) for event in self.events]
        self.assertEqual(
            told,
            [
                ("task.created", first, "files"),
                ("task.created", second, "files"),
                ("task.failed", first, "files"),
                ("task.cancelled", second, "files"),
            ],
        )
        self.assertEqual(self.events[-1].data["tool"], "read_file")

    def test_mcp_call_error_in_api_shape(self) -> None:
        """An MCP task's JSON-RPC error reads as the API's upstream_error with rpc."""
        store = self.harness.http.host.tasks
        task = store.open("me", origin="mcp")

        async def fail() -> None:
            raise AssertionError("unused")

        store.run(task, fail, lambda failure: {"code": -32002, "message": "gone"})
        body = self.harness.get(f"/v1/tasks/{task.id}").json
        conforms(self, BY_NAME["get_task"].output_schema, body)
        self.assertEqual(body["error"]["code"], "upstream_error")
        self.assertEqual(body["error"]["rpc"], {"code": -32002, "message": "gone"})
