"""
The 2026-07-28 tasks extension as mcpx serves it (L{mcpx.server.ext_tasks}): declared
only to 2026-07-28 clients; a call from a client that declared the extension becomes a
C{CreateTaskResult} once it has run 250 ms; C{tasks/get} inlines its result, error or
questions; C{tasks/update} answers them; C{tasks/cancel} stops it.  Every frame is
checked strictly against the extension's schema.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from mcpx.call import CallState, ClientUnreachable
from mcpx.server.conn import Conn
from mcpx.server.ext_tasks import SUPPORTING_TOOL_AFTER, becomes_task_after
from mcpx.spec.feature import TASKS_EXTENSION as EXTENSION
from mcpx.spec.questions import ELICIT
from mcpx.spec.revision import NEWEST, Revision
from mcpx.spec.schemas import TASKS_EXTENSION, violations
from mcpx.wire.errors import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    RpcError,
)
from mcpx.wire.messages import Request
from tests.daemon.fake_pool import FakePool, FakeServer, text_result
from tests.server import Harness, Session, gateway_servers, result_of

MCPX_CALL: dict[str, Any] = {
    "name": "mcpx_call",
    "arguments": {"server": "search", "tool": "web_search", "arguments": {"q": "mcpx"}},
}
CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
WITH_EXTENSION: dict[str, Any] = {CAPABILITIES: {"extensions": {EXTENSION: {}}}}
ASKABLE: dict[str, Any] = {
    CAPABILITIES: {"extensions": {EXTENSION: {}}, "elicitation": {"form": {}}}
}
FORM: dict[str, Any] = {
    "message": "search (via mcpx) asks: which site?",
    "requestedSchema": {
        "type": "object",
        "properties": {"site": {"type": "string"}},
        "required": ["site"],
    },
}


def modern() -> Session:
    return Session(NEWEST, Harness(FakePool(gateway_servers(), hold=True)))


def passthrough(support: str | None, *, in_meta: bool = False) -> Session:
    """
    A 2026-07-28 client of a pass-through server with one tool, C{crunch}, whose task
    support is in C{execution} or, C{in_meta}, where a 2026-07-28 server puts it: the
    tool's C{_meta}, under the extension's id.
    """
    tool: dict[str, Any] = {"name": "crunch", "inputSchema": {"type": "object"}}
    if support is not None and in_meta:
        tool["_meta"] = {EXTENSION: {"taskSupport": support}}
    elif support is not None:
        tool["execution"] = {"taskSupport": support}
    pool = FakePool({"jobs": FakeServer("jobs", tools=[tool])}, hold=True)
    session = Session(NEWEST, Harness(pool))
    session.harness.conn.passthrough = ("jobs",)
    return session


def strictly(test: SynchronousTestCase, instance: Any, definition: str) -> None:
    test.assertEqual(violations(instance, TASKS_EXTENSION, definition), [], instance)


class CreationTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.session = modern()
        self.harness = self.session.harness
        self.pool = self.harness.pool

    def call(self, **meta: Any) -> Any:
        return self.session.request("tools/call", MCPX_CALL, **meta)

    def test_declared_only_to_2026_07_28(self) -> None:
        discovered = self.session.result("server/discover")
        self.assertEqual(discovered["capabilities"]["extensions"], {EXTENSION: {}})
        legacy = Session(Revision.V2025_11_25)
        self.assertNotIn("extensions", legacy.initialize_result["capabilities"])

    def test_a_slow_call_becomes_a_task_after_250ms(self) -> None:
        """
        A call to a task-supporting tool (mcpx_call) still running after 250 ms is
        answered with a CreateTaskResult; the call goes on, and tasks/get then inlines
        its result.
        """
        answering = self.call(**WITH_EXTENSION)
        self.harness.clock.advance(SUPPORTING_TOOL_AFTER - 0.01)
        self.assertNoResult(answering)
        self.harness.clock.advance(0.01)
        created = result_of(answering)
        strictly(self, created, "CreateTaskResult")
        self.assertEqual((created["resultType"], created["status"]), ("task", "working"))
        call = self.pool.callers[-1]
        assert call is not None
        self.assertIs(call.state, CallState.TASK)
        self.assertIsInstance(created["pollIntervalMs"], int)
        task_id = created["taskId"]
        working = self.session.result("tasks/get", {"taskId": task_id}, **WITH_EXTENSION)
        strictly(self, working, "GetTaskResult")
        self.assertEqual(working["status"], "working")
        self.pool.held[0].result.callback(text_result("found"))
        self.assertIs(call.state, CallState.ENDED)
        done = self.session.result("tasks/get", {"taskId": task_id}, **WITH_EXTENSION)
        strictly(self, done, "GetTaskResult")
        self.assertEqual(done["status"], "completed")
        self.assertEqual(done["result"]["content"], [{"type": "text", "text": "found"}])
        self.assertEqual(done["resultType"], "complete")
        [listed] = self.harness.host.tasks.tasks()
        self.assertEqual(
            (listed.id, listed.origin, listed.tool), (task_id, "extension", "web_search")
        )

    def test_a_quick_call_is_answered_inline(self) -> None:
        answering = self.call(**WITH_EXTENSION)
        self.harness.clock.advance(0.1)
        self.pool.held[0].result.callback(text_result("quick"))
        result = result_of(answering)
        self.assertEqual(result["resultType"], "complete")
        self.assertEqual(result["content"], [{"type": "text", "text": "quick"}])
        self.assertEqual(len(self.harness.host.tasks), 0)

    def test_a_client_without_the_extension_is_answered_inline(self) -> None:
        """The core tasks' task field means nothing: the call waits as long as it runs."""
        answering = self.session.request("tools/call", {**MCPX_CALL, "task": {"ttl": 1000}})
        self.harness.clock.advance(30)
        self.assertNoResult(answering)
        self.pool.held[0].result.callback(text_result("slow"))
        self.assertEqual(result_of(answering)["content"][0]["text"], "slow")
        self.assertEqual(len(self.harness.host.tasks), 0)

    def test_a_tool_that_declares_nothing_waits_for_task_after(self) -> None:
        """A pass-through tool without taskSupport becomes a task only after taskAfter."""
        session = passthrough(None)
        answering = session.request(
            "tools/call", {"name": "crunch", "arguments": {}}, **WITH_EXTENSION
        )
        session.harness.clock.advance(4.9)
        self.assertNoResult(answering)
        session.harness.clock.advance(0.1)
        self.assertEqual(result_of(answering)["resultType"], "task")
        self.assertEqual(becomes_task_after("optional", 5.0), SUPPORTING_TOOL_AFTER)
        self.assertEqual(becomes_task_after("required", 5.0), SUPPORTING_TOOL_AFTER)
        self.assertEqual(becomes_task_after(None, 5.0), 5.0)
        self.assertEqual(becomes_task_after("forbidden", 7.5), 7.5)

    def test_a_tools_error_result_is_a_completed_task(self) -> None:
        """
        An upstream error mcpx_call reports as an isError result completes the task,
        as the extension asks (failed is for JSON-RPC errors only).
        """
        created = result_of(self._task())
        self.pool.held[0].result.errback(RpcError(-32602, "q is required"))
        done = self.session.result("tasks/get", {"taskId": created["taskId"]}, **WITH_EXTENSION)
        strictly(self, done, "GetTaskResult")
        self.assertEqual(done["status"], "completed")
        self.assertTrue(done["result"]["isError"])
        self.assertIn("q is required", done["result"]["content"][0]["text"])

    def _task(self, **meta: Any) -> Any:
        answering = self.call(**(meta or WITH_EXTENSION))
        self.harness.clock.advance(SUPPORTING_TOOL_AFTER)
        return answering


class LaterTests(SynchronousTestCase):
    """What a client does with a task it was given."""

    def setUp(self) -> None:
        self.session = modern()
        self.harness = self.session.harness
        self.pool = self.harness.pool
        answering = self.session.request("tools/call", MCPX_CALL, **ASKABLE)
        self.harness.clock.advance(SUPPORTING_TOOL_AFTER)
        self.task_id = result_of(answering)["taskId"]

    def get(self) -> Any:
        return self.session.result("tasks/get", {"taskId": self.task_id}, **WITH_EXTENSION)

    def test_a_later_question_parks_the_task_until_tasks_update(self) -> None:
        """
        A question the call asks once it is a task shows it input_required with the
        question in inputRequests; tasks/update answers it and the task works again.
        """
        caller: Any = self.pool.callers[-1]
        answer = caller.asker.ask(ELICIT, FORM, "site")
        self.harness.clock.advance(0)
        parked = self.get()
        strictly(self, parked, "GetTaskResult")
        self.assertEqual(parked["status"], "input_required")
        self.assertEqual(parked["inputRequests"], {"site": {"method": ELICIT, "params": FORM}})
        ack = self.session.result(
            "tasks/update",
            {
                "taskId": self.task_id,
                "inputResponses": {"site": {"action": "accept", "content": {"site": "a.org"}}},
            },
            **WITH_EXTENSION,
        )
        strictly(self, ack, "UpdateTaskResult")
        self.assertEqual(result_of(answer)["content"], {"site": "a.org"})
        self.assertEqual(self.get()["status"], "working")
        self.pool.held[0].result.callback(text_result("done"))
        self.assertEqual(self.get()["status"], "completed")

    def test_cancel_stops_the_call(self) -> None:
        ack = self.session.result("tasks/cancel", {"taskId": self.task_id}, **WITH_EXTENSION)
        strictly(self, ack, "CancelTaskResult")
        self.assertTrue(self.pool.held[0].result.called, "the upstream call was cancelled")
        cancelled = self.get()
        strictly(self, cancelled, "GetTaskResult")
        self.assertEqual(cancelled["status"], "cancelled")
        again = self.session.result("tasks/cancel", {"taskId": self.task_id}, **WITH_EXTENSION)
        strictly(self, again, "CancelTaskResult")
        self.assertEqual(self.get()["status"], "cancelled", "idempotent: it stays cancelled")

    def test_another_clients_task_is_unknown(self) -> None:
        """A task of another caller identity is as unknown as one that never was."""
        other = self.harness.server.open(Conn("http-modern", "someone-else"))
        request = Request(
            99, "tasks/get", self.session.params({"taskId": self.task_id}, **WITH_EXTENSION)
        )
        answer = Deferred.fromCoroutine(self.harness.server.handle(other, request))
        self.assertEqual(self.failureResultOf(answer, RpcError).value.code, INVALID_PARAMS)

    def test_tasks_update_is_not_a_legacy_method(self) -> None:
        legacy = Session(Revision.V2025_11_25)
        error = legacy.error("tasks/update", {"taskId": "x", "inputResponses": {}})
        self.assertEqual(error.code, METHOD_NOT_FOUND)


class ListenTests(SynchronousTestCase):
    def test_a_listen_naming_tasks_hears_their_state_and_every_change(self) -> None:
        """
        subscriptions/listen with taskIds acknowledges the ones the caller can see,
        then sends notifications/tasks with each one's state at once and on every
        change, each the DetailedTask tasks/get answers.
        """
        session = modern()
        harness = session.harness
        answering = session.request("tools/call", MCPX_CALL, **ASKABLE)
        harness.clock.advance(SUPPORTING_TOOL_AFTER)
        task_id = result_of(answering)["taskId"]
        session.request(
            "subscriptions/listen", {"notifications": {"taskIds": [task_id, "not-a-task"]}}
        )
        caller: Any = harness.pool.callers[-1]
        asked = caller.asker.ask(ELICIT, FORM, "site")
        harness.clock.advance(0)
        harness.pool.held[0].result.callback(text_result("done"))
        # Still held when the call ended: the broker takes it.
        self.failureResultOf(asked, ClientUnreachable)
        heard = [(n.method, dict(n.params or {})) for n in harness.notifications]
        [ack] = [params for method, params in heard if method.endswith("/acknowledged")]
        self.assertEqual(ack["notifications"], {"taskIds": [task_id]})
        states = [params for method, params in heard if method == "notifications/tasks"]
        self.assertEqual(
            [state["status"] for state in states], ["working", "input_required", "completed"]
        )
        for state in states:
            self.assertEqual(state["taskId"], task_id)
            strictly(self, state, "TaskStatusNotificationParams")
        self.assertEqual(states[1]["inputRequests"]["site"]["method"], ELICIT)
        self.assertEqual(states[2]["result"]["content"][0]["text"], "done")


class GatingTests(SynchronousTestCase):
    """What a 2026-07-28 client that did not declare the extension gets."""

    def test_tasks_methods_need_the_extension(self) -> None:
        session = modern()
        for method, params in (
            ("tasks/get", {"taskId": "x"}),
            ("tasks/update", {"taskId": "x", "inputResponses": {}}),
            ("tasks/cancel", {"taskId": "x"}),
        ):
            error = session.error(method, params)
            self.assertEqual(error.code, MISSING_REQUIRED_CLIENT_CAPABILITY, method)
            self.assertEqual(error.data, {"requiredCapabilities": {"extensions": {EXTENSION: {}}}})
            unknown = session.error(method, params, **WITH_EXTENSION)
            self.assertEqual(unknown.code, INVALID_PARAMS, method)

    def test_a_required_tool_needs_the_extension(self) -> None:
        """
        In pass-through, a tool that runs only as a task is -32021 to a client that
        did not declare the extension; with it, the call goes upstream.
        """
        session = passthrough("required")
        error = session.error("tools/call", {"name": "crunch", "arguments": {}})
        self.assertEqual(error.code, MISSING_REQUIRED_CLIENT_CAPABILITY)
        self.assertEqual(session.harness.pool.held, [], "nothing went upstream")
        session.request("tools/call", {"name": "crunch", "arguments": {}}, **WITH_EXTENSION)
        self.assertEqual([held.tool for held in session.harness.pool.held], ["crunch"])

    def test_a_changed_tool_is_read_anew(self) -> None:
        """
        A tool's task support is read from the tools as its server lists them now: one
        that comes to run only as a task is -32021 from then on, and one that no longer
        does goes upstream again.
        """
        session = passthrough(None)
        jobs = session.harness.pool.servers["jobs"]
        session.request("tools/call", {"name": "crunch", "arguments": {}})
        self.assertEqual(len(session.harness.pool.held), 1)
        required = {"name": "crunch", "inputSchema": {}, "execution": {"taskSupport": "required"}}
        jobs.tools = [required]
        error = session.error("tools/call", {"name": "crunch", "arguments": {}})
        self.assertEqual(error.code, MISSING_REQUIRED_CLIENT_CAPABILITY)
        self.assertEqual(len(session.harness.pool.held), 1, "nothing more went upstream")
        jobs.tools = [{"name": "crunch", "inputSchema": {}}]
        session.request("tools/call", {"name": "crunch", "arguments": {}})
        self.assertEqual(len(session.harness.pool.held), 2)

    def test_a_tool_required_in_its_meta_needs_the_extension(self) -> None:
        """A 2026-07-28 Tool has no execution: its _meta says it runs only as a task."""
        session = passthrough("required", in_meta=True)
        error = session.error("tools/call", {"name": "crunch", "arguments": {}})
        self.assertEqual(error.code, MISSING_REQUIRED_CLIENT_CAPABILITY)
        self.assertEqual(error.data, {"requiredCapabilities": {"extensions": {EXTENSION: {}}}})
        self.assertEqual(session.harness.pool.held, [], "nothing went upstream")

    def test_a_tool_supporting_tasks_in_its_meta_becomes_a_task_after_250ms(self) -> None:
        session = passthrough("optional", in_meta=True)
        answering = session.request(
            "tools/call", {"name": "crunch", "arguments": {}}, **WITH_EXTENSION
        )
        session.harness.clock.advance(SUPPORTING_TOOL_AFTER)
        self.assertEqual(result_of(answering)["resultType"], "task")

    def test_an_optional_tool_does_not(self) -> None:
        session = passthrough("optional")
        answering = session.request("tools/call", {"name": "crunch", "arguments": {}})
        session.harness.pool.held[0].result.callback(text_result("inline"))
        self.assertEqual(result_of(answering)["content"][0]["text"], "inline")


class UpstreamTaskTests(SynchronousTestCase):
    def test_an_upstream_task_is_a_task_at_once(self) -> None:
        """
        When the upstream makes the call a task of its own, the client that accepts
        tasks gets one at once, without waiting out the 250 ms.
        """
        session = modern()
        answering = session.request("tools/call", MCPX_CALL, **WITH_EXTENSION)
        self.assertNoResult(answering)
        caller: Any = session.harness.pool.callers[-1]
        self.assertTrue(caller.wants_task)
        caller.on_upstream_task()
        created = result_of(answering)
        strictly(self, created, "CreateTaskResult")
        session.harness.pool.held[0].result.callback(text_result("done"))
        done = session.result("tasks/get", {"taskId": created["taskId"]}, **WITH_EXTENSION)
        self.assertEqual(done["result"]["content"][0]["text"], "done")

    def test_a_retry_that_answers_may_become_a_task(self) -> None:
        """
        A call that asked at once is answered inline with input_required (no task
        yet); the retry with the answer becomes a task once the call runs on.
        """
        session = modern()
        harness = session.harness
        answering = session.request("tools/call", MCPX_CALL, **ASKABLE)
        caller: Any = harness.pool.callers[-1]
        answer = caller.asker.ask(ELICIT, FORM, "site")
        harness.clock.advance(0)
        first = result_of(answering)
        self.assertEqual(first["resultType"], "input_required")
        self.assertNotIn("taskId", first)
        retry = session.request(
            "tools/call",
            {
                **MCPX_CALL,
                "inputResponses": {"site": {"action": "accept", "content": {"site": "a.org"}}},
                "requestState": first["requestState"],
            },
            **ASKABLE,
        )
        self.assertEqual(result_of(answer)["content"], {"site": "a.org"})
        harness.clock.advance(SUPPORTING_TOOL_AFTER)
        created = result_of(retry)
        strictly(self, created, "CreateTaskResult")
        self.assertNotIn("requestState", created)
        harness.pool.held[0].result.callback(text_result("a.org it is"))
        done = session.result("tasks/get", {"taskId": created["taskId"]}, **WITH_EXTENSION)
        self.assertEqual(done["result"]["content"][0]["text"], "a.org it is")


class FailedTaskTests(SynchronousTestCase):
    def test_a_json_rpc_error_is_a_failed_task_with_its_error(self) -> None:
        """
        A pass-through call that fails with a JSON-RPC error once it is a task shows
        failed, the error inlined and no result.
        """
        session = passthrough("optional")
        answering = session.request(
            "tools/call", {"name": "crunch", "arguments": {}}, **WITH_EXTENSION
        )
        session.harness.clock.advance(SUPPORTING_TOOL_AFTER)
        task_id = result_of(answering)["taskId"]
        session.harness.pool.held[0].result.errback(RpcError(-32602, "no such job"))
        failed = session.result("tasks/get", {"taskId": task_id}, **WITH_EXTENSION)
        strictly(self, failed, "GetTaskResult")
        self.assertEqual(failed["status"], "failed")
        self.assertEqual(failed["error"], {"code": -32602, "message": "no such job"})
        self.assertNotIn("result", failed)
