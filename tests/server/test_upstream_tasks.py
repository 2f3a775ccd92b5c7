"""
A tool that runs only as a task, called through mcpx by every kind of caller.

server-everything's C{simulate-research-query} declares C{execution.taskSupport:
"required"} and, with C{ambiguous} set, asks for a clarification through its task's
C{input_required} (an elicitation it delivers on C{tasks/result}).  mcpx calls it as a
2025-11-25 task upstream whoever calls it, and each caller gets the report with the
clarification in it: a 2025-11-25 client that asked for a task (asked on its own
connection, the question tied to its task), a 2026-07-28 client (asked with
C{input_required}, through C{mcpx_call}: the tool itself needs the extension), a
2026-07-28 client that declared the tasks extension (given a
task, whose C{tasks/get} shows the question and C{tasks/update} answers it), and
C{mcpx call} (whose question waits in the broker, answered with C{mcpx elicit}).

One daemon for all three: server-everything ignores the end of its stdin, so each
daemon that started it takes mcpx's grace period to stop.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import treq
from attrs import define, field
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.shared.exceptions import MCPError
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase
from twisted.web.http_headers import Headers

from mcpx.spec.schemas import TASKS_EXTENSION, violations
from tests.questions.support import MODERN, Daemon, everything_server, in_thread
from tests.support.http import TestClient
from tests.support.processes import reactor

TOOL = "simulate-research-query"
ARGUMENTS = {"topic": "python", "ambiguous": True}
RELATED = "io.modelcontextprotocol/related-task"
ASKS = 'everything (via mcpx) asks: The research query "python" could have multiple'
EXTENSION = "io.modelcontextprotocol/tasks"


async def modern_rpc(
    daemon: Daemon, request_id: int, method: str, params: dict[str, Any]
) -> dict[str, Any]:
    """
    One 2026-07-28 request to C{/mcp} as raw HTTP, declaring elicitation and the tasks
    extension; its JSON-RPC result (an error fails the test).
    """
    headers = {
        "Content-Type": ["application/json"],
        "Accept": ["application/json"],
        "MCP-Protocol-Version": [MODERN],
        "Mcp-Method": [method],
    }
    # The name-bearing parameter of each method travels as Mcp-Name too.
    headers["Mcp-Name"] = [params["name"] if method == "tools/call" else params["taskId"]]
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        "params": {
            **params,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {
                    "elicitation": {},
                    "extensions": {EXTENSION: {}},
                },
            },
        },
    }
    client = TestClient(reactor)
    try:
        response = await client.http.post(
            daemon.mcp_url, data=json.dumps(body).encode(), headers=Headers(headers)
        )
        answer = json.loads(await treq.content(response))
    finally:
        await client.close()
    assert "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


def _texts(result: dict[str, Any]) -> str:
    return "\n".join(block.get("text", "") for block in result.get("content", []))


@define
class Clarifier:
    """Answers the research tool's clarification with one interpretation."""

    choice: str
    asked: list[dict[str, Any]] = field(factory=list)

    async def elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.asked.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        return types.ElicitResult(action="accept", content={"interpretation": self.choice})


class ResearchQueryTests(TestCase):
    timeout = 120

    async def test_every_caller_gets_the_report_and_the_clarification(self) -> None:
        daemon = await Daemon(
            self, {"everything": everything_server()}, passthrough=["everything"]
        ).start()
        await self._legacy_task(daemon)
        await self._modern(daemon)
        await self._extension(daemon)
        await self._cli(daemon)

    async def _legacy_task(self, daemon: Daemon) -> None:
        """
        A 2025-11-25 client (stdio, through C{mcpx serve}) calls the tool with C{task}:
        it gets C{{task}} at once, is asked the clarification tied to its task, and
        C{tasks/result} answers the report with its answer in it.
        """
        clarifier = Clarifier("snake")

        async def conversation() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
            target = daemon.serve("everything")
            async with Client(
                target, mode="legacy", elicitation_callback=clarifier.elicit, cache=None
            ) as client:
                # The SDK's typed surface has no 2025-11-25 tasks: the raw request does.
                send = client.session._dispatcher.send_raw_request
                created = await send(
                    "tools/call",
                    {"name": TOOL, "arguments": ARGUMENTS, "task": {"ttl": 60_000}},
                    {},
                )
                result = await send("tasks/result", {"taskId": created["task"]["taskId"]}, {})
                listed = await send("tasks/list", {}, {})
                return created, result, listed

        created, result, listed = await in_thread(conversation)
        task_id = created["task"]["taskId"]
        self.assertEqual(created["task"]["status"], "working", created)
        self.assertIn("Research Report: python (snake)", _texts(result), result)
        self.assertEqual(result["_meta"][RELATED], {"taskId": task_id})
        [asked] = clarifier.asked
        self.assertTrue(asked["message"].startswith(ASKS), asked)
        self.assertEqual(asked["_meta"][RELATED], {"taskId": task_id}, "tied to the task")
        self.assertEqual([t["status"] for t in listed["tasks"]], ["completed"])

    async def _modern(self, daemon: Daemon) -> None:
        """
        A 2026-07-28 client that declared no tasks extension is refused the tool under
        its own name with -32021 (it runs only as a task); through C{mcpx_call}, which
        holds the upstream task for it, the clarification comes back as
        C{input_required} and its retry with the answer gets the report.
        """
        clarifier = Clarifier("comedy")
        gateway = {"server": "everything", "tool": TOOL, "arguments": ARGUMENTS}

        async def conversation() -> tuple[Any, Any, dict[str, Any]]:
            async with Client(
                daemon.mcp_url, mode=MODERN, elicitation_callback=clarifier.elicit, cache=None
            ) as client:
                try:
                    refused: Any = await client.session.call_tool(TOOL, ARGUMENTS)
                except MCPError as e:
                    refused = (e.error.code, e.error.data)
                first = await client.session.call_tool(
                    "mcpx_call", gateway, allow_input_required=True
                )
                if not isinstance(first, types.InputRequiredResult):
                    return refused, first.model_dump(mode="json", by_alias=True), {}
                [(key, request)] = (first.input_requests or {}).items()
                final = await client.session.call_tool(
                    "mcpx_call",
                    gateway,
                    input_responses={
                        key: types.ElicitResult(
                            action="accept", content={"interpretation": "comedy"}
                        )
                    },
                    request_state=first.request_state,
                    allow_input_required=True,
                )
                return (
                    refused,
                    request.model_dump(mode="json", by_alias=True, exclude_none=True),
                    final.model_dump(mode="json", by_alias=True, exclude_none=True),
                )

        refused, request, final = await in_thread(conversation)
        self.assertEqual(
            refused, (-32021, {"requiredCapabilities": {"extensions": {EXTENSION: {}}}})
        )
        self.assertEqual(request["method"], "elicitation/create", request)
        self.assertTrue(request["params"]["message"].startswith(ASKS), request)
        self.assertIn("Research Report: python (comedy)", _texts(final), final)
        self.assertEqual(clarifier.asked, [], "the test, not the SDK's driver, answered")

    async def _extension(self, daemon: Daemon) -> None:
        """
        A 2026-07-28 client that declared the tasks extension is given a task (the
        research runs for seconds); polling it, it finds the task input_required with
        the clarification in inputRequests, answers it with tasks/update, and polls
        until the task completes with the report inlined.
        """
        created = await modern_rpc(daemon, 1, "tools/call", {"name": TOOL, "arguments": ARGUMENTS})
        self.assertEqual(violations(created, TASKS_EXTENSION, "CreateTaskResult"), [])
        self.assertEqual(created["resultType"], "task", created)
        task_id = created["taskId"]
        polls = 0
        answered = False
        while True:
            polls += 1
            self.assertLess(polls, 200, "the task never finished")
            await deferLater(reactor, 0.05, lambda: None)
            state = await modern_rpc(daemon, 1 + polls, "tasks/get", {"taskId": task_id})
            self.assertEqual(violations(state, TASKS_EXTENSION, "GetTaskResult"), [], state)
            if state["status"] == "input_required" and not answered:
                [(key, asked)] = state["inputRequests"].items()
                self.assertTrue(asked["params"]["message"].startswith(ASKS), asked)
                ack = await modern_rpc(
                    daemon,
                    1000 + polls,
                    "tasks/update",
                    {
                        "taskId": task_id,
                        "inputResponses": {
                            key: {"action": "accept", "content": {"interpretation": "snake"}}
                        },
                    },
                )
                self.assertEqual(ack["resultType"], "complete")
                answered = True
            elif state["status"] in ("completed", "failed", "cancelled"):
                break
        self.assertTrue(answered, "the clarification was asked through the task")
        self.assertEqual(state["status"], "completed", state)
        self.assertIn("Research Report: python (snake)", _texts(state["result"]), state)

    async def _cli(self, daemon: Daemon) -> None:
        """
        C{mcpx call} knows nothing of tasks: the clarification waits in the broker,
        C{mcpx elicit} answers it, and the command prints the report.
        """
        calling = Deferred.fromCoroutine(
            daemon.mcpx("call", "everything", TOOL, "topic=python", "ambiguous=true")
        )
        question = await daemon.wait_for_question("everything")
        self.assertTrue(question["params"]["message"].startswith(ASKS), question)
        answer = json.dumps({"interpretation": "programming"})
        answered = await daemon.mcpx("elicit", question["id"], "--answer", answer)
        self.assertEqual(answered.code, 0, answered)
        done = await calling
        self.assertEqual(done.code, 0, done)
        self.assertIn("Research Report: python (programming)", done.out, done)
