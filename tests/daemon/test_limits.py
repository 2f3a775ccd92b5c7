"""
The HTTP transport's limits, driven in memory: bodies, connections, deadlines.
"""

from __future__ import annotations

import json
import resource
from io import BytesIO
from typing import Any

from twisted.internet.address import IPv4Address, UNIXAddress
from twisted.internet.protocol import connectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import formatEvent
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from mcpx.daemon.limits import (
    ABORT_AFTER,
    MAX_REFUSING,
    SUMMARY_INTERVAL,
    LimitedChannel,
    RefusedConnection,
    TransportLimits,
    raise_descriptor_limit,
)
from mcpx.daemon.site import DaemonSite, SiteOptions
from tests.support.logs import observe_log


class Recorder(Resource):
    """Answers with the size of the body it read; C{/slow} answers only when told."""

    isLeaf = True

    def __init__(self) -> None:
        Resource.__init__(self)
        self.seen: list[Any] = []
        self.held: list[Any] = []
        self.bodies: list[type] = []

    def render(self, request: Any) -> Any:
        self.seen.append(request)
        self.bodies.append(type(request.content))
        if request.path == b"/slow":
            self.held.append(request)
            return NOT_DONE_YET
        body = request.content.read()
        return json.dumps({"size": len(body)}).encode()


def peer(host: str = "127.0.0.1", port: int = 40000) -> IPv4Address:
    return IPv4Address("TCP", host, port)


class NoDelayTransport(StringTransport):
    """A transport that records C{setTcpNoDelay}, as a TCP connection has it."""

    no_delay = False

    def setTcpNoDelay(self, enabled: bool) -> None:
        self.no_delay = enabled


class Harness:
    def __init__(self, limits: TransportLimits, descriptors: int = 100_000) -> None:
        self.clock = Clock()
        self.resource = Recorder()
        self.site = DaemonSite(self.resource, self.clock, SiteOptions(limits))
        self.site.admission.cap = limits.connection_cap(descriptors)

    def connect(self, address: Any = None, host: Any = None) -> tuple[Any, StringTransport]:
        address = address or peer()
        proto = self.site.buildProtocol(address)
        transport = NoDelayTransport(hostAddress=host or peer(port=8899), peerAddress=address)
        proto.makeConnection(transport)
        if isinstance(proto, RefusedConnection):
            # What the reactor does once the answer is written.
            proto.connectionLost(connectionDone)
        return proto, transport


def answer(transport: StringTransport) -> tuple[int, dict[bytes, bytes], Any]:
    head, _, body = transport.value().partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, json.loads(body) if body else None


SMALL = TransportLimits(max_body=1024, max_bodies_total=2048)


class BodyTests(SynchronousTestCase):
    def test_content_length_over_the_limit_is_refused_before_the_body(self) -> None:
        """A huge Content-Length gets 413 JSON at once, and the connection closes."""
        h = Harness(SMALL)
        proto, transport = h.connect()
        proto.dataReceived(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n")
        status, headers, body = answer(transport)
        self.assertEqual(status, 413)
        self.assertEqual(headers[b"content-type"], b"application/json")
        self.assertEqual(body["error"]["code"], "body_too_large")
        self.assertIn("1024 bytes", body["error"]["message"])
        self.assertIn("transport.maxRequestBody", body["error"]["message"])
        self.assertTrue(transport.disconnecting)
        proto.dataReceived(b"x" * 4096)
        self.assertEqual(h.resource.seen, [])

    def test_chunked_body_is_cut_off_once_past_the_limit(self) -> None:
        """A chunked body is refused the moment it passes the limit; the request never runs."""
        h = Harness(SMALL)
        proto, transport = h.connect()
        proto.dataReceived(
            b"POST /v1/call HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        proto.dataReceived(b"200\r\n" + b"a" * 512 + b"\r\n")
        self.assertEqual(transport.value(), b"")
        proto.dataReceived(b"300\r\n" + b"b" * 768 + b"\r\n0\r\n\r\n")
        status, _, body = answer(transport)
        self.assertEqual((status, body["error"]["code"]), (413, "body_too_large"))
        self.assertTrue(transport.disconnecting)
        self.assertEqual(h.resource.seen, [])
        self.assertEqual(h.site.admission.body_bytes, 0)

    def test_large_bodies_are_held_in_memory_not_a_temporary_file(self) -> None:
        """twisted.web spools bodies over 100,000 bytes to a temporary file; mcpx does not."""
        h = Harness(TransportLimits(max_body=400_000))
        for framing in (b"Content-Length: 300000\r\n\r\n", b"Transfer-Encoding: chunked\r\n\r\n"):
            proto, transport = h.connect()
            proto.dataReceived(b"POST /v1/call HTTP/1.1\r\nHost: x\r\n" + framing)
            if b"chunked" in framing:
                proto.dataReceived(b"%x\r\n" % 300_000 + b"z" * 300_000 + b"\r\n0\r\n\r\n")
            else:
                proto.dataReceived(b"z" * 300_000)
            self.assertEqual(h.resource.bodies[-1], BytesIO)
            self.assertEqual(answer(transport)[2], {"size": 300_000})

    def test_bodies_in_flight_are_bounded_in_total(self) -> None:
        """Parallel uploads share transport.maxRequestBodyTotal; one past it gets 503."""
        h = Harness(SMALL)
        first, first_transport = h.connect(peer(port=1))
        first.dataReceived(b"POST /v1/call HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        second, _ = h.connect(peer(port=2))
        second.dataReceived(b"POST /v1/call HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        third, third_transport = h.connect(peer(port=3))
        third.dataReceived(b"POST /v1/call HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        status, headers, body = answer(third_transport)
        self.assertEqual((status, body["error"]["code"]), (503, "busy_receiving"))
        self.assertIn(b"retry-after", headers)
        self.assertIn("transport.maxRequestBodyTotal", body["error"]["message"])
        # Once the first body is answered its bytes are free again.
        first.dataReceived(b"q" * 1000)
        self.assertEqual(answer(first_transport)[2], {"size": 1000})
        fourth, fourth_transport = h.connect(peer(port=4))
        fourth.dataReceived(b"POST /v1/call HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
        fourth.dataReceived(b"0123456789")
        self.assertEqual(answer(fourth_transport)[2], {"size": 10})


class ConnectionTests(SynchronousTestCase):
    def test_tcp_connections_set_no_delay(self) -> None:
        """An accepted TCP connection has Nagle's algorithm off; a unix one is left alone."""
        h = Harness(TransportLimits())
        _, tcp = h.connect()
        self.assertTrue(tcp.no_delay)  # type: ignore[attr-defined]
        _, unix = h.connect(host=UNIXAddress(b"/tmp/mcpx.sock"))
        self.assertFalse(unix.no_delay)  # type: ignore[attr-defined]

    def test_one_peer_is_capped(self) -> None:
        """A peer over transport.maxConnectionsPerPeer gets 503 with Retry-After; others do not."""
        h = Harness(TransportLimits(max_connections_per_peer=2))
        first, _ = h.connect(peer(port=1))
        h.connect(peer(port=2))
        refused, transport = h.connect(peer(port=3))
        self.assertNotIsInstance(refused, LimitedChannel)
        status, headers, body = answer(transport)
        self.assertEqual((status, body["error"]["code"]), (503, "too_many_connections"))
        self.assertEqual(headers[b"retry-after"], b"5")
        self.assertIn("transport.maxConnectionsPerPeer", body["error"]["message"])
        self.assertTrue(transport.disconnecting)
        other, _ = h.connect(peer("127.0.0.2"))
        self.assertIsInstance(other, LimitedChannel)
        first.connectionLost(None)
        again, _ = h.connect(peer(port=4))
        self.assertIsInstance(again, LimitedChannel)

    def test_total_keeps_headroom_below_the_descriptor_limit(self) -> None:
        """With 1,024 descriptors at most 768 TCP connections are let in, whatever the setting."""
        limits = TransportLimits(max_connections=5000, max_connections_per_peer=5000)
        self.assertEqual(limits.connection_cap(1024), 768)
        h = Harness(limits, descriptors=1024)
        for port in range(768):
            self.assertIsInstance(h.connect(peer(port=port))[0], LimitedChannel)
        _, transport = h.connect(peer("10.0.0.9"))
        status, _, body = answer(transport)
        self.assertEqual((status, body["error"]["code"]), (503, "too_many_connections"))
        self.assertIn("transport.maxConnections", body["error"]["message"])

    def test_a_burst_past_the_cap_is_closed_without_spending_descriptors(self) -> None:
        """
        While MAX_REFUSING refused connections still hold their descriptor, a further
        one is closed at once (no protocol: the port closes the socket).
        """
        h = Harness(TransportLimits(max_connections_per_peer=1))
        h.connect()
        refusing = [h.site.buildProtocol(peer(port=p)) for p in range(MAX_REFUSING)]
        self.assertTrue(all(isinstance(r, RefusedConnection) for r in refusing))
        self.assertIsNone(h.site.buildProtocol(peer(port=99)))
        refusing[0].makeConnection(StringTransport())
        refusing[0].connectionLost(connectionDone)
        self.assertIsInstance(h.site.buildProtocol(peer(port=100)), RefusedConnection)

    def test_the_unix_socket_is_never_capped(self) -> None:
        """The owner's unix socket answers however many TCP connections are open."""
        h = Harness(TransportLimits(max_connections=1, max_connections_per_peer=1))
        h.connect(peer())
        self.assertNotIsInstance(h.connect(peer("127.0.0.2"))[0], LimitedChannel)
        for _ in range(5):
            proto, _ = h.connect(UNIXAddress(b"/run/mcpx.sock"))
            self.assertIsInstance(proto, LimitedChannel)

    def test_refusals_are_logged_once_then_summed_up(self) -> None:
        """A thousand refused connections make one log line, then one summary a minute."""
        events = observe_log(self)
        h = Harness(TransportLimits(max_connections_per_peer=1))
        h.connect(peer())
        for port in range(1000):
            h.connect(peer(port=port))
        lines = [formatEvent(e) for e in events if "refused" in formatEvent(e)]
        self.assertEqual(len(lines), 1)
        self.assertIn("transport.maxConnectionsPerPeer", lines[0])
        h.clock.advance(SUMMARY_INTERVAL)
        lines = [formatEvent(e) for e in events if "refused" in formatEvent(e)]
        self.assertEqual(len(lines), 2)
        self.assertIn("999", lines[1])
        h.clock.advance(SUMMARY_INTERVAL)
        self.assertEqual(len([e for e in events if "refused" in formatEvent(e)]), 2)
        self.assertEqual(h.clock.getDelayedCalls(), [])

    def test_descriptor_limit_is_raised_to_the_hard_limit(self) -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.addCleanup(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        lower = min(soft, 256)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lower, hard))
        events = observe_log(self)
        limit = raise_descriptor_limit()
        if hard != resource.RLIM_INFINITY:
            self.assertEqual(limit, hard)
        self.assertEqual(resource.getrlimit(resource.RLIMIT_NOFILE)[0], limit)
        self.assertIn(str(limit), formatEvent(events[-1]))


class DeadlineTests(SynchronousTestCase):
    def test_headers_dripped_byte_by_byte_hit_the_header_deadline(self) -> None:
        """Bytes arriving do not push the deadline back: 408 after transport.headerTimeout."""
        h = Harness(TransportLimits(header_timeout=10))
        proto, transport = h.connect()
        request = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Drip: " + b"a" * 50
        for i in range(9):
            proto.dataReceived(request[i : i + 1])
            h.clock.advance(1)
        self.assertFalse(transport.disconnecting)
        proto.dataReceived(request[9:10])
        h.clock.advance(1)
        status, _, body = answer(transport)
        self.assertEqual((status, body["error"]["code"]), (408, "request_timeout"))
        self.assertIn("transport.headerTimeout", body["error"]["message"])
        self.assertTrue(transport.disconnecting)

    def test_a_slow_body_hits_the_body_deadline(self) -> None:
        h = Harness(TransportLimits(header_timeout=10, body_timeout=30))
        proto, transport = h.connect()
        proto.dataReceived(b"POST /v1/call HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
        for _ in range(29):
            proto.dataReceived(b"x")
            h.clock.advance(1)
        self.assertFalse(transport.disconnecting)
        h.clock.advance(1)
        status, _, body = answer(transport)
        self.assertEqual((status, body["error"]["code"]), (408, "request_timeout"))
        self.assertIn("transport.bodyTimeout", body["error"]["message"])
        self.assertEqual(h.resource.seen, [])

    def test_idle_connections_close_and_keep_alive_waits_are_bounded(self) -> None:
        h = Harness(TransportLimits(idle_timeout=60))
        proto, transport = h.connect()
        h.clock.advance(59)
        self.assertFalse(transport.disconnecting)
        proto.dataReceived(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertEqual(answer(transport)[0], 200)
        h.clock.advance(59)
        self.assertFalse(transport.disconnecting)
        h.clock.advance(1)
        self.assertTrue(transport.disconnecting)

    def test_each_deadline_counts_from_its_own_phase(self) -> None:
        """
        The idle deadline counts from the last answer, however many came before; a
        header deadline that ends after the idle one would have, from the head's first
        byte: the connection's one timer firing earlier closes nothing.
        """
        for head_after in (None, 55):
            h = Harness(TransportLimits(idle_timeout=60, header_timeout=10))
            proto, transport = h.connect()
            for _ in range(3):
                h.clock.advance(50)
                proto.dataReceived(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertEqual(transport.value().count(b"HTTP/1.1 200 "), 3)
            if head_after is None:
                h.clock.advance(59)
                self.assertFalse(transport.disconnecting)
                h.clock.advance(1)
                self.assertTrue(transport.disconnecting)
                self.assertEqual(transport.value().count(b"HTTP/1.1 "), 3)
                continue
            h.clock.advance(head_after)
            proto.dataReceived(b"GET /health HTTP/1.1\r\n")
            h.clock.advance(9)
            self.assertFalse(transport.disconnecting)
            h.clock.advance(1)
            self.assertTrue(transport.disconnecting)
            self.assertIn(b"HTTP/1.1 408 ", transport.value())

    def test_long_answers_are_not_cut(self) -> None:
        """A request being answered (an event stream, a long call) has no deadline."""
        h = Harness(TransportLimits(header_timeout=1, body_timeout=1, idle_timeout=1))
        proto, transport = h.connect()
        proto.dataReceived(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        h.clock.advance(3600)
        self.assertFalse(transport.disconnecting)
        request = h.resource.held[0]
        request.write(b"still going")
        h.clock.advance(3600)
        self.assertFalse(transport.disconnecting)
        request.finish()
        h.clock.advance(1)
        self.assertTrue(transport.disconnecting)

    def test_a_peer_that_does_not_read_its_refusal_is_aborted(self) -> None:
        h = Harness(TransportLimits(header_timeout=1))
        proto, transport = h.connect()
        proto.dataReceived(b"G")
        h.clock.advance(1)
        self.assertTrue(transport.disconnecting)
        self.assertFalse(transport.disconnected)
        h.clock.advance(ABORT_AFTER)
        self.assertTrue(transport.disconnected)
