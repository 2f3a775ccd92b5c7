"""
Tests for L{mcpx.demo}: the bundled demo MCP server.

Most tests drive a L{DemoProtocol} on a L{StringTransport} from a client L{RpcPeer}, with a
L{Clock} for the time, so every byte the demo writes passes through the real framing and is
read back by mcpx's own JSON-RPC layer.  One test class runs C{python -m mcpx.demo} as a
real process.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterable
from typing import Any, Final

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock, deferLater
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase

from mcpx.demo import SERVER_NAME, SUPPORTED_VERSIONS, DemoProtocol, DemoServer
from mcpx.demo.catalogue import README, format_time
from mcpx.demo.server import ASK_TIMEOUT, CACHE_TTL_MS
from mcpx.spec.matrix import capability_in
from mcpx.spec.revision import LEGACY_REVISIONS, Revision
from mcpx.spec.schemas import SchemaViolation, definitions, validate
from mcpx.wire.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    RESOURCE_NOT_FOUND,
    UNSUPPORTED_PROTOCOL_VERSION,
    RpcError,
)
from mcpx.wire.messages import Request
from mcpx.wire.peer import RpcPeer
from tests.support.processes import REPO, kill_on_cleanup, reactor, spawn

MODERN: Final = Revision.V2026_07_28
ALL: Final = tuple(Revision)
#: 2026-01-01T00:00:00Z, where every test clock starts.
EPOCH: Final = 1_767_225_600.0

#: The result definition each method is answered with, in every revision that has it.
RESULT_DEFINITIONS: Final = {
    "initialize": "InitializeResult",
    "ping": "EmptyResult",
    "server/discover": "DiscoverResult",
    "tools/list": "ListToolsResult",
    "tools/call": "CallToolResult",
    "prompts/list": "ListPromptsResult",
    "prompts/get": "GetPromptResult",
    "resources/list": "ListResourcesResult",
    "resources/read": "ReadResourceResult",
    "resources/templates/list": "ListResourceTemplatesResult",
}

#: The request definition of each method, to check that the tests themselves speak each
#: revision correctly.
REQUEST_DEFINITIONS: Final = {
    "initialize": "InitializeRequest",
    "ping": "PingRequest",
    "server/discover": "DiscoverRequest",
    "tools/list": "ListToolsRequest",
    "tools/call": "CallToolRequest",
    "prompts/list": "ListPromptsRequest",
    "prompts/get": "GetPromptRequest",
    "resources/list": "ListResourcesRequest",
    "resources/read": "ReadResourceRequest",
    "resources/templates/list": "ListResourceTemplatesRequest",
}

CLIENT_INFO: Final = {"name": "demo-tests", "version": "1.0"}

#: The definition of each message the demo sends on its own (not as an answer).
SENT_DEFINITIONS: Final = {
    "notifications/progress": "ProgressNotification",
    "elicitation/create": "ElicitRequest",
}

#: What the test user answers to the demo's question.
ACCEPTED: Final = {"action": "accept", "content": {"answer": "Ada"}}


def modern_meta(
    version: object = MODERN.value, capabilities: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The C{_meta} a 2026-07-28 client puts on every request."""
    return {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": capabilities or {},
        "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
    }


def elicitation_capabilities(revision: Revision) -> dict[str, Any]:
    """Client capabilities that declare form elicitation as C{revision} spells it, or none
    where it has no elicitation."""
    if capability_in("client", "elicitation.form", revision):
        return {"elicitation": {"form": {}}}
    if capability_in("client", "elicitation", revision):
        return {"elicitation": {}}
    return {}


class DemoClient:
    """
    A client peer talking to a demo protocol in memory.

    Every request is recorded with the revision it was sent for, and every line the demo
    writes is recorded with the request it answers, for the schema sweep.

    @ivar revision: the revision requests are spelled for: a legacy one after
        L{initialize}, or 2026-07-28 (the C{_meta} version is added to each request).
    """

    def __init__(
        self,
        case: SynchronousTestCase,
        revision: Revision | None = None,
        capabilities: dict[str, Any] | None = None,
    ) -> None:
        """
        @param capabilities: the client capabilities declared by L{initialize}, or on each
            2026-07-28 request.
        """
        self.case = case
        self.capabilities = capabilities or {}
        #: What the client answers to C{elicitation/create}: a result, an error to raise, or
        #: a Deferred (that never fires, for a client that does not answer).
        self.elicit_reply: dict[str, Any] | RpcError | Deferred[Any] = ACCEPTED
        #: The messages the demo sent on its own: notifications and requests.
        self.sent: list[dict[str, Any]] = []
        self.clock = Clock()
        self.clock.advance(EPOCH)
        self.server = DemoServer(self.clock)
        self.protocol = DemoProtocol(self.server)
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)
        self.revision = revision
        self.peer = RpcPeer(self._send, on_request=self._answer, name="demo")
        self._pending: dict[Any, tuple[str, Revision | None, dict[str, Any]]] = {}
        #: (method, revision, request message, response message) for every answer.
        self.exchanges: list[tuple[str, Revision | None, dict[str, Any], dict[str, Any]]] = []

    def _answer(self, request: Request) -> object:
        if request.method != "elicitation/create":
            raise RpcError.method_not_found(request.method)
        if isinstance(self.elicit_reply, RpcError):
            raise self.elicit_reply
        return self.elicit_reply

    def _send(self, data: bytes) -> None:
        message = json.loads(data)
        if "id" in message and "method" in message:
            self._pending[message["id"]] = (message["method"], self.revision, message)
        self.write(data + b"\n")

    def write(self, data: bytes) -> None:
        """Feed raw bytes to the demo and deliver what it answers to the client peer."""
        self.protocol.dataReceived(data)
        self.deliver()

    def deliver(self) -> None:
        """Deliver what the demo wrote, answers and messages of its own, to the client peer."""
        output = self.transport.value()
        self.transport.clear()
        if not output:
            return
        self.case.assertTrue(output.endswith(b"\n"), output)
        for line in output.split(b"\n")[:-1]:
            message = json.loads(line)
            if type(message) is dict and "method" in message:
                self.sent.append(message)
            answered = self._pending.pop(message.get("id"), None) if type(message) is dict else None
            if answered is not None:
                method, revision, request = answered
                self.exchanges.append((method, revision, request, message))
            self.peer.receive(line)

    @property
    def unanswered(self) -> int:
        """Requests sent that the demo has not answered."""
        return len(self._pending)

    def raw(self, data: bytes) -> list[Any]:
        """Feed raw bytes; return the JSON values of the lines the demo wrote."""
        self.protocol.dataReceived(data)
        output = self.transport.value()
        self.transport.clear()
        return [json.loads(line) for line in output.split(b"\n")[:-1]]

    def request(self, method: str, params: dict[str, Any] | None = None) -> Deferred[Any]:
        params = dict(params or {})
        if self.revision is MODERN:
            params["_meta"] = {
                **modern_meta(capabilities=self.capabilities),
                **params.get("_meta", {}),
            }
        return self.peer.request(method, params or None)

    def result(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send a request that must succeed; its result."""
        return self.case.successResultOf(self.request(method, params))

    def error(self, method: str, params: dict[str, Any] | None = None) -> RpcError:
        """Send a request that must fail; its error."""
        failure = self.case.failureResultOf(self.request(method, params), RpcError)
        error = failure.value
        assert isinstance(error, RpcError)
        return error

    def initialize(self, version: str) -> Any:
        """Do the legacy handshake asking for C{version}; spell requests for the answer."""
        result = self.result(
            "initialize",
            {
                "protocolVersion": version,
                "capabilities": self.capabilities,
                "clientInfo": CLIENT_INFO,
            },
        )
        self.revision = Revision.parse(result["protocolVersion"])
        self.peer.notify("notifications/initialized")
        return result

    def call(self, tool: str, arguments: dict[str, Any] | None = None, **params: Any) -> Any:
        params["name"] = tool
        if arguments is not None:
            params["arguments"] = arguments
        return self.result("tools/call", params)

    def countdown(self, steps: int, interval: float, token: object = "count") -> Any:
        """Call C{countdown} with a progress token and let its time pass."""
        params: dict[str, Any] = {
            "name": "countdown",
            "arguments": {"steps": steps, "interval": interval},
        }
        if token is not None:
            params["_meta"] = {"progressToken": token}
        calling = self.request("tools/call", params)
        self.case.assertNoResult(calling)
        self.clock.pump([interval] * steps)
        self.deliver()
        return self.case.successResultOf(calling)

    def progress(self) -> list[dict[str, Any]]:
        """The params of every progress notification the demo sent."""
        return [m["params"] for m in self.sent if m["method"] == "notifications/progress"]

    def ask(self, question: str | None = None) -> Any:
        """Call C{ask}; in 2026-07-28, answer its input request and call again, as a
        client does.  The result of the last call."""
        arguments = {} if question is None else {"question": question}
        result = self.call("ask", arguments)
        if result.get("resultType") != "input_required":
            return result
        [(key, asked)] = result["inputRequests"].items()
        self.case.assertEqual(asked["method"], "elicitation/create")
        reply = self.elicit_reply
        assert isinstance(reply, dict)
        return self.call(
            "ask",
            arguments,
            inputResponses={key: reply},
            requestState=result["requestState"],
        )


def connect(
    case: SynchronousTestCase, revision: Revision, capabilities: dict[str, Any] | None = None
) -> DemoClient:
    """A client speaking C{revision}: handshake done for a legacy one."""
    if revision is MODERN:
        return DemoClient(case, MODERN, capabilities)
    client = DemoClient(case, capabilities=capabilities)
    client.initialize(revision.value)
    return client


def exercise(client: DemoClient) -> Any:
    """
    Call every method the demo has in the client's revision, with good and bad input.

    @return: the result of the C{ask} call.
    """
    if client.revision is MODERN:
        client.result("server/discover")
    else:
        client.result("ping")
    client.result("tools/list")
    client.call("echo", {"text": "hello"})
    client.call("add", {"a": 2, "b": 3})
    client.call("add", {"a": 1.5e308, "b": 1.5e308})
    client.call("add", {"a": "2"})
    client.call("now")
    client.call("fail")
    client.call("fail", {"message": "custom"})
    client.result("prompts/list")
    client.result("prompts/get", {"name": "greet", "arguments": {"name": "Ada"}})
    client.result("resources/list")
    client.result("resources/read", {"uri": README.uri})
    client.result("resources/templates/list")
    client.countdown(2, 0.5)
    client.countdown(1, 0, token=None)
    client.call("countdown", {"steps": 0})
    asked = client.ask("Who are you?")
    client.error("tools/call", {"name": "nope"})
    client.error("prompts/get", {"name": "greet"})
    client.error("resources/read", {"uri": "demo://missing"})
    client.error("no/such/method")
    return asked


def exercise_without_elicitation(client: DemoClient) -> None:
    """What a client that declared no elicitation meets."""
    client.call("ask")


def envelope(revision: Revision, kind: str) -> str:
    """The definition of a whole result (C{kind} "result") or error response."""
    names = definitions(revision)
    if kind == "result":
        return "JSONRPCResultResponse" if "JSONRPCResultResponse" in names else "JSONRPCResponse"
    return "JSONRPCErrorResponse" if "JSONRPCErrorResponse" in names else "JSONRPCError"


def _unwrapped(request: dict[str, Any], revision: Revision) -> dict[str, Any]:
    """C{request} as C{revision}'s schema describes it: before 2025-11-25, without the
    JSON-RPC envelope."""
    if revision >= Revision.V2025_11_25:
        return request
    return {key: value for key, value in request.items() if key not in ("jsonrpc", "id")}


class SchemaSweepTests(SynchronousTestCase):
    """
    Everything the demo sends, in every revision, passes that revision's schema in strict
    mode, which refuses any field the revision does not define.
    """

    def check(self, client: DemoClient, revision: Revision) -> set[str]:
        """Validate everything C{client} exchanged with the demo; the methods answered."""
        answered = set()
        for method, sent_for, request, response in client.exchanges:
            # Only the initialize request goes out before a revision is agreed.
            self.assertIs(sent_for or revision, revision)
            if "result" in response:
                answered.add(method)
                validate(
                    _unwrapped(request, revision),
                    revision,
                    REQUEST_DEFINITIONS[method],
                    strict=True,
                )
                result = response["result"]
                definition = RESULT_DEFINITIONS[method]
                if result.get("resultType") == "input_required":
                    definition = "InputRequiredResult"
                validate(result, revision, definition, strict=True)
                validate(response, revision, envelope(revision, "result"), strict=True)
            else:
                validate(response, revision, envelope(revision, "error"), strict=True)
        for message in client.sent:
            validate(
                _unwrapped(message, revision),
                revision,
                SENT_DEFINITIONS[message["method"]],
                strict=True,
            )
        # Every request was answered, so every answer was checked.
        self.assertEqual(client.unanswered, 0)
        return answered

    def sweep(self, revision: Revision) -> None:
        client = connect(self, revision, elicitation_capabilities(revision))
        ask_result = exercise(client)
        answered = self.check(client, revision)
        # The sweep covers every method the revision has; nothing is skipped unnoticed.
        expected = {m for m in RESULT_DEFINITIONS if client.server.serves(m, revision)}
        self.assertEqual(answered, expected)
        # 2026-07-28 has no ping or initialize, but asks by a second call.
        self.assertEqual(len(client.exchanges), 23)
        # The question reached the user wherever the revision has elicitation.
        asked = revision >= Revision.V2025_06_18
        self.assertEqual("isError" in ask_result, not asked, ask_result)
        sent = [message["method"] for message in client.sent]
        questions = ["elicitation/create"] if asked and revision is not MODERN else []
        self.assertEqual(sent, ["notifications/progress"] * 2 + questions)

        bare = connect(self, revision)
        exercise_without_elicitation(bare)
        self.check(bare, revision)
        self.assertEqual(bare.sent, [])

    def test_2024_11_05(self) -> None:
        """Every 2024-11-05 result and error the demo sends is valid strict 2024-11-05."""
        self.sweep(Revision.V2024_11_05)

    def test_2025_03_26(self) -> None:
        """Every 2025-03-26 result and error the demo sends is valid strict 2025-03-26."""
        self.sweep(Revision.V2025_03_26)

    def test_2025_06_18(self) -> None:
        """Every 2025-06-18 result and error the demo sends is valid strict 2025-06-18."""
        self.sweep(Revision.V2025_06_18)

    def test_2025_11_25(self) -> None:
        """Every 2025-11-25 result and error the demo sends is valid strict 2025-11-25."""
        self.sweep(Revision.V2025_11_25)

    def test_2026_07_28(self) -> None:
        """Every 2026-07-28 result and error the demo sends is valid strict 2026-07-28."""
        self.sweep(MODERN)

    def test_unsupported_version_error(self) -> None:
        """The -32022 error answering an unknown C{_meta} version is a valid 2026-07-28
        C{UnsupportedProtocolVersionError}."""
        client = DemoClient(self)
        [response] = client.raw(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 7,
                    "method": "tools/list",
                    "params": {"_meta": modern_meta("2099-01-01")},
                }
            ).encode()
            + b"\n"
        )
        validate(response, MODERN, "UnsupportedProtocolVersionError", strict=True)

    def test_sweep_catches_a_field_the_revision_lacks(self) -> None:
        """
        The strict check the sweep relies on refuses C{structuredContent} in 2025-03-26 and
        C{resultType} in 2025-11-25, so the sweep could fail if the demo sent them.
        """
        client = connect(self, Revision.V2025_06_18)
        result = client.call("add", {"a": 1, "b": 2})
        self.assertIn("structuredContent", result)
        self.assertRaises(
            SchemaViolation, validate, result, Revision.V2025_03_26, "CallToolResult", strict=True
        )
        modern = connect(self, MODERN).result("tools/list")
        self.assertRaises(
            SchemaViolation, validate, modern, Revision.V2025_11_25, "ListToolsResult", strict=True
        )
        # A progress message is refused before 2025-03-26, which added it.
        progress = {
            "method": "notifications/progress",
            "params": {"progressToken": 1, "progress": 1, "message": "1 to go"},
        }
        self.assertRaises(
            SchemaViolation,
            validate,
            progress,
            Revision.V2024_11_05,
            "ProgressNotification",
            strict=True,
        )


class LegacyHandshakeTests(SynchronousTestCase):
    """C{initialize} and what may come before and after it."""

    def test_agrees_to_each_legacy_revision(self) -> None:
        """A client asking for any legacy revision gets that revision, the demo's identity and
        exactly the tools, prompts and resources capabilities."""
        for revision in LEGACY_REVISIONS:
            result = DemoClient(self).initialize(revision.value)
            self.assertEqual(result["protocolVersion"], revision.value)
            self.assertEqual(result["serverInfo"]["name"], SERVER_NAME)
            self.assertEqual(result["serverInfo"]["version"], DemoServer(Clock()).version)
            self.assertEqual(result["capabilities"], {"tools": {}, "prompts": {}, "resources": {}})
            self.assertIn("instructions", result)
            self.assertEqual("title" in result["serverInfo"], revision >= Revision.V2025_06_18)

    def test_offers_newest_legacy_for_anything_else(self) -> None:
        """A version the demo cannot agree to by handshake (unknown, or the modern one) gets
        2025-11-25 offered instead."""
        for asked in ("2099-01-01", "2024-01-01", MODERN.value):
            result = DemoClient(self).initialize(asked)
            self.assertEqual(result["protocolVersion"], "2025-11-25", asked)

    def test_version_must_be_a_string(self) -> None:
        """C{initialize} without a string protocolVersion is -32602."""
        client = DemoClient(self)
        error = client.error("initialize", {"protocolVersion": 20250618, "capabilities": {}})
        self.assertEqual(error.code, INVALID_PARAMS)

    def test_only_once(self) -> None:
        """A second C{initialize} on the same connection is refused with -32600."""
        client = connect(self, Revision.V2025_06_18)
        error = client.error(
            "initialize", {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {}}
        )
        self.assertEqual(error.code, INVALID_REQUEST)
        assert client.protocol.session is not None
        self.assertIs(client.protocol.session.revision, Revision.V2025_06_18)

    def test_initialized_notification(self) -> None:
        """The client's C{notifications/initialized} is accepted silently."""
        client = DemoClient(self)
        client.initialize("2025-06-18")
        assert client.protocol.session is not None
        self.assertTrue(client.protocol.session.initialized)
        self.assertEqual(client.transport.value(), b"")

    def test_ping(self) -> None:
        """C{ping} is answered with an empty result, before and after the handshake."""
        client = DemoClient(self)
        self.assertEqual(client.result("ping"), {})
        client.initialize("2024-11-05")
        self.assertEqual(client.result("ping"), {})

    def test_requests_before_initialize(self) -> None:
        """A legacy request other than ping before C{initialize} is -32600, and says how to
        proceed."""
        client = DemoClient(self)
        error = client.error("tools/list")
        self.assertEqual(error.code, INVALID_REQUEST)
        self.assertIn("initialize", error.message)

    def test_legacy_version_in_meta_is_still_legacy(self) -> None:
        """A legacy revision named in C{_meta} does not replace the handshake."""
        client = DemoClient(self)
        meta = {"io.modelcontextprotocol/protocolVersion": "2025-06-18"}
        self.assertEqual(client.error("tools/list", {"_meta": meta}).code, INVALID_REQUEST)
        client.initialize("2025-03-26")
        tools = client.result("tools/list", {"_meta": meta})["tools"]
        self.assertNotIn("title", tools[0])

    def test_batches_follow_the_revision(self) -> None:
        """Batches are answered after a 2025-03-26 handshake (the one revision with them)
        and refused otherwise."""
        batch = (
            b'[{"jsonrpc":"2.0","id":"a","method":"ping"},'
            b'{"jsonrpc":"2.0","id":"b","method":"ping"}]\n'
        )
        client = connect(self, Revision.V2025_03_26)
        [reply] = client.raw(batch)
        self.assertEqual(
            reply,
            [
                {"jsonrpc": "2.0", "id": "a", "result": {}},
                {"jsonrpc": "2.0", "id": "b", "result": {}},
            ],
        )
        [refused] = connect(self, Revision.V2025_06_18).raw(batch)
        self.assertEqual(refused["error"]["code"], INVALID_REQUEST)


class LegacyFeatureTests(SynchronousTestCase):
    """Tools, prompts and resources after a legacy handshake, shaped for each revision."""

    def test_tools_list(self) -> None:
        """The four tools are listed; title and outputSchema appear from 2025-06-18 and
        annotations from 2025-03-26, as those revisions introduced them."""
        for revision in LEGACY_REVISIONS:
            tools = connect(self, revision).result("tools/list")["tools"]
            self.assertEqual(
                [t["name"] for t in tools], ["echo", "add", "now", "fail", "countdown", "ask"]
            )
            by_name = {t["name"]: t for t in tools}
            modern_fields = revision >= Revision.V2025_06_18
            self.assertEqual("title" in by_name["echo"], modern_fields, revision)
            self.assertEqual("outputSchema" in by_name["add"], modern_fields, revision)
            self.assertNotIn("outputSchema", by_name["echo"])
            self.assertEqual(
                "annotations" in by_name["now"], revision >= Revision.V2025_03_26, revision
            )
            self.assertEqual(by_name["add"]["inputSchema"]["required"], ["a", "b"])

    def test_add(self) -> None:
        """C{add} returns the sum as text everywhere, and as structuredContent where the
        revision has it."""
        for revision in LEGACY_REVISIONS:
            result = connect(self, revision).call("add", {"a": 2, "b": 0.5})
            self.assertEqual(json.loads(result["content"][0]["text"]), {"sum": 2.5})
            if revision >= Revision.V2025_06_18:
                self.assertEqual(result["structuredContent"], {"sum": 2.5})
            else:
                self.assertNotIn("structuredContent", result)
            self.assertNotIn("isError", result)

    def test_prompt_get(self) -> None:
        """C{greet} renders a user message naming the person."""
        for revision in LEGACY_REVISIONS:
            client = connect(self, revision)
            prompts = client.result("prompts/list")["prompts"]
            self.assertEqual([p["name"] for p in prompts], ["greet"])
            result = client.result("prompts/get", {"name": "greet", "arguments": {"name": "Ada"}})
            [message] = result["messages"]
            self.assertEqual(message["role"], "user")
            self.assertIn("Ada", message["content"]["text"])

    def test_resource_read(self) -> None:
        """C{demo://readme} is listed and reads as Markdown describing the demo."""
        for revision in LEGACY_REVISIONS:
            client = connect(self, revision)
            [listed] = client.result("resources/list")["resources"]
            self.assertEqual(listed["uri"], "demo://readme")
            self.assertEqual(listed["mimeType"], "text/markdown")
            [contents] = client.result("resources/read", {"uri": "demo://readme"})["contents"]
            self.assertEqual(contents["uri"], "demo://readme")
            self.assertIn("# The mcpx demo server", contents["text"])
            for tool in ("echo", "add", "now", "fail", "greet"):
                self.assertIn(f"`{tool}`", contents["text"])
            templates = client.result("resources/templates/list")
            self.assertEqual(templates, {"resourceTemplates": []})

    def test_unknown_resource(self) -> None:
        """An unknown URI is -32002 with the URI in data, in every legacy revision."""
        for revision in LEGACY_REVISIONS:
            error = connect(self, revision).error("resources/read", {"uri": "demo://nope"})
            self.assertEqual(error.code, RESOURCE_NOT_FOUND)
            self.assertEqual(error.data, {"uri": "demo://nope"})

    def test_no_listings_past_one_page(self) -> None:
        """The demo never hands out a cursor, so a list request carrying one is -32602."""
        client = connect(self, Revision.V2025_11_25)
        error = client.error("tools/list", {"cursor": "x"})
        self.assertEqual(error.code, INVALID_PARAMS)

    def test_unoffered_methods(self) -> None:
        """Methods the demo does not offer (logging, subscriptions, completion, anything
        made up) are -32601."""
        client = connect(self, Revision.V2025_11_25)
        for method in (
            "logging/setLevel",
            "resources/subscribe",
            "completion/complete",
            "server/discover",
            "tasks/list",
            "no/such/method",
        ):
            self.assertEqual(client.error(method, {}).code, METHOD_NOT_FOUND, method)
        self.assertEqual(DemoClient(self).error("no/such/method").code, METHOD_NOT_FOUND)


class ModernTests(SynchronousTestCase):
    """2026-07-28 requests: per-request versions, no handshake."""

    def test_discover(self) -> None:
        """C{server/discover} lists all five revisions and the capabilities, is cacheable
        publicly, and carries the server's identity in C{_meta}."""
        result = DemoClient(self, MODERN).result("server/discover")
        self.assertEqual(result["supportedVersions"], list(SUPPORTED_VERSIONS))
        self.assertEqual(sorted(result["supportedVersions"]), sorted(r.value for r in Revision))
        self.assertEqual(result["capabilities"], {"tools": {}, "prompts": {}, "resources": {}})
        self.assertEqual(result["resultType"], "complete")
        self.assertEqual(result["ttlMs"], CACHE_TTL_MS)
        self.assertEqual(result["cacheScope"], "public")
        self.assertIn("instructions", result)
        info = result["_meta"]["io.modelcontextprotocol/serverInfo"]
        self.assertEqual(info["name"], SERVER_NAME)
        self.assertNotIn("serverInfo", result)

    def test_tools_call(self) -> None:
        """A modern C{tools/call} is answered with structuredContent, resultType and the
        server's identity, without any handshake."""
        result = DemoClient(self, MODERN).call("add", {"a": 40, "b": 2})
        self.assertEqual(result["structuredContent"], {"sum": 42})
        self.assertEqual(result["resultType"], "complete")
        self.assertEqual(result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], SERVER_NAME)
        self.assertNotIn("ttlMs", result)

    def test_cache_hints(self) -> None:
        """Lists are cacheable publicly; a resource read privately."""
        client = DemoClient(self, MODERN)
        for method in ("tools/list", "prompts/list", "resources/list", "resources/templates/list"):
            result = client.result(method)
            self.assertEqual((result["ttlMs"], result["cacheScope"]), (CACHE_TTL_MS, "public"))
        read = client.result("resources/read", {"uri": README.uri})
        self.assertEqual((read["ttlMs"], read["cacheScope"]), (CACHE_TTL_MS, "private"))
        self.assertEqual(read["resultType"], "complete")

    def test_unsupported_version(self) -> None:
        """An unknown version in C{_meta} is -32022 naming what was asked and what the demo
        supports."""
        client = DemoClient(self)
        error = client.error("tools/list", {"_meta": modern_meta("2099-01-01")})
        self.assertEqual(error.code, UNSUPPORTED_PROTOCOL_VERSION)
        self.assertEqual(
            error.data, {"supported": list(SUPPORTED_VERSIONS), "requested": "2099-01-01"}
        )

    def test_version_must_be_a_string(self) -> None:
        """A C{_meta} version that is not a string is -32602."""
        client = DemoClient(self)
        self.assertEqual(
            client.error("tools/list", {"_meta": modern_meta(20260728)}).code, INVALID_PARAMS
        )

    def test_removed_methods(self) -> None:
        """C{initialize}, C{ping} and C{logging/setLevel} do not exist in 2026-07-28: -32601."""
        client = DemoClient(self, MODERN)
        for method, params in (
            ("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}}),
            ("ping", {}),
            ("logging/setLevel", {"level": "info"}),
            ("resources/subscribe", {"uri": README.uri}),
            ("no/such/method", {}),
        ):
            self.assertEqual(client.error(method, params).code, METHOD_NOT_FOUND, method)
        assert client.protocol.session is not None
        self.assertIsNone(client.protocol.session.revision)

    def test_unknown_resource(self) -> None:
        """2026-07-28 reports an unknown URI as -32602, never the retired -32002."""
        error = DemoClient(self, MODERN).error("resources/read", {"uri": "demo://nope"})
        self.assertEqual(error.code, INVALID_PARAMS)
        self.assertEqual(error.data, {"uri": "demo://nope"})

    def test_dual_era_connection(self) -> None:
        """After a legacy handshake, a request naming 2026-07-28 is still served as modern,
        and the next legacy request as the agreed revision."""
        client = connect(self, Revision.V2025_03_26)
        modern = client.result(
            "tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}, "_meta": modern_meta()}
        )
        self.assertEqual(modern["resultType"], "complete")
        self.assertEqual(modern["structuredContent"], {"sum": 2})
        legacy = client.call("add", {"a": 1, "b": 1})
        self.assertNotIn("resultType", legacy)
        self.assertNotIn("structuredContent", legacy)


class ToolTests(SynchronousTestCase):
    """What each tool does, and how bad input is reported."""

    def test_echo(self) -> None:
        """C{echo} returns its text as a text block."""
        result = connect(self, MODERN).call("echo", {"text": "hi there"})
        self.assertEqual(result["content"], [{"type": "text", "text": "hi there"}])

    def test_now(self) -> None:
        """C{now} tells the time of the injected clock, in ISO 8601 UTC."""
        client = connect(self, Revision.V2025_06_18)
        self.assertEqual(client.call("now")["content"][0]["text"], "2026-01-01T00:00:00.000Z")
        client.clock.advance(90.25)
        self.assertEqual(client.call("now")["content"][0]["text"], "2026-01-01T00:01:30.250Z")
        self.assertEqual(format_time(0), "1970-01-01T00:00:00.000Z")

    def test_fail(self) -> None:
        """C{fail} answers with a tool error, not a protocol error, carrying its message."""
        client = connect(self, Revision.V2024_11_05)
        default = client.call("fail")
        self.assertIs(default["isError"], True)
        self.assertIn("fail", default["content"][0]["text"])
        custom = client.call("fail", {"message": "boom"})
        self.assertEqual(custom, {"content": [{"type": "text", "text": "boom"}], "isError": True})

    def test_invalid_arguments(self) -> None:
        """Arguments that do not fit a tool give an isError result that names every problem,
        so the model can correct itself."""
        client = connect(self, MODERN)
        result = client.call("add", {"a": "2", "c": 1})
        self.assertIs(result["isError"], True)
        text = result["content"][0]["text"]
        self.assertIn("'a' must be a number, not a string", text)
        self.assertIn("missing required argument 'b'", text)
        self.assertIn("unexpected argument(s): 'c'", text)
        self.assertNotIn("structuredContent", result)
        self.assertIs(client.call("add", {"a": True, "b": 1})["isError"], True)
        self.assertIs(client.call("echo")["isError"], True)
        self.assertIs(client.call("now", {"x": 1})["isError"], True)

    def test_unrepresentable_sum(self) -> None:
        """A sum too large for JSON is a tool error rather than a broken answer."""
        result = connect(self, MODERN).call("add", {"a": 1e308, "b": 1e308})
        self.assertIs(result["isError"], True)

    def test_unknown_tool(self) -> None:
        """An unknown tool is -32602 in every revision."""
        for revision in ALL:
            error = connect(self, revision).error("tools/call", {"name": "nope"})
            self.assertEqual(error.code, INVALID_PARAMS, revision)
            self.assertIn("nope", error.message)

    def test_malformed_params(self) -> None:
        """A call without a tool name, or with arguments that are not an object, is -32602."""
        client = connect(self, Revision.V2025_11_25)
        self.assertEqual(client.error("tools/call", {}).code, INVALID_PARAMS)
        self.assertEqual(
            client.error("tools/call", {"name": "echo", "arguments": ["x"]}).code, INVALID_PARAMS
        )
        [reply] = client.raw(b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":[1]}\n')
        self.assertEqual(reply["error"]["code"], INVALID_PARAMS)

    def test_prompt_arguments(self) -> None:
        """C{greet} without its C{name}, or an unknown prompt, is -32602."""
        client = connect(self, MODERN)
        self.assertEqual(client.error("prompts/get", {"name": "greet"}).code, INVALID_PARAMS)
        self.assertEqual(
            client.error("prompts/get", {"name": "greet", "arguments": {"name": 3}}).code,
            INVALID_PARAMS,
        )
        self.assertEqual(client.error("prompts/get", {"name": "nope"}).code, INVALID_PARAMS)


class ProtocolTests(SynchronousTestCase):
    """The demo on a byte stream."""

    def test_oversized_message(self) -> None:
        """A line over the limit is answered with -32600 and a null id, and the connection
        goes on."""
        server = DemoServer(Clock())
        protocol = DemoProtocol(server, max_length=100)
        transport = StringTransport()
        protocol.makeConnection(transport)
        protocol.dataReceived(b'{"padding":"' + b"x" * 200 + b'"}\n')
        protocol.dataReceived(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
        first, second = (json.loads(line) for line in transport.value().splitlines())
        self.assertEqual((first["id"], first["error"]["code"]), (None, INVALID_REQUEST))
        self.assertEqual(second, {"jsonrpc": "2.0", "id": 1, "result": {}})

    def test_end_of_input_closes(self) -> None:
        """When the client closes its side, the demo closes the connection, and waiters
        learn of it once it is closed."""
        client = DemoClient(self)
        waiting = client.protocol.when_closed()
        client.protocol.readConnectionLost()
        self.assertTrue(client.transport.disconnecting)
        self.assertNoResult(waiting)
        client.protocol.connectionLost(Failure(ConnectionDone()))
        self.assertIsNone(self.successResultOf(waiting))
        self.assertIsNone(self.successResultOf(client.protocol.when_closed()))
        self.assertEqual(client.raw(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'), [])


def lines_of(data: bytes) -> Iterable[bytes]:
    return (line for line in data.split(b"\n") if line)


class ProcessTests(TestCase):
    """C{python -m mcpx.demo} as a real child process on pipes."""

    async def test_stdio_session(self) -> None:
        """
        A legacy handshake and an C{echo} call work over the child's stdin and stdout,
        stdout carries nothing but JSON-RPC lines, and closing stdin makes it exit 0.
        """
        child = spawn([sys.executable, "-m", "mcpx.demo"], cwd=str(REPO))
        self.addCleanup(kill_on_cleanup, child)
        assert child.transport is not None
        child.transport.write(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": CLIENT_INFO,
                    },
                }
            ).encode()
            + b"\n"
        )
        await child.wait_for(rb'"id":1,[^\n]*\n', fd=1, timeout=20)
        # ChildProcess fires its waiters from inside its own scan of them; carry on from a
        # later reactor turn so that a new wait_for does not re-enter that scan.
        await deferLater(reactor, 0, lambda: None)
        child.transport.write(
            b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
            b'{"jsonrpc":"2.0","id":2,"method":"tools/call",'
            b'"params":{"name":"echo","arguments":{"text":"over pipes"}}}\n'
        )
        await child.wait_for(rb'"id":2,[^\n]*\n', fd=1, timeout=20)
        child.transport.closeStdin()
        code = await child.ended(timeout=10)
        self.assertEqual(code, 0, child.text())

        messages = [json.loads(line) for line in lines_of(bytes(child.output[1]))]
        self.assertEqual([m["id"] for m in messages], [1, 2])
        self.assertEqual(messages[0]["result"]["protocolVersion"], "2025-06-18")
        self.assertEqual(
            messages[1]["result"], {"content": [{"type": "text", "text": "over pipes"}]}
        )
        self.assertTrue(all(m["jsonrpc"] == "2.0" for m in messages))
        self.assertIn("serving MCP on stdio", child.text(2))

    async def test_exits_when_its_client_dies_mid_flood(self) -> None:
        """
        A client that sent far more than it read and then died leaves no demo behind:
        with answers backed up the demo had stopped reading, so only the broken stdout
        tells it the client is gone, and it exits on that.
        """
        script = (
            "import os, subprocess, sys, time\n"
            "demo = subprocess.Popen([sys.executable, '-m', 'mcpx.demo'],"
            " stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)\n"
            "print(demo.pid, flush=True)\n"
            "os.set_blocking(demo.stdin.fileno(), False)\n"
            'line = b\'{"jsonrpc":"2.0","id":1,"method":"ping"}\\n\' * 200\n'
            "blocked = 0\n"
            "while blocked < 20:\n"
            "    try:\n"
            "        demo.stdin.write(line)\n"
            "    except BlockingIOError:\n"
            "        blocked += 1\n"
            "        time.sleep(0.05)\n"
            "os._exit(0)\n"
        )
        child = spawn([sys.executable, "-c", script], cwd=str(REPO))
        self.addCleanup(kill_on_cleanup, child)
        self.assertEqual(await child.ended(timeout=60), 0, child.text())
        demo = int(child.text(1).split()[0])
        self.addCleanup(kill_if_running, demo)
        for _ in range(300):
            if not running(demo):
                break
            await deferLater(reactor, 0.1, lambda: None)
        self.assertFalse(running(demo), "the demo outlived its client")

    async def test_no_reactor_at_import(self) -> None:
        """Importing the demo's modules does not install a reactor."""
        script = (
            "import sys, mcpx.demo, mcpx.demo.__main__, mcpx.demo.server, mcpx.demo.catalogue\n"
            "print('twisted.internet.reactor' in sys.modules)\n"
        )
        child = spawn([sys.executable, "-c", script], cwd=str(REPO))
        self.addCleanup(kill_on_cleanup, child)
        self.assertEqual(await child.ended(timeout=20), 0, child.text())
        self.assertEqual(child.text(1).strip(), "False")


def running(pid: int) -> bool:
    """Whether C{pid} is a live process (a zombie waiting to be reaped is not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def kill_if_running(pid: int) -> None:
    if running(pid):
        os.kill(pid, signal.SIGKILL)


class CountdownTests(SynchronousTestCase):
    """C{countdown}: progress on the injected clock."""

    def test_progress_reports(self) -> None:
        """Each step is reported for the request's token, on the clock, with the total and
        (from 2025-03-26) a message; the result comes after the last step."""
        client = connect(self, Revision.V2025_06_18)
        result = client.countdown(3, 1.5, token="t")
        self.assertEqual(
            client.progress(),
            [
                {"progressToken": "t", "progress": 1, "total": 3, "message": "2 to go"},
                {"progressToken": "t", "progress": 2, "total": 3, "message": "1 to go"},
                {"progressToken": "t", "progress": 3, "total": 3, "message": "lift-off"},
            ],
        )
        self.assertEqual(result["content"][0]["text"], "Lift-off after 3 step(s), 1.5s apart.")
        self.assertEqual(client.clock.seconds(), EPOCH + 4.5)
        old = connect(self, Revision.V2024_11_05)
        old.countdown(1, 0, token=7)
        self.assertEqual(old.progress(), [{"progressToken": 7, "progress": 1, "total": 1}])

    def test_modern(self) -> None:
        """A 2026-07-28 countdown reports progress the same way and completes."""
        client = connect(self, MODERN)
        result = client.countdown(2, 1)
        self.assertEqual([p["progress"] for p in client.progress()], [1, 2])
        self.assertEqual(result["resultType"], "complete")

    def test_no_token(self) -> None:
        """Without a progress token the countdown still waits, silently."""
        client = connect(self, Revision.V2025_11_25)
        result = client.countdown(2, 1, token=None)
        self.assertEqual(client.sent, [])
        self.assertNotIn("isError", result)

    def test_cancelled(self) -> None:
        """A cancelled countdown answers nothing, reports nothing more and leaves nothing
        scheduled on the clock; so does one whose connection closes."""
        client = connect(self, Revision.V2025_11_25)
        calling = client.request(
            "tools/call",
            {"name": "countdown", "arguments": {"steps": 5}, "_meta": {"progressToken": 1}},
        )
        client.clock.advance(1)
        client.deliver()
        self.assertEqual(len(client.progress()), 1)
        calling.cancel()
        self.failureResultOf(calling)
        self.assertEqual(client.clock.getDelayedCalls(), [])
        client.clock.advance(10)
        client.deliver()
        self.assertEqual(len(client.progress()), 1)

        other = connect(self, Revision.V2025_11_25)
        other.request("tools/call", {"name": "countdown", "arguments": {"steps": 5}})
        other.protocol.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(other.clock.getDelayedCalls(), [])

    def test_bad_arguments(self) -> None:
        """Steps must be a whole number from 1 to 100 and the interval at most 10 seconds;
        anything else is a tool error at once, naming the limit."""
        client = connect(self, MODERN)
        for arguments, expected in (
            ({"steps": 0}, "'steps' must be at least 1"),
            ({"steps": 101}, "'steps' must be at most 100"),
            ({"steps": 2.5}, "'steps' must be an integer"),
            ({"steps": 1, "interval": 11}, "'interval' must be at most 10"),
            ({"steps": 1, "interval": -1}, "'interval' must be at least 0"),
        ):
            result = client.call("countdown", arguments)
            self.assertIs(result["isError"], True, arguments)
            self.assertIn(expected, result["content"][0]["text"])
        self.assertNotIn("isError", client.countdown(1, 0.0, token=None))
        tool = {t["name"]: t for t in client.result("tools/list")["tools"]}["countdown"]
        steps = tool["inputSchema"]["properties"]["steps"]
        self.assertEqual((steps["type"], steps["minimum"], steps["maximum"]), ("integer", 1, 100))


class AskTests(SynchronousTestCase):
    """C{ask}: a question to the user, by request (legacy) or by result (2026-07-28)."""

    def test_legacy_request(self) -> None:
        """In 2025-06-18 and 2025-11-25, C{ask} sends the client an C{elicitation/create}
        form with the question and returns the user's answer."""
        for revision in (Revision.V2025_06_18, Revision.V2025_11_25):
            client = connect(self, revision, elicitation_capabilities(revision))
            result = client.ask("Favourite colour?")
            self.assertEqual(result["content"][0]["text"], "The user answered: Ada")
            [request] = client.sent
            self.assertEqual(request["method"], "elicitation/create")
            self.assertEqual(request["params"]["message"], "Favourite colour?")
            self.assertEqual(request["params"]["requestedSchema"]["required"], ["answer"])

    def test_other_answers(self) -> None:
        """Declining and dismissing are told apart; a client error or a malformed answer is
        a tool error."""
        client = connect(self, Revision.V2025_11_25, {"elicitation": {}})
        client.elicit_reply = {"action": "decline"}
        self.assertIn("declined", client.ask()["content"][0]["text"])
        client.elicit_reply = {"action": "cancel"}
        self.assertIn("dismissed", client.ask()["content"][0]["text"])
        for reply in ({"action": "accept"}, {"action": "maybe"}, RpcError.internal_error("no")):
            client.elicit_reply = reply
            self.assertIs(client.ask()["isError"], True, reply)

    def test_no_answer(self) -> None:
        """A client that never answers gets the question withdrawn after L{ASK_TIMEOUT} and
        the call ends with a tool error."""
        client = connect(self, Revision.V2025_06_18, {"elicitation": {}})
        client.elicit_reply = Deferred()
        calling = client.request("tools/call", {"name": "ask"})
        self.assertNoResult(calling)
        client.clock.advance(ASK_TIMEOUT)
        client.deliver()
        result = self.successResultOf(calling)
        self.assertIn("nobody answered", result["content"][0]["text"])
        self.assertEqual(
            [m["method"] for m in client.sent], ["elicitation/create", "notifications/cancelled"]
        )

    def test_cannot_ask(self) -> None:
        """A client that declared no elicitation, or only URL mode, or speaks a revision
        without elicitation, gets a tool error saying the question cannot be asked, and the
        demo sends it nothing."""
        cases: list[tuple[Revision, dict[str, Any]]] = [
            (Revision.V2024_11_05, {}),
            (Revision.V2025_06_18, {}),
            (Revision.V2025_11_25, {"elicitation": {"url": {}}}),
            (MODERN, {}),
            (MODERN, {"elicitation": {"url": {}}}),
        ]
        for revision, capabilities in cases:
            client = connect(self, revision, capabilities)
            result = client.call("ask")
            self.assertIs(result["isError"], True, revision)
            self.assertIn("did not declare", result["content"][0]["text"])
            self.assertEqual(client.sent, [])

    def test_modern_round_trip(self) -> None:
        """In 2026-07-28 the question comes back as an C{input_required} result; the call
        sent again with the answer and the same C{requestState} completes."""
        client = connect(self, MODERN, {"elicitation": {}})
        first = client.call("ask", {"question": "Why?"})
        self.assertEqual(first["resultType"], "input_required")
        request = first["inputRequests"]["answer"]
        self.assertEqual(request["method"], "elicitation/create")
        self.assertEqual(request["params"]["message"], "Why?")
        final = client.call(
            "ask",
            {"question": "Why?"},
            inputResponses={"answer": {"action": "accept", "content": {"answer": "because"}}},
            requestState=first["requestState"],
        )
        self.assertEqual(final["content"][0]["text"], "The user answered: because")
        self.assertEqual(final["resultType"], "complete")
        self.assertEqual(client.sent, [])

    def test_modern_retry_without_answer(self) -> None:
        """A retry lacking the answer, or carrying the state of another question, is asked
        again rather than failed."""
        client = connect(self, MODERN, {"elicitation": {"form": {}}})
        state = client.call("ask", {"question": "A?"})["requestState"]
        answer = {"answer": ACCEPTED}
        for question, extra in (
            ("A?", {"requestState": state}),
            ("A?", {"requestState": state, "inputResponses": {}}),
            ("A?", {"requestState": "forged", "inputResponses": answer}),
            ("B?", {"requestState": state, "inputResponses": answer}),
        ):
            again = client.call("ask", {"question": question}, **extra)
            self.assertEqual(again["resultType"], "input_required", (question, extra))
        done = client.call("ask", {"question": "A?"}, requestState=state, inputResponses=answer)
        self.assertEqual(done["resultType"], "complete")

    def test_capabilities_do_not_carry_over(self) -> None:
        """A 2026-07-28 request is judged by its own capabilities, not by those a legacy
        handshake on the same connection declared."""
        client = connect(self, Revision.V2025_11_25, {"elicitation": {}})
        result = client.call("ask", _meta=modern_meta())
        self.assertIs(result["isError"], True)
