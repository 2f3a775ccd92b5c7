"""
The question relay end to end: real daemons, real upstream servers of both eras, and
the MCP Python SDK as an independent client.

Each test starts C{python -m mcpx daemon} in a temporary state directory with a
configuration naming the upstream(s) it needs: the in-project demo (which mcpx reaches
as a 2026-07-28 server, so it asks with C{input_required}), C{server-everything} (a
handshake-era server, which asks with requests on its session) or the SDK fixture
refusing anything but the handshake revisions.  A question then has to cross eras: a
legacy client is asked on its own connection (stdio through C{mcpx serve}, or a
Streamable HTTP session), a 2026-07-28 client with C{input_required} and a retry, and a
client that declared nothing leaves it to the broker, which C{mcpx elicit} answers.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import mcp_types as types
from attrs import define, field
from mcp import Client
from mcp.client.context import ClientRequestContext
from pydantic import BaseModel
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from tests.questions.support import (
    MODERN,
    Daemon,
    demo_server,
    everything_server,
    in_thread,
    legacy_fixture_server,
    modern_demo_server,
    modern_post,
)
from tests.support.processes import reactor

#: The question the demo's C{ask} tool is given.
QUESTION = "What should mcpx call you?"

#: What server-everything's C{trigger-elicitation-request} asks.
EVERYTHING_ASKS = "Please provide inputs for the following fields:"


def wire(model: BaseModel) -> dict[str, Any]:
    """A message as it travels."""
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


def texts(result: Mapping[str, Any]) -> str:
    """The text blocks of a tool result, one after another."""
    return "\n".join(block.get("text", "") for block in result.get("content", []))


@define
class Answerer:
    """
    A client's answers to the questions it is put, in order, and what it was asked.

    Its callbacks run in the SDK client's thread; the test reads C{asked} once the
    conversation is over.
    """

    replies: list[str] = field(factory=list)
    asked: list[dict[str, Any]] = field(factory=list)

    async def elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.asked.append(wire(params))
        return types.ElicitResult(action="accept", content={"answer": self.replies.pop(0)})

    async def sample(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        self.asked.append(wire(params))
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=self.replies.pop(0)),
            model="e2e-model",
        )


class LegacyClientTests(TestCase):
    """
    A 2025-11-25 client that declared elicitation is asked, on its own connection, the
    question a 2026-07-28 upstream put in an C{input_required} result (the bridge: the
    demo's entry holds it to 2026-07-28, so it is not met in the host's era).
    """

    timeout = 60

    async def records(self, daemon: Daemon) -> list[dict[str, Any]]:
        """Every question the broker keeps, through C{mcpx elicit --all --json}."""
        done = await daemon.mcpx("elicit", "--all", "--json")
        self.assertEqual(done.code, 0, done)
        questions: list[dict[str, Any]] = done.json()["questions"]
        return questions

    async def test_stdio_client_answers_modern_upstream(self) -> None:
        """
        A stdio client (the SDK over C{mcpx serve --passthrough demo}) with an elicitation
        callback is asked the demo's question as an C{elicitation/create} request naming
        the demo as its originator; its answer reaches the demo, whose tool result shows
        it; the broker records the question as answered by the client.
        """
        daemon = await Daemon(self, {"demo": modern_demo_server()}).start()
        answerer = Answerer(["Ada"])

        async def conversation() -> tuple[str, dict[str, Any]]:
            target = daemon.serve("demo")
            async with Client(
                target, mode="legacy", elicitation_callback=answerer.elicit, cache=None
            ) as client:
                result = await client.call_tool("ask", {"question": QUESTION})
                return client.protocol_version, wire(result)

        version, result = await in_thread(conversation)
        self.assertEqual(version, "2025-11-25")
        self.assertEqual(
            (texts(result), result.get("isError", False)), ("The user answered: Ada", False)
        )
        [asked] = answerer.asked
        self.assertEqual(asked["message"], f"demo (via mcpx) asks: {QUESTION}")
        self.assertEqual(asked["requestedSchema"]["required"], ["answer"])

        [record] = await self.records(daemon)
        self.assertEqual(
            (
                record["server"],
                record["route"],
                record["state"],
                record["answered_by"],
                record["answer"],
                record["params"]["message"],
            ),
            (
                "demo",
                "client",
                "answered",
                "client",
                {"action": "accept", "content": {"answer": "Ada"}},
                f"demo (via mcpx) asks: {QUESTION}",
            ),
        )
        self.assertIsNotNone(record["call_id"], "the question belongs to the client's call")

    async def test_http_session_client_answers_modern_upstream(self) -> None:
        """
        A Streamable HTTP session client (the SDK, 2025-11-25, on C{/mcp}) is asked the
        demo's question on its POST's stream, both when it calls the demo's tool passed
        through and through C{mcpx_call}; each answer reaches its own call.
        """
        daemon = await Daemon(self, {"demo": modern_demo_server()}, passthrough=["demo"]).start()
        answerer = Answerer(["Ada", "Grace"])

        async def conversation() -> tuple[str, dict[str, Any], dict[str, Any]]:
            async with Client(
                daemon.mcp_url, mode="legacy", elicitation_callback=answerer.elicit, cache=None
            ) as client:
                passed = await client.call_tool("ask", {"question": QUESTION})
                gateway = await client.call_tool(
                    "mcpx_call",
                    {"server": "demo", "tool": "ask", "arguments": {"question": "And your pet?"}},
                )
                return client.protocol_version, wire(passed), wire(gateway)

        version, passed, gateway = await in_thread(conversation)
        self.assertEqual(version, "2025-11-25")
        self.assertEqual(texts(passed), "The user answered: Ada")
        self.assertFalse(gateway.get("isError", False), gateway)
        self.assertIn("The user answered: Grace", texts(gateway))
        self.assertEqual(
            [asked["message"] for asked in answerer.asked],
            [f"demo (via mcpx) asks: {QUESTION}", "demo (via mcpx) asks: And your pet?"],
        )


class ModernClientTests(TestCase):
    """
    A 2026-07-28 client is asked, with C{input_required} and a retry, the questions a
    handshake-era upstream (server-everything) sent as requests on its session.

    One test, one daemon: server-everything ignores the end of its stdin, so each daemon
    that started it takes mcpx's grace period (5 s) to stop.
    """

    timeout = 60

    async def test_modern_client_answers_legacy_upstream(self) -> None:
        """
        Calling server-everything's C{trigger-elicitation-request} passed through, a
        2026-07-28 client gets an C{input_required} result carrying the elicitation
        (naming server-everything as its originator) and a C{requestState}; retrying with
        its answer and that state, it gets the tool's result showing the answer.

        Calling C{trigger-sampling-request} through C{mcpx_call}, a client with a sampling
        callback (the SDK drives the rounds) is asked the server's sampling request, and
        the tool's result is the reply it wrote; the broker attributes that question to
        the client's call.
        """
        daemon = await Daemon(
            self, {"everything": everything_server()}, passthrough=["everything"]
        ).start()
        tool = "trigger-elicitation-request"
        # The callback makes the SDK declare elicitation; the test drives the rounds.
        declares = Answerer()

        async def elicitation() -> tuple[dict[str, Any], dict[str, Any]]:
            async with Client(
                daemon.mcp_url, mode=MODERN, elicitation_callback=declares.elicit, cache=None
            ) as client:
                first = await client.session.call_tool(tool, {}, allow_input_required=True)
                if not isinstance(first, types.InputRequiredResult):
                    return wire(first), {}
                [key] = first.input_requests or {}
                answer = types.ElicitResult(
                    action="accept", content={"name": "Ada Lovelace", "check": True}
                )
                final = await client.session.call_tool(
                    tool,
                    {},
                    input_responses={key: answer},
                    request_state=first.request_state,
                    allow_input_required=True,
                )
                return wire(first), wire(final)

        first, final = await in_thread(elicitation)
        self.assertEqual(first.get("resultType"), "input_required", first)
        [request] = first["inputRequests"].values()
        self.assertEqual(request["method"], "elicitation/create")
        self.assertEqual(
            request["params"]["message"], f"everything (via mcpx) asks: {EVERYTHING_ASKS}"
        )
        self.assertEqual(request["params"]["requestedSchema"]["required"], ["name"])
        self.assertIsInstance(first.get("requestState"), str)
        self.assertEqual(final.get("resultType", "complete"), "complete", final)
        self.assertFalse(final.get("isError", False), final)
        self.assertIn("- Name: Ada Lovelace", texts(final))
        self.assertIn("- Agreed to terms: true", texts(final))
        self.assertEqual(declares.asked, [], "the SDK's own driver did not answer for the test")

        samples = Answerer(["Hello from the model"])

        async def sampling() -> dict[str, Any]:
            async with Client(
                daemon.mcp_url, mode=MODERN, sampling_callback=samples.sample, cache=None
            ) as client:
                result = await client.call_tool(
                    "mcpx_call",
                    {
                        "server": "everything",
                        "tool": "trigger-sampling-request",
                        "arguments": {"prompt": "say hello", "maxTokens": 20},
                    },
                )
                return wire(result)

        result = await in_thread(sampling)
        self.assertFalse(result.get("isError", False), result)
        self.assertIn("Hello from the model", texts(result))
        self.assertIn("e2e-model", texts(result))
        [asked] = samples.asked
        self.assertEqual(
            (asked["messages"][0]["content"]["text"], asked["maxTokens"]),
            ("Resource trigger-sampling-request context: say hello", 20),
        )
        done = await daemon.mcpx("elicit", "--all", "--json")
        self.assertEqual(done.code, 0, done)
        [record] = [q for q in done.json()["questions"] if q["kind"] == "sampling"]
        self.assertEqual(
            (record["route"], record["state"], record["answered_by"]),
            ("client", "answered", "client"),
        )
        self.assertIsNotNone(record["call_id"])


class BrokerTests(TestCase):
    """
    A client that declared nothing cannot be asked: the question waits in the broker,
    where C{mcpx elicit} finds and answers it, durably.
    """

    timeout = 60

    async def test_mcpx_elicit_answers_what_nobody_could_be_asked(self) -> None:
        """
        A legacy HTTP client that declared nothing calls, through C{mcpx_call}, a legacy
        upstream tool that elicits: C{mcpx elicit --json} lists the question (naming its
        originator), an answer that does not fit its schema is refused with the reason
        and leaves it pending, C{mcpx elicit ID --answer JSON} answers it, and the call
        completes with that answer.  A sampling question is answered the same way.
        """
        daemon = await Daemon(self, {"legacy": legacy_fixture_server()}).start()

        async def call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            async with Client(daemon.mcp_url, mode="legacy", cache=None) as client:
                result = await client.call_tool(
                    "mcpx_call", {"server": "legacy", "tool": tool, "arguments": arguments}
                )
                return wire(result)

        calling = in_thread(lambda: call("ask_name", {}))
        pending = await daemon.wait_for_question("legacy")
        listed = await daemon.mcpx("elicit", "--json")
        self.assertEqual(listed.code, 0, listed)
        [question] = listed.json()["questions"]
        self.assertEqual(
            (
                question["id"],
                question["kind"],
                question["route"],
                question["state"],
                question["params"]["message"],
            ),
            (
                pending["id"],
                "elicitation",
                "broker",
                "pending",
                "legacy (via mcpx) asks: What is your name?",
            ),
        )

        refused = await daemon.mcpx("elicit", question["id"], "--answer", '{"name": 7}')
        self.assertEqual(refused.code, 2, refused)
        self.assertIn("name", refused.err)
        self.assertIn("still pending", refused.err)
        still = await daemon.mcpx("elicit", question["id"], "--json")
        self.assertEqual((still.code, still.json()["state"]), (0, "pending"), still)

        answered = await daemon.mcpx(
            "elicit", question["id"], "--answer", '{"name": "Grace"}', "--json"
        )
        self.assertEqual(answered.code, 0, answered)
        self.assertEqual(
            (answered.json()["state"], answered.json()["answered_by"]), ("answered", "cli")
        )
        result = await calling
        self.assertEqual((texts(result), result.get("isError", False)), ("Hello, Grace", False))

        sampling = in_thread(lambda: call("sample", {"prompt": "Write a haiku"}))
        asked = await daemon.wait_for_question("legacy")
        self.assertEqual(asked["kind"], "sampling")
        reply = {
            "role": "assistant",
            "content": {"type": "text", "text": "An old silent pond"},
            "model": "person",
        }
        answered = await daemon.mcpx("elicit", asked["id"], "--answer", json.dumps(reply))
        self.assertEqual(answered.code, 0, answered)
        result = await sampling
        self.assertEqual(texts(result), "An old silent pond")

    async def stopped_with_a_question(self) -> tuple[Daemon, dict[str, Any]]:
        """
        A daemon stopped (C{SIGTERM}, exit status 0) while a question from the legacy
        fixture waits in its broker, and that question as it was listed.
        """
        daemon = await Daemon(self, {"legacy": legacy_fixture_server()}).start()

        async def call() -> dict[str, Any]:
            async with Client(daemon.mcp_url, mode="legacy", cache=None) as client:
                return wire(
                    await client.call_tool(
                        "mcpx_call", {"server": "legacy", "tool": "ask_name", "arguments": {}}
                    )
                )

        calling = in_thread(call)
        pending = await daemon.wait_for_question("legacy")
        self.assertEqual(await daemon.stop(), 0, daemon.log()[-4000:])
        # The client's call ends with the daemon; how it fails is the SDK's business.
        calling.addErrback(lambda _: None)
        await calling
        return daemon, pending

    async def test_pending_question_survives_restart(self) -> None:
        """
        A question pending in the broker when the daemon is stopped (C{SIGTERM}) is
        listed again by C{mcpx elicit} once a new daemon starts on the same state
        directory: same id, still pending, marked orphaned.
        """
        daemon, pending = await self.stopped_with_a_question()
        await daemon.start()
        listed = await daemon.mcpx("elicit", "--json")
        self.assertEqual(listed.code, 0, listed)
        self.assertEqual(
            [(q["id"], q["state"], q["orphaned"]) for q in listed.json()["questions"]],
            [(pending["id"], "pending", True)],
        )
        shown = await daemon.mcpx("elicit")
        self.assertEqual(shown.code, 0, shown)
        self.assertIn(pending["id"], shown.out)
        self.assertIn("[orphaned] legacy (via mcpx) asks: What is your name?", shown.out)

    async def test_stopping_with_a_pending_question_logs_no_error(self) -> None:
        """
        Stopping the daemon while a question waits in its broker is an ordinary stop:
        nothing is logged at error level (the question stays pending on disk).
        """
        daemon, _ = await self.stopped_with_a_question()
        errors = daemon.log_lines("error") + daemon.log_lines("critical")
        self.assertEqual(errors, [], "stopping the daemon logged errors")


class RequestStateTests(TestCase):
    """The C{requestState} mcpx hands a 2026-07-28 client resumes only its own request."""

    timeout = 60

    async def test_tampered_foreign_and_expired_states_are_refused(self) -> None:
        """
        Over raw HTTP on C{/mcp}, with C{proto.stateTTL} at 1s: a state whose payload
        was altered (its round count reset), a state sent with another request's
        parameters and a state past its TTL are each refused with -32602 and a message
        of its own saying which, while the genuine state, sent in time with the request
        it was issued for, resumes the call.
        """
        daemon = await Daemon(
            self, {"demo": demo_server()}, settings={"MCPX_PROTO_STATE_TTL": "1s"}
        ).start()

        def ask(question: str) -> dict[str, Any]:
            return {
                "arguments": {"server": "demo", "tool": "ask", "arguments": {"question": question}}
            }

        answers = {"inputResponses": {"answer": {"action": "accept", "content": {"answer": "Ada"}}}}

        async def issued(request_id: int) -> str:
            status, response = await modern_post(daemon, request_id, "mcpx_call", ask(QUESTION))
            self.assertEqual(status, 200, response)
            result = response["result"]
            self.assertEqual(result["resultType"], "input_required", result)
            state: str = result["requestState"]
            return state

        async def refusal(request_id: int, params: dict[str, Any]) -> str:
            status, response = await modern_post(daemon, request_id, "mcpx_call", params)
            self.assertIn("error", response, response)
            self.assertEqual((status, response["error"]["code"]), (400, -32602), response)
            message: str = response["error"]["message"]
            return message

        state = await issued(1)
        payload, mac = state.split(".")
        body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        body["r"] = 0
        forged = base64.urlsafe_b64encode(json.dumps(body).encode()).rstrip(b"=").decode()

        tampered = await refusal(2, {**ask(QUESTION), "requestState": f"{forged}.{mac}", **answers})
        foreign = await refusal(3, {**ask("Who else?"), "requestState": state, **answers})
        status, resumed = await modern_post(
            daemon, 4, "mcpx_call", {**ask(QUESTION), "requestState": state, **answers}
        )
        self.assertEqual(status, 200, resumed)
        self.assertEqual(texts(resumed["result"]), "The user answered: Ada")

        late = await issued(5)
        await deferLater(reactor, 1.2, lambda: None)
        expired = await refusal(6, {**ask(QUESTION), "requestState": late, **answers})

        self.assertIn("altered", tampered)
        self.assertIn("other parameters", foreign)
        self.assertIn("expired", expired)
        self.assertEqual(len({tampered, foreign, expired}), 3, (tampered, foreign, expired))
