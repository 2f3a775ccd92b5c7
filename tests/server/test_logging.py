"""
Tests of upstream log messages relayed to the host that is calling: the real L{Pool}
over the scripted upstreams of L{tests.pool.fakes}, the pool's C{server.log} events on
the daemon's bus, and L{McpServer} behind the in-memory harness and C{/mcp}; then a real
daemon, C{mcpx serve} and the SDK fixture server.
"""

from __future__ import annotations

import json
from typing import Any

from treq.testing import StubTreq
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.auth.caller import subject_identity
from mcpx.daemon.http import DaemonHTTP
from mcpx.pool import Pool
from mcpx.server.conn import STDIO, Conn
from mcpx.server.dispatch import McpServer
from mcpx.server.http import McpHTTP
from mcpx.spec.revision import ALL_REVISIONS, LEGACY_REVISIONS, NEWEST, Revision
from mcpx.spec.schemas import load_schema, validate
from mcpx.wire.messages import Notification, Request
from tests.cli.test_real_daemon import RealDaemonCase
from tests.daemon.fake_pool import daemon_http, default_settings, result_of
from tests.pool.fakes import FakeConnector, FakeUpstream, servers, stdio, text_result
from tests.server import Harness, Session, servers_config
from tests.server.test_http import BOTH, MODERN, URL, _Body, header, modern, modern_headers
from tests.server.test_http import request as rpc
from tests.server.test_resource_updates import Host
from tests.support.peers import fixture_argv

LOG_LEVEL = "io.modelcontextprotocol/logLevel"
MESSAGE = "notifications/message"
CALL = {"server": "demo", "tool": "echo", "arguments": {"text": "hi"}}


def call_params() -> dict[str, Any]:
    return {"name": "mcpx_call", "arguments": CALL}


def pooled_pool(clock: Clock, publish: Any) -> tuple[Pool, FakeConnector]:
    """The real pool over scripted upstreams C{demo} and C{other}, calls held."""
    connector = FakeConnector(clock)
    connector.holding.update(("tools/call", "prompts/get", "resources/read"))
    pool = Pool(
        servers=servers(stdio("demo"), stdio("other")),
        connector=connector,
        clock=clock,
        call_timeout=60.0,
        idle_timeout=300.0,
        publish=publish,
    )
    return pool, connector


def pooled(*, can_push: bool = True) -> tuple[Harness, FakeConnector]:
    """A harness whose pool publishes on the daemon's own event bus, as the daemon's does."""
    clock = Clock()
    made: list[Harness] = []
    pool, connector = pooled_pool(
        clock, lambda kind, server=None, **data: made[0].host.events.publish(kind, server, **data)
    )
    made.append(Harness(pool, clock=clock, can_push=can_push))
    return made[0], connector


def upstream(connector: FakeConnector, name: str = "demo") -> FakeUpstream:
    return connector.started(name)[-1]


def say(held: FakeUpstream, *levels: str) -> None:
    """The upstream logs one message at each of C{levels}."""
    for level in levels:
        held.notify(MESSAGE, {"level": level, "logger": "db", "data": {"said": level}})


def levels(notifications: list[Notification]) -> list[str]:
    return [dict(n.params or {})["level"] for n in notifications if n.method == MESSAGE]


def valid(frame: dict[str, Any], revision: Revision) -> None:
    """
    C{frame} is a C{LoggingMessageNotification} of C{revision} in strict mode (the
    revisions before 2025-11-25 define it without the C{jsonrpc} member the envelope adds).
    """
    assert frame.get("jsonrpc") == "2.0", frame
    schema = load_schema(revision)
    defined: Any = schema.get("$defs") or schema["definitions"]
    if "jsonrpc" not in defined["LoggingMessageNotification"]["properties"]:
        frame = {key: value for key, value in frame.items() if key != "jsonrpc"}
    validate(frame, revision, "LoggingMessageNotification", strict=True)


def check_frames(frames: list[dict[str, Any]], revision: Revision) -> int:
    """
    Every C{notifications/message} in C{frames} valid in strict mode for C{revision}.

    @return: how many there were.
    """
    found = 0
    for frame in frames:
        if frame.get("method") == MESSAGE:
            valid(frame, revision)
            found += 1
    return found


class Caller:
    """
    Another host on the same L{McpServer}: a connection of its own, whose pushes are
    kept as the frames it would be sent.
    """

    def __init__(self, server: McpServer, identity: str, subject: str | None = None) -> None:
        self.server = server
        self.frames: list[dict[str, Any]] = []
        self.conn: Conn = server.open(Conn(STDIO, identity, push=self._push, subject=subject))
        self._ids = 0

    def _push(self, method: str, params: dict[str, Any] | None) -> None:
        self.frames.append(Notification(method, params).to_json())

    def request(self, method: str, params: dict[str, Any]) -> Deferred[Any]:
        self._ids += 1
        return Deferred.fromCoroutine(
            self.server.handle(self.conn, Request(self._ids, method, params))
        )

    def initialize(self, revision: Revision, level: str | None) -> None:
        result_of(
            self.request("initialize", {"protocolVersion": revision.value, "capabilities": {}})
        )
        if level is not None:
            result_of(self.request("logging/setLevel", {"level": level}))

    def levels(self) -> list[str]:
        return [frame["params"]["level"] for frame in self.frames if frame["method"] == MESSAGE]


class LegacyLoggingTests(SynchronousTestCase):
    def test_level_filters_during_the_call(self) -> None:
        """
        A legacy client that set warning gets the called server's warning and error
        messages, with their logger and data, and not its info ones, on every legacy
        revision; every notification is valid in strict mode for that revision.
        """
        for revision in LEGACY_REVISIONS:
            harness, connector = pooled()
            session = Session(revision, harness)
            session.result("logging/setLevel", {"level": "warning"})
            calling = session.request("tools/call", call_params())
            held = upstream(connector)
            say(held, "debug", "info", "notice", "warning", "error", "emergency")
            held.release("tools/call", text_result("done"))
            self.assertEqual(result_of(calling)["content"], [{"type": "text", "text": "done"}])
            self.assertEqual(levels(harness.notifications), ["warning", "error", "emergency"])
            first = next(n.params for n in harness.notifications if n.method == MESSAGE)
            self.assertEqual(
                first, {"level": "warning", "logger": "db", "data": {"said": "warning"}}
            )
            self.assertEqual(check_frames(harness.sent, revision), 3, revision)

    def test_only_while_the_call_runs(self) -> None:
        """Messages the server logs before the call or after its answer are not relayed."""
        harness, connector = pooled()
        session = Session(Revision.V2025_06_18, harness)
        session.result("logging/setLevel", {"level": "debug"})
        first = session.request("tools/call", call_params())
        held = upstream(connector)
        held.release("tools/call", text_result("one"))
        result_of(first)
        say(held, "error")
        second = session.request("tools/call", call_params())
        say(held, "warning")
        held.release("tools/call", text_result("two"))
        result_of(second)
        say(held, "critical")
        self.assertEqual(levels(harness.notifications), ["warning"])
        self.assertEqual(harness.host.events.subscribers, 0)

    def test_only_from_the_called_server(self) -> None:
        """A message from a server other than the one being called is not relayed."""
        harness, connector = pooled()
        session = Session(Revision.V2025_11_25, harness)
        session.result("logging/setLevel", {"level": "info"})
        session.result("prompts/list")
        other = upstream(connector, "other")
        calling = session.request("tools/call", call_params())
        say(other, "error")
        say(upstream(connector), "info")
        upstream(connector).release("tools/call", text_result("done"))
        result_of(calling)
        self.assertEqual(levels(harness.notifications), ["info"])

    def test_no_level_no_messages(self) -> None:
        """A legacy client that never set a level is sent no log message at all."""
        harness, connector = pooled()
        session = Session(Revision.V2025_03_26, harness)
        calling = session.request("tools/call", call_params())
        say(upstream(connector), "emergency", "error")
        upstream(connector).release("tools/call", text_result("done"))
        result_of(calling)
        self.assertEqual(levels(harness.notifications), [])

    def test_connection_that_cannot_push(self) -> None:
        """A connection mcpx cannot push to is not subscribed, whatever its level."""
        harness, connector = pooled(can_push=False)
        session = Session(Revision.V2025_06_18, harness)
        session.result("logging/setLevel", {"level": "debug"})
        session.request("tools/call", call_params())
        self.assertEqual(harness.host.events.subscribers, 0)
        say(upstream(connector), "error")
        self.assertEqual(levels(harness.notifications), [])

    def test_level_changed_during_the_call(self) -> None:
        """logging/setLevel during a call applies to the messages that follow it."""
        harness, connector = pooled()
        session = Session(Revision.V2025_06_18, harness)
        session.result("logging/setLevel", {"level": "error"})
        calling = session.request("tools/call", call_params())
        say(upstream(connector), "info")
        session.result("logging/setLevel", {"level": "info"})
        say(upstream(connector), "info")
        upstream(connector).release("tools/call", text_result("done"))
        result_of(calling)
        self.assertEqual(levels(harness.notifications), ["info"])

    def test_prompt_and_read_relay(self) -> None:
        """prompts/get and resources/read routed upstream relay that server's messages too."""
        harness, connector = pooled()
        session = Session(Revision.V2025_06_18, harness)
        session.result("logging/setLevel", {"level": "notice"})
        uri = next(
            r["uri"]
            for r in session.result("resources/list")["resources"]
            if r["uri"].startswith("mcpx://demo/")
        )
        getting = session.request("prompts/get", {"name": "demo_greet"})
        held = upstream(connector)
        say(held, "info", "notice")
        held.release("prompts/get", {"messages": []})
        self.assertEqual(result_of(getting)["messages"], [])
        reading = session.request("resources/read", {"uri": uri})
        say(held, "alert")
        held.release("resources/read", {"contents": []})
        result_of(reading)
        self.assertEqual(levels(harness.notifications), ["notice", "alert"])
        self.assertEqual(check_frames(harness.sent, Revision.V2025_06_18), 2)
        self.assertEqual(harness.host.events.subscribers, 0)

    def test_cancellation_unsubscribes(self) -> None:
        """A cancelled call stops relaying: its subscription to the bus is released."""
        harness, connector = pooled()
        session = Session(Revision.V2025_06_18, harness)
        session.result("logging/setLevel", {"level": "debug"})
        calling = session.request("tools/call", call_params())
        held = upstream(connector)
        self.assertEqual(harness.host.events.subscribers, 1)
        say(held, "info")
        calling.addErrback(lambda failure: failure.trap(CancelledError))
        calling.cancel()
        self.assertEqual(held.cancelled, [held.last("tools/call").id])
        self.assertEqual(harness.host.events.subscribers, 0)
        say(held, "error")
        self.assertEqual(levels(harness.notifications), ["info"])

    def test_handle_cancelled_unsubscribes(self) -> None:
        """Cancelling handle() itself (a closed stream) releases the subscription too."""
        harness, _ = pooled()
        session = Session(NEWEST, harness)
        request = Request(7, "tools/call", session.params(call_params(), **{LOG_LEVEL: "debug"}))
        handling = Deferred.fromCoroutine(harness.server.handle(harness.conn, request))
        self.assertEqual(harness.host.events.subscribers, 1)
        handling.addErrback(lambda failure: failure.trap(CancelledError))
        handling.cancel()
        self.assertEqual(harness.host.events.subscribers, 0)


class ModernLoggingTests(SynchronousTestCase):
    def test_request_level(self) -> None:
        """
        A 2026-07-28 request with _meta logLevel warning gets warning and error, not
        info, valid in strict mode for 2026-07-28.
        """
        harness, connector = pooled()
        session = Session(NEWEST, harness)
        calling = session.request("tools/call", call_params(), **{LOG_LEVEL: "warning"})
        say(upstream(connector), "info", "warning", "error")
        upstream(connector).release("tools/call", text_result("done"))
        self.assertEqual(result_of(calling)["resultType"], "complete")
        self.assertEqual(levels(harness.notifications), ["warning", "error"])
        self.assertEqual(check_frames(harness.sent, NEWEST), 2)

    def test_no_level_no_messages(self) -> None:
        """A 2026-07-28 request without _meta logLevel is sent no log message."""
        harness, connector = pooled()
        session = Session(NEWEST, harness)
        calling = session.request("tools/call", call_params())
        self.assertEqual(harness.host.events.subscribers, 0)
        say(upstream(connector), "emergency")
        upstream(connector).release("tools/call", text_result("done"))
        result_of(calling)
        self.assertEqual(levels(harness.notifications), [])

    def test_level_is_the_requests_own(self) -> None:
        """
        Two 2026-07-28 requests in flight on one connection, one with a level and one
        without: each message goes out once, at the level that asked for it.
        """
        harness, connector = pooled()
        session = Session(NEWEST, harness)
        quiet = session.request("tools/call", call_params())
        loud = session.request("tools/call", call_params(), **{LOG_LEVEL: "error"})
        held = upstream(connector)
        say(held, "warning", "error")
        held.release("tools/call", text_result("quiet"))
        held.release("tools/call", text_result("loud"))
        result_of(quiet)
        result_of(loud)
        self.assertEqual(levels(harness.notifications), ["error"])


class SeveralCallersTests(SynchronousTestCase):
    def test_every_caller_on_the_server_hears_it(self) -> None:
        """
        A message arriving while two hosts have calls in flight on the same server goes
        to both, each at its own level and in its revision's valid spelling.
        """
        harness, connector = pooled()
        session = Session(Revision.V2024_11_05, harness)
        session.result("logging/setLevel", {"level": "info"})
        other = Caller(harness.server, "host-pid-2")
        other.initialize(Revision.V2025_11_25, "error")
        mine = session.request("tools/call", call_params())
        theirs = other.request("tools/call", call_params())
        held = upstream(connector)
        self.assertEqual(len(held.held["tools/call"]), 2)
        say(held, "info", "error")
        held.release("tools/call", text_result("mine"))
        held.release("tools/call", text_result("theirs"))
        result_of(mine)
        result_of(theirs)
        self.assertEqual(levels(harness.notifications), ["info", "error"])
        self.assertEqual(other.levels(), ["error"])
        self.assertEqual(check_frames(harness.sent, Revision.V2024_11_05), 2)
        self.assertEqual(check_frames(other.frames, Revision.V2025_11_25), 1)

    def test_a_subject_hears_only_its_own_calls(self) -> None:
        """
        Behind access tokens, a message heard while alice alone has a call on the
        server is alice's; one heard while bob's call runs there too is neither's, so
        bob never hears what alice's call made the server say (nor she his).
        """
        harness, _connector = pooled()
        alice = Caller(harness.server, subject_identity("alice"), "alice")
        bob = Caller(harness.server, subject_identity("bob"), "bob")
        for caller in (alice, bob):
            caller.initialize(Revision.V2025_11_25, "debug")
        alices = alice.request("tools/call", call_params())
        held = upstream(_connector)
        say(held, "info")
        bobs = bob.request("tools/call", call_params())
        say(held, "warning")
        held.release("tools/call", text_result("alice"))
        held.release("tools/call", text_result("bob"))
        result_of(alices)
        result_of(bobs)
        self.assertEqual(alice.levels(), ["info"])
        self.assertEqual(bob.levels(), [])

    def test_one_connection_hears_it_once(self) -> None:
        """Two calls in flight on one connection to the same server: each message once."""
        harness, connector = pooled()
        session = Session(Revision.V2025_06_18, harness)
        session.result("logging/setLevel", {"level": "debug"})
        first = session.request("tools/call", call_params())
        second = session.request("tools/call", call_params())
        held = upstream(connector)
        say(held, "info")
        held.release("tools/call", text_result("1"))
        say(held, "error")
        held.release("tools/call", text_result("2"))
        result_of(first)
        result_of(second)
        self.assertEqual(levels(harness.notifications), ["info", "error"])

    def test_no_level_caller_is_left_out(self) -> None:
        """Of two callers on the server, the one that set no level hears nothing."""
        harness, connector = pooled()
        session = Session(Revision.V2025_06_18, harness)
        session.result("logging/setLevel", {"level": "debug"})
        other = Caller(harness.server, "host-pid-2")
        other.initialize(Revision.V2025_06_18, None)
        mine = session.request("tools/call", call_params())
        theirs = other.request("tools/call", call_params())
        say(upstream(connector), "warning")
        upstream(connector).release("tools/call", text_result("mine"))
        upstream(connector).release("tools/call", text_result("theirs"))
        result_of(mine)
        result_of(theirs)
        self.assertEqual(levels(harness.notifications), ["warning"])
        self.assertEqual(other.levels(), [])


class StreamableHTTPLoggingTests(SynchronousTestCase):
    """Log messages over C{/mcp}: on the response stream of the call they arose during."""

    def setUp(self) -> None:
        self.clock = Clock()
        made: list[DaemonHTTP] = []
        pool, self.connector = pooled_pool(
            self.clock,
            lambda kind, server=None, **data: made[0].host.events.publish(kind, server, **data),
        )
        self.daemon = daemon_http(
            clock=self.clock,
            pid=1,
            pool=pool,
            settings=default_settings(),
            servers=servers_config("demo", "other"),
        )
        made.append(self.daemon)
        self.mcp = McpHTTP(McpServer(self.daemon.host, self.clock), self.clock, keep_alive=0)
        self.daemon.mcp = self.mcp
        self.addCleanup(self.mcp.close)
        self.stub: Any = StubTreq(self.daemon.resource())

    def post(self, body: Any, headers: dict[str, str]) -> Deferred[Any]:
        """POST C{body}; the response fires once its headers are sent."""
        started: Deferred[Any] = self.stub.request(
            "POST",
            URL,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Accept": BOTH, **headers},
        )
        self.stub.flush()
        return started

    def opened(self, started: Deferred[Any]) -> tuple[Any, _Body]:
        """The response that C{started}, its body collected as it arrives."""
        self.stub.flush()
        response = result_of(started)
        collected = _Body()
        response.deliverBody(collected)
        self.stub.flush()
        return response, collected

    def test_modern_request_stream(self) -> None:
        """
        A 2026-07-28 POST with _meta logLevel gets the messages on its own SSE stream,
        before its answer, valid in strict mode.
        """
        body = modern(1, "tools/call", call_params())
        body["params"]["_meta"][LOG_LEVEL] = "warning"
        started = self.post(body, modern_headers("tools/call", **{"Mcp-Name": "mcpx_call"}))
        held = upstream(self.connector)
        say(held, "info", "warning")
        response, collected = self.opened(started)
        self.assertEqual(header(response, "content-type"), "text/event-stream")
        held.release("tools/call", text_result("done"))
        self.stub.flush()
        events = collected.events()
        self.assertEqual([e.get("method") for e in events], [MESSAGE, None])
        self.assertEqual(events[0]["params"]["level"], "warning")
        self.assertEqual(events[1]["id"], 1)
        valid(events[0], NEWEST)
        self.assertEqual(self.daemon.host.events.subscribers, 0)

    def test_modern_without_level(self) -> None:
        """A 2026-07-28 POST without logLevel gets its answer alone, as JSON."""
        started = self.post(
            modern(1, "tools/call", call_params()),
            modern_headers("tools/call", **{"Mcp-Name": "mcpx_call"}),
        )
        held = upstream(self.connector)
        say(held, "emergency")
        held.release("tools/call", text_result("done"))
        self.stub.flush()
        response = result_of(started)
        self.assertEqual(header(response, "content-type"), "application/json")
        answer = json.loads(result_of(response.content()))
        self.assertEqual(answer["result"]["content"], [{"type": "text", "text": "done"}])

    def test_legacy_session_post_stream(self) -> None:
        """
        In a legacy session that set a level, the messages of a call go on that call's
        POST stream (not to a GET stream nobody opened), valid for 2025-06-18.
        """
        response = result_of(
            self.post(
                rpc(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}}), {}
            )
        )
        session = header(response, "mcp-session-id")
        assert session is not None
        self.stub.flush()
        headers = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}
        level = self.post(rpc(1, "logging/setLevel", {"level": "warning"}), headers)
        self.assertEqual(result_of(level).code, 200)
        started = self.post(rpc(2, "tools/call", call_params()), headers)
        held = upstream(self.connector)
        say(held, "info", "error")
        response, collected = self.opened(started)
        held.release("tools/call", text_result("done"))
        self.stub.flush()
        events = collected.events()
        self.assertEqual([e.get("method") for e in events], [MESSAGE, None])
        self.assertEqual(events[0]["params"]["level"], "error")
        valid(events[0], Revision.V2025_06_18)


class SpellingTests(SynchronousTestCase):
    def test_every_revision_accepts_the_spelling(self) -> None:
        """
        The relayed notification, with and without a logger, with any JSON data, is
        valid in strict mode for every revision; a logger that is not a string and a
        level no revision names are not passed on.
        """
        for revision in ALL_REVISIONS:
            harness, connector = pooled()
            session = Session(revision, harness)
            meta: dict[str, Any] = {}
            if revision.is_modern:
                meta[LOG_LEVEL] = "debug"
            else:
                session.result("logging/setLevel", {"level": "debug"})
            calling = session.request("tools/call", call_params(), **meta)
            held = upstream(connector)
            held.notify(MESSAGE, {"level": "info", "data": "plain"})
            held.notify(MESSAGE, {"level": "info", "logger": 7, "data": [1, None]})
            held.notify(MESSAGE, {"level": "loud", "data": "no such level"})
            held.notify(MESSAGE, {"level": "error", "logger": "x", "data": None})
            held.release("tools/call", text_result("done"))
            result_of(calling)
            sent = [n.params for n in harness.notifications if n.method == MESSAGE]
            self.assertEqual(
                sent,
                [
                    {"level": "info", "data": "plain"},
                    {"level": "info", "data": [1, None]},
                    {"level": "error", "logger": "x", "data": None},
                ],
                revision,
            )
            self.assertEqual(check_frames(harness.sent, revision), 3, revision)


class RealProcessLoggingTests(RealDaemonCase):
    timeout = 60

    async def test_host_that_set_a_level_sees_the_fixtures_messages(self) -> None:
        """
        Through a real daemon and `mcpx serve`, a host that set warning sees the SDK
        fixture's warning and error messages during its call of `log`, and not its
        debug or info ones; a 2026-07-28 request asking for error sees error alone.
        """
        await self.start_daemon({"sdk": fixture_argv("stdio", "legacy")})
        host = Host(self)
        await host.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test-host", "version": "1"},
            },
        )
        host.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await host.request("logging/setLevel", {"level": "warning"})
        call = {"name": "mcpx_call", "arguments": {"server": "sdk", "tool": "log"}}
        answered = await host.request("tools/call", call)
        self.assertIn("logged debug,info,warning,error", json.dumps(answered))
        seen = []
        for level in ("warning", "error"):
            message = await host.message(
                lambda m, level=level: m.get("method") == MESSAGE and m["params"]["level"] == level
            )
            seen.append(message["params"])
            valid(message, Revision.V2025_06_18)
        self.assertEqual([p["data"] for p in seen], ["warning message", "error message"])
        self.assertEqual({p.get("logger") for p in seen}, {"fixture"})
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            LOG_LEVEL: "error",
        }
        await host.request("tools/call", {**call, "_meta": meta})
        modern_error = await host.message(lambda m: m.get("method") == MESSAGE)
        self.assertEqual(modern_error["params"]["level"], "error")
        valid(modern_error, NEWEST)
        frames = [json.loads(line) for line in host.child.text(1).splitlines()]
        relayed = [f["params"]["level"] for f in frames if f.get("method") == MESSAGE]
        self.assertEqual(relayed, ["warning", "error", "error"])
        assert host.child.transport is not None
        host.child.transport.closeStdin()
        self.assertEqual(await host.child.ended(timeout=20), 0)


class UpstreamLevelTests(SynchronousTestCase):
    def test_the_callers_level_goes_upstream_with_mcpx_call(self) -> None:
        """
        A 2026-07-28 upstream logs only to a request that asks: mcpx_call carries the
        caller's level in the upstream request's _meta, and nothing when none was set.
        """
        harness, connector = pooled()
        session = Session(Revision.V2025_06_18, harness)
        session.result("logging/setLevel", {"level": "warning"})
        calling = session.request("tools/call", call_params())
        held = upstream(connector)
        forwarded = held.last("tools/call").params
        assert isinstance(forwarded, dict)
        self.assertEqual(forwarded["_meta"]["io.modelcontextprotocol/logLevel"], "warning")
        held.release("tools/call", text_result("done"))
        result_of(calling)

        quiet, quiet_connector = pooled()
        silent = Session(Revision.V2025_06_18, quiet)
        silent_call = silent.request("tools/call", call_params())
        quiet_held = upstream(quiet_connector)
        params = quiet_held.last("tools/call").params
        assert isinstance(params, dict)
        self.assertNotIn("io.modelcontextprotocol/logLevel", params.get("_meta") or {})
        quiet_held.release("tools/call", text_result("done"))
        result_of(silent_call)
