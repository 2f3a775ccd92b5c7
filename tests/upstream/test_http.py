"""
Tests for L{mcpx.upstream.http}: the Streamable HTTP channel against real HTTP servers on
127.0.0.1, with a real L{RpcPeer} attached, and once against the MCP Python SDK's server.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import deferLater
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase, TestCase

from mcpx.settings.servers import Auth, AuthType, RemoteServer, Secret
from mcpx.spec.revision import Revision
from mcpx.upstream.channel import (
    Channel,
    ChannelClosed,
    MessageTooLarge,
    Negotiated,
    SessionExpired,
    TransportRefused,
)
from mcpx.upstream.endpoints import IReactorHTTP
from mcpx.upstream.http import AnswerMissing, StreamableHTTPChannel, modern_request_headers
from mcpx.upstream.http_client import RequestFailed, connection_pool
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import Notification, Request
from mcpx.wire.peer import RpcPeer
from tests.support.processes import (
    ChildProcess,
    free_tcp_port,
    kill_on_cleanup,
    reactor,
    spawn,
)
from tests.upstream.http_fakes import (
    FakeHTTPServer,
    Reply,
    Seen,
    drop,
    end,
    hold,
    legacy_server,
    notification,
    open_sse,
    release,
    reply_json,
    reply_status,
    result,
    rpc_result,
    send_event,
)

E = TypeVar("E", bound=BaseException)

INITIALIZE = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "mcpx-test", "version": "0"},
}


def wait(seconds: float) -> Deferred[None]:
    return deferLater(reactor, seconds, lambda: None)


class RequestHeaderTests(SynchronousTestCase):
    """
    The 2026-07-28 request-metadata headers of a request, as the channel writes them.
    """

    def test_request_headers(self) -> None:
        """
        A modern C{tools/call} names its method and tool, and carries the C{Mcp-Param-*}
        headers the session staged for that tool, encoded where needed; other methods
        name their target or nothing.
        """
        negotiated = Negotiated(
            Revision.V2026_07_28,
            modern=True,
            param_headers={"sql": {"Region": "eu", "Note": "grüße"}},
        )
        request = Request(1, "tools/call", {"name": "sql", "arguments": {"region": "eu"}})
        self.assertEqual(
            modern_request_headers(request, negotiated),
            {
                "Mcp-Method": "tools/call",
                "Mcp-Name": "sql",
                "Mcp-Param-Region": "eu",
                "Mcp-Param-Note": "=?base64?Z3LDvMOfZQ==?=",
            },
        )
        other_tool = Request(2, "tools/call", {"name": "other"})
        self.assertEqual(
            modern_request_headers(other_tool, negotiated),
            {"Mcp-Method": "tools/call", "Mcp-Name": "other"},
        )
        self.assertEqual(
            modern_request_headers(Request(3, "resources/read", {"uri": "x:/y"}), negotiated),
            {"Mcp-Method": "resources/read", "Mcp-Name": "x:/y"},
        )
        self.assertEqual(
            modern_request_headers(Request(4, "prompts/get", {"name": "p"}), negotiated),
            {"Mcp-Method": "prompts/get", "Mcp-Name": "p"},
        )
        self.assertEqual(
            modern_request_headers(Request(5, "tools/list", {}), negotiated),
            {"Mcp-Method": "tools/list"},
        )


class ConnectionPoolTests(SynchronousTestCase):
    def test_idle_connections_are_let_go_before_common_servers_close_them(self) -> None:
        """
        Node's http server and uvicorn close a connection idle for 5 s; mcpx's pool lets
        its idle connections go sooner, so a call never goes out on one the server is
        closing at that moment (a POST lost that way cannot be sent again safely).
        """
        pool = connection_pool(cast(IReactorHTTP, MemoryReactorClock()), keep=4)
        self.assertEqual(pool.maxPersistentPerHost, 4)
        self.assertLess(pool.cachedConnectionTimeout, 5.0)
        self.assertGreater(pool.cachedConnectionTimeout, 1.0, "bursts still reuse them")


class ChannelCase(TestCase):
    """A fake server and channels to it, with a real peer on each."""

    timeout = 10

    def setUp(self) -> None:
        self.server = FakeHTTPServer(reactor)
        self.server.start()
        self.addCleanup(self.server.stop)
        self.server_requests: list[Request] = []
        self.notifications: list[Notification] = []

    def on_request(self, request: Request) -> object:
        self.server_requests.append(request)
        return {"roots": [], "asked": request.method}

    def connect(
        self,
        url: str | None = None,
        auth: Auth | None = None,
        headers: dict[str, str] | None = None,
        **options: Any,
    ) -> tuple[StreamableHTTPChannel, RpcPeer]:
        remote = RemoteServer(
            "up",
            url or self.server.url,
            headers={name: Secret(value) for name, value in (headers or {}).items()},
            auth=auth,
        )
        channel = StreamableHTTPChannel("up", remote, reactor, **options)
        peer = RpcPeer(
            channel.send,
            on_request=self.on_request,
            on_notification=self.notifications.append,
            send_request=channel.send_request,
            on_abandon=channel.abandon,
            clock=reactor,
            name="up",
        )
        channel.attach(peer)
        self.addCleanup(channel.close)
        return channel, peer

    async def initialize(self, channel: StreamableHTTPChannel, peer: RpcPeer) -> Any:
        await channel.start()
        answer = await peer.request("initialize", INITIALIZE, send_cancel=False)
        channel.negotiated.revision = Revision.parse(answer["protocolVersion"])
        return answer

    async def fails_with(self, d: Deferred[Any], kind: type[E]) -> E:
        """Wait for C{d} to fail with a C{kind}, and return that error."""
        try:
            value = await d
        except kind as e:
            return e
        self.fail(f"expected {kind.__name__}, got {value!r}")


class LegacyHeaderTests(ChannelCase):
    """
    Legacy requests carry the session id and, from 2025-06-18, the protocol version.
    """

    async def test_initialize_carries_no_version_or_session(self) -> None:
        """
        C{initialize} is POSTed as JSON accepting JSON or SSE, without
        C{MCP-Protocol-Version} or a session id, and its JSON answer reaches the peer.
        """
        channel, peer = self.connect()
        answer = await self.initialize(channel, peer)
        self.assertEqual(answer["serverInfo"]["name"], "fake")
        [seen] = self.server.seen
        self.assertEqual(seen.method, "POST")
        self.assertEqual(seen.path, "/mcp")
        self.assertEqual(seen.headers["accept"], "application/json, text/event-stream")
        self.assertEqual(seen.headers["content-type"], "application/json")
        self.assertNotIn("mcp-protocol-version", seen.headers)
        self.assertNotIn("mcp-session-id", seen.headers)
        self.assertEqual(seen.json()["method"], "initialize")

    async def test_session_id_captured_and_sent(self) -> None:
        """
        The session id from the answer to C{initialize} is sent on every later request
        and notification, and a revision from 2025-06-18 on is named on each of them.
        """
        channel, peer = self.connect()
        await self.initialize(channel, peer)
        self.assertEqual(channel.session_id, "sess-1")
        peer.notify("notifications/initialized")
        self.assertEqual(await peer.request("tools/list"), {"echo": "tools/list"})
        notified = await self.server.wait_for(rpc_method="notifications/initialized")
        listed = self.server.requests(rpc_method="tools/list")[0]
        for seen in (notified, listed):
            self.assertEqual(seen.headers.get("mcp-session-id"), "sess-1")
            self.assertEqual(seen.headers.get("mcp-protocol-version"), "2025-06-18")

    async def test_2025_03_26_sends_no_version(self) -> None:
        """
        Under 2025-03-26, which has no version header, requests carry only the session.
        """
        channel, peer = self.connect()
        await channel.start()
        await peer.request("initialize", {**INITIALIZE, "protocolVersion": "2025-03-26"})
        channel.negotiated.revision = Revision.V2025_03_26
        await peer.request("tools/list")
        listed = self.server.requests(rpc_method="tools/list")[0]
        self.assertNotIn("mcp-protocol-version", listed.headers)
        self.assertEqual(listed.headers.get("mcp-session-id"), "sess-1")

    async def test_request_waits_for_notification_before_it(self) -> None:
        """
        A request sent right after a notification is POSTed only once the server has
        answered the notification's POST, so the server reads them in order.
        """
        held: list[Seen] = []

        def slow_notifications(seen: Seen) -> Reply:
            if seen.method == "POST" and "id" not in seen.json():
                held.append(seen)
                return hold(seen)
            return legacy_server(seen)

        self.server.handler = slow_notifications
        _channel, peer = self.connect()
        peer.notify("notifications/initialized")
        listing = peer.request("tools/list")
        await self.server.wait_for(rpc_method="notifications/initialized")
        await wait(0.05)
        self.assertEqual(self.server.requests(rpc_method="tools/list"), [])
        release(held[0], 202)
        self.assertEqual(await listing, {"echo": "tools/list"})

    async def test_reset_session_forgets_id(self) -> None:
        """
        After L{StreamableHTTPChannel.reset_session} requests carry no session id.
        """
        channel, peer = self.connect()
        await self.initialize(channel, peer)
        channel.reset_session()
        await peer.request("ping")
        self.assertNotIn("mcp-session-id", self.server.requests(rpc_method="ping")[0].headers)


class ModernHeaderTests(ChannelCase):
    """
    2026-07-28 requests name their revision, method and target, and never a session.
    """

    async def test_modern_request_headers(self) -> None:
        """
        A modern C{tools/call} carries C{MCP-Protocol-Version: 2026-07-28},
        C{Mcp-Method}, C{Mcp-Name} (encoded when not plain ASCII) and the
        C{Mcp-Param-*} headers of its tool, and no session id even if a legacy
        C{initialize} gave one earlier.
        """
        channel, peer = self.connect()
        await self.initialize(channel, peer)
        channel.negotiated = Negotiated(
            Revision.V2026_07_28,
            modern=True,
            param_headers={"wetter": {"Region": "eu-1", "Ort": "Zürich"}},
        )
        self.assertFalse(channel.cancels_with_notification)
        params = {"name": "wetter", "arguments": {"region": "eu-1", "where": {"city": "Zürich"}}}
        await peer.request("tools/call", params)
        await peer.request("resources/read", {"uri": "file:///größe.txt"})
        called = self.server.requests(rpc_method="tools/call")[0]
        self.assertEqual(called.headers["mcp-protocol-version"], "2026-07-28")
        self.assertEqual(called.headers["mcp-method"], "tools/call")
        self.assertEqual(called.headers["mcp-name"], "wetter")
        self.assertEqual(called.headers["mcp-param-region"], "eu-1")
        encoded = called.headers["mcp-param-ort"]
        self.assertEqual(base64.b64decode(encoded[9:-2]).decode(), "Zürich")
        self.assertNotIn("mcp-session-id", called.headers)
        read = self.server.requests(rpc_method="resources/read")[0]
        self.assertEqual(read.headers["mcp-method"], "resources/read")
        self.assertEqual(
            base64.b64decode(read.headers["mcp-name"][9:-2]).decode(), "file:///größe.txt"
        )

    async def test_unsupported_version_reaches_peer(self) -> None:
        """
        A modern server's 400 with a C{-32022} JSON-RPC error body fails the request with
        that L{RpcError}, data included, so the session can pick a version.
        """

        def unsupported(seen: Seen) -> Reply:
            error = {
                "code": -32022,
                "message": "Unsupported protocol version",
                "data": {"supported": ["2026-07-28"], "requested": "2027-01-01"},
            }
            return reply_json(seen, {"jsonrpc": "2.0", "id": seen.message_id, "error": error}, 400)

        self.server.handler = unsupported
        channel, peer = self.connect()
        channel.negotiated = Negotiated(Revision.V2026_07_28, modern=True)
        error = await self.fails_with(peer.request("server/discover"), RpcError)
        self.assertEqual(error.code, -32022)
        self.assertEqual(error.data["supported"], ["2026-07-28"])

    async def test_idless_error_body_answers_the_request(self) -> None:
        """
        An error body without an id, in the reply to a request, is that request's error.
        """
        self.server.handler = lambda seen: reply_json(
            seen,
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32020, "message": "mismatch"}},
            400,
        )
        channel, peer = self.connect()
        channel.negotiated = Negotiated(Revision.V2026_07_28, modern=True)
        error = await self.fails_with(peer.request("tools/list"), RpcError)
        self.assertEqual(error.code, -32020)

    async def test_modern_abandon_closes_stream(self) -> None:
        """
        Giving up on a modern request closes its response stream, which the server sees
        as the connection dropping, and sends no C{notifications/cancelled}.
        """
        streams: list[Seen] = []

        def streaming(seen: Seen) -> Reply:
            streams.append(seen)
            reply = open_sse(seen)
            send_event(seen, notification("notifications/progress", {"progress": 1}))
            return reply

        self.server.handler = streaming
        channel, peer = self.connect()
        channel.negotiated = Negotiated(Revision.V2026_07_28, modern=True)
        call = peer.request(
            "tools/call", {"name": "slow"}, send_cancel=channel.cancels_with_notification
        )
        await self.server.wait_for(rpc_method="tools/call")
        while not self.notifications:
            await wait(0.01)
        call.cancel()
        await streams[0].dropped
        await self.fails_with(call, CancelledError)
        self.assertEqual(len(self.server.seen), 1)


class ResponseTests(ChannelCase):
    """
    Answers arrive as JSON or as event streams; failures reach the request they concern.
    """

    async def test_listen_answered_with_json_lines(self) -> None:
        """
        A C{subscriptions/listen} answered with C{application/json} that stays open,
        one message a line (the conformance suite's reference server): each
        notification reaches the peer as its line arrives, not once the answer ends,
        which a listen's never does.
        """
        listens: list[Seen] = []

        def lines(seen: Seen, *messages: dict[str, Any]) -> None:
            seen.request.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))

        def listening(seen: Seen) -> Reply:
            listens.append(seen)
            seen.request.setResponseCode(200)
            seen.request.setHeader(b"content-type", b"application/json")
            granted = {"notifications": {"toolsListChanged": True}}
            lines(seen, notification("notifications/subscriptions/acknowledged", granted))
            return hold(seen)

        self.server.handler = listening
        channel, peer = self.connect()
        channel.negotiated = Negotiated(Revision.V2026_07_28, modern=True)
        listen = peer.request("subscriptions/listen", {"notifications": {"toolsListChanged": True}})
        await self.until(lambda: len(self.notifications) == 1)
        lines(listens[0], notification("notifications/tools/list_changed"))
        await self.until(lambda: len(self.notifications) == 2)
        self.assertEqual(
            [n.method for n in self.notifications],
            ["notifications/subscriptions/acknowledged", "notifications/tools/list_changed"],
        )
        self.assertNoResult(listen)
        listen.cancel()
        await self.fails_with(listen, CancelledError)

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait (up to a generous 30 s) until C{condition} holds."""
        for _ in range(3000):
            if condition():
                return
            await wait(0.01)
        self.fail("still waiting after 30 s")

    async def test_sse_notifications_then_answer(self) -> None:
        """
        Notifications on a request's event stream reach the peer's notification handler,
        and the answer at its end settles the request.
        """

        def streaming(seen: Seen) -> Reply:
            reply = open_sse(seen)
            send_event(seen, notification("notifications/progress", {"progress": 1}))
            send_event(seen, notification("notifications/message", {"data": "hi"}))
            send_event(seen, rpc_result(seen.message_id, {"ok": True}))
            end(seen)
            return reply

        self.server.handler = streaming
        _channel, peer = self.connect()
        self.assertEqual(await peer.request("tools/call", {"name": "x"}), {"ok": True})
        self.assertEqual(
            [n.method for n in self.notifications],
            ["notifications/progress", "notifications/message"],
        )

    async def test_server_request_on_stream_answered_with_session(self) -> None:
        """
        A request the server sends on a response stream reaches the peer's request
        handler; its answer is POSTed back with the session id; the stream then carries
        the answer to the original request.
        """
        streams: list[Seen] = []

        def asking(seen: Seen) -> Reply:
            if seen.method == "POST" and seen.rpc_method == "tools/call":
                streams.append(seen)
                reply = open_sse(seen)
                send_event(seen, {"jsonrpc": "2.0", "id": "s-1", "method": "roots/list"})
                return reply
            if seen.method == "POST" and seen.message_id == "s-1" and streams:
                send_event(streams[0], rpc_result(streams[0].message_id, {"done": 1}))
                end(streams[0])
            return legacy_server(seen)

        self.server.handler = asking
        channel, peer = self.connect()
        await self.initialize(channel, peer)
        self.assertEqual(await peer.request("tools/call", {"name": "x"}), {"done": 1})
        self.assertEqual([r.method for r in self.server_requests], ["roots/list"])
        answer = await self.server.wait_for("POST", where=lambda s: s.message_id == "s-1")
        self.assertEqual(answer.json()["result"]["asked"], "roots/list")
        self.assertEqual(answer.headers["mcp-session-id"], "sess-1")
        self.assertEqual(answer.headers["mcp-protocol-version"], "2025-06-18")

    async def test_stream_without_answer_fails_request(self) -> None:
        """
        A stream that ends without the answer, and gave no event ids to resume from,
        fails its request with L{AnswerMissing}.
        """

        def hollow(seen: Seen) -> Reply:
            reply = open_sse(seen)
            send_event(seen, notification("notifications/progress", {"progress": 1}))
            end(seen)
            return reply

        self.server.handler = hollow
        _channel, peer = self.connect()
        error = await self.fails_with(peer.request("tools/call", {"name": "x"}), AnswerMissing)
        self.assertIn("tools/call", str(error))
        self.assertIn(self.server.base, str(error))

    async def test_dropped_stream_resumes_with_last_event_id(self) -> None:
        """
        A legacy stream that drops mid-way after giving event ids is resumed with a GET
        carrying C{Last-Event-ID} (after the server's C{retry}), and the answer on the
        resumed stream settles the request.
        """
        calls: list[Seen] = []

        def resumable(seen: Seen) -> Reply:
            if seen.method == "POST" and seen.rpc_method == "tools/call":
                calls.append(seen)
                reply = open_sse(seen)
                send_event(seen, notification("notifications/progress", {"p": 1}), id="ev-1")
                send_event(seen, raw=b"retry: 20\n\n")
                reactor.callLater(0.01, drop, seen)
                return reply
            if seen.method == "GET" and seen.headers.get("last-event-id") == "ev-1":
                reply = open_sse(seen)
                send_event(seen, rpc_result(calls[0].message_id, {"resumed": True}), id="ev-2")
                end(seen)
                return reply
            return legacy_server(seen)

        self.server.handler = resumable
        channel, peer = self.connect()
        await self.initialize(channel, peer)
        self.assertEqual(await peer.request("tools/call", {"name": "x"}), {"resumed": True})
        [resumed] = self.server.requests("GET")
        self.assertEqual(resumed.headers["accept"], "text/event-stream")
        self.assertEqual(resumed.headers["mcp-session-id"], "sess-1")
        self.assertEqual(resumed.headers["mcp-protocol-version"], "2025-06-18")
        self.assertEqual([n.method for n in self.notifications], ["notifications/progress"])

    async def test_polling_stream_resumes_while_it_moves_on(self) -> None:
        """
        A 2025-11-25 server that closes the stream after each event (a priming event
        first) is polled with C{Last-Event-ID} for as long as each poll brings a new
        event, however many that takes.
        """
        calls: list[Seen] = []

        def polling(seen: Seen) -> Reply:
            if seen.method == "POST" and seen.rpc_method == "tools/call":
                calls.append(seen)
                reply = open_sse(seen)
                send_event(seen, raw=b"id: p-0\nretry: 5\ndata:\n\n")
                end(seen)
                return reply
            if seen.method == "GET":
                step = int(seen.headers["last-event-id"].split("-")[1]) + 1
                reply = open_sse(seen)
                if step < 4:
                    send_event(seen, raw=f"id: p-{step}\nretry: 5\ndata:\n\n".encode())
                else:
                    send_event(seen, rpc_result(calls[0].message_id, {"polled": step}))
                end(seen)
                return reply
            return legacy_server(seen)

        self.server.handler = polling
        channel, peer = self.connect(resume_attempts=1)
        await self.initialize(channel, peer)
        self.assertEqual(await peer.request("tools/call", {"name": "x"}), {"polled": 4})
        self.assertEqual(
            [seen.headers["last-event-id"] for seen in self.server.requests("GET")],
            ["p-0", "p-1", "p-2", "p-3"],
        )

    async def test_oversized_answers_refused(self) -> None:
        """
        A JSON body or an SSE event larger than the channel accepts fails its request
        with a clear error, instead of being buffered.
        """

        def huge(seen: Seen) -> Reply:
            padding = "x" * 500
            if seen.rpc_method == "tools/list":
                return result(seen, {"padding": padding})
            reply = open_sse(seen)
            send_event(seen, rpc_result(seen.message_id, {"padding": padding}))
            end(seen)
            return reply

        self.server.handler = huge
        _channel, peer = self.connect(max_message_size=200)
        error = await self.fails_with(peer.request("tools/list"), MessageTooLarge)
        self.assertIn("longer than 200 bytes", str(error))
        error = await self.fails_with(peer.request("tools/call", {"name": "x"}), MessageTooLarge)
        self.assertIn("longer than 200 bytes", str(error))

    async def test_resumption_is_bounded(self) -> None:
        """
        A stream whose resumptions keep bringing nothing is given up after the
        configured number of attempts, failing its request.
        """

        def flaky(seen: Seen) -> Reply:
            if seen.method == "GET":
                reply = open_sse(seen)
                end(seen)
                return reply
            reply = open_sse(seen)
            send_event(seen, notification("notifications/progress", {"p": 1}), id="e", retry=1)
            end(seen)
            return reply

        self.server.handler = flaky
        _channel, peer = self.connect(resume_attempts=2)
        await self.fails_with(peer.request("tools/call", {"name": "x"}), AnswerMissing)
        self.assertEqual(len(self.server.requests("GET")), 2)

    async def test_session_expired(self) -> None:
        """
        A 404 to a request that carried a session id fails it with L{SessionExpired}.
        """
        channel, peer = self.connect()
        await self.initialize(channel, peer)
        self.server.handler = lambda seen: reply_status(seen, 404, b"no such session")
        await self.fails_with(peer.request("tools/list"), SessionExpired)

    async def test_error_status_without_rpc_body(self) -> None:
        """
        An error status without a JSON-RPC body fails the request with
        L{TransportRefused}, carrying the status, the start of the body and the URL.
        """
        self.server.handler = lambda seen: reply_status(seen, 405, b"Method Not Allowed")
        _channel, peer = self.connect()
        error = await self.fails_with(peer.request("server/discover"), TransportRefused)
        refused = error
        self.assertEqual(refused.status, 405)
        self.assertEqual(refused.body, b"Method Not Allowed")
        self.assertEqual(refused.url, self.server.url)

    async def test_404_without_session_is_refused(self) -> None:
        """
        A 404 to a request that carried no session id is a plain refusal, not an expired
        session (the era probe reads it as "not this transport").
        """
        self.server.handler = lambda seen: reply_status(seen, 404)
        _channel, peer = self.connect()
        error = await self.fails_with(peer.request("initialize", INITIALIZE), TransportRefused)
        self.assertEqual(error.status, 404)

    async def test_unreachable_server_named_without_secret(self) -> None:
        """
        A server that cannot be reached fails the request with L{RequestFailed} naming the
        URL, with the query credential hidden.
        """
        url = f"http://127.0.0.1:{free_tcp_port()}/mcp"
        auth = Auth(AuthType.QUERY, Secret("s3cret"), name="key")
        channel, peer = self.connect(url=url, auth=auth)
        error = await self.fails_with(peer.request("ping"), RequestFailed)
        self.assertIn(url, str(error))
        self.assertNotIn("s3cret", str(error))
        self.assertEqual(channel.describe(), url)

    async def test_notification_accepted(self) -> None:
        """
        A notification answered 202 ends there: nothing is delivered or failed.
        """
        _channel, peer = self.connect()
        peer.notify("notifications/initialized")
        seen = await self.server.wait_for(rpc_method="notifications/initialized")
        self.assertEqual(seen.json(), {"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.assertEqual(await peer.request("ping"), {"echo": "ping"})
        self.assertEqual(peer.in_flight_outgoing, 0)

    async def test_legacy_abandon_sends_notification(self) -> None:
        """
        Giving up on a legacy request sends C{notifications/cancelled} and closes the
        request's stream too: a server that ignores the notification must not keep a
        connection open for an answer nobody waits for.
        """
        streams: list[Seen] = []

        def streaming(seen: Seen) -> Reply:
            if seen.rpc_method == "tools/call":
                streams.append(seen)
                return open_sse(seen)
            return legacy_server(seen)

        self.server.handler = streaming
        channel, peer = self.connect()
        self.assertTrue(channel.cancels_with_notification)
        call = peer.request("tools/call", {"name": "slow"})
        await self.server.wait_for(rpc_method="tools/call")
        call.cancel()
        cancelled = await self.server.wait_for(rpc_method="notifications/cancelled")
        self.assertEqual(cancelled.json()["params"]["requestId"], streams[0].message_id)
        await self.fails_with(call, CancelledError)
        await streams[0].dropped


class GetStreamTests(ChannelCase):
    """
    The legacy standalone GET stream, for messages the server starts.
    """

    async def test_405_tolerated(self) -> None:
        """
        A server without a GET stream answers 405; the channel does not ask again.
        """
        channel, peer = self.connect(reconnect_delay=0.01)
        await self.initialize(channel, peer)
        channel.initialized()
        seen = await self.server.wait_for("GET")
        self.assertEqual(seen.headers["accept"], "text/event-stream")
        self.assertEqual(seen.headers["mcp-session-id"], "sess-1")
        self.assertEqual(seen.headers["mcp-protocol-version"], "2025-06-18")
        await wait(0.1)
        self.assertEqual(len(self.server.requests("GET")), 1)

    async def test_delivers_and_reopens(self) -> None:
        """
        Notifications and requests on the GET stream reach the peer; when the stream
        ends, it is reopened with the last event id it gave.
        """

        def listening(seen: Seen) -> Reply:
            if seen.method != "GET":
                return legacy_server(seen)
            reply = open_sse(seen)
            if "last-event-id" not in seen.headers:
                send_event(seen, notification("notifications/tools/list_changed"), id="g-1")
                send_event(seen, {"jsonrpc": "2.0", "id": "s-9", "method": "ping"}, id="g-2")
                end(seen)
            return reply

        self.server.handler = listening
        channel, peer = self.connect(reconnect_delay=0.01)
        await self.initialize(channel, peer)
        channel.initialized()
        reopened = await self.server.wait_for("GET", where=lambda s: "last-event-id" in s.headers)
        self.assertEqual(reopened.headers["last-event-id"], "g-2")
        self.assertEqual(
            [n.method for n in self.notifications], ["notifications/tools/list_changed"]
        )
        self.assertEqual([r.method for r in self.server_requests], ["ping"])
        answered = await self.server.wait_for("POST", where=lambda s: s.message_id == "s-9")
        self.assertEqual(answered.headers["mcp-session-id"], "sess-1")

    async def test_reopening_is_bounded(self) -> None:
        """
        A GET stream that keeps ending empty is reopened a bounded number of times.
        """

        def empty(seen: Seen) -> Reply:
            if seen.method != "GET":
                return legacy_server(seen)
            reply = open_sse(seen)
            end(seen)
            return reply

        self.server.handler = empty
        channel, peer = self.connect(reconnect_delay=0.001, reconnect_attempts=3)
        await self.initialize(channel, peer)
        channel.initialized()
        await wait(0.3)
        self.assertEqual(len(self.server.requests("GET")), 4)

    async def test_modern_opens_no_stream(self) -> None:
        """
        A modern channel has no GET stream to open.
        """
        channel, _peer = self.connect()
        channel.negotiated = Negotiated(Revision.V2026_07_28, modern=True)
        channel.initialized()
        await wait(0.05)
        self.assertEqual(self.server.seen, [])


class CloseTests(ChannelCase):
    """
    Closing ends the session, stops the streams and releases the connections.
    """

    async def test_close_deletes_session(self) -> None:
        """
        Closing a legacy channel with a session sends C{DELETE} with its session id, then
        fires L{when_lost} with L{ChannelClosed}.
        """
        channel, peer = self.connect()
        await self.initialize(channel, peer)
        lost = channel.when_lost()
        self.assertNoResult(lost)
        await channel.close()
        [deleted] = self.server.requests("DELETE")
        self.assertEqual(deleted.headers["mcp-session-id"], "sess-1")
        self.assertEqual(deleted.headers["mcp-protocol-version"], "2025-06-18")
        self.failureResultOf(lost, ChannelClosed)
        self.failureResultOf(channel.when_lost(), ChannelClosed)

    async def test_delete_405_ignored(self) -> None:
        """
        A server that does not let clients end sessions (405) does not make close fail.
        """

        def no_delete(seen: Seen) -> Reply:
            if seen.method == "DELETE":
                return reply_status(seen, 405)
            return legacy_server(seen)

        self.server.handler = no_delete
        channel, peer = self.connect()
        await self.initialize(channel, peer)
        await channel.close()
        self.assertEqual(len(self.server.requests("DELETE")), 1)

    async def test_close_without_session_sends_nothing(self) -> None:
        """
        A channel without a session closes without any request.
        """
        channel, peer = self.connect()
        await peer.request("ping")
        await channel.close()
        self.assertEqual(self.server.requests("DELETE"), [])

    async def test_close_stops_streams_and_fails_requests(self) -> None:
        """
        Closing cuts open response streams and the GET stream, and fails the requests
        they were answering with L{ChannelClosed}; later requests are refused.
        """
        streams: list[Seen] = []

        def hanging(seen: Seen) -> Reply:
            if seen.method == "GET" or seen.rpc_method == "tools/call":
                streams.append(seen)
                return open_sse(seen)
            return legacy_server(seen)

        self.server.handler = hanging
        channel, peer = self.connect()
        await self.initialize(channel, peer)
        channel.initialized()
        call = peer.request("tools/call", {"name": "x"})
        await self.server.wait_for(rpc_method="tools/call")
        await self.server.wait_for("GET")
        await channel.close()
        await self.fails_with(call, ChannelClosed)
        for stream in streams:
            await stream.dropped
        await self.fails_with(peer.request("ping"), ChannelClosed)
        await self.fails_with(channel.start(), ChannelClosed)

    def test_is_a_channel(self) -> None:
        """
        The channel has what the session layer expects of a L{Channel}.
        """
        channel: Channel = StreamableHTTPChannel(
            "up", RemoteServer("up", "http://127.0.0.1:1/"), reactor
        )
        self.assertTrue(channel.cancels_with_notification)
        channel.negotiated.modern = True
        self.assertFalse(channel.cancels_with_notification)
        self.assertEqual(channel.describe(), "http://127.0.0.1:1/")
        return channel.close()  # type: ignore[return-value]


class AuthTests(ChannelCase):
    """
    Configured headers and credentials go on every request.
    """

    async def test_bearer_and_headers(self) -> None:
        """
        A bearer token becomes the C{Authorization} header, next to configured headers.
        """
        auth = Auth(AuthType.BEARER, Secret("tok-1"))
        _channel, peer = self.connect(auth=auth, headers={"X-Team": "blue"})
        await peer.request("ping")
        [seen] = self.server.seen
        self.assertEqual(seen.headers["authorization"], "Bearer tok-1")
        self.assertEqual(seen.headers["x-team"], "blue")

    async def test_basic(self) -> None:
        """
        Basic credentials are sent as RFC 7617 says.
        """
        auth = Auth(AuthType.BASIC, Secret("pw"), username=Secret("me"))
        _channel, peer = self.connect(auth=auth)
        await peer.request("ping")
        expected = "Basic " + base64.b64encode(b"me:pw").decode()
        self.assertEqual(self.server.seen[0].headers["authorization"], expected)

    async def test_header(self) -> None:
        """
        A header credential is sent under its configured name, on GET streams too.
        """
        auth = Auth(AuthType.HEADER, Secret("k-2"), name="X-Api-Key")
        channel, peer = self.connect(auth=auth)
        await self.initialize(channel, peer)
        channel.initialized()
        listened = await self.server.wait_for("GET")
        self.assertEqual(self.server.seen[0].headers["x-api-key"], "k-2")
        self.assertEqual(listened.headers["x-api-key"], "k-2")

    async def test_query(self) -> None:
        """
        A query credential is added to the URL of every request.
        """
        auth = Auth(AuthType.QUERY, Secret("k 3"), name="key")
        channel, peer = self.connect(url=self.server.url + "?v=1", auth=auth)
        await peer.request("ping")
        self.assertEqual(self.server.seen[0].path, "/mcp?v=1&key=k+3")
        self.assertNotIn("k 3", channel.describe())


class FakeCredentials:
    """Credentials of an OAuth server, as L{mcpx.auth.signin} hands them out."""

    def __init__(self) -> None:
        self.value = "Bearer oauth-1"
        self.refusals: list[list[str]] = []
        #: What the next authorization raises instead, when set.
        self.refuse: Exception | None = None
        self.asked = 0

    async def authorization(self) -> str:
        self.asked += 1
        if self.refuse is not None:
            raise self.refuse
        return self.value

    def unauthorized(self, www_authenticate: list[str], revision: object = None) -> str:
        self.refusals.append(www_authenticate)
        return "run `mcpx auth login up`"


class OAuthChannelTests(ChannelCase):
    """An OAuth server's token goes on every request; a 401 is reported to the sign-ins."""

    async def test_token_on_posts_and_get(self) -> None:
        """The token fetched when the channel starts is on the POSTs and the GET stream."""
        credentials = FakeCredentials()
        channel, peer = self.connect(credentials=credentials)
        await self.initialize(channel, peer)
        channel.initialized()
        listened = await self.server.wait_for("GET")
        self.assertEqual(self.server.seen[0].headers["authorization"], "Bearer oauth-1")
        self.assertEqual(listened.headers["authorization"], "Bearer oauth-1")

    async def test_401_tells_the_sign_ins(self) -> None:
        """A 401's challenge goes to the credentials, and their hint into the error."""

        def refusing(seen: Seen) -> Reply:
            seen.request.setHeader(b"www-authenticate", b'Bearer error="invalid_token"')
            return reply_status(seen, 401)

        self.server.handler = refusing
        credentials = FakeCredentials()
        channel, peer = self.connect(credentials=credentials)
        await channel.start()
        error = await self.fails_with(peer.request("ping"), TransportRefused)
        self.assertEqual(credentials.refusals, [['Bearer error="invalid_token"']])
        self.assertIn("mcpx auth login up", str(error))

    async def test_each_request_asks_for_the_token(self) -> None:
        """
        A running channel asks the credentials for every request, so a token renewed
        after it started (refreshed, or replaced after a 401) is the one sent; when no
        token can be had, the request fails with the reason and is never sent.
        """
        credentials = FakeCredentials()
        channel, peer = self.connect(credentials=credentials)
        await self.initialize(channel, peer)
        credentials.value = "Bearer oauth-2"
        await peer.request("ping")
        self.assertEqual(self.server.seen[-1].headers["authorization"], "Bearer oauth-2")
        sent = len(self.server.seen)
        credentials.refuse = RuntimeError("up needs a sign-in; run `mcpx auth login up`")
        error = await self.fails_with(peer.request("ping"), ConnectionError)
        self.assertIn("mcpx auth login up", str(error))
        self.assertFalse(getattr(error, "started", True))
        self.assertEqual(len(self.server.seen), sent)


SDK_SERVER = """
import sys
from mcp.server import MCPServer

app = MCPServer("sdk-fixture", log_level="WARNING")


@app.tool()
def add(a: int, b: int) -> int:
    \"\"\"Add two numbers.\"\"\"
    return a + b


app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
"""


class SDKServerTests(TestCase):
    """
    The channel against a Streamable HTTP server written with the MCP Python SDK.
    """

    timeout = 30

    async def test_initialize_and_list_tools(self) -> None:
        """
        A legacy C{initialize}, C{notifications/initialized}, C{tools/list} and
        C{tools/call} work against the SDK's server, which answers over SSE with a
        session id; closing ends the session.
        """
        port = free_tcp_port()
        child: ChildProcess = spawn([sys.executable, "-c", SDK_SERVER, str(port)])
        self.addCleanup(kill_on_cleanup, child)
        url = f"http://127.0.0.1:{port}/mcp"
        channel = StreamableHTTPChannel("sdk", RemoteServer("sdk", url), reactor)
        peer = RpcPeer(
            channel.send,
            on_request=lambda request: {},
            send_request=channel.send_request,
            on_abandon=channel.abandon,
            clock=reactor,
            name="sdk",
        )
        channel.attach(peer)
        try:
            await channel.start()
            answer = None
            for _ in range(100):
                try:
                    answer = await peer.request("initialize", INITIALIZE, send_cancel=False)
                    break
                except RequestFailed:
                    await wait(0.1)
            assert answer is not None, child.text()
            self.assertEqual(answer["protocolVersion"], "2025-06-18")
            self.assertIsNotNone(channel.session_id)
            channel.negotiated.revision = Revision.V2025_06_18
            peer.notify("notifications/initialized")
            channel.initialized()
            listed = await peer.request("tools/list")
            self.assertEqual([tool["name"] for tool in listed["tools"]], ["add"])
            called = await peer.request(
                "tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}}
            )
            self.assertEqual(json.loads(json.dumps(called))["content"][0]["text"], "5")
        finally:
            await channel.close()
            child.signal("TERM")
            await child.ended(timeout=10)
