"""
Remote servers that misbehave, over Streamable HTTP: the whole path from the pool through
the real connector and channel to a rough HTTP server on 127.0.0.1 that closes streams
early, refuses with statuses with and without bodies and headers, redirects, drips,
hangs, sends the wrong content type or results that are too large.

Each scenario asserts what the caller is told (the pool's error and the C{/v1} answer
it becomes), how many times the server saw the call (never a silent duplicate), and,
where connections are at stake, the descriptors of this process before and after.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

from twisted.internet.defer import Deferred, DeferredList, gatherResults
from twisted.logger import ILogObserver, LogEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.server import NOT_DONE_YET
from zope.interface import provider

from mcpx.ops.errors import error_from
from mcpx.pool import Pool
from mcpx.pool.errors import AnswerTooLarge, ServerUnavailable, UpstreamBroke
from mcpx.server.conn import Conn
from mcpx.settings.servers import RemoteServer, Secret, ServersConfig, Tls
from mcpx.spec.revision import Era, Revision
from mcpx.upstream.connect import make_connector
from mcpx.upstream.probe import era_key
from mcpx.upstream.records import UpstreamError
from mcpx.upstream.tls import TlsFileError
from mcpx.wire.errors import UPSTREAM_FAILED, RpcError, http_status_for
from tests.daemon.fake_pool import daemon_http
from tests.support.peers import start_everything_http, start_http_fixture
from tests.support.processes import reactor
from tests.upstream.http_fakes import (
    FakeHTTPServer,
    Reply,
    Seen,
    drop,
    end,
    open_sse,
    reply_json,
    reply_status,
    result,
    send_event,
)
from tests.upstream.test_http import wait

TOOLS = [
    {"name": "charge", "inputSchema": {"type": "object"}},
    {
        "name": "lookup",
        "inputSchema": {"type": "object"},
        "annotations": {"idempotentHint": True},
    },
]


def sse_answer(value: Any) -> Any:
    """A C{tools/call} script answering C{value} in one event of a stream."""

    def answer(seen: Seen) -> Reply:
        reply = open_sse(seen)
        send_event(seen, {"jsonrpc": "2.0", "id": seen.message_id, "result": value})
        end(seen)
        return reply

    return answer


def open_descriptors() -> int:
    """How many file descriptors this process has open."""
    return len(os.listdir("/proc/self/fd"))


class RoughServer:
    """
    A legacy Streamable HTTP server (session C{sess-<n>}, a new one per C{initialize})
    whose C{tools/call} answer a test scripts with C{on_call}; it counts every request.

    @ivar calls: how many times each tool was called.
    @ivar initializes: how many times C{initialize} was sent.
    @ivar forget: answer every request carrying a session with this status and body
        (a server that was restarted and no longer knows it), until initialized again.
    """

    def __init__(self) -> None:
        self.http = FakeHTTPServer(reactor, self.handle)
        self.calls: Counter[str] = Counter()
        self.initializes = 0
        self.sessions = 0
        self.known: set[str] = set()
        self.on_call: Any = lambda seen: result(seen, {"content": [], "ran": True})
        self.on_get: Any = lambda seen: reply_status(seen, 405)

    def forget_sessions(self) -> None:
        self.known.clear()

    def handle(self, seen: Seen) -> Reply:
        session = seen.headers.get("mcp-session-id")
        if session is not None and session not in self.known:
            return self.unknown_session(seen)
        if seen.method == "GET":
            return self.on_get(seen)  # type: ignore[no-any-return]
        if seen.method == "DELETE":
            return reply_status(seen, 200)
        body = seen.json()
        method = body.get("method")
        if method == "initialize":
            self.initializes += 1
            self.sessions += 1
            sid = f"sess-{self.sessions}"
            self.known.add(sid)
            return self._initialized(seen, sid)
        if "id" not in body:
            return reply_status(seen, 202)
        if method == "tools/list":
            return result(seen, {"tools": TOOLS})
        if method == "tools/call":
            self.calls[body["params"]["name"]] += 1
            return self.on_call(seen)  # type: ignore[no-any-return]
        return result(seen, {})

    def unknown_session(self, seen: Seen) -> bytes:
        return reply_status(seen, 404, b"Session not found", "text/plain")

    def _initialized(self, seen: Seen, sid: str) -> bytes:
        body = seen.json()
        return result(
            seen,
            {
                "protocolVersion": body["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "rough", "version": "1"},
            },
            mcp_session_id=sid,
        )


class RemoteCase(TestCase):
    """A rough server and a pool with one remote server, C{rough}, on the real connector."""

    timeout = 30

    def setUp(self) -> None:
        self.rough = RoughServer()
        self.rough.http.start()
        self.addCleanup(self.rough.http.stop)

    def make_pool(
        self,
        url: str | None = None,
        headers: dict[str, str] | None = None,
        call_timeout: float = 10.0,
        policies: Any = None,
        **options: Any,
    ) -> Pool:
        server = RemoteServer(
            "rough",
            url or self.rough.http.url,
            headers={name: Secret(value) for name, value in (headers or {}).items()},
        )
        connector = make_connector(reactor, os.environ, None, **options)
        # Known to be legacy: no probe, so the counts below are the calls' own.
        connector.cache.put(era_key(server), Era.LEGACY, Revision.V2025_11_25)
        pool = Pool(
            servers=ServersConfig({"rough": server}, origin="test", policies=policies or {}),
            connector=connector,
            clock=reactor,
            call_timeout=call_timeout,
            idle_timeout=600.0,
        )
        pool.startService()
        self.addCleanup(pool.stopService)
        return pool

    async def broke(self, pool: Pool, tool: str = "charge", **options: Any) -> UpstreamBroke:
        """Call C{tool}, which must fail with L{UpstreamBroke}; return that error."""
        try:
            answer = await pool.call_tool("rough", tool, {}, **options)
        except UpstreamBroke as e:
            return e
        self.fail(f"expected UpstreamBroke, got {answer!r}")

    def assert_v1(self, error: UpstreamBroke, status: int, *words: str) -> dict[str, Any]:
        """The error as C{/v1} answers it: its status, code, and words of its message."""
        shown = error_from(error)
        self.assertEqual(shown.status, status)
        body: dict[str, Any] = shown.to_json()
        self.assertEqual(body["code"], "upstream_transport")
        for word in words:
            self.assertIn(word, body["message"])
        return body


class CallFailureTests(RemoteCase):
    """Every way a call's transport fails is an upstream error saying what the server did."""

    async def test_stream_closed_before_the_answer(self) -> None:
        """
        An SSE answer that ends without the result: 502, saying the stream ended without
        it and that the call, which the server started, was not sent again.
        """

        def hollow(seen: Seen) -> Reply:
            reply = open_sse(seen)
            end(seen)
            return reply

        self.rough.on_call = hollow
        pool = self.make_pool()
        error = await self.broke(pool)
        self.assert_v1(error, 502, "ended without it", "not sent again", "whether it ran")
        self.assertTrue(error.outcome_unknown)
        self.assertEqual(self.rough.calls["charge"], 1)

    async def test_error_status_to_tools_call(self) -> None:
        """A 500 with a text body: 502, with the status and the body's words."""
        self.rough.on_call = lambda seen: reply_status(seen, 500, b"database is down", "text/plain")
        pool = self.make_pool()
        error = await self.broke(pool)
        self.assert_v1(error, 502, "HTTP 500", "database is down")
        self.assertFalse(error.outcome_unknown)
        self.assertEqual(self.rough.calls["charge"], 1)

    async def test_result_over_the_size_limit(self) -> None:
        """
        A result larger than C{transport.maxMessageSize} is refused on HTTP too, saying
        so; a smaller limit than the default proves the setting reaches the channel.
        """
        self.rough.on_call = lambda seen: result(seen, {"content": [], "blob": "x" * 20_000})
        pool = self.make_pool(max_message_size=8192)
        with self.assertRaises(AnswerTooLarge) as caught:
            await pool.call_tool("rough", "charge", {})
        shown = error_from(caught.exception)
        self.assertEqual((shown.status, shown.code), (502, "answer_too_large"))
        self.assertIn("longer than 8192 bytes", shown.message)
        self.assertIn("transport.maxMessageSize", shown.message)
        self.assertEqual(self.rough.calls["charge"], 1)
        # The same over an event stream.
        self.rough.on_call = sse_answer({"content": [], "blob": "x" * 20_000})
        with self.assertRaises(AnswerTooLarge):
            await pool.call_tool("rough", "charge", {})
        self.assertEqual(self.rough.calls["charge"], 2)

    async def test_large_result_within_a_raised_limit(self) -> None:
        """A 5 MB result passes when C{transport.maxMessageSize} is 32 MiB."""
        self.rough.on_call = lambda seen: result(
            seen, {"content": [{"type": "text", "text": "x" * 5_000_000}]}
        )
        pool = self.make_pool(max_message_size=32 * 1024 * 1024)
        answer = await pool.call_tool("rough", "charge", {})
        self.assertEqual(len(answer["content"][0]["text"]), 5_000_000)

    async def test_connection_cut_mid_call(self) -> None:
        """
        The server goes away mid-call (its connection is cut before the answer): 502,
        outcome unknown, sent once; the next call works without a restart.
        """

        def dying(seen: Seen) -> Reply:
            reply = open_sse(seen)
            reactor.callLater(0.01, drop, seen)
            return reply

        self.rough.on_call = dying
        pool = self.make_pool()
        error = await self.broke(pool)
        # Cut before or after the stream's head reached mcpx (which a loaded machine
        # decides): the POST "failed" or its stream "broke"; the outcome is unknown alike.
        body = self.assert_v1(error, 502, "whether it ran is unknown")
        self.assertTrue(
            " broke" in body["message"] or "failed: ConnectionLost" in body["message"],
            body["message"],
        )
        self.assertEqual(self.rough.calls["charge"], 1)
        self.rough.on_call = lambda seen: result(seen, {"content": [], "ran": True})
        answer = await pool.call_tool("rough", "charge", {})
        self.assertTrue(answer["ran"])
        self.assertEqual(self.rough.calls["charge"], 2)

    async def test_connection_refused_mid_session(self) -> None:
        """
        The server stops accepting connections after the session was opened: 503, the
        call never reached it (so nothing is said to be unknown), and it was not run.
        """
        pool = self.make_pool(http_connections=1)
        await pool.tools("rough")
        await self.rough.http.pause()
        # The idle connection kept for reuse goes too, as when the server process ends.
        for connection in list(self.rough.http.connections):
            transport: Any = getattr(connection, "_channel", connection).transport
            transport.loseConnection()
        await wait(0.05)
        error = await self.broke(pool)
        self.assert_v1(error, 503, "ConnectionRefusedError")
        self.assertFalse(error.outcome_unknown)
        self.assertNotIn("unknown", error.message)
        self.assertEqual(self.rough.calls["charge"], 0)
        self.rough.http.unpause()

    async def test_wrong_content_type(self) -> None:
        """A 200 in text/html says the content type was the problem."""
        self.rough.on_call = lambda seen: reply_status(seen, 200, b"<html>hi</html>", "text/html")
        pool = self.make_pool()
        error = await self.broke(pool)
        self.assert_v1(error, 502, "Content-Type was text/html")

    async def test_unauthorized_names_the_challenge(self) -> None:
        """A 401 says the server wants credentials, with the scheme and realm it named."""

        def locked(seen: Seen) -> Reply:
            seen.request.setHeader(b"www-authenticate", b'Bearer realm="tools", error="x"')
            return reply_status(seen, 401)

        self.rough.on_call = locked
        pool = self.make_pool()
        error = await self.broke(pool)
        self.assert_v1(error, 502, "HTTP 401", "Bearer credentials for realm 'tools'", "auth")

    async def test_busy_with_retry_after(self) -> None:
        """
        A 429 with C{Retry-After: 7} is 503 with C{retry_in} 7; a 503 asking for an hour
        is bounded to a minute; a 503 without the header has no C{retry_in}.
        """
        asked: dict[str, Any] = {"wait": "7", "status": 429}

        def busy(seen: Seen) -> Reply:
            if asked["wait"]:
                seen.request.setHeader(b"retry-after", asked["wait"].encode())
            return reply_status(seen, int(asked["status"]), b"slow down")

        self.rough.on_call = busy
        pool = self.make_pool()
        body = self.assert_v1(await self.broke(pool), 503, "HTTP 429", "slow down", "wait 7s")
        self.assertEqual(body["retry_in"], 7.0)
        asked.update(wait="3600", status=503)
        body = self.assert_v1(await self.broke(pool), 503, "HTTP 503")
        self.assertEqual(body["retry_in"], 60.0)
        asked.update(wait="")
        body = self.assert_v1(await self.broke(pool), 503, "HTTP 503")
        self.assertNotIn("retry_in", body)
        self.assertEqual(self.rough.calls["charge"], 3)

    async def test_listing_during_a_failure(self) -> None:
        """C{GET /v1/tools} while the server fails its listing: an upstream error too."""
        self.rough.http.handler = lambda seen: (
            reply_status(seen, 502, b"bad gateway upstream")
            if seen.rpc_method == "tools/list"
            else self.rough.handle(seen)
        )
        pool = self.make_pool()
        try:
            await pool.tools("rough")
        except UpstreamBroke as e:
            self.assert_v1(e, 502, "HTTP 502", "bad gateway upstream")
        else:
            self.fail("the listing did not fail")


class SessionLossTests(RemoteCase):
    """A server that forgets the session: initialize again, never running a call twice."""

    def resume_refused(self) -> None:
        """tools/call streams an event with an id, then breaks; the server is restarted."""

        def breaking(seen: Seen) -> Reply:
            reply = open_sse(seen)
            send_event(seen, raw=b"id: ev-1\nretry: 10\ndata: \n\n")

            def restart() -> None:
                self.rough.forget_sessions()
                drop(seen)

            reactor.callLater(0.01, restart)
            return reply

        self.rough.on_call = breaking

    async def test_started_call_not_sent_again(self) -> None:
        """
        The call's stream breaks and resuming it answers 404 (the server restarted):
        mcpx initializes again but does not send the call again; the caller is told
        the outcome is unknown, and the next call works on the new session.
        """
        self.resume_refused()
        pool = self.make_pool()
        error = await self.broke(pool)
        self.assert_v1(error, 502, "no longer knows the session", "whether it ran is unknown")
        self.assertEqual(self.rough.calls["charge"], 1)
        self.assertEqual(self.rough.initializes, 2)
        self.rough.on_call = lambda seen: result(seen, {"content": [], "ran": True})
        self.assertTrue((await pool.call_tool("rough", "charge", {}))["ran"])
        self.assertEqual(self.rough.calls["charge"], 2)
        self.assertEqual(self.rough.initializes, 2)

    async def test_idempotent_tool_sent_again(self) -> None:
        """A tool annotated C{idempotentHint: true} is safe to send again, and is."""
        pool = self.make_pool()
        await pool.tools("rough")
        self.resume_refused()
        first = self.rough.on_call

        def once_then_answer(seen: Seen) -> Reply:
            if self.rough.calls["lookup"] == 1:
                return first(seen)  # type: ignore[no-any-return]
            return result(seen, {"content": [], "ran": True})

        self.rough.on_call = once_then_answer
        answer = await pool.call_tool("rough", "lookup", {})
        self.assertTrue(answer["ran"])
        self.assertEqual(self.rough.calls["lookup"], 2)
        self.assertEqual(self.rough.initializes, 2)

    async def test_400_unknown_session_initializes_again(self) -> None:
        """
        A server that answers an unknown session with 400 and says so in the body (as
        TypeScript SDK servers do) is initialized again; the refused call never ran, so
        it is sent again and succeeds; calls after it keep working.
        """
        self.rough.unknown_session = lambda seen: reply_json(  # type: ignore[method-assign]
            seen,
            {
                "jsonrpc": "2.0",
                "error": {"code": -32000, "message": "Bad Request: No valid session ID provided"},
                "id": None,
            },
            400,
        )
        pool = self.make_pool()
        self.assertTrue((await pool.call_tool("rough", "charge", {}))["ran"])
        for _ in range(3):
            self.rough.forget_sessions()
            self.assertTrue((await pool.call_tool("rough", "charge", {}))["ran"])
        self.assertEqual(self.rough.initializes, 4)
        self.assertEqual(self.rough.calls["charge"], 4)
        [status] = pool.status()
        self.assertEqual(status.state.value, "ready")

    async def test_400_about_something_else_is_no_session_loss(self) -> None:
        """A 400 that is not about the session is reported, not a reason to initialize."""
        self.rough.on_call = lambda seen: reply_status(seen, 400, b"arguments are wrong")
        pool = self.make_pool()
        error = await self.broke(pool)
        self.assert_v1(error, 502, "HTTP 400", "arguments are wrong")
        self.assertEqual(self.rough.initializes, 1)
        # mcpx servers: still ready, and showing what the last call met.
        [status] = pool.status()
        self.assertEqual(status.state.value, "ready")
        self.assertIn("arguments are wrong", status.last_error or "")


class RedirectTests(RemoteCase):
    """307/308 to the same origin are followed; another origin's are reported."""

    async def test_same_origin_followed_with_method_and_body(self) -> None:
        """
        A URL with a trailing slash that the server redirects (as the Python SDK does)
        works: the POST is repeated at the new URL with its body, once per message,
        and later requests go straight there.
        """

        def redirecting(seen: Seen) -> Reply:
            if seen.path == "/mcp/":
                seen.request.setHeader(b"location", b"/mcp")
                return reply_status(seen, 307)
            return self.rough.handle(seen)

        self.rough.http.handler = redirecting
        pool = self.make_pool(url=self.rough.http.url + "/")
        self.assertTrue((await pool.call_tool("rough", "charge", {}))["ran"])
        self.assertTrue((await pool.call_tool("rough", "charge", {}))["ran"])
        self.assertEqual(self.rough.calls["charge"], 2)
        redirected = [s for s in self.rough.http.seen if s.path == "/mcp/"]
        # Only initialize met the redirect; everything after went to /mcp.
        self.assertEqual([s.rpc_method for s in redirected], ["initialize"])
        posts = [s for s in self.rough.http.requests("POST") if s.rpc_method == "tools/call"]
        self.assertEqual({s.path for s in posts}, {"/mcp"})
        self.assertEqual(posts[0].json()["params"]["name"], "charge")

    async def test_other_origin_reported_without_credentials(self) -> None:
        """
        A 308 to another origin is not followed: the error names the Location, and the
        other server never sees a request (nor the credentials).
        """
        other = FakeHTTPServer(reactor)
        other.start()
        self.addCleanup(other.stop)

        def elsewhere(seen: Seen) -> Reply:
            seen.request.setHeader(b"location", other.url.encode())
            return reply_status(seen, 308)

        self.rough.on_call = elsewhere
        pool = self.make_pool(headers={"Authorization": "Bearer s3cret"})
        error = await self.broke(pool)
        self.assert_v1(error, 502, "HTTP 308", other.url, "another origin", "configure")
        self.assertNotIn("s3cret", error.message)
        self.assertEqual(other.seen, [])


class ConnectionTests(RemoteCase):
    """Connections are closed when a call is given up, and reused across bursts."""

    async def test_timed_out_calls_close_their_connections(self) -> None:
        """
        200 calls with a 1 s deadline to a server that ignores C{notifications/cancelled}
        and keeps every stream open: each call times out and its connection is closed,
        so the descriptors are back where they started.
        """
        self.rough.on_call = open_sse
        pool = self.make_pool(call_timeout=1.0)
        await pool.tools("rough")
        await wait(0.1)
        before = open_descriptors()
        for _ in range(4):
            calls = [
                Deferred.fromCoroutine(pool.call_tool("rough", "charge", {})) for _ in range(50)
            ]
            outcomes: list[tuple[bool, Any]] = await DeferredList(calls, consumeErrors=True)
            self.assertEqual({type(o[1].value).__name__ for o in outcomes}, {"CallTimedOut"})
        # Each sent once at most: on a loaded machine a call's second may be over before
        # its request left.
        self.assertLessEqual(self.rough.calls["charge"], 200)
        self.assertGreater(self.rough.calls["charge"], 0)
        for _ in range(50):
            if not [s for s in self.rough.http.open if not s.dropped.called]:
                break
            await wait(0.05)
        after = open_descriptors()
        self.assertEqual([s for s in self.rough.http.open if not s.dropped.called], [])
        # A few idle connections (the cancel notifications') may stay in the pool.
        self.assertLess(after - before, 20, f"descriptors {before} -> {after}")

    async def test_dripping_body_cut_at_the_deadline(self) -> None:
        """A JSON body dripped a byte at a time is not read past the call's deadline."""
        dripping: list[Seen] = []

        def drip(seen: Seen) -> Reply:
            seen.request.setHeader(b"content-type", b"application/json")
            seen.request.setHeader(b"content-length", b"100000")
            seen.request.write(b"{")
            dripping.append(seen)

            def more() -> None:
                if not seen.dropped.called:
                    seen.request.write(b" ")
                    later[0] = reactor.callLater(0.05, more)

            later = [reactor.callLater(0.05, more)]
            self.addCleanup(lambda: later[0].cancel() if later[0].active() else None)
            return NOT_DONE_YET

        self.rough.on_call = drip
        pool = self.make_pool()
        started = reactor.seconds()
        with self.assertRaises(Exception) as caught:
            await pool.call_tool("rough", "charge", {}, timeout=0.5)
        self.assertEqual(type(caught.exception).__name__, "CallTimedOut")
        await dripping[0].dropped
        self.assertLess(reactor.seconds() - started, 2.0)

    async def test_connections_reused_across_bursts_quietly(self) -> None:
        """
        With C{transport.httpConnections} at 50, a second burst of 50 concurrent calls
        opens no new connection, and no "Starting factory" line is logged.
        """
        noise: list[LogEvent] = []

        @provider(ILogObserver)
        def heard(event: LogEvent) -> None:
            text = str(event.get("log_format") or event.get("format") or event.get("message"))
            if "factory" in text.lower():
                noise.append(event)

        globalLogPublisher.addObserver(heard)
        self.addCleanup(globalLogPublisher.removeObserver, heard)

        def slowly(seen: Seen) -> Reply:
            reply = open_sse(seen)

            def answer() -> None:
                message = {"jsonrpc": "2.0", "id": seen.message_id, "result": {"content": []}}
                send_event(seen, message)
                end(seen)

            reactor.callLater(0.1, answer)
            return reply

        self.rough.on_call = slowly
        pool = self.make_pool(http_connections=50)
        await pool.tools("rough")

        async def burst() -> None:
            await gatherResults(
                [Deferred.fromCoroutine(pool.call_tool("rough", "charge", {})) for _ in range(50)]
            )

        await burst()
        await wait(0.05)
        opened = self.rough.http.connection_count
        await burst()
        self.assertEqual(self.rough.http.connection_count, opened)
        self.assertLessEqual(opened, 52)
        self.assertEqual(noise, [])


class LogTests(TestCase):
    """A failure logged by the daemon keeps its message in the JSON log."""

    def test_failure_message_in_the_json_line(self) -> None:
        import io

        from twisted.logger import Logger

        from mcpx.daemon.logs import log_observer

        stream = io.StringIO()
        log = Logger(observer=log_observer(stream))
        try:
            raise ConnectionError("the stream from http://x/mcp ended without it")
        except ConnectionError:
            log.failure("operation {op} failed unexpectedly", op="call")
        line = json.loads(stream.getvalue().strip().splitlines()[-1])
        self.assertEqual(
            line["error"], "ConnectionError: the stream from http://x/mcp ended without it"
        )
        self.assertIn("ConnectionError", line["traceback"])


class StartTests(RemoteCase):
    """Starting a remote server that refuses: its Retry-After, and no needless probes."""

    def refuse_initialize(self, seen: Seen) -> Reply:
        if seen.rpc_method == "initialize":
            self.rough.initializes += 1
            seen.request.setHeader(b"retry-after", b"7")
            return reply_status(seen, 503, b"warming up")
        return self.rough.handle(seen)

    async def test_retry_after_sets_the_next_start(self) -> None:
        """
        A 503 with C{Retry-After: 7} to C{initialize}: the next start is in 7 s, not the
        back-off's first second, and the caller is told so.
        """
        self.rough.http.handler = self.refuse_initialize
        pool = self.make_pool()
        with self.assertRaises(ServerUnavailable) as first:
            await pool.call_tool("rough", "charge", {})
        self.assertIn("warming up", first.exception.message)
        with self.assertRaises(ServerUnavailable) as second:
            await pool.call_tool("rough", "charge", {})
        assert second.exception.retry_in is not None
        self.assertGreater(second.exception.retry_in, 6.0)
        self.assertEqual(self.rough.initializes, 1)

    async def test_cached_era_not_probed_again_for_an_outage(self) -> None:
        """
        With the era remembered, each start attempt of a server answering 503 sends
        only C{initialize}: no C{server/discover}, which would be refused the same way.
        """
        self.rough.http.handler = self.refuse_initialize
        server = RemoteServer("rough", self.rough.http.url)
        connector = make_connector(reactor, os.environ, None)
        connector.cache.put(era_key(server), Era.LEGACY, Revision.V2025_11_25)
        for _ in range(2):
            with self.assertRaises(UpstreamError):
                await connector.connect("rough", server)
        self.assertEqual(self.rough.http.requests(rpc_method="server/discover"), [])
        self.assertEqual(self.rough.initializes, 2)

    async def test_call_deadline_bounds_the_start(self) -> None:
        """
        A server that accepts the connection and never answers C{initialize}: a call
        with a 0.5 s timeout is told within about that, not after the 30 s the start
        may take; the start goes on, and a later call finds it ready.
        """
        held: list[Seen] = []

        def slow_start(seen: Seen) -> Reply:
            if seen.rpc_method == "initialize" and not held:
                held.append(seen)
                return NOT_DONE_YET
            return self.rough.handle(seen)

        self.rough.http.handler = slow_start
        pool = self.make_pool()
        started = reactor.seconds()
        with self.assertRaises(ServerUnavailable) as caught:
            await pool.call_tool("rough", "charge", {}, timeout=0.5)
        self.assertLess(reactor.seconds() - started, 2.0)
        self.assertIn("still starting after 0.5s", caught.exception.message)
        # The start was not given up: the server answers it late, and is used.
        held[0].request.write(self.rough.handle(held[0]))
        held[0].request.finish()
        answer = await pool.call_tool("rough", "charge", {})
        self.assertTrue(answer["ran"])
        self.assertEqual(self.rough.calls["charge"], 1)


class ResumeTests(RemoteCase):
    """A broken stream whose resumption meets a server that is restarting."""

    async def test_resume_retried_while_connections_are_refused(self) -> None:
        """
        The stream breaks and the server refuses connections for a moment (it is
        restarting): the resumption is tried again after the server's C{retry}, and
        the answer on the resumed stream settles the call, which ran once.
        """

        def breaking(seen: Seen) -> Reply:
            reply = open_sse(seen)
            send_event(seen, raw=b"id: ev-1\nretry: 50\ndata: \n\n")

            async def restart() -> None:
                await self.rough.http.pause()
                drop(seen)
                reactor.callLater(0.2, self.rough.http.unpause)

            reactor.callLater(0.01, lambda: Deferred.fromCoroutine(restart()))
            return reply

        def resumed(seen: Seen) -> Reply:
            if seen.headers.get("last-event-id") != "ev-1":
                return reply_status(seen, 405)
            reply = open_sse(seen)
            call = self.rough.http.requests(rpc_method="tools/call")[-1]
            message = {"jsonrpc": "2.0", "id": call.message_id, "result": {"content": []}}
            send_event(seen, message, id="ev-2")
            end(seen)
            return reply

        self.rough.on_call = breaking
        self.rough.on_get = resumed
        pool = self.make_pool()
        answer = await pool.call_tool("rough", "charge", {}, timeout=5.0)
        self.assertEqual(answer["content"], [])
        self.assertEqual(self.rough.calls["charge"], 1)
        resumptions = [s for s in self.rough.http.requests("GET") if "last-event-id" in s.headers]
        self.assertEqual(len(resumptions), 1)


def real_pool(case: TestCase, url: str) -> Pool:
    """A pool with one remote server, C{real}, at C{url}, found by the era probe."""
    server = RemoteServer("real", url)
    pool = Pool(
        servers=ServersConfig({"real": server}, origin="test"),
        connector=make_connector(reactor, os.environ, None, probe_timeout=5.0),
        clock=reactor,
        call_timeout=20.0,
        idle_timeout=600.0,
    )
    pool.startService()
    case.addCleanup(pool.stopService)
    return pool


class RealServerTests(TestCase):
    """
    The same faults against servers mcpx did not write (server-everything binds every
    interface, so this runs inside C{tests/isolated}, as C{make test} does).
    """

    timeout = 90

    def make_pool(self, url: str) -> Pool:
        return real_pool(self, url)

    async def test_sdk_server_at_a_url_with_a_trailing_slash(self) -> None:
        """
        The Python SDK answers C{POST /mcp/} with a 307 to C{/mcp}: configured with the
        slash, the server is reached all the same.
        """
        server = await start_http_fixture(reactor, "legacy", add_cleanup=self.addCleanup)
        pool = self.make_pool(server.url + "/")
        answer = await pool.call_tool("real", "echo", {"text": "slashed"})
        self.assertIn("slashed", json.dumps(answer))

    async def test_sdk_server_restarted_keeps_working(self) -> None:
        """
        The SDK server is killed and started again on its port: the next call meets an
        unknown session, mcpx initializes again, and the call works.
        """
        server = await start_http_fixture(reactor, "legacy", add_cleanup=self.addCleanup)
        pool = self.make_pool(server.url)
        await pool.call_tool("real", "echo", {"text": "one"})
        await server.stop()
        again = await start_http_fixture(
            reactor, "legacy", port=server.port, add_cleanup=self.addCleanup
        )
        self.assertEqual(again.port, server.port)
        answer = await pool.call_tool("real", "echo", {"text": "two"})
        self.assertIn("two", json.dumps(answer))
        [status] = pool.status()
        self.assertEqual(status.state.value, "ready")

    async def test_everything_restarted_keeps_working(self) -> None:
        """
        server-everything (TypeScript SDK) answers a session it does not know with 400:
        after a restart the next calls initialize again and work, instead of failing
        until mcpx is restarted.
        """
        server = await start_everything_http(reactor, add_cleanup=self.addCleanup)
        pool = self.make_pool(server.url)
        self.assertIn("3", json.dumps(await pool.call_tool("real", "get-sum", {"a": 1, "b": 2})))
        await server.stop()
        await start_everything_http(reactor, port=server.port, add_cleanup=self.addCleanup)
        for n in range(3):
            answer = await pool.call_tool("real", "get-sum", {"a": n, "b": 10})
            self.assertIn(str(n + 10), json.dumps(answer))


class ApiTests(RemoteCase):
    """The daemon's own HTTP answers for a remote server whose transport fails."""

    async def serve(self, pool: Pool) -> str:
        from twisted.web.server import Site

        app = daemon_http(clock=reactor, pid=os.getpid(), pool=pool, servers=pool.servers)
        port = reactor.listenTCP(0, Site(app.resource()), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        return f"http://127.0.0.1:{port.getHost().port}"

    async def test_v1_answers_and_cli_exit_status(self) -> None:
        """
        C{POST /v1/call} of a call whose stream ends early is 502 C{upstream_transport}
        saying what the server did; C{GET /v1/tools} during a failing listing is an
        upstream error too (not 500); C{mcpx call} would exit with status 4.
        """
        import treq

        from mcpx.cli.client import ApiError
        from mcpx.cli.failures import EXIT_UPSTREAM, exit_code_for
        from tests.support.http import TestClient

        def hollow(seen: Seen) -> Reply:
            reply = open_sse(seen)
            end(seen)
            return reply

        self.rough.on_call = hollow
        base = await self.serve(self.make_pool())
        client = TestClient(reactor)
        self.addCleanup(client.close)
        response = await client.http.post(
            base + "/v1/call", json={"server": "rough", "tool": "charge", "arguments": {}}
        )
        body = json.loads(await treq.content(response))
        self.assertEqual(response.code, 502)
        self.assertEqual(body["error"]["code"], "upstream_transport")
        self.assertIn("ended without it", body["error"]["message"])
        self.assertEqual(
            exit_code_for(ApiError(502, body["error"]["code"], "", body["error"])), EXIT_UPSTREAM
        )
        self.assertEqual(self.rough.calls["charge"], 1)

        self.rough.http.handler = lambda seen: (
            reply_status(seen, 500, b"listing broke")
            if seen.rpc_method == "tools/list"
            else self.rough.handle(seen)
        )
        status, listed = await client.get_json(base + "/v1/tools?server=rough")
        self.assertEqual(status, 502)
        self.assertEqual(listed["error"]["code"], "upstream_transport")
        self.assertIn("HTTP 500", listed["error"]["message"])
        self.assertIn("listing broke", listed["error"]["message"])


def _pem_pair(
    subject: str, names: list[str], issuer: tuple[Any, Any] | None = None, ca: bool = False
) -> tuple[Any, Any, bytes, bytes]:
    """A key and certificate (signed by C{issuer}, or self-signed), and their PEM."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    signer_key, signer_cert = issuer if issuer is not None else (key, None)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(signer_cert.subject if signer_cert is not None else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if names:
        alternatives: list[x509.GeneralName] = []
        for entry in names:
            try:
                alternatives.append(x509.IPAddress(ipaddress.ip_address(entry)))
            except ValueError:
                alternatives.append(x509.DNSName(entry))
        builder = builder.add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
    certificate = builder.sign(signer_key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    return key, certificate, certificate.public_bytes(serialization.Encoding.PEM), key_pem


class TlsTests(TestCase):
    """Per-server C{tls}: a private CA, the name to check, and a client certificate."""

    timeout = 30

    def setUp(self) -> None:
        self.dir = self.mktemp()
        os.makedirs(self.dir)
        ca_key, ca_cert, self.ca_pem, _ = _pem_pair("test CA", [], ca=True)
        self.ca = (ca_key, ca_cert)
        self.ca_file = self.write("ca.pem", self.ca_pem)

    def write(self, name: str, data: bytes) -> str:
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def serve(self, names: list[str], require_client: bool = False) -> RoughServer:
        from twisted.internet.ssl import Certificate, PrivateCertificate

        _, _, cert_pem, key_pem = _pem_pair("server", names, issuer=self.ca)
        identity = PrivateCertificate.loadPEM(cert_pem + key_pem)
        authorities = [Certificate.loadPEM(self.ca_pem)] if require_client else []
        rough = RoughServer()
        rough.http.start(tls=identity.options(*authorities))
        self.addCleanup(rough.http.stop)
        return rough

    async def call(self, rough: RoughServer, tls: Any = None) -> dict[str, Any]:
        server = RemoteServer("secure", rough.http.url, tls=tls)
        connector = make_connector(reactor, os.environ, None)
        connector.cache.put(era_key(server), Era.LEGACY, Revision.V2025_11_25)
        session = await connector.connect("secure", server)
        self.addCleanup(session.close)
        return await session.call_tool("charge", {})

    async def refused(self, rough: RoughServer, tls: Any = None) -> str:
        try:
            answer = await self.call(rough, tls)
        except ConnectionError as e:
            return str(e)
        self.fail(f"expected the connection to be refused, got {answer!r}")

    async def test_private_ca(self) -> None:
        """
        A server whose certificate a private CA signed: refused without C{tls.ca},
        saying how to trust it; accepted with it.
        """
        rough = self.serve(["127.0.0.1"])
        message = await self.refused(rough)
        self.assertIn("certificate verify failed", message)
        self.assertIn("tls.ca", message)
        self.assertTrue((await self.call(rough, Tls(ca=self.ca_file)))["ran"])

    async def test_certificate_for_another_name(self) -> None:
        """
        A certificate for another name is refused even from a trusted CA, saying so;
        C{tls.serverName} names the one it carries.
        """
        rough = self.serve(["mcp.internal.example"])
        message = await self.refused(rough, Tls(ca=self.ca_file))
        self.assertIn("tls.serverName", message)
        answer = await self.call(rough, Tls(ca=self.ca_file, server_name="mcp.internal.example"))
        self.assertTrue(answer["ran"])

    async def test_client_certificate(self) -> None:
        """A server that requires a client certificate accepts mcpx's C{tls.cert}/C{tls.key}."""
        rough = self.serve(["127.0.0.1"], require_client=True)
        await self.refused(rough, Tls(ca=self.ca_file))
        self.assertEqual(rough.initializes, 0)
        _, _, cert_pem, key_pem = _pem_pair("mcpx", [], issuer=self.ca)
        tls = Tls(
            ca=self.ca_file,
            cert=self.write("client.pem", cert_pem),
            key=self.write("client.key", key_pem),
        )
        self.assertTrue((await self.call(rough, tls))["ran"])

    async def test_missing_file_named(self) -> None:
        """A C{tls.ca} that cannot be read fails the start naming the field and path."""
        rough = self.serve(["127.0.0.1"])
        missing = os.path.join(self.dir, "nope.pem")
        with self.assertRaises(TlsFileError) as caught:
            await self.call(rough, Tls(ca=missing))
        self.assertIn("tls.ca", str(caught.exception))
        self.assertIn(missing, str(caught.exception))

    def test_config(self) -> None:
        """C{tls} is read from the config file, and its mistakes are named."""
        from mcpx.settings.errors import SettingsError
        from mcpx.settings.server_entry import parse_server

        def parse(entry: dict[str, Any]) -> Any:
            return parse_server("s", entry, origin="test", environ={})

        server = parse(
            {"url": "https://x.example/mcp", "tls": {"ca": "/ca.pem", "serverName": "y"}}
        )
        self.assertEqual(server.tls, Tls(ca="/ca.pem", server_name="y"))
        for entry, words in [
            ({"url": "http://x.example/mcp", "tls": {"ca": "/ca.pem"}}, "only to an https"),
            ({"url": "https://x.example/mcp", "tls": {"key": "/k.pem"}}, 'give "cert" too'),
            (
                {"url": "https://x.example/mcp", "tls": {"cafile": "/c"}},
                "unknown field; tls takes: ca, cert",
            ),
        ]:
            with self.assertRaises(SettingsError) as caught:
                parse(entry)
            self.assertIn(words, str(caught.exception))


class McpAnswerTests(SynchronousTestCase):
    """On C{/mcp}, a remote server's transport failure reaches the model as a readable error."""

    def test_gateway_call_names_what_the_server_did(self) -> None:
        """C{mcpx_call} of a call whose stream broke is an isError result with the reason."""
        from tests.daemon.fake_pool import FakePool
        from tests.server import Harness, Session, gateway_servers

        servers = gateway_servers()
        servers["search"].failure = UpstreamBroke(
            "search",
            "web_search",
            "no answer to tools/call: its stream ended without it",
            outcome_unknown=True,
        )
        session = Session(Revision.V2025_06_18, Harness(FakePool(servers)))
        result = session.call("mcpx_call", {"server": "search", "tool": "web_search"})
        self.assertIs(result["isError"], True)
        text = result["content"][0]["text"]
        self.assertIn("ended without it", text)
        self.assertIn("whether it ran is unknown", text)


class SdkVariantTests(TestCase):
    """The Python SDK's Streamable HTTP server in each of its shapes, under a warm pool."""

    timeout = 90

    async def check(self, era: Any, mode: str) -> None:
        server = await start_http_fixture(reactor, era, http_mode=mode, add_cleanup=self.addCleanup)
        pool = real_pool(self, server.url)
        for n in range(3):
            answer = await pool.call_tool("real", "echo", {"text": f"{mode}-{n}"})
            self.assertIn(f"{mode}-{n}", json.dumps(answer))
        # A call that outlives its timeout: the pool says so, and the next call works.
        with self.assertRaises(Exception) as caught:
            await pool.call_tool("real", "slow", {"seconds": 3, "steps": 1}, timeout=0.5)
        self.assertEqual(type(caught.exception).__name__, "CallTimedOut")
        answer = await pool.call_tool("real", "echo", {"text": "after"})
        self.assertIn("after", json.dumps(answer))

    async def test_legacy_stateful(self) -> None:
        await self.check("legacy", "stateful")

    async def test_legacy_stateless(self) -> None:
        await self.check("legacy", "stateless")

    async def test_legacy_json_responses(self) -> None:
        await self.check("legacy", "json")

    async def test_modern_stateless(self) -> None:
        await self.check("modern", "stateless")

    async def test_dual_era_json_responses(self) -> None:
        await self.check("both", "json")


class SdkRestartMidCallTests(TestCase):
    """The SDK server, with its event store, killed and started again in the middle of a call."""

    timeout = 90

    async def test_call_not_run_twice_across_a_restart(self) -> None:
        """
        C{kill -9} while C{slow} runs, and the server starts again on its port: the
        broken stream's resumption is retried while connections are refused, then meets
        an unknown session.  mcpx initializes again but does not send the call again:
        the caller is told its outcome is unknown, and the next call works.
        """
        server = await start_http_fixture(
            reactor, "legacy", http_mode="resumable", add_cleanup=self.addCleanup
        )
        pool = real_pool(self, server.url)
        await pool.call_tool("real", "echo", {"text": "warm"})
        progress: list[Any] = []
        call = Deferred.fromCoroutine(
            pool.call_tool(
                "real",
                "slow",
                {"seconds": 4, "steps": 8},
                timeout=20.0,
                on_progress=progress.append,
            )
        )
        while not progress:
            await wait(0.05)
        server.child.signal("KILL")
        await server.stop()
        again = await start_http_fixture(
            reactor, "legacy", http_mode="resumable", port=server.port, add_cleanup=self.addCleanup
        )
        self.assertEqual(again.port, server.port)
        try:
            answer = await call
        except UpstreamBroke as e:
            self.assertTrue(e.outcome_unknown)
            self.assertIn("whether it ran is unknown", e.message)
        else:
            self.fail(f"the call was sent again and answered: {answer!r}")
        answer = await pool.call_tool("real", "echo", {"text": "after"})
        self.assertIn("after", json.dumps(answer))


class McpPassThroughTests(RemoteCase):
    """
    On C{/mcp} in pass-through, a remote server's transport failure and an output its
    schema refuses are tool errors carrying C{/v1}'s code and message, not C{-32603}.
    """

    def host(self, pool: Any) -> Any:
        """A 2026-07-28 host of an MCP server passing C{rough} through over C{pool}."""
        from mcpx.server.dispatch import McpServer
        from tests.server import Harness, Session

        harness = Harness(pool)
        harness.server = McpServer(harness.host, harness.clock, passthrough=("rough",))
        harness.conn = harness.server.open(Conn("stdio", "host-pid-1"))
        return Session(Revision.V2026_07_28, harness)

    async def call(self, session: Any, tool: str = "charge") -> dict[str, Any]:
        answer: dict[str, Any] = await session.request(
            "tools/call", {"name": tool, "arguments": {}}
        )
        return answer

    async def test_http_502_is_a_tool_error(self) -> None:
        self.rough.on_call = lambda seen: reply_status(seen, 502, b"bad gateway", "text/plain")
        answer = await self.call(self.host(self.make_pool()))
        self.assertIs(answer["isError"], True)
        text = answer["content"][0]["text"]
        self.assertTrue(text.startswith("upstream_transport: "), text)
        self.assertIn("HTTP 502", text)
        self.assertIn("bad gateway", text)

    async def test_connection_refused_is_a_tool_error(self) -> None:
        pool = self.make_pool(http_connections=1)
        session = self.host(pool)
        self.assertNotIn("isError", await self.call(session))
        await self.rough.http.pause()
        for connection in list(self.rough.http.connections):
            transport: Any = getattr(connection, "_channel", connection).transport
            transport.loseConnection()
        await wait(0.05)
        answer = await self.call(session)
        self.rough.http.unpause()
        self.assertIs(answer["isError"], True)
        text = answer["content"][0]["text"]
        self.assertTrue(text.startswith("upstream_transport: "), text)
        self.assertIn("ConnectionRefusedError", text)

    async def test_output_refused_by_its_schema_is_a_tool_error(self) -> None:
        from mcpx.policy.guard import GuardedPool
        from mcpx.settings.server_policy import parse_policy

        typed = {
            "name": "typed",
            "inputSchema": {"type": "object"},
            "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
        }

        def handle(seen: Seen) -> Reply:
            if seen.method == "POST" and seen.json().get("method") == "tools/list":
                return result(seen, {"tools": [typed]})
            return self.rough.handle(seen)

        self.rough.http.handler = handle
        self.rough.on_call = lambda seen: result(
            seen, {"content": [], "structuredContent": {"n": "x"}}
        )
        pool = self.make_pool(
            policies={"rough": parse_policy({"validate": {"output": "enforce"}}, {}, where="rough")}
        )
        answer = await self.call(self.host(GuardedPool(pool)), "typed")
        self.assertIs(answer["isError"], True)
        text = answer["content"][0]["text"]
        self.assertTrue(text.startswith("invalid_output: "), text)
        self.assertIn("/n", text)

    def listing(self, failing: str) -> None:
        """
        The rough server lists a prompt and a resource, and answers C{failing}
        (C{prompts/get} or C{resources/read}) with HTTP 502.
        """

        def handle(seen: Seen) -> Reply:
            if seen.method == "POST":
                method = seen.json().get("method")
                if method == "initialize":
                    body = seen.json()
                    sid = "sess-listing"
                    self.rough.known.add(sid)
                    return result(
                        seen,
                        {
                            "protocolVersion": body["params"]["protocolVersion"],
                            "capabilities": {"tools": {}, "prompts": {}, "resources": {}},
                            "serverInfo": {"name": "rough", "version": "1"},
                        },
                        mcp_session_id=sid,
                    )
                if method == "prompts/list":
                    return result(seen, {"prompts": [{"name": "brief"}]})
                if method == "resources/list":
                    return result(seen, {"resources": [{"uri": "rough://r", "name": "r"}]})
                if method == failing:
                    return reply_status(seen, 502, b"bad gateway", "text/plain")
            return self.rough.handle(seen)

        self.rough.http.handler = handle

    async def test_prompt_and_read_transport_failure(self) -> None:
        """
        A transport failure answering a prompts/get or resources/read (no tool error
        for either) is an error carrying /v1's code and message, on every revision: not
        -32603 (internal error), whose 2026-07-28 status is 500, but -32010 (upstream
        failed), whose status is 200 as an application error's.
        """
        for method, params in (
            ("prompts/get", {"name": "brief"}),
            ("resources/read", {"uri": "rough://r"}),
        ):
            self.listing(method)
            session = self.host(self.make_pool())
            await session.request("prompts/list" if method == "prompts/get" else "resources/list")
            try:
                answer = await session.request(method, params)
            except RpcError as e:
                error = e
            else:
                self.fail(f"{method} answered {answer!r}")
            self.assertEqual(error.code, UPSTREAM_FAILED, method)
            self.assertEqual(error.data["code"], "upstream_transport", method)
            self.assertIn("HTTP 502", error.message, method)
            self.assertIn("bad gateway", error.message, method)
            self.assertEqual(http_status_for(error.code), 200)


class DelimitedJsonTests(RemoteCase):
    """
    An C{application/json} answer whose body holds several newline-delimited messages (a
    notification line, then the result), as the conformance suite's reference server
    writes its streaming tools' answers: the notifications are relayed, the call
    answered with the result.
    """

    async def test_progress_line_then_the_result(self) -> None:
        def answer(seen: Seen) -> Reply:
            token = seen.json()["params"]["_meta"]["progressToken"]
            lines = [
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": 1, "total": 2},
                },
                {"jsonrpc": "2.0", "id": seen.message_id, "result": {"content": [], "n": 7}},
            ]
            seen.request.setHeader(b"content-type", b"application/json")
            return b"\n".join(json.dumps(line).encode() for line in lines) + b"\n"

        self.rough.on_call = answer
        progress: list[dict[str, Any]] = []
        answered = await self.make_pool().call_tool(
            "rough", "charge", {}, on_progress=progress.append
        )
        self.assertEqual(answered["n"], 7)
        self.assertEqual([(p["progress"], p["total"]) for p in progress], [(1, 2)])
        self.assertEqual(self.rough.calls["charge"], 1)

    async def test_a_body_of_one_bad_line_is_still_refused(self) -> None:
        """Lines that are not all messages are no answer: the call fails as before."""
        self.rough.on_call = lambda seen: reply_status(
            seen, 200, b'{"jsonrpc": "2.0"}\nnot json\n', "application/json"
        )
        error = await self.broke(self.make_pool())
        self.assertIn("unknown", error.message)
