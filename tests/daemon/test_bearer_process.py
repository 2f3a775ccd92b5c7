"""
A real daemon with C{daemon.auth} the C{oauth} object, against the stand-in
authorization server served on a loopback port by this test: the daemon fetches the
issuer's metadata and keys over the network, as it would from an identity provider.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from treq.client import HTTPClient
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers

from mcpx.auth.metadata import parse_challenge
from mcpx.spec.feature import TASKS_EXTENSION as EXTENSION
from mcpx.spec.revision import NEWEST
from mcpx.wire.http_common import NAME_FIELDS
from tests.support.daemons import daemon_environ, start_daemon
from tests.support.http import TestClient, exchange
from tests.support.oauth import oauth_auth, serve_issuer
from tests.support.processes import ChildProcess, free_tcp_port, reactor

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
#: What the 2026-07-28 requests below declare: the tasks extension, and form elicitation.
FORMS: dict[str, Any] = {"elicitation": {"form": {}}}
TASKS_AND_FORMS: dict[str, Any] = {**FORMS, "extensions": {EXTENSION: {}}}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


class OAuthDaemonTests(TestCase):
    timeout = 60

    def setUp(self) -> None:
        self.issuer = serve_issuer(self)
        self.port = free_tcp_port()
        self.audience = f"http://127.0.0.1:{self.port}/mcp"
        self.state_dir = tempfile.mkdtemp(prefix="mcpx-state-")
        self.env = daemon_environ(self.state_dir, tempfile.mkdtemp(prefix="mcpx-cfg-"))
        self.env["MCPX_DAEMON_AUTH"] = oauth_auth(self.issuer, self.audience)

    async def start_daemon(self) -> ChildProcess:
        return await start_daemon(self, self.env, self.port, ready=rb"upstream servers: demo")

    async def request(
        self,
        method: str,
        path: str,
        token: str | None = None,
        body: Any = None,
        session: str | None = None,
    ) -> tuple[int, dict[str, list[str]], bytes]:
        headers = dict(MCP_HEADERS) if path == "/mcp" else {}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if session is not None:
            headers["Mcp-Session-Id"] = session
            headers["MCP-Protocol-Version"] = "2025-06-18"
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        # No kept connections: a test leaves nothing behind in the reactor.
        client = HTTPClient(Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False)))
        return await exchange(client, method, f"http://127.0.0.1:{self.port}{path}", headers, body)

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

    async def as_owner(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """A request on the owner's unix socket, with no token: its status and JSON."""
        client = TestClient(reactor, str(Path(self.state_dir) / "mcpx.sock"))
        self.addCleanup(client.close)
        response = await client.http.request(
            method,
            f"http://mcpx{path}",
            headers=Headers({"Content-Type": ["application/json"]}),
            data=None if body is None else json.dumps(body).encode(),
        )
        return response.code, json.loads(await response.content())

    async def test_owners_operations_refused_to_subjects(self) -> None:
        """
        A subject's token reaches no operation that is the owner's: a reload, a restart
        and the settings are each 403 owner_only, and change nothing (alice's call in
        flight goes on to the end); the owner runs them on the unix socket.  (The
        owner's sign-ins: L{tests.daemon.test_per_person}.)
        """
        await self.start_daemon()
        alice, bob = self.mint(sub="alice"), self.mint(sub="bob")
        # Alice's call in flight: a restart would end it.
        countdown = {"steps": 6, "interval": 0.25}
        code, started = await self.json(
            "POST",
            "/v1/call",
            alice,
            {"server": "demo", "tool": "countdown", "arguments": countdown, "task": True},
        )
        self.assertEqual(code, 202, started)
        refused: list[tuple[str, str, Any]] = [
            ("POST", "/v1/reload", {}),
            ("POST", "/v1/servers/demo/restart", {}),
            ("GET", "/v1/settings", None),
        ]
        for method, path, body in refused:
            code, answer = await self.json(method, path, bob, body)
            self.assertEqual((code, answer["error"]["code"]), (403, "owner_only"), path)
        task = started["task"]
        while task["status"] == "working":
            await deferLater(reactor, 0.1)
            code, task = await self.json("GET", f"/v1/tasks/{task['id']}", alice)
        self.assertEqual(task["status"], "completed", task)
        code, reloaded = await self.as_owner("POST", "/v1/reload", {})
        self.assertEqual(code, 200, reloaded)
        code, settings = await self.as_owner("GET", "/v1/settings")
        self.assertEqual(code, 200, settings)

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

    async def json(self, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
        code, _, content = await self.request(method, path, token, body)
        return code, json.loads(content)

    async def test_v1_task_and_question_are_the_subjects(self) -> None:
        """
        What alice's /v1 call leaves (a task, the question its server asks) is alice's:
        bob cannot list, collect or cancel the task, nor list, see or answer the
        question, whatever client he names; alice can.
        """
        await self.start_daemon()
        alice, bob = self.mint(sub="alice"), self.mint(sub="bob")
        code, started = await self.json(
            "POST", "/v1/call", alice, {"server": "demo", "tool": "ask", "task": True}
        )
        self.assertEqual(code, 202, started)
        task_id = started["task"]["id"]
        question_id = None
        for _ in range(100):
            code, listed = await self.json("GET", "/v1/questions", alice)
            if listed["questions"]:
                (question,) = listed["questions"]
                question_id = question["id"]
                break
            await deferLater(reactor, 0.05)
        assert question_id is not None, "alice's call asked nothing"
        self.assertEqual(question["owner"], 'subject:"alice"')

        code, listed = await self.json("GET", "/v1/tasks?client=subject:%22alice%22", bob)
        self.assertEqual((code, listed), (200, {"tasks": []}))
        code, refused = await self.json("GET", f"/v1/tasks/{task_id}", bob)
        self.assertEqual((code, refused["error"]["code"]), (404, "unknown_task"))
        code, refused = await self.json("POST", f"/v1/tasks/{task_id}/cancel", bob, {})
        self.assertEqual((code, refused["error"]["code"]), (404, "unknown_task"))
        code, listed = await self.json("GET", "/v1/questions?all=true", bob)
        self.assertEqual((code, listed), (200, {"questions": []}))
        code, refused = await self.json("GET", f"/v1/questions/{question_id}", bob)
        self.assertEqual((code, refused["error"]["code"]), (404, "unknown_question"))
        answer = {"action": "accept", "content": {"answer": "bob's"}}
        code, refused = await self.json("POST", f"/v1/questions/{question_id}/answer", bob, answer)
        self.assertEqual((code, refused["error"]["code"]), (404, "unknown_question"))

        code, listed = await self.json("GET", "/v1/tasks", alice)
        self.assertEqual([task["id"] for task in listed["tasks"]], [task_id])
        code, answered = await self.json(
            "POST",
            f"/v1/questions/{question_id}/answer",
            alice,
            {"action": "decline"},
        )
        self.assertEqual((code, answered["state"]), (200, "declined"))
        code, task = await self.json("GET", f"/v1/tasks/{task_id}", alice)
        self.assertEqual(code, 200, task)

    async def modern(
        self,
        token: str,
        method: str,
        params: dict[str, Any],
        capabilities: dict[str, Any] = TASKS_AND_FORMS,
        meta: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """
        A 2026-07-28 request to /mcp with C{token}, declaring C{capabilities}; its
        JSON-RPC answer.
        """
        headers = {
            **MCP_HEADERS,
            "MCP-Protocol-Version": NEWEST.value,
            "Mcp-Method": method,
            "Authorization": f"Bearer {token}",
        }
        if method in NAME_FIELDS:
            headers["Mcp-Name"] = params[NAME_FIELDS[method]]
        body = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": method,
            "params": {
                **params,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": NEWEST.value,
                    "io.modelcontextprotocol/clientCapabilities": capabilities,
                    **(meta or {}),
                },
            },
        }
        client = HTTPClient(Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False)))
        response = await client.post(
            f"http://127.0.0.1:{self.port}/mcp",
            data=json.dumps(body).encode(),
            headers=Headers({k: [v] for k, v in headers.items()}),
        )
        content = (await response.content()).decode()
        if content.lstrip().startswith("{"):
            answer: dict[str, Any] = json.loads(content)
            return answer
        # An event stream: its last data line is the answer.
        lines = [line[5:] for line in content.splitlines() if line.startswith("data:")]
        answer = json.loads(lines[-1])
        return answer

    async def start_task(self, token: str, meta: dict[str, Any] | None = None) -> str:
        """A 2026-07-28 extension task (a slow countdown through mcpx_call)'s id."""
        countdown = {"server": "demo", "tool": "countdown"}
        countdown["arguments"] = {"steps": 30, "interval": 0.5}  # type: ignore[assignment]
        answer = await self.modern(
            token, "tools/call", {"name": "mcpx_call", "arguments": countdown}, meta=meta
        )
        self.assertEqual(answer["result"]["resultType"], "task", answer)
        task_id: str = answer["result"]["taskId"]
        return task_id

    async def test_extension_task_is_the_subjects(self) -> None:
        """
        A 2026-07-28 extension task alice's request left is unknown to bob (tasks/get
        and tasks/cancel), and alice collects it.
        """
        await self.start_daemon()
        alice, bob = self.mint(sub="alice"), self.mint(sub="bob")
        task_id = await self.start_task(alice)
        for method in ("tasks/get", "tasks/cancel"):
            answer = await self.modern(bob, method, {"taskId": task_id})
            self.assertEqual(answer["error"]["code"], -32602, (method, answer))
        answer = await self.modern(alice, "tasks/get", {"taskId": task_id})
        self.assertEqual(answer["result"]["status"], "working", answer)

    async def test_named_session_is_the_subjects(self) -> None:
        """
        Bob naming the session string alice named reaches a session of his own: the
        extension task alice's named session holds is not his to get or cancel.
        """
        await self.start_daemon()
        alice, bob = self.mint(sub="alice"), self.mint(sub="bob")
        named = {"dev.mcpx/session": "team"}
        task_id = await self.start_task(alice, named)
        for method in ("tasks/get", "tasks/cancel"):
            answer = await self.modern(bob, method, {"taskId": task_id}, meta=named)
            self.assertEqual(answer["error"]["code"], -32602, (method, answer))
        answer = await self.modern(alice, "tasks/get", {"taskId": task_id}, meta=named)
        self.assertEqual(answer["result"]["status"], "working", answer)

    async def test_request_state_is_the_subjects(self) -> None:
        """
        The requestState alice's input_required answer carries is refused when bob
        sends it back, and alice's own retry resumes the call with her answer.
        """
        await self.start_daemon()
        alice, bob = self.mint(sub="alice"), self.mint(sub="bob")
        call = {"name": "mcpx_call", "arguments": {"server": "demo", "tool": "ask"}}
        asked = await self.modern(alice, "tools/call", call, FORMS)
        self.assertEqual(asked["result"]["resultType"], "input_required", asked)
        (key,) = asked["result"]["inputRequests"]
        retry = {
            **call,
            "requestState": asked["result"]["requestState"],
            "inputResponses": {key: {"action": "decline"}},
        }
        replayed = await self.modern(bob, "tools/call", retry, FORMS)
        self.assertEqual(replayed["error"]["code"], -32602, replayed)
        self.assertIn("another caller", replayed["error"]["message"])
        resumed = await self.modern(alice, "tools/call", retry, FORMS)
        self.assertNotIn("error", resumed)
