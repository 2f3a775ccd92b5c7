"""
The host's token stays at the daemon: a real daemon behind C{daemon.auth} (an OAuth
access token, or the daemon's own bearer token) calls an HTTP upstream that records
every request's headers, and no header of any request carries the host's token
(the specification forbids token passthrough).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from twisted.trial.unittest import TestCase
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from tests.daemon import test_bearer_process as bearer
from tests.support.daemons import daemon_environ, start_daemon
from tests.support.oauth import oauth_auth, serve_issuer
from tests.support.processes import ChildProcess, free_tcp_port, reactor


class RecordingUpstream(Resource):
    """A 2025-06-18 MCP server with one tool, C{echo}, that keeps every request's headers."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[list[tuple[bytes, bytes]]] = []

    def _record(self, request: Request) -> None:
        self.seen.append(
            [
                (name, value)
                for name, values in request.requestHeaders.getAllRawHeaders()
                for value in values
            ]
        )

    def render_GET(self, request: Request) -> bytes:
        self._record(request)
        request.setResponseCode(405)
        return b""

    def render_DELETE(self, request: Request) -> bytes:
        self._record(request)
        return b""

    def render_POST(self, request: Request) -> bytes:
        self._record(request)
        assert request.content is not None
        message = json.loads(request.content.read())
        if "id" not in message:
            request.setResponseCode(202)
            return b""
        method = message.get("method")
        result: dict[str, Any]
        if method == "initialize":
            result = {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "recording", "version": "1"},
            }
        elif method == "tools/list":
            tool = {"name": "echo", "inputSchema": {"type": "object", "properties": {}}}
            result = {"tools": [tool]}
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": "echoed"}]}
        else:
            result = {}
        request.setHeader(b"content-type", b"application/json")
        return json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()


class NoPassthroughTests(TestCase):
    timeout = 60

    # The bearer tests' requests, borrowed (their test methods are not).
    request: Any = bearer.OAuthDaemonTests.request
    modern: Any = bearer.OAuthDaemonTests.modern

    def setUp(self) -> None:
        self.upstream = RecordingUpstream()
        upstream_port = reactor.listenTCP(0, Site(self.upstream), interface="127.0.0.1")
        self.addCleanup(upstream_port.stopListening)
        self.port = free_tcp_port()
        self.state_dir = tempfile.mkdtemp(prefix="mcpx-state-")
        config_home = tempfile.mkdtemp(prefix="mcpx-cfg-")
        url = f"http://127.0.0.1:{upstream_port.getHost().port}/mcp"
        (Path(config_home) / "mcpx").mkdir()
        (Path(config_home) / "mcpx" / "config.json").write_text(
            json.dumps({"servers": {"rec": {"url": url}}})
        )
        self.env = daemon_environ(self.state_dir, config_home)
        self.env["MCPX_MCP_PASSTHROUGH"] = "rec"

    async def start_daemon(self) -> ChildProcess:
        return await start_daemon(self, self.env, self.port)

    async def call_every_way(self, token: str) -> None:
        """The upstream's tool called by name through /mcp, by mcpx_call, and at /v1/call."""
        listed = await self.modern(token, "tools/list", {}, bearer.FORMS)
        names = [tool["name"] for tool in listed["result"]["tools"]]
        (passed_through,) = [name for name in names if name.endswith("echo")]
        for name, arguments in (
            (passed_through, {}),
            ("mcpx_call", {"server": "rec", "tool": "echo", "arguments": {}}),
        ):
            params = {"name": name, "arguments": arguments}
            answer = await self.modern(token, "tools/call", params, bearer.FORMS)
            self.assertEqual(answer["result"]["content"][0]["text"], "echoed", answer)
        body = {"server": "rec", "tool": "echo", "arguments": {}}
        code, _, content = await self.request("POST", "/v1/call", token, body)
        self.assertEqual(code, 200, content)
        self.assertIn(b"echoed", content)

    def assertNeverForwarded(self, token: str) -> None:
        # The handshake, the listing and the three calls at least.
        self.assertGreaterEqual(len(self.upstream.seen), 5, "the upstream was not called")
        for headers in self.upstream.seen:
            for name, value in headers:
                self.assertNotIn(
                    token.encode(), value, f"the host's token went upstream in {name!r}"
                )

    async def test_oauth_access_token_stays_at_the_daemon(self) -> None:
        issuer = serve_issuer(self)
        audience = f"http://127.0.0.1:{self.port}/mcp"
        self.env["MCPX_DAEMON_AUTH"] = oauth_auth(issuer, audience)
        await self.start_daemon()
        alice = issuer.mint(reactor.seconds(), aud=audience, sub="alice")
        await self.call_every_way(alice)
        self.assertNeverForwarded(alice)

    async def test_daemon_bearer_token_stays_at_the_daemon(self) -> None:
        self.env["MCPX_DAEMON_AUTH"] = "token"
        await self.start_daemon()
        token = (Path(self.state_dir) / "token").read_text().strip()
        await self.call_every_way(token)
        self.assertNeverForwarded(token)
