"""
The doors of docs/security.md, walked with a real daemon: for each way in (the unix
socket, loopback TCP with peer authentication, TCP with the daemon's token, TCP with an
OAuth access token, a browser), what each principal can and cannot do through it.

The OAuth rows are walked with two subjects, alice and bob, against a stand-in
authorization server on a loopback port and a real hostile upstream
(L{tests.fixtures.chatty_upstream}) that repeats each caller's business (an IBAN) in
its log lines and progress reports while it works: each subject sees its own calls and
what they caused, never the other's; the owner, on the unix socket, sees everything,
and alone what belongs to no one (servers starting, C{/metrics}).

Rows that depend on work not yet merged (owner-only operations refused to other
subjects, requests from the daemon's own upstreams refused, the status page's browser
sign-in) are in the table as intended behaviour and are walked by the tests that come
with that work.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any, cast

from treq.client import HTTPClient
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Protocol, connectionDone
from twisted.internet.task import deferLater
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers

from mcpx.daemon.token import token_path
from mcpx.server.http_legacy import MAX_SESSIONS
from tests.support.daemons import daemon_environ, start_daemon
from tests.support.http import _UnixSocket, exchange
from tests.support.oauth import oauth_auth, serve_issuer
from tests.support.processes import ChildProcess, free_tcp_port, reactor

CHATTY = str(Path(__file__).parent.parent / "fixtures" / "chatty_upstream.py")
#: What alice's call carries, which nobody but alice and the owner may see.
IBAN = "DE89370400440532013000"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "host", "version": "1"},
    },
}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


class _Collect(Protocol):
    """Keeps what an event stream sends until it is stopped."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.done: Deferred[None] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.data.extend(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if not self.done.called:
            self.done.callback(None)

    def stop(self) -> Deferred[None]:
        if self.transport is not None:
            # A response body's transport is its producer: stopping it drops the stream.
            cast(IPushProducer, self.transport).stopProducing()
        return self.done

    def events(self) -> list[dict[str, Any]]:
        """The JSON of each C{data:} line so far."""
        return [
            json.loads(line[5:])
            for line in bytes(self.data).decode().splitlines()
            if line.startswith("data:")
        ]


class DaemonDoorsCase(TestCase):
    """A real daemon on a loopback port and its unix socket, with C{servers}."""

    timeout = 120

    def setUp(self) -> None:
        self.state_dir = tempfile.mkdtemp(prefix="mcpx-doors-")
        self.config_home = tempfile.mkdtemp(prefix="mcpx-cfg-")
        (Path(self.config_home) / "mcpx").mkdir()
        servers = {
            "chatty": {"command": sys.executable, "args": [CHATTY]},
            "demo": {"command": sys.executable, "args": ["-m", "mcpx.demo"]},
        }
        (Path(self.config_home) / "mcpx" / "config.json").write_text(
            json.dumps({"servers": servers})
        )
        self.env = daemon_environ(self.state_dir, self.config_home)
        self.port = free_tcp_port()
        self.socket = str(Path(self.state_dir) / "mcpx.sock")

    async def start_daemon(self) -> ChildProcess:
        return await start_daemon(self, self.env, self.port)

    def client(self, unix: bool) -> HTTPClient:
        # No kept connections: a test leaves nothing behind in the reactor.
        pool = HTTPConnectionPool(reactor, persistent=False)
        if unix:
            return HTTPClient(
                Agent.usingEndpointFactory(reactor, _UnixSocket(reactor, self.socket), pool=pool)
            )
        return HTTPClient(Agent(reactor, pool=pool))

    def url(self, path: str, unix: bool) -> str:
        return f"http://mcpx{path}" if unix else f"http://127.0.0.1:{self.port}{path}"

    async def request(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        unix: bool = False,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, list[str]], bytes]:
        sent = dict(MCP_HEADERS) if path == "/mcp" else {}
        if body is not None:
            sent["Content-Type"] = "application/json"
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        sent.update(headers or {})
        return await exchange(self.client(unix), method, self.url(path, unix), sent, body)

    async def json(self, method: str, path: str, **options: Any) -> tuple[int, Any]:
        code, _, content = await self.request(method, path, **options)
        return code, json.loads(content) if content else None

    async def events(self, *, token: str | None = None, unix: bool = False) -> _Collect:
        """An open C{GET /v1/events}, collecting what it is sent."""
        headers = {"Authorization": [f"Bearer {token}"]} if token is not None else {}
        response = await self.client(unix).get(
            self.url("/v1/events", unix), headers=Headers(headers)
        )
        self.assertEqual(response.code, 200)
        collector = _Collect()
        response.deliverBody(collector)
        self.addCleanup(collector.stop)
        return collector

    async def until(self, stream: _Collect, marker: str) -> None:
        """Wait (up to 20 s) for C{marker} to arrive on C{stream}."""
        for _ in range(400):
            if marker.encode() in stream.data:
                return
            await deferLater(reactor, 0.05, lambda: None)
        self.fail(f"{marker!r} never arrived: {bytes(stream.data)[-2000:]!r}")


class OAuthDoorsTests(DaemonDoorsCase):
    """C{daemon.auth} C{oauth}: the owner's unix socket, and two subjects on TCP."""

    def setUp(self) -> None:
        super().setUp()
        self.issuer = serve_issuer(self)
        self.audience = f"http://127.0.0.1:{self.port}/mcp"
        self.env["MCPX_DAEMON_AUTH"] = oauth_auth(self.issuer, self.audience)

    def mint(self, subject: str) -> str:
        return self.issuer.mint(reactor.seconds(), aud=self.audience, sub=subject)

    async def call(self, token: str | None, text: str) -> None:
        code, answer = await self.json(
            "POST",
            "/v1/call",
            token=token,
            unix=token is None,
            body={"server": "chatty", "tool": "transfer", "arguments": {"text": text}},
        )
        self.assertEqual(code, 200, answer)

    async def test_tcp_asks_for_a_token(self) -> None:
        """Row "TCP, no token": 401 with the challenge; the owner's socket needs none."""
        await self.start_daemon()
        code, headers, _ = await self.request("GET", "/v1/servers")
        self.assertEqual(code, 401)
        self.assertIn("resource_metadata", headers["www-authenticate"][0])
        code, _ = await self.json("GET", "/v1/servers", unix=True)
        self.assertEqual(code, 200)

    async def test_cpython_programs_are_the_owners(self) -> None:
        """
        Row "TCP, oauth" under exec.mode cpython: a subject's program would run as the
        daemon's user, able to reach the unix socket as the owner (its GET /v1/settings
        answered), so a subject's /v1/exec is 403 owner_only, on /v1 and as the gateway's
        mcpx_exec; the owner's program runs.
        """
        self.env["MCPX_EXEC_MODE"] = "cpython"
        await self.start_daemon()
        program = (
            "import socket\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            f"s.connect({self.socket!r})\n"
            "s.sendall(b'GET /v1/settings HTTP/1.0\\r\\nHost: mcpx\\r\\n\\r\\n')\n"
            "s.recv(100).split(b' ')[1].decode()\n"
        )
        alice = self.mint("alice")
        code, answer = await self.json("POST", "/v1/exec", token=alice, body={"program": program})
        self.assertEqual(code, 403, answer)
        self.assertEqual(answer["error"]["code"], "owner_only")
        self.assertIn("exec.mode is cpython", answer["error"]["message"])
        mcp, headers, _ = await self.request("POST", "/mcp", token=alice, body=INITIALIZE)
        self.assertEqual(mcp, 200)
        session = {"Mcp-Session-Id": headers["mcp-session-id"][0]}
        exec_call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "mcpx_exec", "arguments": {"program": program}},
        }
        code, _, content = await self.request(
            "POST", "/mcp", token=alice, body=exec_call, headers=session
        )
        self.assertEqual(code, 200, content)
        result = json.loads(content)["result"]
        self.assertIs(result["isError"], True, result)
        self.assertIn("exec.mode is cpython", result["content"][0]["text"])
        code, answer = await self.json("POST", "/v1/exec", unix=True, body={"program": program})
        self.assertEqual((code, answer.get("result")), (200, "200"), answer)

    async def test_each_subject_sees_its_own_activity(self) -> None:
        """
        Rows "OAuth subject: /v1/events, /v1/calls": while alice's call runs, the
        upstream's log line and progress report repeat her IBAN; they reach her event
        stream and the owner's, never bob's, nor does her call's end or the servers'
        starting.  C{/v1/calls} lists each subject's own calls, the owner's all.
        """
        await self.start_daemon()
        alice, bob = self.mint("alice"), self.mint("bob")
        owners = await self.events(unix=True)
        alices = await self.events(token=alice)
        bobs = await self.events(token=bob)
        await self.call(alice, f"IBAN {IBAN}")
        await self.until(alices, "call.finished")
        await self.until(owners, "call.finished")
        # Bob's own call: once its end reaches his stream, anything of alice's sent to
        # it before would have arrived too (a stream is delivered in order).
        await self.call(bob, "bob-marker")
        await self.until(bobs, "call.finished")
        await self.until(owners, "bob-marker")

        kinds = {event["kind"] for event in alices.events()}
        self.assertLessEqual({"server.log", "progress", "call.finished"}, kinds)
        self.assertIn(IBAN.encode(), alices.data)
        self.assertNotIn(b"bob-marker", alices.data)
        self.assertNotIn(IBAN.encode(), bobs.data)
        self.assertIn(b"bob-marker", bobs.data)
        for stream in (alices, bobs):
            # Servers starting are nobody's call: the owner's alone.
            self.assertNotIn("server.started", {event["kind"] for event in stream.events()})
        self.assertIn(IBAN.encode(), owners.data)
        self.assertIn("server.started", {event["kind"] for event in owners.events()})

        code, listed = await self.json("GET", "/v1/calls", token=bob)
        self.assertEqual(code, 200)
        self.assertEqual([c["tool"] for c in listed["calls"]], ["transfer"])
        code, alices_calls = await self.json("GET", "/v1/calls", token=alice)
        code, owners_calls = await self.json("GET", "/v1/calls", unix=True)
        self.assertEqual(len(alices_calls["calls"]), 1)
        self.assertEqual(len(owners_calls["calls"]), 2)

    async def test_a_subjects_question_and_task_events_are_its_own(self) -> None:
        """
        Row "OAuth subject: /v1/events": the task alice's call becomes and the question
        its server asks are events on her stream, with their ids; bob's stream shows
        neither.
        """
        await self.start_daemon()
        alice, bob = self.mint("alice"), self.mint("bob")
        alices = await self.events(token=alice)
        bobs = await self.events(token=bob)
        code, started = await self.json(
            "POST",
            "/v1/call",
            token=alice,
            body={"server": "demo", "tool": "ask", "task": True},
        )
        self.assertEqual(code, 202, started)
        task_id = started["task"]["id"]
        await self.until(alices, "question.asked")
        await self.until(alices, task_id)
        await self.call(bob, "bob-marker")
        await self.until(bobs, "call.finished")
        self.assertNotIn(task_id.encode(), bobs.data)
        self.assertNotIn(b"question.", bobs.data)
        self.assertNotIn(b"task.", bobs.data)

    async def test_metrics_are_the_owners(self) -> None:
        """
        Row "OAuth subject: /metrics": counts of everyone's calls are refused to a
        subject (403) and served on the owner's socket.
        """
        await self.start_daemon()
        for subject in ("alice", "bob"):
            code, _, body = await self.request("GET", "/metrics", token=self.mint(subject))
            self.assertEqual(code, 403, body)
            self.assertEqual(json.loads(body)["error"]["code"], "owner_only")
        code, _, body = await self.request("GET", "/metrics", unix=True)
        self.assertEqual(code, 200)
        self.assertIn(b"mcpx_", body)

    async def test_a_flood_of_sessions_stays_with_its_principal(self) -> None:
        """
        Row "legacy /mcp sessions": bob holds one idle session; the owner opens more
        than the daemon keeps in all, under a new Mcpx-Client name each time.  The
        sessions the flood ends are the owner's own: bob's session still works.
        """
        await self.start_daemon()
        bob = self.mint("bob")
        code, headers, body = await self.request("POST", "/mcp", token=bob, body=INITIALIZE)
        self.assertEqual(code, 200, body)
        (session,) = headers["mcp-session-id"]
        pool = HTTPConnectionPool(reactor, persistent=True)
        pool.maxPersistentPerHost = 1
        self.addCleanup(pool.closeCachedConnections)
        owner = HTTPClient(
            Agent.usingEndpointFactory(reactor, _UnixSocket(reactor, self.socket), pool=pool)
        )
        for n in range(MAX_SESSIONS + 8):
            response = await owner.post(
                "http://mcpx/mcp",
                data=json.dumps(INITIALIZE).encode(),
                headers=Headers(
                    {
                        **{k: [v] for k, v in MCP_HEADERS.items()},
                        "Mcpx-Client": [f"flood-{n}"],
                    }
                ),
            )
            await response.content()
            self.assertEqual(response.code, 200)
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        code, _, answer = await self.request(
            "POST",
            "/mcp",
            token=bob,
            body=listing,
            headers={"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"},
        )
        self.assertEqual(code, 200, answer)


class PeerDoorsTests(DaemonDoorsCase):
    """The default, C{daemon.auth} C{peer}: loopback TCP, the unix socket, a browser."""

    async def test_owner_on_loopback_and_socket(self) -> None:
        """
        Rows "unix socket" and "loopback TCP, the daemon's user": both let the owner in
        with no token, and everything is the owner's: its events, calls and metrics.
        """
        await self.start_daemon()
        for unix in (False, True):
            for path in ("/v1/servers", "/v1/calls", "/metrics", "/"):
                code, _, body = await self.request("GET", path, unix=unix)
                self.assertEqual(code, 200, (unix, path, body[:200]))

    async def test_a_browser(self) -> None:
        """
        Row "a browser": a page of another origin is refused (403) even though the
        browser runs as the owner; a name other than loopback in Host (DNS rebinding)
        too; the daemon's own page, same origin, gets in.
        """
        await self.start_daemon()
        code, body = await self.json(
            "GET", "/v1/servers", headers={"Origin": "https://evil.example"}
        )
        self.assertEqual((code, body["error"]["code"]), (403, "origin_not_allowed"))
        code, body = await self.json(
            "GET", "/v1/servers", headers={"Host": f"rebound.example:{self.port}"}
        )
        self.assertEqual((code, body["error"]["code"]), (403, "host_not_allowed"))
        code, _ = await self.json(
            "GET", "/v1/servers", headers={"Origin": f"http://127.0.0.1:{self.port}"}
        )
        self.assertEqual(code, 200)


class TokenDoorsTests(DaemonDoorsCase):
    """C{daemon.auth} C{token}: every TCP connection shows the daemon's token."""

    def setUp(self) -> None:
        super().setUp()
        self.env["MCPX_DAEMON_AUTH"] = "token"

    async def test_tcp_needs_the_token(self) -> None:
        """
        Row "TCP with the daemon's token": loopback without it is 401 even for the
        daemon's own user; with it, the owner's; the unix socket needs none.
        """
        await self.start_daemon()
        code, headers, _ = await self.request("GET", "/v1/servers")
        self.assertEqual(code, 401)
        self.assertEqual(headers["www-authenticate"], ["Bearer"])
        token = token_path(Path(self.state_dir)).read_text().strip()
        for path in ("/v1/servers", "/metrics"):
            code, _, body = await self.request("GET", path, token=token)
            self.assertEqual(code, 200, (path, body[:200]))
        code, _, _ = await self.request("GET", "/v1/servers", token=token + "0")
        self.assertEqual(code, 401)
        code, _, _ = await self.request("GET", "/v1/servers", unix=True)
        self.assertEqual(code, 200)
