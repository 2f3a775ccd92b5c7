"""
Tests for 2025-11-25 core tasks as mcpx serves them (L{mcpx.server.tasks}): a
task-augmented C{tools/call} answered with its task at once, C{tasks/get},
C{tasks/result}, C{tasks/list}, C{tasks/cancel}, status notifications, which tools may
run as tasks, and a task whose call asks its client a question.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from mcpx.call import CallState
from mcpx.server.conn import Conn
from mcpx.spec.meta_keys import RELATED_TASK_KEY
from mcpx.spec.questions import ELICIT
from mcpx.spec.revision import NEWEST, Revision
from mcpx.spec.schemas import violations
from mcpx.wire.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    RpcError,
)
from mcpx.wire.messages import Request
from tests.daemon.fake_pool import FakePool, FakeServer, text_result
from tests.server import Harness, Session, gateway_servers, result_of

V4 = Revision.V2025_11_25

#: A 2026-07-28 request's _meta declaring the tasks extension.
WITH_EXTENSION: dict[str, Any] = {
    "io.modelcontextprotocol/clientCapabilities": {
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    }
}

MCPX_CALL: dict[str, Any] = {
    "name": "mcpx_call",
    "arguments": {"server": "search", "tool": "web_search", "arguments": {"q": "mcpx"}},
}

FORM: dict[str, Any] = {
    "message": "search (via mcpx) asks: which site?",
    "requestedSchema": {
        "type": "object",
        "properties": {"site": {"type": "string"}},
        "required": ["site"],
    },
}


class AskableHarness(Harness):
    """A stdio client that can be asked: it answers each question from L{answers}."""

    def __init__(self, pool: FakePool, **kwargs: Any) -> None:
        super().__init__(pool, **kwargs)
        self.asked: list[Request] = []
        self.answers: list[Deferred[Any]] = []
        self.conn = self.server.open(
            Conn(
                "stdio",
                "host-pid-1",
                push=self.server_peer.notify,
                ask=self.server_peer.request,
            )
        )

    def _client_request(self, request: Request) -> Any:
        self.asked.append(request)
        answer: Deferred[Any] = Deferred()
        self.answers.append(answer)
        return answer


def held_pool() -> FakePool:
    return FakePool(gateway_servers(), hold=True)


def legacy(
    revision: Revision = V4,
    *,
    pool: FakePool | None = None,
    capabilities: dict[str, Any] | None = None,
) -> Session:
    """A legacy client after initialize, over a held pool (the test finishes calls)."""
    harness = AskableHarness(pool if pool is not None else held_pool())
    session = Session.__new__(Session)
    session.revision = revision
    session.harness = harness
    session.initialize_result = harness.result(
        "initialize",
        {
            "protocolVersion": revision.value,
            "capabilities": capabilities or {},
            "clientInfo": {"name": "test-client", "version": "1"},
        },
    )
    harness.client.notify("notifications/initialized")
    return session


def start_task(session: Session, ttl: int = 60_000) -> dict[str, Any]:
    created = session.result("tools/call", {**MCPX_CALL, "task": {"ttl": ttl}})
    task: dict[str, Any] = created["task"]
    return task


def statuses(session: Session) -> list[dict[str, Any]]:
    return [
        dict(n.params or {})
        for n in session.harness.notifications
        if n.method == "notifications/tasks/status"
    ]


class CreateTests(SynchronousTestCase):
    def test_answered_at_once(self) -> None:
        """
        A tools/call with a task field is answered with the task, working, before the
        upstream answers: with the ttl asked for, a poll interval and ISO timestamps.
        """
        session = legacy()
        task = start_task(session, ttl=60_000)
        self.assertEqual(task["status"], "working")
        self.assertEqual(task["ttl"], 60_000)
        self.assertIsInstance(task["pollInterval"], int)
        self.assertEqual(task["createdAt"], "1970-01-01T00:00:00.000Z")
        self.assertEqual(task["lastUpdatedAt"], task["createdAt"])
        pool = session.harness.pool
        self.assertEqual([held.tool for held in pool.held], ["web_search"])
        self.assertEqual(pool.held[0].arguments, {"q": "mcpx"})

    def test_ttl_capped(self) -> None:
        """A ttl longer than mcpx keeps anything (proto.askTTL) is cut down to it."""
        session = legacy()
        task = start_task(session, ttl=10**12)
        self.assertEqual(task["ttl"], round(session.harness.host.tasks.ttl * 1000))

    def test_older_revision_honoured(self) -> None:
        """A 2025-06-18 client's task field is honoured too (accept liberally)."""
        session = legacy(Revision.V2025_06_18)
        task = start_task(session)
        self.assertEqual(task["status"], "working")
        self.assertNotIn("tasks", session.initialize_result["capabilities"])

    def test_tool_without_task_support(self) -> None:
        """A gateway tool other than mcpx_call runs no task: -32601 naming it."""
        session = legacy()
        error = session.error("tools/call", {"name": "mcpx_servers", "task": {}})
        self.assertEqual(error.code, METHOD_NOT_FOUND)
        self.assertIn("mcpx_servers", error.message)
        self.assertEqual(len(session.harness.host.tasks), 0)

    def test_malformed_task(self) -> None:
        """A task that is no object, or a ttl that is no whole number, is -32602."""
        session = legacy()
        for task in ("soon", {"ttl": "long"}, {"ttl": -1}):
            error = session.error("tools/call", {**MCPX_CALL, "task": task})
            self.assertEqual(error.code, INVALID_PARAMS, task)

    def test_per_client_limit(self) -> None:
        """A client at tasks.maxPerClient is refused with a message saying what to do."""
        session = legacy()
        session.harness.host.tasks.per_client = 2
        start_task(session)
        start_task(session)
        error = session.error("tools/call", {**MCPX_CALL, "task": {}})
        self.assertEqual(error.code, INTERNAL_ERROR)
        self.assertIn("tasks.maxPerClient", error.message)

    def test_tools_list_declares_mcpx_call(self) -> None:
        """
        mcpx_call and mcpx_exec declare execution.taskSupport optional to 2025-11-25
        clients only; no other gateway tool declares any.
        """
        for revision in (V4, Revision.V2025_06_18):
            tools = legacy(revision).result("tools/list")["tools"]
            executions = {tool["name"]: tool.get("execution") for tool in tools}
            expected = {"taskSupport": "optional"} if revision is V4 else None
            self.assertEqual(executions.pop("mcpx_call"), expected, revision)
            self.assertEqual(executions.pop("mcpx_exec"), expected, revision)
            self.assertEqual(set(executions.values()), {None}, revision)
        modern = Session(NEWEST).result("tools/list")["tools"]
        self.assertEqual([tool for tool in modern if "execution" in tool], [])


class LifecycleTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.session = legacy()
        self.task = start_task(self.session)
        self.pool = self.session.harness.pool
        self.task_id = self.task["taskId"]

    def get(self) -> dict[str, Any]:
        found: dict[str, Any] = self.session.result("tasks/get", {"taskId": self.task_id})
        return found

    def test_get_follows_the_call(self) -> None:
        """tasks/get shows working until the call answers, then completed."""
        self.assertEqual(self.get()["status"], "working")
        self.session.harness.clock.advance(2)
        self.pool.held[0].result.callback(text_result("found"))
        found = self.get()
        self.assertEqual(found["status"], "completed")
        self.assertEqual(found["lastUpdatedAt"], "1970-01-01T00:00:02.000Z")
        self.assertNotIn("pollInterval", found)

    def test_result_blocks_until_done(self) -> None:
        """
        tasks/result waits for the call and answers its result, with the related-task
        _meta beside the upstream's own.
        """
        waiting = self.session.request("tasks/result", {"taskId": self.task_id})
        self.assertNoResult(waiting)
        answer = {**text_result("found"), "_meta": {"example.com/trace": "t-1"}}
        self.pool.held[0].result.callback(answer)
        result = result_of(waiting)
        self.assertEqual(result["content"], [{"type": "text", "text": "found"}])
        self.assertEqual(
            result["_meta"],
            {"example.com/trace": "t-1", RELATED_TASK_KEY: {"taskId": self.task_id}},
        )

    def test_error_result_is_failed(self) -> None:
        """A tool's isError result fails the task; tasks/result still answers it."""
        self.pool.held[0].result.callback({**text_result("no such page"), "isError": True})
        self.assertEqual(self.get()["status"], "failed")
        result = self.session.result("tasks/result", {"taskId": self.task_id})
        self.assertTrue(result["isError"])

    def test_gateway_call_error_is_failed(self) -> None:
        """
        An upstream's JSON-RPC error, which mcpx_call answers as an isError result,
        fails the task with that result.
        """
        self.pool.held[0].result.errback(RpcError(-32002, "no such resource"))
        self.assertEqual(self.get()["status"], "failed")
        result = self.session.result("tasks/result", {"taskId": self.task_id})
        self.assertTrue(result["isError"])
        self.assertIn("no such resource", result["content"][0]["text"])

    def test_status_notifications(self) -> None:
        """The client hears notifications/tasks/status with the whole Task on each change."""
        self.assertEqual(statuses(self.session), [])
        self.pool.held[0].result.callback(text_result("found"))
        told = statuses(self.session)
        self.assertEqual([t["status"] for t in told], ["completed"])
        self.assertEqual(told[0]["taskId"], self.task_id)
        self.assertNotIn("_meta", told[0])

    def test_cancel(self) -> None:
        """
        tasks/cancel answers the task cancelled and stops the upstream call; the task
        stays cancelled, tasks/result is an error, and a second cancel is -32602.
        """
        held = self.pool.held[0].result
        cancelled = self.session.result("tasks/cancel", {"taskId": self.task_id})
        self.assertEqual(cancelled["status"], "cancelled")
        self.assertIn("tasks/cancel", cancelled["statusMessage"])
        # Nothing but the cancel fires the held upstream call.
        self.assertTrue(held.called)
        self.assertEqual(self.get()["status"], "cancelled")
        error = self.session.error("tasks/result", {"taskId": self.task_id})
        self.assertIn("cancelled", error.message)
        again = self.session.error("tasks/cancel", {"taskId": self.task_id})
        self.assertEqual(again.code, INVALID_PARAMS)
        self.assertIn("already cancelled", again.message)
        self.assertEqual([t["status"] for t in statuses(self.session)], ["cancelled"])

    def test_cancel_finished(self) -> None:
        """A completed task cannot be cancelled: -32602, and it stays completed."""
        self.pool.held[0].result.callback(text_result("found"))
        error = self.session.error("tasks/cancel", {"taskId": self.task_id})
        self.assertEqual(error.code, INVALID_PARAMS)
        self.assertEqual(self.get()["status"], "completed")

    def test_unknown_task(self) -> None:
        """A taskId mcpx does not hold is -32602 for get, result and cancel."""
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            error = self.session.error(method, {"taskId": "nope"})
            self.assertEqual(error.code, INVALID_PARAMS, method)
            self.assertIn("nope", error.message)

    def test_expires_after_ttl(self) -> None:
        """A finished task is forgotten once its ttl has passed: then it is unknown."""
        self.pool.held[0].result.callback(text_result("found"))
        self.session.harness.clock.advance(59)
        self.assertEqual(self.get()["status"], "completed")
        self.session.harness.clock.advance(2)
        error = self.session.error("tasks/get", {"taskId": self.task_id})
        self.assertEqual(error.code, INVALID_PARAMS)

    def test_another_clients_task(self) -> None:
        """A task of another caller identity is unknown to this one and not listed."""
        store = self.session.harness.host.tasks
        other = store.open("someone-else", origin="mcp")
        error = self.session.error("tasks/get", {"taskId": other.id})
        self.assertEqual(error.code, INVALID_PARAMS)
        error = self.session.error("tasks/cancel", {"taskId": other.id})
        self.assertEqual(error.code, INVALID_PARAMS)
        listed = self.session.result("tasks/list")["tasks"]
        self.assertEqual([t["taskId"] for t in listed], [self.task_id])


class ListTests(SynchronousTestCase):
    def test_pages(self) -> None:
        """tasks/list pages through the caller's tasks, oldest first, with nextCursor."""
        session = legacy()
        session.harness.server.core_tasks.page_size = 2
        made = [start_task(session)["taskId"] for _ in range(3)]
        first = session.result("tasks/list")
        self.assertEqual([t["taskId"] for t in first["tasks"]], made[:2])
        second = session.result("tasks/list", {"cursor": first["nextCursor"]})
        self.assertEqual([t["taskId"] for t in second["tasks"]], made[2:])
        self.assertNotIn("nextCursor", second)

    def test_bad_cursor(self) -> None:
        """A cursor tasks/list never gave is -32602."""
        session = legacy()
        start_task(session)
        for cursor in ("garbage", 7):
            error = session.error("tasks/list", {"cursor": cursor})
            self.assertEqual(error.code, INVALID_PARAMS, cursor)


class PassThroughTests(SynchronousTestCase):
    def session(self, execution: dict[str, Any] | None) -> Session:
        tool: dict[str, Any] = {"name": "crunch", "inputSchema": {"type": "object"}}
        if execution is not None:
            tool["execution"] = execution
        pool = FakePool({"jobs": FakeServer("jobs", tools=[tool])}, hold=True)
        harness = AskableHarness(pool)
        harness.conn.passthrough = ("jobs",)
        session = Session.__new__(Session)
        session.revision = V4
        session.harness = harness
        session.initialize_result = harness.result(
            "initialize", {"protocolVersion": V4.value, "capabilities": {}}
        )
        return session

    def test_upstream_declaration_carried_and_decides(self) -> None:
        """
        A pass-through tool's execution.taskSupport is on tools/list; optional runs
        as a task, an undeclared one is -32601.
        """
        session = self.session({"taskSupport": "optional"})
        tools = session.result("tools/list")["tools"]
        self.assertEqual(tools[0]["execution"], {"taskSupport": "optional"})
        created = session.result("tools/call", {"name": "crunch", "task": {}})
        self.assertEqual(created["task"]["status"], "working")
        session.harness.pool.held[0].result.callback(text_result("done"))
        result = session.result("tasks/result", {"taskId": created["task"]["taskId"]})
        self.assertEqual(result["content"], [{"type": "text", "text": "done"}])

    def test_protocol_error_relayed(self) -> None:
        """
        A pass-through call that failed with a JSON-RPC error fails its task, with the
        error as its statusMessage; tasks/result is that error, naming the task.
        """
        session = self.session({"taskSupport": "required"})
        task = session.result("tools/call", {"name": "crunch", "task": {}})["task"]
        session.harness.pool.held[0].result.errback(RpcError(-32002, "no such resource"))
        found = session.result("tasks/get", {"taskId": task["taskId"]})
        self.assertEqual(found["status"], "failed")
        self.assertEqual(found["statusMessage"], "no such resource")
        error = session.error("tasks/result", {"taskId": task["taskId"]})
        self.assertEqual((error.code, error.message), (-32002, "no such resource"))
        self.assertEqual(error.data, {"taskId": task["taskId"]})

    def test_undeclared_refused(self) -> None:
        """A pass-through tool that declares no task support is -32601 with a task."""
        for execution in (None, {"taskSupport": "forbidden"}):
            plain = self.session(execution)
            error = plain.error("tools/call", {"name": "crunch", "task": {}})
            self.assertEqual(error.code, METHOD_NOT_FOUND, execution)


class InputRequiredTests(SynchronousTestCase):
    def test_question_of_a_task(self) -> None:
        """
        While the task's call asks its client, the task is input_required and the
        question carries the related-task _meta; answered, it is working again.
        """
        session = legacy(capabilities={"elicitation": {}})
        task_id = start_task(session)["taskId"]
        harness = session.harness
        assert isinstance(harness, AskableHarness)
        caller: Any = harness.pool.callers[-1]
        answer = caller.asker.ask(ELICIT, FORM, "q1")
        self.assertEqual(
            session.result("tasks/get", {"taskId": task_id})["status"], "input_required"
        )
        self.assertIs(caller.state, CallState.TASK)
        [asked] = harness.asked
        self.assertEqual(asked.method, "elicitation/create")
        assert isinstance(asked.params, dict)
        self.assertEqual(asked.params["_meta"][RELATED_TASK_KEY], {"taskId": task_id})
        self.assertEqual(asked.params["message"], FORM["message"])
        harness.answers[0].callback({"action": "accept", "content": {"site": "example.com"}})
        self.assertEqual(result_of(answer)["action"], "accept")
        self.assertEqual(session.result("tasks/get", {"taskId": task_id})["status"], "working")
        told = [t["status"] for t in statuses(session)]
        self.assertEqual(told, ["input_required", "working"])


class ModernTests(SynchronousTestCase):
    def test_core_methods_not_found(self) -> None:
        """
        To a 2026-07-28 client, the core-only tasks methods are -32601 (tasks/get and
        tasks/cancel are the tasks extension's: -32021 without it declared, and it knows
        no core task), and its task field on tools/call is ignored: the call is answered
        inline.
        """
        held = legacy()
        # The same connection, and so the same caller, on 2026-07-28.
        session = Session(NEWEST, held.harness)
        for method in ("tasks/result", "tasks/list"):
            error = session.error(method, {"taskId": "x"})
            self.assertEqual(error.code, METHOD_NOT_FOUND, method)
        core = start_task(held)["taskId"]
        for method in ("tasks/get", "tasks/cancel"):
            error = session.error(method, {"taskId": core})
            self.assertEqual(error.code, MISSING_REQUIRED_CLIENT_CAPABILITY, method)
            error = session.error(method, {"taskId": core}, **WITH_EXTENSION)
            self.assertEqual(error.code, INVALID_PARAMS, method)
        result = Session(NEWEST).result("tools/call", {**MCPX_CALL, "task": {"ttl": 1000}})
        self.assertNotIn("task", result)
        self.assertEqual(result["resultType"], "complete")


class SchemaTests(SynchronousTestCase):
    def test_every_task_frame_is_valid(self) -> None:
        """
        Every frame of a task's life (its creation, polls, list, result, cancel, errors,
        status notifications and a question tied to it) is valid, strictly, against
        the 2025-11-25 schema.
        """
        session = legacy(capabilities={"elicitation": {}})
        harness = session.harness
        assert isinstance(harness, AskableHarness)
        expected: dict[Any, str] = {}

        def answered(definition: str) -> None:
            expected[max(harness.methods)] = definition

        first = start_task(session)["taskId"]
        answered("CreateTaskResult")
        caller: Any = harness.pool.callers[-1]
        caller.asker.ask(ELICIT, FORM, "q1")
        harness.answers[0].callback({"action": "accept", "content": {"site": "a"}})
        session.result("tasks/get", {"taskId": first})
        answered("GetTaskResult")
        waiting = session.request("tasks/result", {"taskId": first})
        answered("GetTaskPayloadResult")
        harness.pool.held[0].result.callback(text_result("found"))
        result_of(waiting)
        second = start_task(session)["taskId"]
        answered("CreateTaskResult")
        session.result("tasks/list")
        answered("ListTasksResult")
        session.result("tasks/cancel", {"taskId": second})
        answered("CancelTaskResult")
        session.error("tasks/result", {"taskId": second})
        session.error("tasks/get", {"taskId": "nope"})

        found: list[str] = []
        seen: set[str] = set()
        for frame in harness.sent:
            if "method" in frame:
                definition = "ElicitRequest" if "id" in frame else "TaskStatusNotification"
                instance = frame
            elif "error" in frame:
                definition, instance = "JSONRPCErrorResponse", frame
            elif frame["id"] in expected:
                definition, instance = expected[frame["id"]], frame["result"]
            else:
                continue
            seen.add(definition)
            found.extend(
                f"{definition}: {line}"
                for line in violations(instance, V4, definition, strict=True)
            )
        self.assertEqual(found, [])
        self.assertEqual(
            seen,
            {
                "CreateTaskResult",
                "GetTaskResult",
                "GetTaskPayloadResult",
                "ListTasksResult",
                "CancelTaskResult",
                "TaskStatusNotification",
                "ElicitRequest",
                "JSONRPCErrorResponse",
            },
        )


class ApiTests(SynchronousTestCase):
    def test_mcp_task_listed_with_its_call(self) -> None:
        """A host's task reads in the daemon's list with the server and tool it calls."""
        session = legacy()
        task_id = start_task(session)["taskId"]
        [task] = session.harness.host.tasks.tasks()
        self.assertEqual(
            (task.id, task.server, task.tool, task.origin),
            (task_id, "search", "web_search", "mcp"),
        )
