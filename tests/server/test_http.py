"""
Tests for L{mcpx.server.http}: C{/mcp} driven in memory through StubTreq over the
daemon's Klein app, with a scripted core (and, at the end, the real one).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any, cast

from treq.testing import StubTreq
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IPushProducer, ITransport
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.iweb import IRequest
from twisted.web.resource import Resource
from twisted.web.test.requesthelper import DummyRequest

from mcpx.auth.caller import CALLER_ATTRIBUTE, VerifiedToken
from mcpx.server import http_exchange
from mcpx.server import http_legacy as legacy_module
from mcpx.server.dispatch import McpServer
from mcpx.server.http import McpHTTP
from mcpx.server.http_exchange import (
    HTTP_IDENTITY,
    KEEPALIVE,
    METHOD,
    Driven,
    Exchange,
    KeepAlive,
    Started,
    accepts_event_stream,
)
from mcpx.server.http_legacy import BACKLOG_BYTES, HostSession
from mcpx.spec.revision import Revision
from mcpx.wire.errors import HEADER_MISMATCH, INVALID_REQUEST, METHOD_NOT_FOUND
from mcpx.wire.sse import SSEDecoder
from tests.daemon.fake_pool import FakePool, daemon_http, default_settings, result_of
from tests.server import gateway_servers, servers_config
from tests.server.fake_core import FakeCore
from tests.support.logs import observe_log

URL = "http://127.0.0.1:8899/mcp"
MODERN = "2026-07-28"
BOTH = "application/json, text/event-stream"
PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"


class _Body(Protocol):
    """Collects a streamed response body as it arrives."""

    def __init__(self) -> None:
        self.data = b""
        self.ended: list[Failure] = []

    def dataReceived(self, data: bytes) -> None:
        self.data += data

    def connectionLost(self, reason: Failure | None = None) -> None:
        assert reason is not None
        self.ended.append(reason)

    def events(self) -> list[Any]:
        decoder = SSEDecoder()
        return [json.loads(event.data) for event in decoder.feed(self.data)]


def request(request_id: int | str, method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def modern(request_id: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """A 2026-07-28 request: its C{_meta} names the revision and the capabilities."""
    meta = {PROTOCOL_VERSION: MODERN, CLIENT_CAPABILITIES: {}}
    return request(request_id, method, {**(params or {}), "_meta": meta})


def modern_headers(method: str, **extra: str) -> dict[str, str]:
    return {"MCP-Protocol-Version": MODERN, "Mcp-Method": method, "Accept": BOTH, **extra}


class Client:
    """Requests to C{/mcp} through StubTreq, answered in memory."""

    def __init__(self, mcp_http: McpHTTP | None, clock: Clock) -> None:
        self.daemon = daemon_http(clock=clock, pid=1)
        self.daemon.mcp = mcp_http
        # StubTreq grows its request methods at run time, so mypy cannot see them.
        self.stub: Any = StubTreq(self.daemon.resource())

    def start(
        self,
        method: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        *,
        raw: bytes | None = None,
    ) -> Deferred[Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        sent = {"Content-Type": "application/json", "Accept": BOTH, **(headers or {})}
        started: Deferred[Any] = self.stub.request(method, URL, data=data, headers=sent)
        self.stub.flush()
        return started

    def open(
        self, method: str, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> tuple[Any, _Body]:
        """A request whose response has started; its body is collected as it arrives."""
        response = result_of(self.start(method, body, headers))
        collected = _Body()
        response.deliverBody(collected)
        self.stub.flush()
        return response, collected

    def send(
        self,
        method: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        *,
        raw: bytes | None = None,
    ) -> tuple[Any, bytes]:
        """A request answered at once: its response and whole body."""
        response = result_of(self.start(method, body, headers, raw=raw))
        self.stub.flush()
        content: bytes = result_of(response.content())
        return response, content

    def post(self, body: Any, headers: Mapping[str, str] | None = None) -> tuple[Any, Any]:
        """POST C{body} and decode the JSON answer (C{None} for an empty body)."""
        response, content = self.send("POST", body, headers)
        return response, (json.loads(content) if content else None)


def header(response: Any, name: str) -> str | None:
    values = response.headers.getRawHeaders(name.encode("ascii"))
    return None if not values else str(values[0], "utf-8")


class McpHTTPCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.core = FakeCore()
        self.mcp = McpHTTP(
            self.core,
            self.clock,
            keep_alive=15.0,
            max_body=4096,
        )
        self.client = Client(self.mcp, self.clock)
        self.addCleanup(self.client.stub.flush)
        self.addCleanup(self.mcp.close)

    def initialize(self, revision: str = "2025-06-18") -> str:
        response, body = self.client.post(
            request(0, "initialize", {"protocolVersion": revision, "capabilities": {}})
        )
        self.assertEqual(response.code, 200)
        self.assertEqual(body["result"]["protocolVersion"], revision)
        session = header(response, "mcp-session-id")
        assert session is not None
        return session

    def session_headers(self, session: str, revision: str = "2025-06-18") -> dict[str, str]:
        return {"Mcp-Session-Id": session, "MCP-Protocol-Version": revision}


class DaemonSessionIdTests(SynchronousTestCase):
    """A daemon's id (L{mcpx.store.heartbeat}) begins every session id it mints."""

    def daemon(self, daemon: str) -> tuple[McpHTTP, Client]:
        clock = Clock()
        mcp = McpHTTP(FakeCore(), clock, keep_alive=15.0, max_body=4096, daemon=daemon)
        client = Client(mcp, clock)
        self.addCleanup(client.stub.flush)
        self.addCleanup(mcp.close)
        return mcp, client

    def initialize(self, client: Client) -> str:
        response, _ = client.post(
            request(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}})
        )
        session = header(response, "mcp-session-id")
        assert session is not None
        return session

    def test_session_id_names_its_daemon(self) -> None:
        """
        The session id is the daemon's id, a dot and 32 random URL-safe characters, a
        fresh random part each time; it is visible ASCII, as the transport asks.
        """
        _, client = self.daemon("d_0123456789ab")
        first, second = self.initialize(client), self.initialize(client)
        for session in (first, second):
            owner, dot, random = session.partition(".")
            self.assertEqual((owner, dot, len(random)), ("d_0123456789ab", ".", 32))
            self.assertRegex(random, r"^[A-Za-z0-9_-]{32}$")
            self.assertEqual(legacy_module.session_owner(session), "d_0123456789ab")
        self.assertNotEqual(first, second)

    def test_another_daemons_session_is_404_and_logged(self) -> None:
        """
        A session id minted by another daemon is 404 on POST, GET and DELETE (so the
        host initializes again here), and the log names the daemon that owns it, never
        the rest of the id.
        """
        _, first = self.daemon("d_aaaaaaaaaaaa")
        _, second = self.daemon("d_bbbbbbbbbbbb")
        session = self.initialize(first)
        logged = observe_log(self)
        headers = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}
        response, _ = second.post(request(1, "echo", {"x": 1}), headers)
        self.assertEqual(response.code, 404)
        for method in ("GET", "DELETE"):
            response, _ = second.send(method, None, {**headers, "Accept": "text/event-stream"})
            self.assertEqual(response.code, 404, method)
        said = [
            e for e in logged if "a request named a session of daemon" in str(e.get("log_format"))
        ]
        self.assertEqual(len(said), 3)
        self.assertEqual(
            (said[0]["owner"], said[0]["daemon"]), ("d_aaaaaaaaaaaa", "d_bbbbbbbbbbbb")
        )
        secret = session.partition(".")[2]
        self.assertFalse([e for e in logged if secret in repr(e)])
        # On its own daemon it is served.
        response, _ = first.post(request(2, "echo", {"x": 1}), headers)
        self.assertEqual(response.code, 200)


class LegacySessionTests(McpHTTPCase):
    def test_only_initialize_mints_a_session(self) -> None:
        """initialize answers with an Mcp-Session-Id; a sessionless request gets none."""
        session = self.initialize()
        self.assertGreaterEqual(len(session), 24)
        self.assertTrue(all(0x21 <= ord(c) <= 0x7E for c in session))
        conn = self.core.opened[0]
        self.assertEqual(conn.transport, "http-session")
        self.assertEqual(conn.identity, f"http-session:{session}")
        self.assertTrue(conn.can_push)
        response, body = self.client.post(request(1, "echo", {"x": 1}))
        self.assertIsNone(header(response, "mcp-session-id"))
        self.assertEqual(body["result"], {"x": 1})
        sessionless = self.core.opened[1]
        self.assertEqual(sessionless.transport, "http-post")
        self.assertFalse(sessionless.can_push)
        self.assertTrue(sessionless.closed, "a sessionless connection lasts one request")
        # A second initialize mints a different session.
        self.assertNotEqual(self.initialize(), session)

    def test_failed_initialize_mints_nothing(self) -> None:
        """An initialize that fails gets no session id and leaves no session behind."""
        self.initialize()
        response, body = self.client.post(request(1, "initialize", {"protocolVersion": 7}))
        self.assertEqual(response.code, 200)
        self.assertIsNone(header(response, "mcp-session-id"))
        self.assertEqual(body["error"]["code"], -32602)
        self.assertEqual(len(self.mcp.sessions), 1)
        self.assertTrue(self.core.opened[-1].closed)

    def test_session_requests(self) -> None:
        """A request with the session's id is served on the session's connection."""
        session = self.initialize()
        response, body = self.client.post(
            request(1, "echo", {"y": 2}), self.session_headers(session)
        )
        self.assertEqual(body["result"], {"y": 2})
        self.assertEqual(header(response, "content-type"), "application/json")
        conns = {id(conn) for conn, _ in self.core.handled}
        self.assertEqual(len(conns), 1)

    def test_unknown_session_is_404(self) -> None:
        """A request naming a session mcpx does not know is 404."""
        response, body = self.client.post(
            request(1, "echo", {}), {"Mcp-Session-Id": "nope", "MCP-Protocol-Version": "2025-06-18"}
        )
        self.assertEqual(response.code, 404)
        self.assertEqual(body["id"], 1)
        self.assertEqual(self.core.handled, [])

    def test_delete_ends_the_session(self) -> None:
        """DELETE ends a session: later requests on it are 404, and its connection closes."""
        session = self.initialize()
        response, _ = self.client.send("DELETE", headers=self.session_headers(session))
        self.assertEqual(response.code, 200)
        self.assertTrue(self.core.opened[0].closed)
        response, _ = self.client.post(request(1, "echo", {}), self.session_headers(session))
        self.assertEqual(response.code, 404)
        response, _ = self.client.send("DELETE", headers=self.session_headers(session))
        self.assertEqual(response.code, 404)
        response, _ = self.client.send("DELETE")
        self.assertEqual(response.code, 400)

    def test_delete_cancels_running_requests(self) -> None:
        """Ending a session cancels what it was running; the open POST ends with 202."""
        session = self.initialize()
        started = self.client.start("POST", request(5, "wait"), self.session_headers(session))
        self.assertNoResult(started)
        self.client.send("DELETE", headers=self.session_headers(session))
        self.assertEqual(self.core.cancelled, [5])
        self.client.stub.flush()
        self.assertEqual(result_of(started).code, 202)

    def test_revision_header_must_match(self) -> None:
        """A later request naming another revision than the session's is 400."""
        session = self.initialize("2025-06-18")
        response, body = self.client.post(
            request(1, "echo", {}), self.session_headers(session, "2025-11-25")
        )
        self.assertEqual(response.code, 400)
        self.assertEqual(body["error"]["code"], INVALID_REQUEST)
        response, _ = self.client.post(request(1, "echo", {}), {"Mcp-Session-Id": session})
        self.assertEqual(response.code, 200, "the header may be left out")

    def test_unsupported_revision_header(self) -> None:
        """An MCP-Protocol-Version mcpx does not speak is 400, listing what it speaks."""
        response, body = self.client.post(
            request(1, "echo", {}), {"MCP-Protocol-Version": "1999-01-01"}
        )
        self.assertEqual(response.code, 400)
        self.assertEqual(body["error"]["data"]["requested"], "1999-01-01")
        self.assertIn("2025-06-18", body["error"]["data"]["supported"])

    def test_headerless_is_2025_03_26(self) -> None:
        """A request without MCP-Protocol-Version is read as 2025-03-26; with one, as it says."""
        self.client.post(request(1, "echo", {}))
        self.assertIs(self.core.opened[-1].default_revision, Revision.V2025_03_26)
        self.client.post(request(1, "echo", {}), {"MCP-Protocol-Version": "2025-06-18"})
        self.assertIs(self.core.opened[-1].default_revision, Revision.V2025_06_18)
        self.initialize("2025-11-25")
        self.assertIs(self.core.opened[-1].default_revision, Revision.V2025_03_26)

    def test_notifications_and_responses_are_202(self) -> None:
        """Notifications are accepted with 202 and reach the core with the session's conn."""
        session = self.initialize()
        response, body = self.client.post(
            {"jsonrpc": "2.0", "method": "notifications/initialized"}, self.session_headers(session)
        )
        self.assertEqual((response.code, body), (202, None))
        [(conn, notification)] = self.core.notifications
        self.assertIs(conn, self.core.opened[0])
        self.assertEqual(notification.method, "notifications/initialized")
        response, _ = self.client.post({"jsonrpc": "2.0", "method": "notifications/x"})
        self.assertEqual(response.code, 202)
        response, _ = self.client.post(
            {"jsonrpc": "2.0", "id": -9, "result": {}}, self.session_headers(session)
        )
        self.assertEqual(response.code, 202)
        response, _ = self.client.post({"jsonrpc": "2.0", "id": -9, "result": {}})
        self.assertEqual(response.code, 400, "a response outside a session belongs nowhere")

    def test_cancelled_notification_cancels(self) -> None:
        """notifications/cancelled cancels the session's request; its POST ends with 202."""
        session = self.initialize()
        started = self.client.start("POST", request(5, "wait"), self.session_headers(session))
        response, _ = self.client.post(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": 5, "reason": "no longer needed"},
            },
            self.session_headers(session),
        )
        self.assertEqual(response.code, 202)
        self.assertEqual(self.core.cancelled, [5])
        self.assertEqual(self.core.notifications, [])
        self.client.stub.flush()
        self.assertEqual(result_of(started).code, 202)

    def test_dropped_connection_is_not_a_cancellation(self) -> None:
        """Within a session, a POST whose connection drops keeps running."""
        session = self.initialize()
        started = self.client.start("POST", request(5, "wait"), self.session_headers(session))
        # The keep-alive starts the stream, so there is a connection to drop.
        self.clock.advance(15)
        self.client.stub.flush()
        body = _Body()
        result_of(started).deliverBody(body)
        self.client.stub.flush()
        cast(IPushProducer, cast(ITransport, body.transport)).stopProducing()
        self.client.stub.flush()
        self.assertEqual(self.core.cancelled, [])
        self.assertIn(5, self.core.waiting)
        self.core.release(5, {})
        self.assertFalse(self.mcp.sessions[session].peer.is_handling(5))

    def test_sessionless_drop_is_a_cancellation(self) -> None:
        """Outside a session, a POST whose connection drops is cancelled."""
        started = self.client.start("POST", request(5, "wait"))
        self.assertIn(5, self.core.waiting)
        started.cancel()
        self.client.stub.flush()
        self.failureResultOf(started)
        self.assertEqual(self.core.cancelled, [5])
        self.assertTrue(self.core.opened[-1].closed)


class StreamTests(McpHTTPCase):
    def test_get_stream_carries_pushes(self) -> None:
        """What mcpx pushes to a session goes on its GET stream, as events without ids."""
        session = self.initialize()
        conn = self.core.opened[0]
        assert conn.push is not None
        conn.push("notifications/tools/list_changed", None)
        response, body = self.client.open(
            "GET", headers={**self.session_headers(session), "Accept": "text/event-stream"}
        )
        self.assertEqual(response.code, 200)
        self.assertEqual(header(response, "content-type"), "text/event-stream")
        conn.push("notifications/resources/updated", {"uri": "mcpx://a/b"})
        self.client.stub.flush()
        self.assertEqual(
            [event["method"] for event in body.events()],
            ["notifications/tools/list_changed", "notifications/resources/updated"],
        )
        self.assertNotIn(b"\nid:", b"\n" + body.data)

    def test_get_stream_rules(self) -> None:
        """GET needs a known session and an event-stream Accept; a second one replaces the first."""
        response, _ = self.client.send("GET", headers={"Accept": "text/event-stream"})
        self.assertEqual(response.code, 405)
        response, _ = self.client.send(
            "GET", headers={"Mcp-Session-Id": "nope", "Accept": "text/event-stream"}
        )
        self.assertEqual(response.code, 404)
        session = self.initialize()
        response, _ = self.client.send(
            "GET", headers={"Mcp-Session-Id": session, "Accept": "application/json"}
        )
        self.assertEqual(response.code, 406)
        headers = {"Mcp-Session-Id": session, "Accept": "text/event-stream"}
        _, first = self.client.open("GET", headers=headers)
        _, second = self.client.open("GET", headers=headers)
        self.assertEqual(len(first.ended), 1, "the first stream ended")
        conn = self.core.opened[0]
        assert conn.push is not None
        conn.push("notifications/x", None)
        self.client.stub.flush()
        self.assertEqual(len(second.events()), 1)
        self.assertEqual(first.events(), [])

    def test_get_stream_keep_alive(self) -> None:
        """The GET stream sends a keep-alive comment each transport.sseKeepAlive."""
        session = self.initialize()
        _, body = self.client.open(
            "GET", headers={"Mcp-Session-Id": session, "Accept": "text/event-stream"}
        )
        self.clock.advance(15)
        self.client.stub.flush()
        self.assertEqual(body.data, b": keepalive\n")
        self.client.send("DELETE", headers={"Mcp-Session-Id": session})
        self.assertEqual(len(body.ended), 1)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_plain_answer_is_json(self) -> None:
        """A request with nothing to stream is answered with a JSON body."""
        session = self.initialize()
        response, body = self.client.post(request(1, "echo", {}), self.session_headers(session))
        self.assertEqual(header(response, "content-type"), "application/json")
        self.assertEqual(body["id"], 1)

    def test_notification_turns_the_answer_into_a_stream(self) -> None:
        """
        A notification sent while a request is handled goes on that request's POST,
        which becomes an event stream ending with the answer.
        """
        session = self.initialize()
        params = {"method": "notifications/message", "params": {"level": "info", "data": "hi"}}
        response, body = self.client.open(
            "POST", request(3, "notify", params), self.session_headers(session)
        )
        self.assertEqual(header(response, "content-type"), "text/event-stream")
        self.core.release(3, {"ok": True})
        self.client.stub.flush()
        first, last = body.events()
        self.assertEqual(first["method"], "notifications/message")
        self.assertEqual(last, {"jsonrpc": "2.0", "id": 3, "result": {"ok": True}})
        self.assertEqual(len(body.ended), 1)

    def test_progress_goes_to_its_request(self) -> None:
        """Progress pushed outside the handler finds its POST by the progress token."""
        session = self.initialize()
        params = {"_meta": {"progressToken": "tok"}}
        started = self.client.start(
            "POST", request(3, "wait", params), self.session_headers(session)
        )
        _, other = self.client.open(
            "GET", headers={"Mcp-Session-Id": session, "Accept": "text/event-stream"}
        )
        conn = self.core.opened[0]
        assert conn.push is not None
        conn.push("notifications/progress", {"progressToken": "tok", "progress": 1})
        conn.push("notifications/progress", {"progressToken": "other", "progress": 1})
        self.core.release(3, {})
        self.client.stub.flush()
        body = _Body()
        result_of(started).deliverBody(body)
        self.client.stub.flush()
        self.assertEqual(
            [e.get("params", {}).get("progressToken") for e in body.events()], ["tok", None]
        )
        self.assertEqual([e["params"]["progressToken"] for e in other.events()], ["other"])

    def test_ask_on_the_post_stream(self) -> None:
        """
        A server request during a POST goes on that POST's stream with a negative id; the
        client's answer, POSTed to the session, reaches the asker and the POST ends.
        """
        session = self.initialize()
        _, body = self.client.open(
            "POST", request(4, "ask", {"message": "sure?"}), self.session_headers(session)
        )
        [asked] = body.events()
        self.assertEqual((asked["id"], asked["method"]), (-1, "elicitation/create"))
        response, _ = self.client.post(
            {"jsonrpc": "2.0", "id": -1, "result": {"action": "decline"}},
            self.session_headers(session),
        )
        self.assertEqual(response.code, 202)
        self.client.stub.flush()
        self.assertEqual(body.events()[-1]["result"], {"answer": {"action": "decline"}})

    def test_ask_without_a_stream_fails(self) -> None:
        """A server request outside any POST, with no GET stream open, fails at once."""
        self.initialize()
        conn = self.core.opened[0]
        assert conn.ask is not None
        self.failureResultOf(conn.ask("roots/list", {}), ConnectionError)

    def test_keep_alive_after_silence(self) -> None:
        """
        A slow request whose client accepts event streams becomes one after
        transport.sseKeepAlive of silence, with a comment each interval, no ids.
        """
        session = self.initialize()
        started = self.client.start("POST", request(6, "wait"), self.session_headers(session))
        self.clock.advance(14.9)
        self.client.stub.flush()
        self.assertNoResult(started)
        self.clock.advance(0.1)
        self.client.stub.flush()
        response = result_of(started)
        self.assertEqual(header(response, "content-type"), "text/event-stream")
        body = _Body()
        response.deliverBody(body)
        self.client.stub.flush()
        self.assertEqual(body.data, b": keepalive\n")
        self.clock.advance(15)
        self.client.stub.flush()
        self.assertEqual(body.data.count(b": keepalive\n"), 2)
        self.core.release(6, {"late": True})
        self.client.stub.flush()
        self.assertEqual(body.events(), [{"jsonrpc": "2.0", "id": 6, "result": {"late": True}}])
        self.assertNotIn(b"id:", body.data)
        # The keep-alive timer, left armed, fires once more with nothing due.
        self.clock.advance(15)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_no_keep_alive_without_event_stream(self) -> None:
        """A client that accepts only JSON waits for a JSON answer, however long."""
        session = self.initialize()
        started = self.client.start(
            "POST",
            request(6, "wait"),
            {**self.session_headers(session), "Accept": "application/json"},
        )
        self.clock.advance(100)
        self.client.stub.flush()
        self.assertNoResult(started)
        self.core.release(6, {})
        self.client.stub.flush()
        self.assertEqual(header(result_of(started), "content-type"), "application/json")


class SharedKeepAliveTests(SynchronousTestCase):
    """
    The responses that wait share one keep-alive timer (L{KeepAlive}); each still gets
    its keep-alive after its own C{transport.sseKeepAlive} of silence, counted from
    the last thing written to it.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.beats = KeepAlive(self.clock, 15.0)
        self.requests = [DummyRequest([b"mcp"]) for _ in range(3)]
        self.exchanges = [
            Exchange(
                cast(Any, request), self.clock, accepts_sse=True, keep_alive=15.0, beats=self.beats
            )
            for request in self.requests
        ]

    def beats_of(self) -> list[int]:
        return [b"".join(request.written).count(KEEPALIVE) for request in self.requests]

    def test_silence_is_counted_per_response(self) -> None:
        first, second, third = self.exchanges
        first.watch()
        self.clock.advance(5)
        second.watch()
        self.clock.advance(5)
        third.watch()
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        self.clock.advance(4)
        # Written to at 14 s: its silence starts again.
        self.assertTrue(first.send(b'{"n":1}'))
        self.clock.advance(1)
        self.assertEqual(self.beats_of(), [0, 0, 0])
        self.clock.advance(4.9)
        self.assertEqual(self.beats_of(), [0, 0, 0])
        self.clock.advance(0.1)
        self.assertEqual(self.beats_of(), [0, 1, 0])
        self.clock.advance(5)
        self.assertEqual(self.beats_of(), [0, 1, 1])
        self.clock.advance(4)
        self.assertEqual(self.beats_of(), [1, 1, 1])
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        self.clock.advance(15)
        self.assertEqual(self.beats_of(), [2, 2, 2])
        for exchange in self.exchanges:
            exchange.answer(b'{"done":true}')
        self.clock.advance(60)
        self.assertEqual(self.beats_of(), [2, 2, 2])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_a_response_that_ends_gets_no_more(self) -> None:
        """
        The first response watched ends: the others keep their own due, none is beaten
        for it, and the timer stops when the last ends (or its client goes): left armed,
        it fires once with nothing due and is not armed again.
        """
        first, second, third = self.exchanges
        first.watch()
        self.clock.advance(10)
        second.watch()
        third.watch()
        first.answer(b"{}")
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        self.clock.advance(5)
        self.assertEqual(self.beats_of(), [0, 0, 0])
        self.clock.advance(10)
        self.assertEqual(self.beats_of(), [0, 1, 1])
        second.answer(b"{}")
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        self.requests[2].processingFailed(Failure(ConnectionError("gone")))
        self.assertTrue(third.lost)
        self.clock.advance(60)
        self.assertEqual(self.beats_of(), [0, 1, 1])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_one_timer_for_responses_one_after_another(self) -> None:
        """
        A response watched after the last one ended finds the timer still armed: no
        other is armed for it, and it gets its keep-alive after its own silence, not
        at the first's due.
        """
        first, second, _ = self.exchanges
        first.watch()
        [timer] = self.clock.getDelayedCalls()
        self.clock.advance(10)
        first.answer(b"{}")
        self.assertEqual(self.clock.getDelayedCalls(), [timer])
        second.watch()
        self.assertEqual(self.clock.getDelayedCalls(), [timer])
        self.clock.advance(14.9)
        self.assertEqual(self.beats_of(), [0, 0, 0])
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        self.clock.advance(0.1)
        self.assertEqual(self.beats_of(), [0, 1, 0])
        second.answer(b"{}")
        self.clock.advance(60)
        self.assertEqual(self.beats_of(), [0, 1, 0])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_stop_cancels_the_timer(self) -> None:
        """The endpoint closing (the daemon stops) cancels the timer left armed."""
        first = self.exchanges[0]
        first.watch()
        first.answer(b"{}")
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        self.beats.stop()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.beats.stop()


class HeaderReadingTests(SynchronousTestCase):
    """
    A request header is read the same however often its value comes: trimmed of
    spaces and tabs, C{Accept} taken for an event stream in any case; a value
    remembered from an earlier request, or one too long or too many to be, alike.
    """

    def read(self, value: bytes) -> tuple[str | None, bool]:
        dummy = DummyRequest([b"mcp"])
        dummy.requestHeaders.setRawHeaders(b"mcp-method", [value])
        dummy.requestHeaders.setRawHeaders(b"accept", [value])
        request = cast(IRequest, dummy)
        return http_exchange.header(request, METHOD), accepts_event_stream(request)

    def test_values_read_alike_however_often(self) -> None:
        self.patch(http_exchange, "_texts", {})
        self.patch(http_exchange, "_accepting", {})
        values = [
            (b"tools/call", ("tools/call", False)),
            (b" \ttools/call\t ", ("tools/call", False)),
            (b"application/json, TEXT/Event-Stream", ("application/json, TEXT/Event-Stream", True)),
            (b"text/event", ("text/event", False)),
            (b"caf\xe9", ("caf\xe9", False)),
            (b"x" * 200 + b" text/event-stream ", ("x" * 200 + " text/event-stream", True)),
            (b"", ("", False)),
        ]
        for _ in range(3):
            for value, expected in values:
                self.assertEqual(self.read(value), expected, value)
        # Past the table's room, values are read as they come, and alike.
        for n in range(http_exchange.MAX_REMEMBERED + 10):
            value = b"v%d text/event-stream" % n
            self.assertEqual(self.read(value), (value.decode(), True))
        self.assertEqual(len(http_exchange._texts), http_exchange.MAX_REMEMBERED)
        for value, expected in values:
            self.assertEqual(self.read(value), expected, value)

    def test_absent(self) -> None:
        request = cast(IRequest, DummyRequest([b"mcp"]))
        self.assertEqual(
            (http_exchange.header(request, METHOD), accepts_event_stream(request)), (None, False)
        )


class DrivenTests(SynchronousTestCase):
    """
    L{Driven}, a legacy session's request that waits, ends as
    C{Deferred.fromCoroutine(started.__await__())} did: its result, its failure, its
    cancellation (the Deferred it waits on cancelled, the coroutine's own end after).
    """

    def outcomes(self, body: Any, fire: Any, *, cancel: bool = False) -> list[tuple[str, object]]:
        """How each driver's Deferred ends: C{body(waits)} run, C{fire(waits)} after."""
        ends: list[tuple[str, object]] = []
        for drive in (lambda s: Deferred.fromCoroutine(s.__await__()), lambda s: Driven(s).outcome):
            waits: list[Deferred[Any]] = []
            started = Started(body(waits))
            self.assertFalse(started.start())
            outcome = drive(started)
            seen: list[object] = []
            outcome.addBoth(seen.append)
            if cancel:
                outcome.cancel()
            fire(waits)
            [end] = seen
            if isinstance(end, Failure):
                ends.append(("failed", end.type))
            else:
                ends.append(("result", end))
        return ends

    def test_like_twisteds_runner(self) -> None:
        async def twice(waits: list[Deferred[Any]]) -> Any:
            first: Deferred[int] = Deferred()
            waits.append(first)
            one = await first
            second: Deferred[int] = Deferred()
            waits.append(second)
            return one + await second

        async def fails(waits: list[Deferred[Any]]) -> Any:
            wait: Deferred[int] = Deferred()
            waits.append(wait)
            await wait
            raise ValueError("after")

        async def caught(waits: list[Deferred[Any]]) -> Any:
            wait: Deferred[int] = Deferred()
            waits.append(wait)
            try:
                await wait
            except CancelledError:
                return "cancelled, answered"
            return "not cancelled"

        def both(waits: list[Deferred[Any]]) -> None:
            for wait in waits:
                if not wait.called:
                    wait.callback(2)

        def one(waits: list[Deferred[Any]]) -> None:
            waits[0].callback(1)
            if len(waits) > 1:
                waits[1].callback(2)

        def broken(waits: list[Deferred[Any]]) -> None:
            waits[0].errback(RuntimeError("upstream"))

        cases = [
            (twice, one, False, ("result", 3)),
            (twice, broken, False, ("failed", RuntimeError)),
            (fails, both, False, ("failed", ValueError)),
            (twice, both, True, ("failed", CancelledError)),
            (caught, both, True, ("result", "cancelled, answered")),
            (caught, both, False, ("result", "not cancelled")),
        ]
        for body, fire, cancel, expected in cases:
            self.assertEqual(self.outcomes(body, fire, cancel=cancel), [expected] * 2, body)


class BatchTests(McpHTTPCase):
    def test_batch_in_a_2025_03_26_session(self) -> None:
        """A 2025-03-26 session takes a batch and answers its requests as an array."""
        session = self.initialize("2025-03-26")
        batch = [
            request(1, "echo", {"n": 1}),
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            request(2, "echo", {"n": 2}),
        ]
        response, body = self.client.post(batch, {"Mcp-Session-Id": session})
        self.assertEqual(response.code, 200)
        self.assertEqual(sorted(answer["id"] for answer in body), [1, 2])
        self.assertEqual(len(self.core.notifications), 1)
        response, body = self.client.post(
            [{"jsonrpc": "2.0", "method": "notifications/x"}], {"Mcp-Session-Id": session}
        )
        self.assertEqual(response.code, 202)

    def test_batch_refused_elsewhere(self) -> None:
        """Outside a 2025-03-26 session a batch is 400."""
        batch = [request(1, "echo", {})]
        response, body = self.client.post(batch)
        self.assertEqual((response.code, body["error"]["code"]), (400, INVALID_REQUEST))
        session = self.initialize("2025-06-18")
        response, _ = self.client.post(batch, {"Mcp-Session-Id": session})
        self.assertEqual(response.code, 400)
        response, _ = self.client.post(batch, {"MCP-Protocol-Version": MODERN})
        self.assertEqual(response.code, 400)
        self.assertEqual(self.core.handled[-1][1].method, "initialize")

    def test_malformed_and_oversized_bodies(self) -> None:
        """A body that is not JSON is 400 with -32700; one over the limit is 413."""
        response, body = self.client.send("POST", raw=b"{not json")
        self.assertEqual((response.code, json.loads(body)["error"]["code"]), (400, -32700))
        response, _ = self.client.send("POST", raw=b"[" + b" " * 5000 + b"]")
        self.assertEqual(response.code, 413)

    def test_other_methods(self) -> None:
        """/mcp answers 405 to methods other than GET, POST and DELETE."""
        response, _ = self.client.send("PUT", request(1, "echo"))
        self.assertEqual(response.code, 405)
        self.assertEqual(header(response, "allow"), "GET, POST, DELETE")


class ModernTests(McpHTTPCase):
    def test_modern_request(self) -> None:
        """A 2026-07-28 request is served statelessly: its own connection, no session."""
        response, body = self.client.post(
            modern(1, "echo"), modern_headers("echo", **{"Mcp-Session-Id": "abc"})
        )
        self.assertEqual(response.code, 200)
        self.assertEqual(body["id"], 1)
        self.assertIsNone(header(response, "mcp-session-id"), "no session is echoed")
        [conn] = self.core.opened
        self.assertEqual(conn.transport, "http-modern")
        self.assertTrue(conn.closed)
        self.assertEqual(self.mcp.sessions, {})

    def test_header_validation(self) -> None:
        """The request-metadata headers must be present and agree with the body: -32020, 400."""
        cases: list[tuple[dict[str, Any], dict[str, str]]] = [
            (modern(1, "tools/list"), {"Mcp-Method": "tools/list"}),
            (modern(1, "tools/list"), modern_headers("prompts/list")),
            (modern(1, "tools/list"), {"MCP-Protocol-Version": MODERN}),
            (modern(1, "tools/list"), modern_headers("TOOLS/LIST")),
            (
                modern(1, "tools/list"),
                modern_headers("tools/list", **{"MCP-Protocol-Version": "2025-11-25"}),
            ),
            (modern(1, "tools/call", {"name": "a"}), modern_headers("tools/call")),
            (
                modern(1, "tools/call", {"name": "a"}),
                modern_headers("tools/call", **{"Mcp-Name": "b"}),
            ),
            (
                modern(1, "resources/read", {"uri": "x://y"}),
                modern_headers("resources/read", **{"Mcp-Name": "x://z"}),
            ),
        ]
        for body, headers in cases:
            response, answer = self.client.post(body, headers)
            self.assertEqual(response.code, 400, headers)
            self.assertEqual(answer["error"]["code"], HEADER_MISMATCH, headers)
            self.assertEqual(answer["id"], 1)
        self.assertEqual(self.core.handled, [])

    def test_header_values_accepted(self) -> None:
        """Header names in any case, whitespace around values, and base64 names are accepted."""
        encoded = "=?base64?" + base64.b64encode("zürich tool".encode()).decode() + "?="
        cases = [
            (modern(1, "echo"), {"mcp-protocol-version": MODERN, "MCP-METHOD": "echo"}),
            (
                modern(2, "tools/call", {"name": "a"}),
                modern_headers("tools/call", **{"Mcp-Name": "  a  "}),
            ),
            (
                modern(3, "tools/call", {"name": "zürich tool"}),
                modern_headers("tools/call", **{"Mcp-Name": encoded}),
            ),
        ]
        for body, headers in cases:
            response, _ = self.client.post(body, headers)
            self.assertNotEqual(response.code, 400, headers)
        self.assertEqual(len(self.core.handled), 3)

    def test_malformed_encoded_name_taken_as_it_is(self) -> None:
        """
        An C{Mcp-Name} in the encoded form whose Base64 is malformed is compared as it
        is: it agrees only with a body naming that very text.
        """
        malformed = "=?base64?***?="
        response, _ = self.client.post(
            modern(1, "tools/call", {"name": malformed}),
            modern_headers("tools/call", **{"Mcp-Name": malformed}),
        )
        self.assertNotEqual(response.code, 400)
        response, body = self.client.post(
            modern(2, "tools/call", {"name": "a"}),
            modern_headers("tools/call", **{"Mcp-Name": malformed}),
        )
        self.assertEqual((response.code, body["error"]["code"]), (400, HEADER_MISMATCH))

    def test_meta_without_header_is_modern(self) -> None:
        """A body whose _meta names 2026-07-28 without the header is -32020, not legacy."""
        response, body = self.client.post(modern(1, "tools/list"))
        self.assertEqual((response.code, body["error"]["code"]), (400, HEADER_MISMATCH))

    def test_status_follows_the_error_code(self) -> None:
        """The HTTP status of a 2026-07-28 error is the one its code maps to."""
        for code, status in ((-32601, 404), (-32602, 400), (-32022, 400), (-32603, 500), (-5, 200)):
            response, body = self.client.post(
                modern(1, "fail", {"code": code}), modern_headers("fail")
            )
            self.assertEqual(response.code, status, code)
            self.assertEqual(body["error"]["code"], code)
        response, body = self.client.post(modern(1, "crash"), modern_headers("crash"))
        self.assertEqual((response.code, body["error"]["code"]), (500, -32603))
        self.flushLoggedErrors(ValueError)

    def test_legacy_errors_are_200(self) -> None:
        """A legacy JSON-RPC error travels in a 200 response."""
        response, body = self.client.post(request(1, "fail", {"code": -32601}))
        self.assertEqual((response.code, body["error"]["code"]), (200, METHOD_NOT_FOUND))

    def test_get_and_delete_are_405(self) -> None:
        """A 2026-07-28 client has no GET stream and no session to delete."""
        for method in ("GET", "DELETE"):
            response, _ = self.client.send(
                method, headers={"MCP-Protocol-Version": MODERN, "Accept": "text/event-stream"}
            )
            self.assertEqual(response.code, 405, method)
            self.assertEqual(header(response, "allow"), "POST")

    def test_closing_the_stream_cancels(self) -> None:
        """Closing a 2026-07-28 request's connection cancels the request."""
        started = self.client.start("POST", modern(9, "wait"), modern_headers("wait"))
        self.assertIn(9, self.core.waiting)
        started.cancel()
        self.client.stub.flush()
        self.failureResultOf(started)
        self.assertEqual(self.core.cancelled, [9])
        self.assertTrue(self.core.opened[0].closed)

    def test_notifications_on_the_response_stream(self) -> None:
        """A notification about a 2026-07-28 request goes on its response stream."""
        params = {"method": "notifications/progress", "params": {"progressToken": 1, "progress": 5}}
        response, body = self.client.open(
            "POST", modern(2, "notify", params), modern_headers("notify")
        )
        self.assertEqual(header(response, "content-type"), "text/event-stream")
        self.core.release(2, {})
        self.client.stub.flush()
        progress, answer = body.events()
        self.assertEqual(progress["params"]["progress"], 5)
        self.assertEqual(answer["id"], 2)

    def test_no_push_without_event_stream(self) -> None:
        """A 2026-07-28 client that accepts only JSON gets a connection that cannot push."""
        self.client.post(modern(1, "echo"), modern_headers("echo", Accept="application/json"))
        self.assertFalse(self.core.opened[0].can_push)

    def test_notification_is_202(self) -> None:
        """A 2026-07-28 notification is accepted with 202."""
        notification = {
            "jsonrpc": "2.0",
            "method": "notifications/x",
            "params": {"_meta": {PROTOCOL_VERSION: MODERN}},
        }
        response, _ = self.client.post(notification, modern_headers("notifications/x"))
        self.assertEqual(response.code, 202)
        self.assertEqual(len(self.core.notifications), 1)

    def test_not_a_request(self) -> None:
        """
        A 2026-07-28 POST of anything but a request: a batch or an answer is refused
        (-32600, 400), a notification's C{Mcp-Method} is checked (-32020, 400) but not
        required; none reaches the core but the notification that passes.
        """
        meta = {"_meta": {PROTOCOL_VERSION: MODERN}}
        notification = {"jsonrpc": "2.0", "method": "notifications/x", "params": meta}
        answer = {"jsonrpc": "2.0", "id": 4, "result": meta}
        cases: list[tuple[Any, dict[str, str], int, dict[str, Any]]] = [
            (
                [notification],
                modern_headers("notifications/x"),
                400,
                {
                    "code": INVALID_REQUEST,
                    "message": "Invalid Request: 2026-07-28 has no batches: POST one message",
                },
            ),
            (
                answer,
                modern_headers("x"),
                400,
                {
                    "code": INVALID_REQUEST,
                    "message": "Invalid Request: a 2026-07-28 client sends requests and "
                    "notifications only",
                },
            ),
            (
                notification,
                modern_headers("notifications/y"),
                400,
                {
                    "code": HEADER_MISMATCH,
                    "message": "Mcp-Method 'notifications/y' disagrees with the body's method "
                    "'notifications/x'",
                },
            ),
        ]
        for body, headers, status, error in cases:
            response, refused = self.client.post(body, headers)
            self.assertEqual(response.code, status, body)
            self.assertEqual(refused, {"jsonrpc": "2.0", "id": None, "error": error})
        self.assertEqual(self.core.notifications, [])
        response, _ = self.client.post(notification, {"MCP-Protocol-Version": MODERN})
        self.assertEqual(response.code, 202)
        self.assertEqual(len(self.core.notifications), 1)

    def test_unavailable_without_mcp(self) -> None:
        """A daemon without an MCP server answers /mcp with 503."""
        client = Client(None, self.clock)
        response, body = client.send("POST", request(1, "echo"))
        self.assertEqual(response.code, 503)
        self.assertEqual(json.loads(body)["error"]["code"], "mcp_unavailable")


class AtOnceTests(McpHTTPCase):
    """
    An answer ready by the time the request's handling first waits is written at once,
    with no keep-alive armed and no Deferred made for it: what the client receives is
    the same, byte for byte, as when the same answer comes after a wait, for every
    revision, for results (kept encoded or not, large, non-ASCII), for errors and for a
    notification streamed before the answer.
    """

    LARGE = {"content": [{"type": "text", "text": "ünïcødé ✓ 𝄞 " * 20000}], "isError": False}

    OUTCOMES: tuple[dict[str, Any], ...] = (
        {"result": {"tools": [{"name": "a"}]}},
        {"result": {"tools": [{"name": "zürich", "title": "日本語 \u2028"}]}, "encoded": True},
        {"result": LARGE},
        {"result": LARGE, "encoded": True},
        {"result": {}},
        {"error": {"code": -32602, "message": "bad ünïcødé"}},
        {"error": {"code": HEADER_MISMATCH, "message": "disagrees"}},
        {"error": {"code": -32601, "message": "no such method"}},
        {"crash": True},
        {"result": {"ok": "é"}, "push": {"method": "notifications/message", "params": {"d": "é"}}},
        {"error": {"code": -32000, "message": "x"}, "push": {"method": "notifications/x"}},
    )

    def setUp(self) -> None:
        super().setUp()
        # The large answers come from the request itself.
        self.mcp = McpHTTP(self.core, self.clock, keep_alive=15.0, max_body=4 * 1024 * 1024)
        self.client = Client(self.mcp, self.clock)
        self.addCleanup(self.client.stub.flush)
        self.addCleanup(self.mcp.close)

    def exchange(
        self, revision: str, request_id: int | str, outcome: dict[str, Any], *, wait: bool
    ) -> tuple[int, list[tuple[bytes, list[bytes]]], bytes]:
        """The status, headers (but C{Date}) and body of one request answered C{outcome}."""
        params = {**outcome, "wait": wait}
        if revision == MODERN:
            body = modern(cast(int, request_id), "answer", params)
            headers = modern_headers("answer")
        else:
            body = request(request_id, "answer", params)
            headers = self.session_headers(self.initialize(revision), revision)
        started = self.client.start("POST", body, headers)
        if wait:
            self.assertNoResult(started)
            self.core.release(request_id, None)
            self.client.stub.flush()
        response = result_of(started)
        self.client.stub.flush()
        content: bytes = result_of(response.content())
        kept = sorted(
            (name, values)
            for name, values in response.headers.getAllRawHeaders()
            if name.lower() not in (b"date", b"mcp-session-id")
        )
        return response.code, kept, content

    def test_same_bytes(self) -> None:
        """Every revision, every outcome: at once and after a wait, the same response."""
        revisions = [revision.value for revision in Revision]
        self.assertEqual(len(revisions), 5)
        for revision in revisions:
            for request_id in (7, "é-ü 1"):
                for outcome in self.OUTCOMES:
                    at_once = self.exchange(revision, request_id, outcome, wait=False)
                    later = self.exchange(revision, request_id, outcome, wait=True)
                    # Compared whole, reported short: the large bodies' repr is long.
                    if at_once != later:
                        at = next(
                            i
                            for i, (a, b) in enumerate(
                                zip(at_once[2] + b"$", later[2] + b"#", strict=False)
                            )
                            if a != b
                        )
                        self.fail(
                            f"{revision} {request_id!r} {str(outcome)[:80]}: "
                            f"{at_once[:2]} != {later[:2]}, bodies from byte {at}: "
                            f"{at_once[2][at : at + 40]!r} != {later[2][at : at + 40]!r}"
                        )
                    self.assertIn(at_once[0], (200, 400, 404, 500))
        self.assertEqual(len(self.flushLoggedErrors(ValueError)), 5 * 2 * 2)
        self.assertEqual(self.core.waiting, {})
        # The keep-alive timer, left armed, fires once more with nothing due.
        self.clock.advance(15)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_modern_answers(self) -> None:
        """What a 2026-07-28 client receives at once: its result, or its error's status."""
        code, headers, content = self.exchange(MODERN, 3, self.OUTCOMES[1], wait=False)
        self.assertEqual(code, 200)
        self.assertIn((b"Content-Type", [b"application/json"]), headers)
        self.assertEqual(
            json.loads(content),
            {"jsonrpc": "2.0", "id": 3, "result": self.OUTCOMES[1]["result"]},
        )
        code, _, content = self.exchange(MODERN, 4, self.OUTCOMES[6], wait=False)
        self.assertEqual((code, json.loads(content)["error"]["code"]), (400, HEADER_MISMATCH))
        code, _, content = self.exchange(MODERN, 5, {"crash": True}, wait=False)
        self.flushLoggedErrors(ValueError)
        self.assertEqual((code, json.loads(content)["error"]["code"]), (500, -32603))
        code, headers, content = self.exchange(MODERN, 6, self.OUTCOMES[9], wait=False)
        self.assertIn((b"Content-Type", [b"text/event-stream"]), headers)
        decoder = SSEDecoder()
        events = [json.loads(event.data) for event in decoder.feed(content)]
        self.assertEqual(
            events,
            [
                {"jsonrpc": "2.0", "method": "notifications/message", "params": {"d": "é"}},
                {"jsonrpc": "2.0", "id": 6, "result": {"ok": "é"}},
            ],
        )
        self.assertTrue(all(conn.closed for conn in self.core.opened))

    def test_legacy_id_free_again(self) -> None:
        """
        A legacy session's request answered at once leaves its id free: the next request
        may use it, and one using the id of a request still waiting is refused.
        """
        session = self.initialize()
        headers = self.session_headers(session)
        for _ in range(2):
            _, body = self.client.post(request(5, "answer", {"result": {"n": 1}}), headers)
            self.assertEqual(body, {"jsonrpc": "2.0", "id": 5, "result": {"n": 1}})
        waiting = self.client.start(
            "POST", request(6, "answer", {"result": {}, "wait": True}), headers
        )
        _, body = self.client.post(request(6, "answer", {"result": {}}), headers)
        self.assertEqual(body["error"]["code"], INVALID_REQUEST)
        self.core.release(6, None)
        self.client.stub.flush()
        self.assertEqual(result_of(waiting).code, 200)
        self.assertEqual(self.mcp.sessions[session].peer.in_flight_incoming, 0)

    def test_keep_alive_when_waiting(self) -> None:
        """
        A request that waits is watched: its client gets a keep-alive after
        C{transport.sseKeepAlive} seconds of silence, then its answer on the stream.
        """
        params = {"result": {"ok": 1}, "wait": True}
        response = result_of(self.started_stream(params))
        collected = _Body()
        response.deliverBody(collected)
        self.core.release(9, None)
        self.client.stub.flush()
        self.assertIn(b": keepalive", collected.data)
        self.assertEqual(collected.events(), [{"jsonrpc": "2.0", "id": 9, "result": {"ok": 1}}])

    def started_stream(self, params: dict[str, Any]) -> Deferred[Any]:
        started = self.client.start("POST", modern(9, "answer", params), modern_headers("answer"))
        self.assertNoResult(started)
        self.clock.advance(15)
        self.client.stub.flush()
        return started


class RealCoreTests(SynchronousTestCase):
    """C{/mcp} in front of the real L{McpServer}."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.daemon = daemon_http(
            clock=self.clock,
            pid=1,
            pool=FakePool(gateway_servers()),
            settings=default_settings(),
            servers=servers_config("files", "search"),
        )
        self.daemon.mcp = McpHTTP(McpServer(self.daemon.host, self.clock), self.clock)
        self.client = Client(None, self.clock)
        self.client.stub = StubTreq(self.daemon.resource())

    def test_legacy_session(self) -> None:
        """A legacy client initializes, gets a session, and lists mcpx's tools in it."""
        response, body = self.client.post(
            request(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}})
        )
        session = header(response, "mcp-session-id")
        assert session is not None
        self.assertEqual(body["result"]["protocolVersion"], "2025-06-18")
        self.assertTrue(body["result"]["capabilities"]["resources"]["subscribe"])
        headers = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}
        response, _ = self.client.post(
            {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers
        )
        self.assertEqual(response.code, 202)
        _, body = self.client.post(request(2, "tools/list"), headers)
        self.assertIn("mcpx_call", [tool["name"] for tool in body["result"]["tools"]])

    def test_hostile_json_is_a_parse_error(self) -> None:
        """
        Arguments nested 1,000 deep, or holding 1e400, NaN or an infinity, are answered 400
        with a JSON-RPC -32700 naming the problem; nothing reaches the pool.
        """
        template = (
            b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"mcpx_call",'
            b'"arguments":{"server":"files","tool":"read_file","arguments":{"a":%s}}}}'
        )
        cases = {
            b"[" * 1000 + b"]" * 1000: "nested",
            b"1e400": "1e400",
            b"NaN": "NaN",
            b"Infinity": "Infinity",
            b"-Infinity": "-Infinity",
        }
        pool = self.daemon.host.pool
        assert isinstance(pool, FakePool)
        for value, named in cases.items():
            response, body = self.client.send("POST", raw=template % value)
            self.assertEqual(response.code, 400)
            self.assertEqual(header(response, "content-type"), "application/json")
            error = json.loads(body)
            self.assertEqual((error["id"], error["error"]["code"]), (None, -32700))
            self.assertIn(named, error["error"]["message"])
        self.assertEqual(pool.calls, [])

    def test_second_initialize_in_a_session_is_refused(self) -> None:
        """
        initialize inside a legacy session is -32600 "already initialized"; the session keeps
        the revision it agreed.
        """
        response, _ = self.client.post(
            request(1, "initialize", {"protocolVersion": "2024-11-05", "capabilities": {}})
        )
        session = header(response, "mcp-session-id")
        assert session is not None
        headers = {"Mcp-Session-Id": session}
        response, body = self.client.post(
            request(2, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}}),
            headers,
        )
        self.assertEqual(body["error"]["code"], INVALID_REQUEST)
        self.assertIn("already initialized", body["error"]["message"])
        self.assertIsNone(header(response, "mcp-session-id"))
        conn = self.daemon.mcp.sessions[session].conn if self.daemon.mcp else None
        assert conn is not None
        self.assertIs(conn.revision, Revision.V2024_11_05)

    def test_sessionless_cannot_subscribe(self) -> None:
        """A sessionless legacy POST is not offered push-dependent capabilities."""
        _, body = self.client.post(request(1, "resources/subscribe", {"uri": "mcpx://files/x"}))
        self.assertEqual(body["error"]["code"], METHOD_NOT_FOUND)

    def test_modern_discover_and_removed_methods(self) -> None:
        """
        server/discover answers a 2026-07-28 client; initialize, removed in that revision,
        is 404 with -32601.
        """
        response, body = self.client.post(
            modern(1, "server/discover"), modern_headers("server/discover")
        )
        self.assertEqual(response.code, 200)
        self.assertIn(MODERN, body["result"]["supportedVersions"])
        self.assertEqual(body["result"]["resultType"], "complete")
        response, body = self.client.post(
            modern(2, "initialize", {"protocolVersion": MODERN, "capabilities": {}}),
            modern_headers("initialize"),
        )
        self.assertEqual((response.code, body["error"]["code"]), (404, METHOD_NOT_FOUND))

    def test_modern_missing_meta(self) -> None:
        """A 2026-07-28 request without _meta is -32602 with 400."""
        response, body = self.client.post(request(1, "tools/list"), modern_headers("tools/list"))
        self.assertEqual((response.code, body["error"]["code"]), (400, -32602))

    def test_modern_unsupported_version(self) -> None:
        """An unknown version in header and _meta is -32022 with 400, listing the supported."""
        message = request(
            1,
            "tools/list",
            {"_meta": {PROTOCOL_VERSION: "2099-01-01", CLIENT_CAPABILITIES: {}}},
        )
        response, body = self.client.post(
            message, {**modern_headers("tools/list"), "MCP-Protocol-Version": "2099-01-01"}
        )
        self.assertEqual((response.code, body["error"]["code"]), (400, -32022))
        self.assertIn(MODERN, body["error"]["data"]["supported"])


class SessionLimitTests(McpHTTPCase):
    """transport.maxSessionsPerClient: one client's sessions are capped, not everybody's."""

    def capped(self, limit: int) -> None:
        self.mcp = McpHTTP(self.core, self.clock, max_sessions_per_client=limit)
        self.client = Client(self.mcp, self.clock)
        self.addCleanup(self.mcp.close)

    def open_session(self, name: str, headers: Mapping[str, str] | None = None) -> tuple[Any, Any]:
        params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": name}}
        return self.client.post(request(0, "initialize", params), headers)

    def start(self, name: str, headers: Mapping[str, str] | None = None) -> str:
        response, _ = self.open_session(name, headers)
        self.assertEqual(response.code, 200)
        session = header(response, "mcp-session-id")
        assert session is not None
        return session

    def alive(self, session: str) -> bool:
        response, _ = self.client.post(request(1, "echo", {}), self.session_headers(session))
        self.assertIn(response.code, (200, 404))
        return bool(response.code == 200)

    def busy(self, session: str) -> None:
        """Hold a GET stream open on it, so it is not idle."""
        headers = {**self.session_headers(session), "Accept": "text/event-stream"}
        response, _ = self.client.open("GET", headers=headers)
        self.assertEqual(response.code, 200)

    def test_flood_ends_only_the_flooders_sessions(self) -> None:
        """
        On the default settings, 1,100 initialize from one client end only that client's
        own oldest sessions: another client's idle session survives, and the flooder
        keeps its newest 64.
        """
        other = self.start("claude-code")
        flood = [self.start("flooder") for _ in range(1100)]
        self.assertTrue(self.alive(other))
        self.assertEqual(len(self.mcp.sessions), 65)
        self.assertTrue(self.alive(flood[-1]))
        self.assertTrue(self.alive(flood[-64]))
        self.assertFalse(self.alive(flood[-65]))

    def test_least_recently_used_idle_goes_first(self) -> None:
        """At its cap, a client's new session ends its idle session used longest ago."""
        self.capped(2)
        first, second = self.start("host"), self.start("host")
        self.assertTrue(self.alive(first))  # first is now the more recently used
        third = self.start("host")
        self.assertEqual([self.alive(s) for s in (first, second, third)], [True, False, True])

    def test_busy_sessions_are_kept_and_the_new_one_refused(self) -> None:
        """
        When every session of the client is busy, a new initialize is refused with 429,
        Retry-After and a JSON-RPC error naming the setting; the busy ones live on.
        """
        self.capped(2)
        sessions = [self.start("host"), self.start("host")]
        for session in sessions:
            self.busy(session)
        response, body = self.open_session("host")
        self.assertEqual(response.code, 429)
        self.assertEqual(header(response, "retry-after"), "1")
        self.assertIsNone(header(response, "mcp-session-id"))
        self.assertEqual((body["id"], body["error"]["code"]), (0, INVALID_REQUEST))
        self.assertIn("transport.maxSessionsPerClient", body["error"]["message"])
        self.assertEqual(len(self.mcp.sessions), 2)
        # Another client is not affected.
        self.start("other")

    def test_mcpx_client_header_names_the_client(self) -> None:
        """The Mcpx-Client header, when sent, is the client; the declared name is not."""
        self.capped(1)
        one = self.start("same", {"Mcpx-Client": "one"})
        two = self.start("same", {"Mcpx-Client": "two"})
        self.assertEqual([self.alive(one), self.alive(two)], [True, True])
        again = self.start("different", {"Mcpx-Client": "one"})
        self.assertEqual([self.alive(one), self.alive(again)], [False, True])

    def test_crowding_logged_once(self) -> None:
        """A client at its cap is logged once, not for every session it replaces."""
        logged = observe_log(self)
        self.capped(2)
        for _ in range(10):
            self.start("host")
        crowded = [e for e in logged if "maxSessionsPerClient" in str(e.get("log_format", ""))]
        self.assertEqual(len(crowded), 1)

    def test_past_the_total_the_biggest_holder_yields(self) -> None:
        """
        At MAX_SESSIONS in all, the client holding the most sessions gives up its least
        recently used idle one, even when another client's session is older.
        """
        self.patch(legacy_module, "MAX_SESSIONS", 4)
        self.capped(3)
        small = self.start("small")
        big = [self.start("big") for _ in range(3)]
        newcomer = self.start("new")
        self.assertEqual(len(self.mcp.sessions), 4)
        self.assertTrue(self.alive(small))
        self.assertTrue(self.alive(newcomer))
        self.assertEqual([self.alive(s) for s in big], [False, True, True])

    def test_changing_names_never_reach_past_their_principal(self) -> None:
        """
        A flood of sessions under a new Mcpx-Client name each time reaches MAX_SESSIONS
        in all; the sessions it ends are its own principal's (here the peer's), never
        the idle session an access token's subject opened before it, however old.
        """
        self.patch(legacy_module, "MAX_SESSIONS", 4)
        peer = self.client.stub
        self.client.stub = StubTreq(_AsSubject(self.client.daemon.resource(), "bob"))
        bobs = self.start("bob's host")
        self.client.stub = peer
        flood = [self.start("flooder", {"Mcpx-Client": f"name-{n}"}) for n in range(10)]
        self.assertEqual(len(self.mcp.sessions), 4)
        self.assertEqual([self.alive(s) for s in flood[-3:]], [True, True, True])
        self.assertFalse(self.alive(flood[0]))
        self.client.stub = StubTreq(_AsSubject(self.client.daemon.resource(), "bob"))
        self.assertTrue(self.alive(bobs))


class _AsSubject(Resource):
    """Lets every request in as an access token's C{subject}, as the bearer gate does."""

    isLeaf = True

    def __init__(self, inner: Any, subject: str) -> None:
        super().__init__()
        self.inner = inner
        self.subject = subject

    def render(self, request: Any) -> Any:
        setattr(request, CALLER_ATTRIBUTE, VerifiedToken(self.subject, ("mcp:tools",)))
        return self.inner.render(request)


class SubjectIdentityTests(McpHTTPCase):
    """Requests let in with an access token count as its subject, outside any session."""

    def as_subject(self, subject: str) -> None:
        self.client.stub = StubTreq(_AsSubject(self.client.daemon.resource(), subject))

    def test_sessionless_and_modern_requests_are_the_subjects(self) -> None:
        """
        A sessionless POST, a 2026-07-28 request and a lone notification open their
        connection as the subject's identity, with the subject; two subjects never share.
        """
        for subject in ("alice", "bob"):
            self.as_subject(subject)
            self.client.post(request(1, "echo", {"x": 1}))
            self.client.post(modern(2, "tools/list"), modern_headers("tools/list"))
            self.client.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        identities = [(conn.transport, conn.identity, conn.subject) for conn in self.core.opened]
        self.assertEqual(
            identities,
            [
                ("http-post", 'subject:"alice"', "alice"),
                ("http-modern", 'subject:"alice"', "alice"),
                ("http-post", 'subject:"alice"', "alice"),
                ("http-post", 'subject:"bob"', "bob"),
                ("http-modern", 'subject:"bob"', "bob"),
                ("http-post", 'subject:"bob"', "bob"),
            ],
        )

    def test_a_session_carries_its_subject(self) -> None:
        """A legacy session's connection knows its subject, for the sessions it names."""
        self.as_subject("alice")
        self.initialize()
        (conn,) = self.core.opened
        self.assertEqual((conn.transport, conn.subject), ("http-session", "alice"))

    def test_without_a_token_the_shared_identity(self) -> None:
        """With no token (the owner's socket) the identity is the shared C{http}."""
        self.client.post(request(1, "echo", {"x": 1}))
        (conn,) = self.core.opened
        self.assertEqual((conn.identity, conn.subject), (HTTP_IDENTITY, None))


class _RecordingStream:
    """Stands in for a session's GET stream: records what it is sent."""

    def __init__(self) -> None:
        self.open = True
        self.sent: list[bytes] = []

    def send(self, payload: bytes) -> bool:
        self.sent.append(payload)
        return True

    def stop(self) -> None:
        self.open = False


MiB = 1024 * 1024


class SessionBacklogTests(SynchronousTestCase):
    """What is pushed to a legacy session with no GET stream open waits, bounded by bytes."""

    def test_oldest_dropped_past_the_bytes(self) -> None:
        session = HostSession("s", Clock())
        for n in range(10):
            session.push("notifications/message", {"level": "info", "data": f"{n}" + "x" * MiB})
        stream = _RecordingStream()
        session.attach(stream)  # type: ignore[arg-type]
        self.assertLessEqual(sum(len(payload) for payload in stream.sent), BACKLOG_BYTES)
        self.assertEqual([json.loads(p)["params"]["data"][0] for p in stream.sent], ["7", "8", "9"])

    def test_one_larger_than_the_bytes_is_not_kept(self) -> None:
        session = HostSession("s", Clock())
        session.push("notifications/message", {"level": "info", "data": "x" * BACKLOG_BYTES})
        session.push("notifications/message", {"level": "info", "data": "small"})
        stream = _RecordingStream()
        session.attach(stream)  # type: ignore[arg-type]
        self.assertEqual([json.loads(p)["params"]["data"] for p in stream.sent], ["small"])
