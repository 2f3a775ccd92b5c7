"""
Properties of C{/mcp} in front of the real L{McpServer}, driven in memory: whatever the body
and headers, the answer is never a 500, and every JSON-RPC message in it is well formed.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, note
from hypothesis import strategies as st
from treq.testing import StubTreq
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.server.dispatch import McpServer
from mcpx.server.http import McpHTTP
from mcpx.server.request_context import SUPPORTED_VERSIONS
from mcpx.wire import jsontext
from mcpx.wire.sse import SSEDecoder
from tests.daemon.fake_pool import FakePool, daemon_http, default_settings, result_of
from tests.properties import bounded, hostile_bytes, json_objects, json_values
from tests.properties.test_http_v1 import watching_failures
from tests.server import gateway_servers, servers_config

URL = "http://127.0.0.1:8899/mcp"
BOTH = "application/json, text/event-stream"
PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"

METHODS = (
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "completion/complete",
    "logging/setLevel",
    "tasks/get",
    "tasks/result",
    "notifications/initialized",
    "notifications/cancelled",
)

#: Header values are visible ASCII (Twisted refuses control bytes before mcpx sees them).
versions = st.sampled_from(SUPPORTED_VERSIONS) | st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=12
)

#: Params that often look like what a method takes, with the modern _meta some of the time.
params = st.one_of(
    json_objects,
    st.fixed_dictionaries(
        {},
        optional={
            "protocolVersion": versions,
            "capabilities": json_objects,
            "name": st.sampled_from(["mcpx_call", "mcpx_list", "files", "search"]) | json_values,
            "arguments": json_objects,
            "uri": st.sampled_from(["mcpx://files/x", "file:///a.txt", ""]) | json_values,
            "cursor": json_values,
            "level": json_values,
            "_meta": st.fixed_dictionaries(
                {}, optional={PROTOCOL_VERSION: versions, CLIENT_CAPABILITIES: json_values}
            ),
        },
    ),
)


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": draw(st.sampled_from(METHODS))}
    if draw(st.booleans()):
        message["id"] = draw(st.integers(-5, 5) | st.text(max_size=4))
    if draw(st.booleans()):
        message["params"] = draw(params)
    return message


bodies = st.one_of(
    messages().map(lambda m: json.dumps(m).encode()),
    st.lists(messages(), min_size=1, max_size=3).map(lambda ms: json.dumps(ms).encode()),
    hostile_bytes,
)


class McpProperties(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()

    def daemon(self) -> Any:
        daemon = daemon_http(
            clock=self.clock,
            pid=1,
            pool=FakePool(gateway_servers()),
            settings=default_settings(),
            servers=servers_config("files", "search"),
        )
        daemon.mcp = McpHTTP(McpServer(daemon.host, self.clock), self.clock)
        # StubTreq grows its request methods at run time, so mypy cannot see them.
        stub: Any = StubTreq(daemon.resource())
        return stub

    def post(self, stub: Any, body: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
        sent = {"Content-Type": "application/json", "Accept": BOTH, **headers}
        started = stub.request("POST", URL, data=body, headers=sent)
        stub.flush()
        response = result_of(started)
        content: bytes = result_of(response.content())
        kind = (response.headers.getRawHeaders(b"content-type") or [b""])[0].decode()
        return response.code, kind, content

    def check_message(self, message: Any) -> None:
        self.assertIsInstance(message, dict)
        self.assertEqual(message.get("jsonrpc"), "2.0", message)
        if "method" in message:
            return
        self.assertIn("id", message)
        self.assertNotEqual("result" in message, "error" in message, message)
        if "error" in message:
            error = message["error"]
            self.assertIs(type(error.get("code")), int, message)
            self.assertIs(type(error.get("message")), str, message)

    def check_answer(self, code: int, kind: str, content: bytes) -> None:
        self.assertNotEqual(code, 500, content[:300])
        self.assertLess(code, 600)
        if not content:
            self.assertIn(code, (200, 202, 204), kind)
            return
        if kind.startswith("text/event-stream"):
            found = [json.loads(event.data) for event in SSEDecoder().feed(content)]
        else:
            self.assertEqual(kind, "application/json", content[:300])
            decoded = json.loads(content)
            found = decoded if type(decoded) is list else [decoded]
        for message in found:
            self.check_message(message)

    @bounded(250)
    @given(bodies, st.one_of(st.none(), versions), st.sampled_from(["none", "valid", "junk"]))
    def test_any_post_is_well_formed(self, body: bytes, version: str | None, session: str) -> None:
        """
        Any body, under any MCP-Protocol-Version, outside a session, inside a real one or
        under an unknown session id, is answered without a 500, with well-formed JSON-RPC,
        and logs no failure.
        """
        stub = self.daemon()
        headers: dict[str, str] = {}
        with watching_failures() as watch:
            if session == "valid":
                hello = {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {"protocolVersion": "2025-03-26", "capabilities": {}},
                }
                started = stub.request(
                    "POST",
                    URL,
                    data=json.dumps(hello).encode(),
                    headers={"Content-Type": "application/json", "Accept": BOTH},
                )
                stub.flush()
                response = result_of(started)
                headers["Mcp-Session-Id"] = response.headers.getRawHeaders(b"mcp-session-id")[
                    0
                ].decode()
                result_of(response.content())
            elif session == "junk":
                headers["Mcp-Session-Id"] = "no-such-session"
            if version is not None:
                headers["MCP-Protocol-Version"] = version
                method = _method_of(body)
                if method is not None:
                    headers["Mcp-Method"] = method
            code, kind, content = self.post(stub, body, headers)
            note(f"sent {headers} {body[:200]!r}; got {code} {kind} {content[:200]!r}")
            self.check_answer(code, kind, content)
        self.assertEqual(watch.failures, [])


def _method_of(body: bytes) -> str | None:
    try:
        decoded = jsontext.loads(body)
    except jsontext.JSONRefused:
        return None
    method = decoded.get("method") if type(decoded) is dict else None
    return method if type(method) is str and method.isascii() and method.isprintable() else None
