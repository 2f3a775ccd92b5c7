"""
A real daemon with C{daemon.auth} the C{oauth} object, against the stand-in
authorization server served on a loopback port by this test: the daemon fetches the
issuer's metadata and keys over the network, as it would from an identity provider.
"""

from __future__ import annotations

import json
import sys
import tempfile
from typing import Any

from treq.client import HTTPClient
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers
from twisted.web.server import Site

from mcpx.auth.metadata import parse_challenge
from tests.auth.standin_issuer import StandInIssuer
from tests.daemon.test_process import daemon_environ
from tests.support.processes import ChildProcess, free_tcp_port, kill_on_cleanup, reactor, spawn

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


class OAuthDaemonTests(TestCase):
    timeout = 60

    def setUp(self) -> None:
        issuer_port = reactor.listenTCP(0, Site(StandInIssuer()), interface="127.0.0.1")
        self.addCleanup(issuer_port.stopListening)
        issuer = f"http://127.0.0.1:{issuer_port.getHost().port}/realms/tools"
        self.issuer = StandInIssuer(issuer)
        issuer_port.factory.resource = self.issuer
        self.port = free_tcp_port()
        self.audience = f"http://127.0.0.1:{self.port}/mcp"
        self.env = daemon_environ(
            tempfile.mkdtemp(prefix="mcpx-state-"), tempfile.mkdtemp(prefix="mcpx-cfg-")
        )
        self.env["MCPX_DAEMON_AUTH"] = json.dumps(
            {"type": "oauth", "issuer": issuer, "audience": self.audience, "scopes": ["mcp:tools"]}
        )

    async def start_daemon(self) -> ChildProcess:
        argv = [sys.executable, "-m", "mcpx", "daemon"]
        argv += ["--daemon-listen", f"tcp:{self.port}:interface=127.0.0.1"]
        child = spawn(argv, env=self.env)
        self.addCleanup(self.stop, child)
        await child.wait_for(rb"upstream servers: demo")
        return child

    async def stop(self, child: ChildProcess) -> None:
        if child.exit_code is None:
            child.signal("TERM")
            try:
                await child.ended(timeout=15)
            finally:
                kill_on_cleanup(child)

    async def request(
        self,
        method: str,
        path: str,
        token: str | None = None,
        body: Any = None,
        session: str | None = None,
    ) -> tuple[int, dict[str, list[str]], bytes]:
        headers = dict(MCP_HEADERS) if path == "/mcp" else {}
        if session is not None:
            headers["Mcp-Session-Id"] = session
            headers["MCP-Protocol-Version"] = "2025-06-18"
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        # No kept connections: a test leaves nothing behind in the reactor.
        client = HTTPClient(Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False)))
        response = await client.request(
            method,
            f"http://127.0.0.1:{self.port}{path}",
            headers=Headers({k: [v] for k, v in headers.items()}),
            data=None if body is None else json.dumps(body).encode(),
        )
        content = await response.content()
        found = {
            k.decode().lower(): [v.decode() for v in vs]
            for k, vs in response.headers.getAllRawHeaders()
        }
        return response.code, found, content

    def mint(self, **claims: Any) -> str:
        return self.issuer.mint(reactor.seconds(), aud=self.audience, **claims)

    async def test_tokens_at_v1_and_mcp(self) -> None:
        """
        /v1 and /mcp: 401 and the challenge without a token, through with a good one,
        403 insufficient_scope without the scope; the metadata names the issuer.
        """
        await self.start_daemon()
        for method, path, body in (("GET", "/v1/servers", None), ("POST", "/mcp", INITIALIZE)):
            code, headers, _ = await self.request(method, path, body=body)
            self.assertEqual(code, 401, path)
            challenge = parse_challenge(headers["www-authenticate"])
            assert challenge is not None
            self.assertEqual(
                challenge.resource_metadata,
                f"http://127.0.0.1:{self.port}/.well-known/oauth-protected-resource/mcp",
            )
            code, _, answer = await self.request(method, path, self.mint(), body)
            self.assertEqual(code, 200, (path, answer))
            code, headers, _ = await self.request(method, path, self.mint(scope="profile"), body)
            self.assertEqual(code, 403, path)
            challenge = parse_challenge(headers["www-authenticate"])
            assert challenge is not None
            self.assertEqual(challenge.error, "insufficient_scope")
        code, _, document = await self.request("GET", "/.well-known/oauth-protected-resource/mcp")
        self.assertEqual(code, 200)
        self.assertEqual(json.loads(document)["authorization_servers"], [self.issuer.issuer])

    async def test_unknown_kid_within_a_minute(self) -> None:
        """
        A token of a key the daemon has not seen, within a minute of its last fetch, is
        refused without asking the issuer again (the unit tests in
        L{tests.auth.test_resource_server.RotationTests} take the clock past the minute).
        """
        await self.start_daemon()
        code, _, _ = await self.request("GET", "/v1/servers", self.mint())
        self.assertEqual(code, 200)
        self.issuer.rotate()
        # The daemon fetched the keys just now; it asks again only after a minute.
        code, _, _ = await self.request("GET", "/v1/servers", self.mint(kid="k2"))
        self.assertEqual(code, 401)
        self.assertEqual(self.issuer.requests.count("/realms/tools/certs"), 1)

    async def test_session_bound_to_subject(self) -> None:
        """
        A session opened with alice's token is no session at all to bob's (404 on POST,
        GET and DELETE), and goes on working for alice.
        """
        await self.start_daemon()
        alice, bob = self.mint(sub="alice"), self.mint(sub="bob")
        code, headers, _ = await self.request("POST", "/mcp", alice, INITIALIZE)
        self.assertEqual(code, 200)
        (session,) = headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        code, _, _ = await self.request("POST", "/mcp", bob, listing, session)
        self.assertEqual(code, 404)
        code, _, _ = await self.request("GET", "/mcp", bob, session=session)
        self.assertEqual(code, 404)
        code, _, _ = await self.request("DELETE", "/mcp", bob, session=session)
        self.assertEqual(code, 404)
        code, _, answer = await self.request("POST", "/mcp", alice, listing, session)
        self.assertEqual(code, 200, answer)
        self.assertIn(b'"tools"', answer)
