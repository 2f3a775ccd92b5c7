"""
Upstream sign-ins per person, end to end: a real daemon with C{daemon.auth} the
C{oauth} object, two subjects (bob, alice) and the owner (its unix socket), and a real
remote OAuth-protected MCP server whose authorization server signs in whichever account
the browser says.  The server's C{echo} answers with the account its token is for, so
each call shows whose credentials it travelled with.

  - C{remote}: each principal signs in for itself (the default).
  - C{team}: C{"shared": true}, the owner's sign-in serves everyone.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from typing import Any
from urllib.parse import parse_qs, urlencode

from treq.client import HTTPClient
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers
from twisted.web.server import Request, Site

from mcpx.spec.revision import NEWEST
from tests.auth.signin_issuer import SigningInIssuer
from tests.daemon.test_no_passthrough import RecordingUpstream
from tests.questions.support import Daemon
from tests.support.http import TestClient
from tests.support.processes import reactor

#: Where a /v1 sign-in says the browser goes back to (nothing listens: the test reads
#: the redirect the authorization server answers, as `mcpx auth login --no-browser`).
REDIRECT = "http://127.0.0.1:9/callback"
AUDIENCE = "http://127.0.0.1:9/mcp"


class AccountIssuer(SigningInIssuer):
    """
    The signing-in issuer, signing in the account the authorization request names in
    C{user} (what a browser's user would type): its token is C{token-for-<user>}.
    """

    def __init__(self, issuer: str) -> None:
        super().__init__(issuer)
        self.accounts: dict[str, str] = {}
        self._granted: dict[str, tuple[str, str]] = {}

    def render(self, request: Request) -> bytes:
        path = request.path.decode()
        if path == self.prefix + "/authorize":
            query = {k.decode(): v[0].decode() for k, v in request.args.items()}
            code = secrets.token_urlsafe(8)
            self._granted[code] = (query["code_challenge"], query["user"])
            back = {"code": code, "state": query["state"], "iss": self.issuer}
            request.redirect((query["redirect_uri"] + "?" + urlencode(back)).encode())
            return b""
        if path == self.prefix + "/token":
            assert request.content is not None
            form = {k: v[0] for k, v in parse_qs(request.content.read().decode()).items()}
            request.setHeader(b"content-type", b"application/json")
            challenge, user = self._granted.pop(form.get("code", ""), ("", ""))
            verifier = form.get("code_verifier", "").encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=")
            if not user or digest.decode() != challenge:
                request.setResponseCode(400)
                return b'{"error":"invalid_grant"}'
            token = f"token-for-{user}"
            self.accounts[token] = user
            return json.dumps(
                {"access_token": token, "token_type": "Bearer", "expires_in": 3600}
            ).encode()
        return super().render(request)


class AccountUpstream(RecordingUpstream):
    """An MCP server that wants a token the issuer handed out; C{echo} names its account."""

    def __init__(self, issuer: AccountIssuer) -> None:
        super().__init__()
        self.issuer = issuer
        self.base = ""

    def render_POST(self, request: Request) -> bytes:
        given = (request.getHeader("authorization") or "").removeprefix("Bearer ")
        account = self.issuer.accounts.get(given)
        if account is None:
            self._record(request)
            request.setResponseCode(401)
            metadata = f"{self.base}/.well-known/oauth-protected-resource/mcp"
            request.setHeader(
                b"www-authenticate", f'Bearer resource_metadata="{metadata}"'.encode()
            )
            return b""
        assert request.content is not None
        message = json.loads(request.content.read())
        if message.get("method") != "tools/call":
            request.content.seek(0)
            return super().render_POST(request)
        self._record(request)
        request.setHeader(b"content-type", b"application/json")
        result = {"content": [{"type": "text", "text": f"as {account}"}]}
        return json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()

    def render_GET(self, request: Request) -> bytes:
        if request.path == b"/.well-known/oauth-protected-resource/mcp":
            request.setHeader(b"content-type", b"application/json")
            document = {
                "resource": self.base + "/mcp",
                "authorization_servers": [self.issuer.issuer],
            }
            return json.dumps(document).encode()
        return super().render_GET(request)


def _agent() -> HTTPClient:
    # No kept connections: a test leaves nothing behind in the reactor.
    return HTTPClient(Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False)))


class PerPersonTests(TestCase):
    timeout = 90

    def setUp(self) -> None:
        issuer_port = reactor.listenTCP(0, Site(AccountIssuer("")), interface="127.0.0.1")
        self.addCleanup(issuer_port.stopListening)
        issuer = f"http://127.0.0.1:{issuer_port.getHost().port}/realms/tools"
        self.issuer = AccountIssuer(issuer)
        issuer_port.factory.resource = self.issuer
        self.upstream = AccountUpstream(self.issuer)
        upstream_port = reactor.listenTCP(0, Site(self.upstream), interface="127.0.0.1")
        self.addCleanup(upstream_port.stopListening)
        self.upstream.base = f"http://127.0.0.1:{upstream_port.getHost().port}"
        url = self.upstream.base + "/mcp"
        servers = {
            "remote": {"url": url, "auth": {"type": "oauth"}},
            "team": {"url": url, "auth": {"type": "oauth", "shared": True}},
        }
        auth = {"type": "oauth", "issuer": issuer, "audience": AUDIENCE, "scopes": ["mcp:tools"]}
        self.daemon = Daemon(self, servers, settings={"MCPX_DAEMON_AUTH": json.dumps(auth)})
        self.bob = self.issuer.mint(reactor.seconds(), aud=AUDIENCE, sub="bob")
        self.alice = self.issuer.mint(reactor.seconds(), aud=AUDIENCE, sub="alice")

    async def v1(
        self, method: str, path: str, token: str | None = None, body: Any = None
    ) -> tuple[int, Any]:
        """A /v1 request: the owner's on the unix socket without C{token}, else over TCP."""
        headers = {"Content-Type": ["application/json"]}
        if token is None:
            client = TestClient(reactor, self.daemon.socket)
            self.addCleanup(client.close)
            http, url = client.http, f"http://mcpx{path}"
        else:
            headers["Authorization"] = [f"Bearer {token}"]
            http, url = _agent(), f"http://127.0.0.1:{self.daemon.port}{path}"
        response = await http.request(
            method,
            url,
            headers=Headers(headers),
            data=None if body is None else json.dumps(body).encode(),
        )
        return response.code, json.loads(await response.content())

    async def call(self, server: str, token: str | None = None) -> str:
        """Call C{server}'s echo: whose account it acted as, or the error's message."""
        body = {"server": server, "tool": "echo", "arguments": {}}
        code, answer = await self.v1("POST", "/v1/call", token, body)
        if code != 200:
            message: str = answer["error"]["message"]
            return message
        text: str = answer["content"][0]["text"]
        return text

    async def browse(self, url: str, user: str) -> str:
        """The browser at the authorization URL, signing in as C{user}: where it is sent."""
        response = await _agent().get(url + "&" + urlencode({"user": user}), allow_redirects=False)
        await response.content()
        self.assertEqual(response.code, 302, url)
        (location,) = response.headers.getRawHeaders(b"location")
        found: str = location.decode()
        return found

    async def sign_in(self, server: str, user: str, token: str | None = None) -> None:
        """Sign C{user} in to C{server} through /v1 (begin, the browser, finish)."""
        code, begun = await self.v1(
            "POST", f"/v1/auth/{server}/begin", token, {"redirect_uri": REDIRECT}
        )
        self.assertEqual(code, 200, begun)
        back = await self.browse(begun["url"], user)
        code, finished = await self.v1("POST", f"/v1/auth/{server}/finish", token, {"url": back})
        self.assertEqual((code, finished["server"]["state"]), (200, "signed_in"), finished)

    async def test_each_principal_its_own_sign_in(self) -> None:
        """
        The owner's sign-in serves the owner's calls alone; bob must sign in himself
        (on /v1 and in a legacy /mcp session alike), and his sign-in (and sign-out)
        changes nothing of the owner's: the owner's calls go on acting as the owner.
        Bob cannot restart or reload either.
        """
        await self.daemon.start()
        await self.sign_in("remote", "owner")
        self.assertEqual(await self.call("remote"), "as owner")
        refused = await self.call("remote", self.bob)
        self.assertIn("remote needs a sign-in", refused)
        self.assertIn("sign in to it yourself", refused)

        self.assertIn("remote needs a sign-in", await self.legacy_call("remote", self.bob))

        await self.sign_in("remote", "bob", self.bob)
        self.assertEqual(await self.call("remote", self.bob), "as bob")
        self.assertEqual(await self.legacy_call("remote", self.bob), "as bob")
        self.assertEqual(await self.call("remote"), "as owner")
        self.assertIn("remote needs a sign-in", await self.call("remote", self.alice))
        code, mine = await self.v1("GET", "/v1/auth", self.bob)
        self.assertEqual(code, 200)
        (shown,) = [s for s in mine["servers"] if s["server"] == "remote"]
        self.assertEqual(shown["state"], "signed_in")

        # Bob cannot restart the server's connections (the owner's among them), nor reload.
        for path in ("/v1/servers/remote/restart", "/v1/reload"):
            code, refused = await self.v1("POST", path, self.bob, {})
            self.assertEqual((code, refused["error"]["code"]), (403, "owner_only"), path)

        # Bob signing out forgets his sign-in, not the owner's.
        code, out = await self.v1("DELETE", "/v1/auth/remote", self.bob)
        self.assertEqual((code, out["forgotten"]), (200, 1), out)
        self.assertIn("remote needs a sign-in", await self.call("remote", self.bob))
        self.assertEqual(await self.call("remote"), "as owner")
        code, owners = await self.v1("GET", "/v1/auth")
        (shown,) = [s for s in owners["servers"] if s["server"] == "remote"]
        self.assertEqual(shown["state"], "signed_in")

    async def test_shared_sign_in_is_the_owners(self) -> None:
        """
        A server whose sign-in is shared: bob's calls act as the owner's account, and
        bob can neither sign in over it nor sign the owner out (403 owner_only).
        """
        await self.daemon.start()
        await self.sign_in("team", "owner")
        self.assertEqual(await self.call("team", self.bob), "as owner")
        code, refused = await self.v1(
            "POST", "/v1/auth/team/begin", self.bob, {"redirect_uri": REDIRECT}
        )
        self.assertEqual((code, refused["error"]["code"]), (403, "owner_only"), refused)
        code, refused = await self.v1("DELETE", "/v1/auth/team", self.bob)
        self.assertEqual((code, refused["error"]["code"]), (403, "owner_only"), refused)
        self.assertEqual(await self.call("team"), "as owner")

    async def test_pending_sign_ins_per_principal(self) -> None:
        """
        Bob filling every sign-in slot he may have (daemon.pendingSignIns) leaves the
        owner's own: the owner's sign-in begins and completes.
        """
        await self.daemon.start()
        begin = {"redirect_uri": REDIRECT}
        for _ in range(16):
            code, begun = await self.v1("POST", "/v1/auth/remote/begin", self.bob, begin)
            self.assertEqual(code, 200, begun)
        code, refused = await self.v1("POST", "/v1/auth/remote/begin", self.bob, begin)
        self.assertEqual((code, refused["error"]["code"]), (422, "sign_in_failed"), refused)
        self.assertIn("daemon.pendingSignIns", refused["error"]["message"])
        await self.sign_in("remote", "owner")
        self.assertEqual(await self.call("remote"), "as owner")

    async def test_subject_signs_in_through_its_own_host(self) -> None:
        """
        Alice's host (2026-07-28, URL elicitation) is offered alice's own sign-in; once
        she has signed in, her retry acts as alice and the owner's calls still as the
        owner.  The owner's host is never given alice's link, nor alice the owner's.
        """
        await self.daemon.start()
        await self.sign_in("remote", "owner")
        call = {"name": "mcpx_call", "arguments": {"server": "remote", "tool": "echo"}}
        asked = await self.modern(self.alice, call)
        self.assertEqual(asked["result"]["resultType"], "input_required", asked)
        (key, request), *_ = asked["result"]["inputRequests"].items()
        url = request["params"]["url"]
        back = await self.browse(url, "alice")
        self.assertTrue(back.startswith("http://127.0.0.1:"), back)
        page = await _agent().get(back)
        self.assertIn(b"Signed in to remote", await page.content())
        retried = await self.modern(
            self.alice, {**call, "inputResponses": {key: {"action": "accept"}}}
        )
        self.assertEqual(retried["result"]["content"][0]["text"], "as alice", retried)
        self.assertEqual(await self.call("remote"), "as owner")
        self.assertIn("remote needs a sign-in", await self.call("remote", self.bob))

    async def legacy_call(self, server: str, token: str) -> str:
        """
        C{mcpx_call} of C{server}'s echo in a legacy /mcp session opened with C{token}:
        whose account it acted as, or the error's text.
        """
        url = f"http://127.0.0.1:{self.daemon.port}/mcp"
        headers = {
            "Content-Type": ["application/json"],
            "Accept": ["application/json, text/event-stream"],
            "Authorization": [f"Bearer {token}"],
        }
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        opened = await _agent().post(
            url, data=json.dumps(initialize).encode(), headers=Headers(headers)
        )
        await opened.content()
        (session,) = opened.headers.getRawHeaders(b"mcp-session-id")
        headers["Mcp-Session-Id"] = [session.decode()]
        headers["MCP-Protocol-Version"] = ["2025-06-18"]
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "mcpx_call", "arguments": {"server": server, "tool": "echo"}},
        }
        response = await _agent().post(
            url, data=json.dumps(call).encode(), headers=Headers(headers)
        )
        answer = _json_or_last_event((await response.content()).decode())
        text: str = answer["result"]["content"][0]["text"]
        return text

    async def modern(self, token: str, params: dict[str, Any]) -> dict[str, Any]:
        """A 2026-07-28 tools/call to /mcp with C{token}, declaring URL elicitation."""
        capabilities: dict[str, Any] = {"elicitation": {"url": {}}}
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                **params,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": NEWEST.value,
                    "io.modelcontextprotocol/clientCapabilities": capabilities,
                },
            },
        }
        headers = {
            "Content-Type": ["application/json"],
            "Accept": ["application/json, text/event-stream"],
            "MCP-Protocol-Version": [NEWEST.value],
            "Mcp-Method": ["tools/call"],
            "Mcp-Name": [params["name"]],
            "Authorization": [f"Bearer {token}"],
        }
        response = await _agent().post(
            f"http://127.0.0.1:{self.daemon.port}/mcp",
            data=json.dumps(body).encode(),
            headers=Headers(headers),
        )
        return _json_or_last_event((await response.content()).decode())


def _json_or_last_event(content: str) -> dict[str, Any]:
    """An /mcp answer: its JSON body, or the last event of its event stream."""
    if content.lstrip().startswith("{"):
        answer: dict[str, Any] = json.loads(content)
        return answer
    lines = [line[5:] for line in content.splitlines() if line.startswith("data:")]
    answer = json.loads(lines[-1])
    return answer
