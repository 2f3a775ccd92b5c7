"""
No token is ever printed: a real daemon whose C{/mcp} and C{/v1} take OAuth access
tokens (the stand-in issuer), with two OAuth upstreams of the same issuer (one by the
client-credentials grant with a client secret, one signed in through C{/v1/auth} with
a refresh token), used, then refused (every token revoked, the refused token quoted
back in the upstream's 401).  Everything a user or a program can read of the daemon
(its debug log, C{/v1/events}, C{/v1/servers}, C{/v1/auth}, the answers and errors of
the calls, C{/mcp}'s answers) holds neither an access token, a refresh token, a client
secret nor the host's own token.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from treq.client import HTTPClient
from twisted.internet.defer import Deferred
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers
from twisted.web.server import Request, Site

from tests.auth.standin_issuer import StandInIssuer
from tests.daemon import test_bearer_process as bearer
from tests.daemon.test_no_passthrough import RecordingUpstream
from tests.support.daemons import daemon_environ, start_daemon, stop_daemon
from tests.support.oauth import oauth_auth, serve_issuer
from tests.support.processes import free_tcp_port, reactor

ROBOT_SECRET = "robot-secret-4f1c9a7e2b"
APP_SECRET = "app-secret-9d3e5b1a7c"


class ProtectedUpstream(RecordingUpstream):
    """
    A 2025-06-18 MCP server that takes only tokens the issuer issued and has not been
    told are revoked; its 401 quotes the refused token back, as careless servers do.
    """

    def __init__(self, issuer: StandInIssuer) -> None:
        super().__init__()
        self.issuer = issuer
        self.revoked: set[str] = set()
        self.url = ""

    def render_GET(self, request: Request) -> bytes:
        if request.path == b"/.well-known/oauth-protected-resource/mcp":
            request.setHeader(b"content-type", b"application/json")
            document = {"resource": self.url, "authorization_servers": [self.issuer.issuer]}
            return json.dumps(document).encode()
        return super().render_GET(request)

    def render_POST(self, request: Request) -> bytes:
        header = (request.getHeader(b"authorization") or b"").decode()
        token = header.removeprefix("Bearer ")
        if token not in self.issuer.issued or token in self.revoked:
            self._record(request)
            metadata = self.url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
            request.setResponseCode(401)
            request.setHeader(
                b"www-authenticate",
                f'Bearer error="invalid_token", resource_metadata="{metadata}"'.encode(),
            )
            request.setHeader(b"content-type", b"application/json")
            refusal = {"error": "invalid_token", "error_description": f"{token!r} is revoked"}
            return json.dumps(refusal).encode()
        return super().render_POST(request)


class _Collect(Protocol):
    def __init__(self, into: bytearray) -> None:
        self.into = into
        self.done: Deferred[None] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.into.extend(data)

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:  # noqa: B008
        self.done.callback(None)


class NoTokenLeakTests(TestCase):
    timeout = 90

    request: Any = bearer.OAuthDaemonTests.request
    modern: Any = bearer.OAuthDaemonTests.modern

    def serve(self, resource: Any) -> Any:
        port = reactor.listenTCP(0, Site(resource), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        return port

    def setUp(self) -> None:
        self.issuer = serve_issuer(self)
        self.issuer.metadata["authorization_response_iss_parameter_supported"] = True
        self.issuer.client_secrets.update({"robot": ROBOT_SECRET, "app": APP_SECRET})
        self.upstreams: dict[str, ProtectedUpstream] = {}
        servers: dict[str, Any] = {}
        auths = {
            "machine": {
                "type": "oauth",
                "grant": "client_credentials",
                "clientId": "robot",
                "clientSecret": "${ROBOT_SECRET}",
            },
            "signed": {"type": "oauth", "clientId": "app", "clientSecret": "${APP_SECRET}"},
        }
        for name, auth in auths.items():
            upstream = ProtectedUpstream(self.issuer)
            upstream.url = f"http://127.0.0.1:{self.serve(upstream).getHost().port}/mcp"
            self.upstreams[name] = upstream
            servers[name] = {"url": upstream.url, "auth": auth}
        self.port = free_tcp_port()
        self.audience = f"http://127.0.0.1:{self.port}/mcp"
        config_home = tempfile.mkdtemp(prefix="mcpx-cfg-")
        (Path(config_home) / "mcpx").mkdir()
        (Path(config_home) / "mcpx" / "config.json").write_text(json.dumps({"servers": servers}))
        self.env = daemon_environ(tempfile.mkdtemp(prefix="mcpx-state-"), config_home)
        self.env.update(
            {
                "ROBOT_SECRET": ROBOT_SECRET,
                "APP_SECRET": APP_SECRET,
                "MCPX_DAEMON_LOG_LEVEL": "debug",
                "MCPX_DAEMON_AUTH": oauth_auth(self.issuer, self.audience),
            }
        )
        #: Everything read from the daemon, to be searched at the end.
        self.seen = bytearray()

    async def read(self, method: str, path: str, token: str, body: Any = None) -> Any:
        code, headers, content = await self.request(method, path, token, body)
        self.seen.extend(json.dumps(headers).encode() + content)
        return code, json.loads(content) if content else None

    async def open_events(self, token: str) -> Deferred[None]:
        client = HTTPClient(Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False)))
        response = await client.get(
            f"http://127.0.0.1:{self.port}/v1/events",
            headers=Headers({"Authorization": [f"Bearer {token}"]}),
        )
        collector = _Collect(self.seen)
        response.deliverBody(collector)
        return collector.done

    async def sign_in(self, token: str) -> None:
        """The sign-in to C{signed} through /v1/auth, the test playing the browser."""
        code, begun = await self.read(
            "POST", "/v1/auth/signed/begin", token, {"redirect_uri": "http://127.0.0.1:9/cb"}
        )
        self.assertEqual(code, 200, begun)
        client = HTTPClient(Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False)))
        response = await client.get(begun["url"], allow_redirects=False)
        await response.content()
        (location,) = response.headers.getRawHeaders(b"location")
        code, finished = await self.read(
            "POST", "/v1/auth/signed/finish", token, {"url": location.decode()}
        )
        self.assertEqual(code, 200, finished)
        self.assertEqual(finished["server"]["state"], "signed_in")

    async def test_no_token_anywhere(self) -> None:
        child = await start_daemon(self, self.env, self.port)
        host = self.issuer.mint(reactor.seconds(), aud=self.audience, sub="alice")
        events_ended = await self.open_events(host)

        await self.sign_in(host)
        for name in ("machine", "signed"):
            code, answer = await self.read(
                "POST", "/v1/call", host, {"server": name, "tool": "echo", "arguments": {}}
            )
            self.assertEqual(code, 200, answer)
        listed = await self.modern(host, "tools/list", {}, bearer.FORMS)
        self.seen.extend(json.dumps(listed).encode())
        # A refresh token came with the sign-in, and the upstreams saw access tokens.
        self.assertTrue(any(t.startswith("rt-") for t in self.issuer.issued))
        self.assertTrue(self.upstreams["signed"].seen and self.upstreams["machine"].seen)

        # Everything revoked: the signed-in server needs a sign-in again (its refresh is
        # refused), the machine obtains a new token.
        for upstream in self.upstreams.values():
            upstream.revoked.update(self.issuer.issued)
        self.issuer.revoke_all()
        code, refused = await self.read(
            "POST", "/v1/call", host, {"server": "signed", "tool": "echo", "arguments": {}}
        )
        self.assertNotEqual(code, 200, refused)
        # The refusal makes the next call refresh first, and the refresh is refused.
        code, refused = await self.read(
            "POST", "/v1/call", host, {"server": "signed", "tool": "echo", "arguments": {}}
        )
        self.assertNotEqual(code, 200, refused)
        self.assertIn("mcpx auth login signed", json.dumps(refused))
        self.assertIn("refresh_token", [f.get("grant_type") for f in self.issuer.token_requests])
        # The machine's next call after its refusal obtains a new token and goes through.
        for _ in range(2):
            code, answer = await self.read(
                "POST", "/v1/call", host, {"server": "machine", "tool": "echo", "arguments": {}}
            )
        self.assertEqual(code, 200, answer)
        self.seen.extend(
            json.dumps(await self.modern(host, "tools/list", {}, bearer.FORMS)).encode()
        )
        code, status = await self.read("GET", "/v1/auth", host)
        self.assertEqual(code, 200)
        states = {entry["server"]: entry["state"] for entry in status["servers"]}
        self.assertEqual(states["signed"], "needs_sign_in")
        await self.read("GET", "/v1/servers", host)
        for name in ("machine", "signed"):
            await self.read("GET", f"/v1/servers/{name}", host)

        await stop_daemon(child)
        await events_ended
        self.seen.extend(child.output[1] + child.output[2])

        text = self.seen.decode("utf-8", "replace")
        self.assertIn("needs", text)  # the refusal was read, and said what to do
        secrets = {
            "the host's token": host,
            "the client secret of machine": ROBOT_SECRET,
            "the client secret of signed": APP_SECRET,
        }
        for number, token in enumerate(self.issuer.issued):
            kind = "refresh" if token.startswith("rt-") else "access"
            secrets[f"{kind} token {number}"] = token
        leaked = {what: value for what, value in secrets.items() if _pieces_in(value, text)}
        self.assertEqual(leaked, {}, "printed by the daemon")


def _pieces_in(value: str, text: str) -> bool:
    """
    Whether C{text} holds C{value} or any 20 characters of it (past a JWT's header,
    which every token of an issuer shares): a token cut short is still a leak.
    """
    start = value.index(".") + 1 if value.count(".") == 2 else 0
    return any(value[at : at + 20] in text for at in range(start, max(start + 1, len(value) - 19)))
