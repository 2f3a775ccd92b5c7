"""
The status page at C{/} (docs/status-page.md): its files and headers, the recent calls
it lists, the gate in front of it, and the page itself in a real headless Chromium
(Debian's C{chromium}, driven by Playwright in a process of its own) answering a
question an upstream asked while the call that caused it waits.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from treq.testing import StubTreq
from twisted.internet.task import Clock
from twisted.trial.unittest import SkipTest, SynchronousTestCase, TestCase

from mcpx.ops.events import EventBus
from mcpx.ops.recent_calls import RecentCalls
from tests.daemon.fake_pool import daemon_http
from tests.support.daemons import NOBODY, daemon_environ, probe, start_daemon
from tests.support.processes import (
    REPO,
    ChildProcess,
    free_tcp_port,
    kill_on_cleanup,
    spawn,
)

BROWSER = str(REPO / "tests" / "support" / "status_browser.py")
ASKING = str(REPO / "tests" / "fixtures" / "asking_upstream.py")
ASSETS = {
    "/": "text/html",
    "/status.js": "text/javascript",
    "/status.css": "text/css",
}


class RecentCallsTests(SynchronousTestCase):
    def test_newest_first_and_bounded(self) -> None:
        """Only the last C{limit} calls are kept, listed newest first, or one server's."""
        clock = Clock()
        calls = RecentCalls(clock, limit=3)
        for n in range(5):
            clock.advance(1)
            calls.call_finished("a" if n % 2 else "b", f"t{n}", 0.25, "ok")
        shown = calls.newest_first()
        self.assertEqual([c["tool"] for c in shown], ["t4", "t3", "t2"])
        self.assertEqual(
            shown[0],
            {
                "server": "b",
                "tool": "t4",
                "finished": 5.0,
                "seconds": 0.25,
                "outcome": "ok",
            },
        )
        self.assertEqual([c["tool"] for c in calls.newest_first("a")], ["t3"])

    def test_each_call_is_an_event(self) -> None:
        """Each call that ends is a C{call.finished} event naming its tool and outcome."""
        seen: list[tuple[Any, ...]] = []
        calls = RecentCalls(Clock(), publish=lambda *a, **kw: seen.append((a, kw)))
        calls.call_finished("demo", "add", 0.5, "tool_error")
        self.assertEqual(
            seen,
            [(("call.finished", "demo"), {"tool": "add", "seconds": 0.5, "outcome": "tool_error"})],
        )

    def test_unheard_calls_use_their_event_ids(self) -> None:
        """
        Calls that end while nobody listens are not spelled out as events, yet use their
        ids as if published: the next one heard has the id it always had, and the fields
        (a subject's call attributed to it, the seconds rounded); the listing keeps them all.
        """
        clock = Clock()
        bus = EventBus(clock)
        calls = RecentCalls(clock, publish=bus.publish, unheard=bus.unheard)
        clock.advance(10)
        calls.call_finished("demo", "add", 0.5, "ok")
        calls.call_finished("demo", "add", 0.25, "error", principal='subject:"alice"')
        seen: list[Any] = []
        bus.subscribe(seen.append)
        calls.call_finished("demo", "sub", 0.123456789, "tool_error", principal='subject:"bob"')
        calls.call_finished("demo", "mul", 1.0, "ok", principal="")
        self.assertEqual(
            [(event.id, event.principal, event.to_json()) for event in seen],
            [
                (
                    3,
                    'subject:"bob"',
                    {
                        "kind": "call.finished",
                        "server": "demo",
                        "time": 10.0,
                        "tool": "sub",
                        "seconds": 0.123457,
                        "outcome": "tool_error",
                    },
                ),
                (
                    4,
                    None,
                    {
                        "kind": "call.finished",
                        "server": "demo",
                        "time": 10.0,
                        "tool": "mul",
                        "seconds": 1.0,
                        "outcome": "ok",
                    },
                ),
            ],
        )
        self.assertEqual(
            [(c["tool"], c["seconds"]) for c in calls.newest_first()],
            [("mul", 1.0), ("sub", 0.123457), ("add", 0.25), ("add", 0.5)],
        )
        bus.publish("server.started", "demo")
        self.assertEqual(seen[-1].id, 5)


class PageRouteTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.http = daemon_http(Clock(), 1)
        self.stub: Any = StubTreq(self.http.resource())

    def get(self, path: str) -> tuple[Any, bytes]:
        response = self.successResultOf(self.stub.get("http://mcpx" + path))
        return response, self.successResultOf(response.content())

    def test_page_and_assets(self) -> None:
        """
        C{/}, its script and its style are served with their types and a strict CSP:
        only this origin's script, no inline script, no framing.
        """
        for path, ctype in ASSETS.items():
            response, body = self.get(path)
            self.assertEqual(response.code, 200, path)
            self.assertTrue(body, path)
            self.assertEqual(
                response.headers.getRawHeaders(b"content-type")[0].split(b";")[0],
                ctype.encode(),
                path,
            )
            policy = response.headers.getRawHeaders(b"content-security-policy")[0].decode()
            self.assertIn("script-src 'self'", policy)
            self.assertIn("default-src 'none'", policy)
            self.assertIn("frame-ancestors 'none'", policy)
            self.assertNotIn("unsafe", policy)
            self.assertEqual(
                response.headers.getRawHeaders(b"x-content-type-options"), [b"nosniff"]
            )
        _, page = self.get("/")
        # Every script is a file of its own: no inline script, no inline handler.
        scripts = re.findall(rb"<script([^>]*)>(.*?)</script>", page, re.S)
        self.assertEqual(
            [(attrs.strip(), inner) for attrs, inner in scripts], [(b'src="/status.js" defer', b"")]
        )
        self.assertNotRegex(page, rb"\son[a-z]+=")

    def test_calls_route(self) -> None:
        """C{GET /v1/calls} lists the calls the pool reported, newest first, and the bound."""
        self.http.host.calls.call_finished("demo", "add", 0.01, "ok")
        self.http.host.calls.call_finished("demo", "fail", 0.02, "error")
        response, body = self.get("/v1/calls")
        self.assertEqual(response.code, 200)
        answer = json.loads(body)
        self.assertEqual([c["tool"] for c in answer["calls"]], ["fail", "add"])
        self.assertEqual(answer["limit"], 100)


class RealDaemonPageCase(TestCase):
    """A real C{mcpx daemon} on a loopback TCP port, and processes that talk to it."""

    timeout = 90

    def setUp(self) -> None:
        # Short paths: a unix socket path must fit in 108 bytes.
        self.state_dir = tempfile.mkdtemp(prefix="mcpx-page-")
        self.addCleanup(shutil.rmtree, self.state_dir, True)
        self.config_home = tempfile.mkdtemp(prefix="mcpx-cfg-")
        self.addCleanup(shutil.rmtree, self.config_home, True)
        self.port = free_tcp_port()
        self.env = daemon_environ(self.state_dir, self.config_home)
        # A question waits in the broker until the page the test opens shows it, rather
        # than being refused if it is asked before the page's event stream is open.
        self.env["MCPX_PROTO_BROKER_WHEN_UNWATCHED"] = "wait"

    async def start_daemon(self, *flags: str, servers: dict[str, Any] | None = None) -> None:
        if servers is not None:
            config = Path(self.config_home) / "servers.json"
            config.write_text(json.dumps({"servers": servers}))
            self.env["MCPX_CONFIG"] = str(config)
        child = await start_daemon(
            self, self.env, self.port, *flags, ready=rb"listening on unix socket", cwd=str(REPO)
        )
        await child.wait_for(rb"listening on http://")
        self.daemon = child

    async def run_to_end(self, argv: list[str], timeout: float = 60) -> str:
        """Run C{argv} to its end; its standard output."""
        child = spawn(argv, env=self.env, cwd=str(REPO))
        self.addCleanup(kill_on_cleanup, child)
        code = await child.ended(timeout=timeout)
        self.assertEqual(code, 0, child.text())
        return child.text(1)

    async def probe(self, requests: list[dict[str, Any]]) -> Any:
        return await probe(self, self.env, requests)

    def tcp(self, path: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
        sent = {"Host": f"127.0.0.1:{self.port}", **(headers or {})}
        return {"port": self.port, "method": "GET", "path": path, "headers": sent}

    async def browse(self, call: str, answers: dict[str, Any], **more: Any) -> dict[str, Any]:
        """
        The page in a real headless Chromium (L{BROWSER}), answering the question of the
        waiting call C{call} with C{answers}; C{more} goes to it as given (C{url},
        C{login}, C{empty_first}).  What it saw.
        """
        self.shots = Path(tempfile.mkdtemp(prefix="mcpx-shots-"))
        self.addCleanup(shutil.rmtree, str(self.shots), True)
        spec = {
            "url": more.pop("url", f"http://127.0.0.1:{self.port}/"),
            "answers": answers,
            "call": call,
            "screenshots": str(self.shots),
            **more,
        }
        seen: dict[str, Any] = json.loads(
            await self.run_to_end([sys.executable, BROWSER, json.dumps(spec)])
        )
        for name in ("question.png", "answered.png"):
            self.assertTrue((self.shots / name).read_bytes().startswith(b"\x89PNG"), name)
        self.assertEqual(seen["console_errors"], [])
        return seen


class PageGateTests(RealDaemonPageCase):
    """The page and its files pass the same gate as every other route."""

    def assertRefused(self, answer: Any, status: int, code: str) -> None:
        self.assertEqual(answer["status"], status, answer)
        self.assertEqual(json.loads(answer["body"])["error"]["code"], code)
        self.assertNotIn("<html", answer["body"])

    async def test_foreign_origin_and_rebinding_refused(self) -> None:
        """
        A foreign page's request and a DNS-rebinding Host get 403 for the page and its
        files; the owner's own browser on loopback (no token: daemon.auth peer) gets them.
        """
        await self.start_daemon()
        for path in ASSETS:
            foreign, rebound, owner = await self.probe(
                [
                    self.tcp(path, {"Origin": "http://evil.example"}),
                    self.tcp(path, {"Host": f"evil.example:{self.port}"}),
                    self.tcp(path, {"Origin": f"http://127.0.0.1:{self.port}"}),
                ]
            )
            self.assertRefused(foreign, 403, "origin_not_allowed")
            self.assertRefused(rebound, 403, "host_not_allowed")
            self.assertEqual(owner["status"], 200, owner)
            self.assertIn("script-src 'self'", owner["headers"]["content-security-policy"])

    async def test_token_required(self) -> None:
        """With daemon.auth token, the page and its files are 401 without the token."""
        await self.start_daemon("--daemon-auth", "token")
        token = (Path(self.state_dir) / "token").read_text().strip()
        for path in ASSETS:
            bare, wrong, right = await self.probe(
                [
                    self.tcp(path),
                    self.tcp(path, {"Authorization": "Bearer not-the-token"}),
                    self.tcp(path, {"Authorization": f"Bearer {token}"}),
                ]
            )
            self.assertRefused(bare, 401, "unauthorized")
            self.assertRefused(wrong, 401, "unauthorized")
            self.assertEqual(right["status"], 200, right)


class BrowserTests(RealDaemonPageCase):
    """The page in a real headless Chromium, answering a waiting call's question."""

    async def test_answer_the_demo_question(self) -> None:
        """
        C{mcpx call demo ask} waits on the demo's question; the page shows it with a form
        (its one required field refusing to be sent empty), the answer typed there
        reaches the demo, the call completes with it, and the page lists the call.
        """
        await self.start_daemon()
        call = spawn(
            [sys.executable, "-m", "mcpx", "call", "demo", "ask"], env=self.env, cwd=str(REPO)
        )
        self.addCleanup(kill_on_cleanup, call)
        seen = await self.browse("demo/ask", {"answer": "Ada Lovelace"}, empty_first=True)
        self.assertEqual(seen["title"], "mcpx status")
        self.assertEqual(list(seen["servers"]), ["demo"])
        self.assertEqual(seen["servers"]["demo"][:3], ["demo", "ready", "1"])
        self.assertIn("What should I call you?", seen["message"])
        self.assertEqual(seen["fields"], [{"label": "Answer *", "tag": "input", "type": "text"}])
        self.assertTrue(seen["pending_after_empty"])
        self.assertEqual(seen["call_outcome"], "ok")
        self.assertEqual(seen["questions_count"], "0")
        # Live: the question's end and the call's arrived on /v1/events.
        self.assertIn("question.closed", seen["events"])
        self.assertIn("call.finished", seen["events"])
        self.assertEqual(await call.ended(timeout=30), 0, call.text())
        self.assertIn("Ada Lovelace", call.text(1))

    async def test_form_from_the_requested_schema(self) -> None:
        """
        A question whose schema asks for text, an integer, a number, a yes/no and two
        lists of choices gets a control of the right kind for each, and the values sent
        have the schema's types; a server that failed to start shows why, with the last
        words of its stderr.
        """
        crashy = ["-c", "import sys; print('oops: no such database', file=sys.stderr); sys.exit(3)"]
        await self.start_daemon(
            servers={
                "asker": {"command": sys.executable, "args": [ASKING]},
                "crashy": {"command": sys.executable, "args": crashy},
            }
        )
        failed = spawn([sys.executable, "-m", "mcpx", "call", "crashy", "x"], env=self.env)
        self.addCleanup(kill_on_cleanup, failed)
        self.assertNotEqual(await failed.ended(), 0)
        schema = {
            "type": "object",
            "properties": {
                "name": {"type": "string", "title": "Name", "minLength": 1},
                "count": {"type": "integer", "title": "Count", "minimum": 0},
                "ratio": {"type": "number", "title": "Ratio"},
                "ok": {"type": "boolean", "title": "Agree"},
                "color": {"type": "string", "enum": ["r", "g"], "enumNames": ["Red", "Green"]},
                "size": {
                    "type": "string",
                    "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}],
                },
            },
            "required": ["name", "count"],
        }
        argv = [sys.executable, "-m", "mcpx", "call", "asker", "ask", "label=form"]
        call = spawn([*argv, f"schema={json.dumps(schema)}"], env=self.env, cwd=str(REPO))
        self.addCleanup(kill_on_cleanup, call)
        answers = {
            "name": "Ada",
            "count": "3",
            "ratio": "0.5",
            "ok": True,
            "color": "Green",
            "size": "Large",
        }
        seen = await self.browse("asker/ask", answers)
        self.assertEqual(
            [(f["label"], f["tag"], f["type"]) for f in seen["fields"]],
            [
                ("Name *", "input", "text"),
                ("Count *", "input", "number"),
                ("Ratio", "input", "number"),
                ("Agree", "input", "checkbox"),
                ("color", "select", "select-one"),
                ("size", "select", "select-one"),
            ],
        )
        # A server that failed to start: its state, and its stderr's last words.
        name, state, instances, *_, last_error = seen["servers"]["crashy"]
        self.assertEqual((name, instances), ("crashy", "0"))
        self.assertTrue(state.startswith("failed"), state)
        self.assertIn("status 3", last_error)
        self.assertIn("oops: no such database", last_error)
        self.assertEqual(await call.ended(timeout=30), 0, call.text())
        sent = {"color": "g", "count": 3, "name": "Ada", "ok": True, "ratio": 0.5, "size": "l"}
        self.assertIn(f"form: accept {json.dumps(sent, sort_keys=True)}", call.text(1))


class BrowserSignInTests(RealDaemonPageCase):
    """
    The page where a browser needs more than being the owner's on loopback: opened as
    C{localhost}, and under C{daemon.auth token} through C{mcpx status --open}'s link.
    """

    def post(self, path: str, headers: dict[str, str], body: Any = None) -> dict[str, Any]:
        """A JSON C{POST} to C{path} over TCP with C{headers}."""
        sent = {"Content-Type": "application/json", **headers}
        return {**self.tcp(path, sent), "method": "POST", "body": body}

    async def ask_demo(self) -> ChildProcess:
        """C{mcpx call demo ask}, waiting on the demo's question."""
        call = spawn(
            [sys.executable, "-m", "mcpx", "call", "demo", "ask"], env=self.env, cwd=str(REPO)
        )
        self.addCleanup(kill_on_cleanup, call)
        return call

    async def test_buttons_at_localhost(self) -> None:
        """
        Opened as http://localhost:PORT/ (daemon.auth peer): the question's Accept button
        works as at 127.0.0.1, since localhost is the daemon's own loopback origin.
        """
        await self.start_daemon()
        call = await self.ask_demo()
        seen = await self.browse(
            "demo/ask", {"answer": "Grace"}, url=f"http://localhost:{self.port}/"
        )
        self.assertEqual(seen["call_outcome"], "ok")
        self.assertEqual(await call.ended(timeout=30), 0, call.text())
        self.assertIn("Grace", call.text(1))

    async def test_cookie_is_the_owners_alone(self) -> None:
        """
        Under daemon.auth token, a browser signed in through the link gets a cookie that
        a web server of another local user, on another port of 127.0.0.1, is sent too:
        replayed by that user with the page's own Origin forged, it opens nothing (401
        for /v1/servers, /v1/reload, /v1/call, the page); replayed by the owner's uid,
        it does.
        """
        if os.getuid() == NOBODY:
            raise SkipTest("the test needs a user other than nobody to own the daemon")
        if os.getuid() != 0:
            raise SkipTest("becoming another user takes root")
        await self.start_daemon("--daemon-auth", "token")
        out = await self.run_to_end([sys.executable, "-m", "mcpx", "status", "--open", "--print"])
        base = f"http://127.0.0.1:{self.port}"
        code = out.strip().split("#", 1)[1]
        (signed_in,) = await self.probe([self.post("/login", {"Origin": base}, {"code": code})])
        self.assertEqual(signed_in["status"], 303, signed_in)
        cookie = signed_in["headers"]["set-cookie"].split(";", 1)[0]
        self.assertTrue(cookie.startswith("mcpx_session="), cookie)
        own = {"Cookie": cookie, "Origin": base}
        call = {"server": "demo", "tool": "echo", "arguments": {"text": "hi"}}
        replay = [
            self.tcp("/v1/servers", own),
            self.tcp("/", {"Cookie": cookie}),
            self.post("/v1/reload", own, {}),
            self.post("/v1/call", own, call),
        ]
        for answer in await probe(self, self.env, replay, NOBODY):
            self.assertEqual(answer["status"], 401, answer)
            self.assertEqual(json.loads(answer["body"])["error"]["code"], "unauthorized")
        for answer in await self.probe(replay):
            self.assertEqual(answer["status"], 200, answer)

    async def test_token_auth_link_signs_in(self) -> None:
        """
        Under daemon.auth token, `mcpx status --open --print` prints a one-time link that
        signs the browser in: an HttpOnly, SameSite=Strict cookie, and the page answers
        the question.  The link's code is good once; the cookie opens nothing from
        another origin, and nobody but the owner on the unix socket gets a link.
        """
        await self.start_daemon("--daemon-auth", "token")
        # The banner names the page, and how a browser gets in.
        line = await self.daemon.wait_for(rb"status page: .*")
        self.assertIn(f"http://127.0.0.1:{self.port}/".encode(), line)
        self.assertIn(b"status --open", line)
        call = await self.ask_demo()
        out = await self.run_to_end([sys.executable, "-m", "mcpx", "status", "--open", "--print"])
        link = out.strip()
        base = f"http://127.0.0.1:{self.port}"
        self.assertTrue(link.startswith(base + "/login#"), link)
        code = link.split("#", 1)[1]
        seen = await self.browse("demo/ask", {"answer": "Linus"}, login=link)
        self.assertEqual(seen["call_outcome"], "ok")
        self.assertEqual(await call.ended(timeout=30), 0, call.text())
        self.assertIn("Linus", call.text(1))
        (cookie,) = seen["cookies"]
        self.assertEqual(
            (cookie["name"], cookie["path"], cookie["httpOnly"], cookie["sameSite"]),
            ("mcpx_session", "/", True, "Strict"),
        )
        sent = f"mcpx_session={cookie['value']}"
        token = (Path(self.state_dir) / "token").read_text().strip()
        again, own, bare, other_port, foreign, post_other, tcp_link = await self.probe(
            [
                self.post("/login", {"Origin": base}, {"code": code}),
                self.tcp("/v1/servers", {"Cookie": sent}),
                self.tcp("/v1/servers"),
                self.tcp("/v1/servers", {"Cookie": sent, "Origin": "http://127.0.0.1:1"}),
                self.tcp("/", {"Cookie": sent, "Origin": "http://evil.example"}),
                self.post("/v1/reload", {"Cookie": sent, "Origin": "http://localhost:1"}),
                self.post("/v1/status/login", {"Authorization": f"Bearer {token}"}),
            ]
        )
        # The code was used by the browser: good once.
        self.assertEqual(again["status"], 400, again)
        self.assertEqual(json.loads(again["body"])["error"]["code"], "link_used_or_expired")
        self.assertNotIn("set-cookie", again["headers"])
        # The cookie from the page's own origin (a same-origin GET sends no Origin).
        self.assertEqual(own["status"], 200, own)
        self.assertEqual(bare["status"], 401, bare)
        # From another origin, even one on loopback, the cookie counts for nothing.
        self.assertEqual(other_port["status"], 401, other_port)
        self.assertEqual(foreign["status"], 403, foreign)
        self.assertEqual(post_other["status"], 401, post_other)
        # A link is the owner's on the unix socket: not even the token gets one over TCP.
        self.assertEqual(tcp_link["status"], 403, tcp_link)
        self.assertEqual(json.loads(tcp_link["body"])["error"]["code"], "owner_only")
