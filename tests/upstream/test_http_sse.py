"""
Tests for L{mcpx.upstream.http_sse}: the 2024-11-05 HTTP+SSE channel against a real HTTP
server on 127.0.0.1, with a real L{RpcPeer} attached.
"""

from __future__ import annotations

from typing import Any, TypeVar

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import TestCase

from mcpx.settings.servers import Auth, AuthType, RemoteServer, Secret
from mcpx.upstream.channel import Channel, ChannelClosed, TransportRefused
from mcpx.upstream.http_client import RequestFailed
from mcpx.upstream.http_sse import EndpointRefused, HTTPSSEChannel
from mcpx.wire.messages import Notification, Request
from mcpx.wire.peer import ConnectionClosed, RpcPeer
from tests.support.processes import reactor
from tests.upstream.http_fakes import (
    FakeHTTPServer,
    Reply,
    Seen,
    drop,
    end,
    notification,
    open_sse,
    reply_status,
    rpc_result,
    send_event,
)

E = TypeVar("E", bound=BaseException)


class OldServer:
    """
    A scripted 2024-11-05 server: C{GET /sse} opens the stream and names
    C{/messages?session_id=abc}; POSTs there are accepted with 202 and requests are
    answered on the stream with their method as the result.
    """

    def __init__(self, http: FakeHTTPServer) -> None:
        self.http = http
        self.stream: Seen | None = None
        self.endpoint = "/messages?session_id=abc"
        self.post_status = 202
        self.answer = True

    def __call__(self, seen: Seen) -> Reply:
        if seen.method == "GET":
            self.stream = seen
            reply = open_sse(seen)
            if self.endpoint:
                send_event(seen, raw=f"event: endpoint\ndata: {self.endpoint}\n\n".encode())
            return reply
        if self.post_status != 202:
            return reply_status(seen, self.post_status, b"Could not find session")
        if self.answer and seen.message_id is not None and seen.rpc_method is not None:
            assert self.stream is not None
            send_event(self.stream, rpc_result(seen.message_id, {"echo": seen.rpc_method}))
        return reply_status(seen, 202, b"Accepted")


class HTTPSSEChannelTests(TestCase):
    """
    The GET stream names the endpoint, POSTs carry messages, the stream carries answers.
    """

    timeout = 10

    def setUp(self) -> None:
        self.http = FakeHTTPServer(reactor)
        self.old = OldServer(self.http)
        self.http.handler = self.old
        self.http.start()
        self.addCleanup(self.http.stop)
        self.server_requests: list[Request] = []
        self.notifications: list[Notification] = []

    def connect(
        self, url: str | None = None, auth: Auth | None = None, **options: Any
    ) -> tuple[HTTPSSEChannel, RpcPeer]:
        remote = RemoteServer("old", url or self.http.base + "/sse", auth=auth)
        channel = HTTPSSEChannel("old", remote, reactor, **options)
        peer = RpcPeer(
            channel.send,
            on_request=self.on_request,
            on_notification=self.notifications.append,
            send_request=channel.send_request,
            on_abandon=channel.abandon,
            clock=reactor,
            name="old",
        )
        channel.attach(peer)
        self.addCleanup(channel.close)
        return channel, peer

    def on_request(self, request: Request) -> object:
        self.server_requests.append(request)
        return {"roots": []}

    async def fails_with(self, d: Deferred[Any], kind: type[E]) -> E:
        """Wait for C{d} to fail with a C{kind}, and return that error."""
        try:
            value = await d
        except kind as e:
            return e
        self.fail(f"expected {kind.__name__}, got {value!r}")

    async def test_endpoint_flow(self) -> None:
        """
        C{start} opens the event stream and fires once the server names its endpoint;
        a request is POSTed there as JSON, and its answer arrives on the stream.
        """
        channel, peer = self.connect()
        await channel.start()
        [stream] = self.http.seen
        self.assertEqual(stream.method, "GET")
        self.assertEqual(stream.path, "/sse")
        self.assertEqual(stream.headers["accept"], "text/event-stream")
        self.assertEqual(channel.endpoint, self.http.base + "/messages?session_id=abc")
        self.assertEqual(await peer.request("tools/list"), {"echo": "tools/list"})
        [posted] = self.http.requests("POST")
        self.assertEqual(posted.path, "/messages?session_id=abc")
        self.assertEqual(posted.headers["content-type"], "application/json")
        self.assertEqual(posted.json(), {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        self.assertNotIn("mcp-protocol-version", posted.headers)
        self.assertTrue(channel.cancels_with_notification)

    async def test_server_messages_on_stream(self) -> None:
        """
        Notifications and requests from the server on the stream reach the peer, and the
        answer to a server request is POSTed to the endpoint.
        """
        channel, _peer = self.connect()
        await channel.start()
        assert self.old.stream is not None
        send_event(self.old.stream, notification("notifications/message", {"data": "x"}))
        send_event(self.old.stream, {"jsonrpc": "2.0", "id": 5, "method": "roots/list"})
        answered = await self.http.wait_for("POST", where=lambda s: s.message_id == 5)
        self.assertEqual(answered.json()["result"], {"roots": []})
        self.assertEqual([n.method for n in self.notifications], ["notifications/message"])
        self.assertEqual([r.method for r in self.server_requests], ["roots/list"])

    async def test_posts_in_order(self) -> None:
        """
        Messages sent back to back reach the server in the order they were sent.
        """
        channel, peer = self.connect()
        await channel.start()
        peer.notify("notifications/initialized")
        calls = [peer.request("tools/list"), peer.request("prompts/list")]
        peer.notify("notifications/roots/list_changed")
        for call in calls:
            await call
        await self.http.wait_for(rpc_method="notifications/roots/list_changed")
        self.assertEqual(
            [seen.rpc_method for seen in self.http.requests("POST")],
            [
                "notifications/initialized",
                "tools/list",
                "prompts/list",
                "notifications/roots/list_changed",
            ],
        )

    async def test_stream_end_loses_channel(self) -> None:
        """
        The stream ending is the channel lost: outstanding requests fail with the
        peer's L{ConnectionClosed} caused by L{ChannelClosed}, and L{when_lost} fires.
        """
        self.old.answer = False
        channel, peer = self.connect()
        await channel.start()
        lost = channel.when_lost()
        call = peer.request("tools/list")
        await self.http.wait_for(rpc_method="tools/list")
        assert self.old.stream is not None
        drop(self.old.stream)
        error = await self.fails_with(call, ConnectionClosed)
        self.assertIsInstance(error.reason, ChannelClosed)
        await self.fails_with(lost, ChannelClosed)
        self.assertTrue(peer.closed)

    async def test_post_refused(self) -> None:
        """
        An error status to a POST fails that request with L{TransportRefused}.
        """
        channel, peer = self.connect()
        await channel.start()
        self.old.post_status = 404
        error = await self.fails_with(peer.request("tools/list"), TransportRefused)
        self.assertEqual(error.status, 404)
        self.assertEqual(error.body, b"Could not find session")

    async def test_get_refused(self) -> None:
        """
        A server that refuses the GET (a Streamable HTTP server, say) fails C{start}
        with L{TransportRefused}.
        """
        self.http.handler = lambda seen: reply_status(seen, 405)
        channel, _peer = self.connect()
        error = await self.fails_with(channel.start(), TransportRefused)
        self.assertEqual(error.status, 405)

    async def test_no_endpoint_in_time(self) -> None:
        """
        A stream that names no endpoint within the timeout (on the injected clock)
        fails C{start} and is closed.
        """
        self.old.endpoint = ""
        clock = Clock()
        channel, _peer = self.connect(clock=clock, endpoint_timeout=5)
        starting = channel.start()
        stream = await self.http.wait_for("GET")
        clock.advance(5)
        error = await self.fails_with(starting, RequestFailed)
        self.assertIn("endpoint", str(error))
        await stream.dropped

    async def test_foreign_endpoint_refused(self) -> None:
        """
        An endpoint on another origin is refused: mcpx's credentials are not sent there.
        """
        self.old.endpoint = "http://elsewhere.example/messages"
        channel, _peer = self.connect()
        error = await self.fails_with(channel.start(), EndpointRefused)
        self.assertIn("elsewhere.example", str(error))

    async def test_auth_on_stream_and_posts(self) -> None:
        """
        Credentials go on the stream and on every POST, a query credential included.
        """
        auth = Auth(AuthType.QUERY, Secret("k1"), name="key")
        channel, peer = self.connect(auth=auth)
        await channel.start()
        await peer.request("ping")
        [stream] = self.http.requests("GET")
        [posted] = self.http.requests("POST")
        self.assertEqual(stream.path, "/sse?key=k1")
        self.assertEqual(posted.path, "/messages?session_id=abc&key=k1")
        self.assertNotIn("k1", channel.describe())

    async def test_close(self) -> None:
        """
        Closing drops the stream, fails L{when_lost} with L{ChannelClosed}, and refuses
        later requests.
        """
        channel, peer = self.connect()
        await channel.start()
        lost = channel.when_lost()
        await channel.close()
        assert self.old.stream is not None
        await self.old.stream.dropped
        await self.fails_with(lost, ChannelClosed)
        await self.fails_with(peer.request("ping"), ConnectionClosed)
        end(self.old.stream)

    def test_is_a_channel(self) -> None:
        """
        The channel has what the session layer expects of a L{Channel}.
        """
        channel: Channel = HTTPSSEChannel(
            "old", RemoteServer("old", "http://127.0.0.1:1/"), reactor
        )
        self.assertTrue(channel.cancels_with_notification)
        self.assertEqual(channel.describe(), "http://127.0.0.1:1/")
        return channel.close()  # type: ignore[return-value]
