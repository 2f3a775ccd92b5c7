"""
Task-augmented calls upstream, over an in-memory channel: a 2025-11-25 server's core
tasks and a 2026-07-28 server's tasks extension, each answered to mcpx's caller as a
plain call's result.  (server-everything's own task tool proves it end to end in
L{tests.server.test_upstream_tasks}.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.call import Call
from mcpx.upstream.handlers import UpstreamHandlers
from mcpx.upstream.legacy_session import LegacySession
from mcpx.upstream.modern_session import ModernSession
from mcpx.upstream.tasks import REQUESTED_TTL_MS, UpstreamTaskEnded
from mcpx.wire.errors import RpcError
from tests.upstream.memory import (
    FakeServer,
    MemoryChannel,
    discover_result,
    initialize_result,
    params_of,
)

TASKS: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
EXTENSION = "io.modelcontextprotocol/tasks"
RELATED = "io.modelcontextprotocol/related-task"
REPORT = {"content": [{"type": "text", "text": "the report"}]}


def _tool(name: str, support: str | None) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": name, "inputSchema": {"type": "object"}}
    if support is not None:
        tool["execution"] = {"taskSupport": support}
    return tool


TOOLS = [_tool("research", "required"), _tool("maybe", "optional"), _tool("plain", None)]


def _task(task_id: str = "t-1", status: str = "working", **more: Any) -> dict[str, Any]:
    return {
        "taskId": task_id,
        "status": status,
        "createdAt": "2025-11-25T10:00:00Z",
        "lastUpdatedAt": "2025-11-25T10:00:00Z",
        **more,
    }


class LegacyTaskTests(SynchronousTestCase):
    """A 2025-11-25 server's task tools, called as tasks and answered as plain calls."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.results: dict[str, Deferred[Any]] = {}
        self.asked: list[dict[str, Any]] = []

        def call(params: Mapping[str, Any]) -> Any:
            if "task" in params:
                return {"task": _task(ttl=60_000, pollInterval=1000)}
            return {"content": [{"type": "text", "text": "inline"}]}

        def result(params: Mapping[str, Any]) -> Any:
            waiting: Deferred[Any] = Deferred()
            self.results[params["taskId"]] = waiting
            return waiting

        self.server = FakeServer(
            {
                "initialize": lambda p: initialize_result(tools={}, tasks=TASKS),
                "tools/list": lambda p: {"tools": TOOLS},
                "tools/call": call,
                "tasks/result": result,
                "tasks/cancel": lambda p: _task(status="cancelled", ttl=60_000),
            }
        )

        async def elicit(asked: Mapping[str, Any]) -> Mapping[str, Any]:
            self.asked.append(dict(asked))
            return {"action": "accept", "content": {"interpretation": "snake"}}

        self.session = LegacySession(
            name="fake",
            channel=MemoryChannel(self.server),
            clock=self.clock,
            handlers=UpstreamHandlers(elicitation=elicit),
        )
        self.successResultOf(Deferred.fromCoroutine(self.session.open()))

    def _call(self, name: str, caller: Any = None) -> Deferred[dict[str, Any]]:
        return Deferred.fromCoroutine(self.session.call_tool(name, {"topic": "x"}, call=caller))

    def test_a_required_tool_is_called_as_a_task_and_answered_plainly(self) -> None:
        """
        The call carries C{task} (with mcpx's ttl), the result comes from tasks/result,
        and the caller gets the tool's result without the upstream's task id.
        """
        calling = self._call("research")
        self.assertNoResult(calling)
        sent = next(r for r in self.server.requests if r.method == "tools/call")
        self.assertEqual(params_of(sent)["task"], {"ttl": REQUESTED_TTL_MS})
        self.assertEqual(self.server.methods()[-1], "tasks/result")
        self.results["t-1"].callback({**REPORT, "_meta": {RELATED: {"taskId": "t-1"}}})
        self.assertEqual(self.successResultOf(calling), {**REPORT, "resultType": "complete"})

    def test_the_caller_hears_that_the_upstream_made_a_task(self) -> None:
        told: list[bool] = []
        caller = Call("c1", {}, on_upstream_task=lambda: told.append(True))
        self._call("research", caller)
        self.assertEqual(told, [True])

    def test_tools_are_listed_first_when_none_were(self) -> None:
        """A session that never listed its tools learns their task support before calling."""
        self._call("research")
        self.assertEqual(self.server.methods()[1:], ["tools/list", "tools/call", "tasks/result"])

    def test_a_tool_without_task_support_is_called_plainly(self) -> None:
        result = self.successResultOf(self._call("plain"))
        self.assertEqual(result["content"][0]["text"], "inline")

    def test_an_optional_tool_is_a_task_only_when_the_caller_wants_one(self) -> None:
        plain = self.successResultOf(self._call("maybe", Call("c1", {})))
        self.assertEqual(plain["content"][0]["text"], "inline")
        calling = self._call("maybe", Call("c2", {}, wants_task=True))
        self.assertIn("t-1", self.results)
        self.results["t-1"].callback(REPORT)
        self.assertEqual(self.successResultOf(calling)["content"], REPORT["content"])

    def test_a_server_without_tasks_is_never_sent_one(self) -> None:
        """A server that declares no tasks capability gets plain calls (nothing listed)."""
        server = FakeServer(
            {
                "initialize": lambda p: initialize_result(tools={}),
                "tools/call": lambda p: {"content": [], "echo": sorted(p)},
            }
        )
        session = LegacySession(name="old", channel=MemoryChannel(server), clock=Clock())
        self.successResultOf(Deferred.fromCoroutine(session.open()))
        result = self.successResultOf(Deferred.fromCoroutine(session.call_tool("research", {})))
        self.assertEqual(result["echo"], ["arguments", "name"])
        self.assertEqual(server.methods(), ["initialize", "tools/call"])

    def test_the_tasks_question_goes_through_the_handlers(self) -> None:
        """
        An elicitation the server sends while tasks/result waits is answered as usual,
        without the related-task _meta naming the server's own task.
        """
        calling = self._call("research")
        answer = self.server.ask(
            "elicitation/create",
            {
                "message": "which python?",
                "requestedSchema": {"type": "object"},
                "_meta": {RELATED: {"taskId": "t-1"}},
            },
        )
        self.assertEqual(
            self.successResultOf(answer),
            {"action": "accept", "content": {"interpretation": "snake"}},
        )
        self.assertEqual(self.asked[0]["message"], "which python?")
        self.assertNotIn("_meta", self.asked[0], "the upstream's task id stays upstream")
        self.results["t-1"].callback(REPORT)
        self.successResultOf(calling)

    def test_cancelling_the_call_cancels_the_upstream_task(self) -> None:
        calling = self._call("research")
        calling.cancel()
        self.failureResultOf(calling, CancelledError)
        cancel = [r for r in self.server.requests if r.method == "tasks/cancel"]
        self.assertEqual([params_of(r) for r in cancel], [{"taskId": "t-1"}])

    def test_a_failed_status_notification_ends_the_wait(self) -> None:
        """The server saying its task failed is acted on: the caller hears it at once."""
        calling = self._call("research")
        self.server.notify(
            "notifications/tasks/status",
            _task(status="failed", statusMessage="the index is gone", ttl=60_000),
        )
        error = self.failureResultOf(calling, UpstreamTaskEnded).value
        self.assertIn("failed", str(error))
        self.assertIn("the index is gone", str(error))
        self.assertNotIn("tasks/cancel", self.server.methods(), "it is over upstream already")

    def test_a_working_status_notification_changes_nothing(self) -> None:
        calling = self._call("research")
        self.server.notify("notifications/tasks/status", _task(status="working", ttl=60_000))
        self.assertNoResult(calling)
        self.results["t-1"].callback(REPORT)
        self.successResultOf(calling)

    def test_a_task_that_outlives_its_ttl_is_given_up_and_cancelled(self) -> None:
        calling = self._call("research")
        self.clock.advance(59.9)
        self.assertNoResult(calling)
        self.clock.advance(0.2)
        error = self.failureResultOf(calling, UpstreamTaskEnded).value
        self.assertIn("ttl of 60s", str(error))
        self.assertIn("tasks/cancel", self.server.methods())

    def test_the_tasks_error_is_the_calls_error(self) -> None:
        calling = self._call("research")
        self.results["t-1"].errback(RpcError(-32602, "topic must not be empty"))
        error = self.failureResultOf(calling, RpcError).value
        self.assertEqual((error.code, error.message), (-32602, "topic must not be empty"))


class ModernTaskTests(SynchronousTestCase):
    """A 2026-07-28 server that answers CreateTaskResult: polled to the end."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.states: list[dict[str, Any]] = []
        self.updates: list[dict[str, Any]] = []
        self.asked: list[dict[str, Any]] = []

        def call(params: Mapping[str, Any]) -> Any:
            return {
                "resultType": "task",
                **_task(ttlMs=30_000, pollIntervalMs=500),
            }

        def get(params: Mapping[str, Any]) -> Any:
            state = self.states.pop(0) if self.states else _task(ttlMs=30_000)
            return {"resultType": "complete", **state}

        def update(params: Mapping[str, Any]) -> Any:
            self.updates.append(dict(params))
            return {"resultType": "complete"}

        self.server = FakeServer(
            {
                "server/discover": lambda p: discover_result(tools={}, extensions={EXTENSION: {}}),
                "tools/call": call,
                "tasks/get": get,
                "tasks/update": update,
                "tasks/cancel": lambda p: {"resultType": "complete"},
            }
        )

        async def elicit(asked: Mapping[str, Any]) -> Mapping[str, Any]:
            self.asked.append(dict(asked))
            return {"action": "accept", "content": {"interpretation": "snake"}}

        self.session = ModernSession(
            name="fake",
            channel=MemoryChannel(self.server),
            clock=self.clock,
            handlers=UpstreamHandlers(elicitation=elicit),
        )
        self.successResultOf(Deferred.fromCoroutine(self.session.open()))

    def _call(self) -> Deferred[dict[str, Any]]:
        return Deferred.fromCoroutine(self.session.call_tool("research", {"topic": "x"}))

    def _gets(self) -> int:
        return self.server.methods().count("tasks/get")

    def test_the_extension_is_declared_on_tool_calls(self) -> None:
        self._call()
        sent = next(r for r in self.server.requests if r.method == "tools/call")
        capabilities = params_of(sent)["_meta"]["io.modelcontextprotocol/clientCapabilities"]
        self.assertEqual(capabilities["extensions"], {EXTENSION: {}})

    def test_the_caller_hears_that_the_upstream_made_a_task(self) -> None:
        told: list[bool] = []
        caller = Call("c1", {}, on_upstream_task=lambda: told.append(True))
        Deferred.fromCoroutine(self.session.call_tool("research", {}, call=caller))
        self.assertEqual(told, [True])

    def test_a_task_is_polled_at_its_interval_until_it_completes(self) -> None:
        self.states = [
            _task(ttlMs=30_000, pollIntervalMs=2000),
            _task(status="completed", ttlMs=30_000, result=REPORT),
        ]
        calling = self._call()
        self.assertEqual(self._gets(), 0)
        self.clock.advance(0.5)
        self.assertEqual(self._gets(), 1)
        self.clock.advance(1.9)
        self.assertEqual(self._gets(), 1, "the server's new interval is honoured")
        self.clock.advance(0.1)
        self.assertEqual(self.successResultOf(calling), {**REPORT, "resultType": "complete"})

    def test_input_requests_are_answered_once_through_tasks_update(self) -> None:
        question = {
            "method": "elicitation/create",
            "params": {
                "message": "which python?",
                "requestedSchema": {"type": "object"},
                "_meta": {RELATED: {"taskId": "t-1"}},
            },
        }
        asking = _task(status="input_required", ttlMs=30_000, inputRequests={"q1": question})
        self.states = [
            asking,
            asking,
            _task(status="completed", ttlMs=30_000, result=REPORT),
        ]
        calling = self._call()
        self.clock.advance(0.5)
        self.clock.advance(0.5)
        self.clock.advance(0.5)
        self.successResultOf(calling)
        self.assertEqual(len(self.asked), 1, "a key seen on two polls is asked once")
        self.assertNotIn("_meta", self.asked[0], "the upstream's task id stays upstream")
        self.assertEqual(
            self.updates,
            [
                {
                    "taskId": "t-1",
                    "inputResponses": {
                        "q1": {"action": "accept", "content": {"interpretation": "snake"}}
                    },
                    "_meta": self.updates[0]["_meta"],
                }
            ],
        )

    def test_a_failed_task_is_its_json_rpc_error(self) -> None:
        self.states = [
            _task(
                status="failed",
                ttlMs=30_000,
                error={"code": -32602, "message": "no such topic"},
            )
        ]
        calling = self._call()
        self.clock.advance(0.5)
        error = self.failureResultOf(calling, RpcError).value
        self.assertEqual((error.code, error.message), (-32602, "no such topic"))

    def test_a_task_cancelled_upstream_is_an_error_that_says_so(self) -> None:
        self.states = [_task(status="cancelled", ttlMs=30_000, statusMessage="operator")]
        calling = self._call()
        self.clock.advance(0.5)
        error = self.failureResultOf(calling, UpstreamTaskEnded).value
        self.assertIn("cancelled", str(error))
        self.assertIn("operator", str(error))

    def test_cancelling_the_call_cancels_the_upstream_task(self) -> None:
        calling = self._call()
        self.clock.advance(0.5)
        calling.cancel()
        self.failureResultOf(calling, CancelledError)
        cancels = [params_of(r) for r in self.server.requests if r.method == "tasks/cancel"]
        self.assertEqual([c["taskId"] for c in cancels], ["t-1"])
        self.clock.advance(5)
        self.assertEqual(self._gets(), 1, "no polling after the cancel")

    def test_a_task_past_its_ttl_is_given_up(self) -> None:
        calling = self._call()
        for _ in range(70):
            self.clock.advance(0.5)
        error = self.failureResultOf(calling, UpstreamTaskEnded).value
        self.assertIn("ttl of 30s", str(error))
        self.assertIn("tasks/cancel", self.server.methods())

    def test_a_zero_poll_interval_does_not_spin(self) -> None:
        self.states = [_task(ttlMs=30_000, pollIntervalMs=0)] * 3
        self._call()
        self.clock.advance(0.5)
        self.clock.advance(0.05)
        self.assertEqual(self._gets(), 1)
        self.clock.advance(0.05)
        self.assertEqual(self._gets(), 2)
