"""
The back-pressure mcpx learns from Twisted: each stream to a client registers a L{Flow}
as a streaming producer, so a full write buffer pauses it, and the connection's
C{flow_for} names the flow that carries a request's notifications.
"""

from __future__ import annotations

from functools import partial
from typing import Any, cast

from twisted.internet.interfaces import IConsumer, IProducer
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.iweb import IRequest
from twisted.web.test.requesthelper import DummyRequest
from zope.interface import implementer

from mcpx.server.flow import Flow, Notices
from mcpx.server.http_exchange import Exchange
from mcpx.server.log_relay import HeldLogs
from mcpx.server.mcp_socket import StdioFactory
from tests.server.test_transport_sweep import pooled_daemon


class FlowTests(SynchronousTestCase):
    def test_resuming_calls_back_once(self) -> None:
        """A callback waiting on a paused flow runs once, when it resumes."""
        flow = Flow()
        flow.pauseProducing()
        called: list[str] = []
        flow.when_resumed(lambda: called.append("x"))
        self.assertTrue(flow.paused)
        flow.resumeProducing()
        flow.resumeProducing()
        self.assertEqual(called, ["x"])
        self.assertFalse(flow.paused)

    def test_stopping_releases_the_waiting(self) -> None:
        """A stream that ends lets what waited on it go (to find the stream gone)."""
        flow = Flow()
        flow.pauseProducing()
        called: list[str] = []
        flow.when_resumed(lambda: called.append("x"))
        flow.stopProducing()
        self.assertEqual(called, ["x"])
        self.assertTrue(flow.stopped)


class StdioFlowTests(SynchronousTestCase):
    def test_the_connection_registers_its_flow(self) -> None:
        """
        An C{mcpx serve} connection's transport pauses the connection's flow, and every
        request's notifications are said to ride on it.
        """
        clock = Clock()
        _, core, _ = pooled_daemon(clock)
        protocol = StdioFactory(core, clock, drain=5.0).buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        protocol.dataReceived(b'{"mcpx": "serve", "pid": 1, "cwd": "/", "version": "t"}\n')
        self.assertIs(transport.producer, protocol.flow)
        self.assertTrue(transport.streaming)
        assert protocol.conn is not None
        self.assertIs(protocol.conn.flow_for("token"), protocol.flow)
        protocol.flow.pauseProducing()  # what the transport does when its buffer fills
        self.assertTrue(protocol.flow.paused)


@implementer(IConsumer)
class ConsumingRequest(DummyRequest):
    """A request that, like C{twisted.web}'s, takes a producer."""

    producer: IProducer | None = None

    def registerProducer(self, producer: IProducer, streaming: bool) -> None:
        assert self.producer is None, "a producer is already registered"
        assert streaming
        self.producer = producer

    def unregisterProducer(self) -> None:
        self.producer = None


class ExchangeFlowTests(SynchronousTestCase):
    def test_an_event_stream_registers_its_flow_until_answered(self) -> None:
        """
        A POST's response registers its flow on the request once it becomes an event
        stream, and lets go of it with the answer, so the next response can register.
        """
        request = ConsumingRequest([b"mcp"])
        exchange = Exchange(cast(IRequest, request), Clock(), accepts_sse=True, keep_alive=0)
        self.assertIsNone(request.producer)
        self.assertTrue(exchange.send(b'{"jsonrpc": "2.0", "method": "notifications/x"}'))
        self.assertIs(request.producer, exchange.flow)
        exchange.answer(b'{"jsonrpc": "2.0", "id": 1, "result": {}}')
        self.assertIsNone(request.producer)
        self.assertTrue(exchange.flow.stopped)

    def test_the_flow_asked_for_is_the_one_registered(self) -> None:
        """
        The flow a request's progress is coalesced by, asked for before its response
        became an event stream, is the one Twisted pauses once it is one; asked for only
        after the answer, it is stopped (nothing more will reach that client).
        """
        request = ConsumingRequest([b"mcp"])
        exchange = Exchange(cast(IRequest, request), Clock(), accepts_sse=True, keep_alive=0)
        asked = exchange.flow
        self.assertIs(exchange.flow, asked)
        self.assertFalse(asked.stopped)
        exchange.send(b'{"jsonrpc": "2.0", "method": "notifications/x"}')
        self.assertIs(request.producer, asked)
        exchange.answer(b'{"jsonrpc": "2.0", "id": 1, "result": {}}')
        self.assertTrue(asked.stopped)

        other = ConsumingRequest([b"mcp"])
        answered = Exchange(cast(IRequest, other), Clock(), accepts_sse=True, keep_alive=0)
        answered.answer(b'{"jsonrpc": "2.0", "id": 2, "result": {}}')
        self.assertTrue(answered.flow.stopped)
        self.assertFalse(answered.flow.paused)


class HeldLogsTests(SynchronousTestCase):
    """Log messages for a stream that is backed up: held up to a bound, then dropped."""

    def setUp(self) -> None:
        self.flow = Flow()
        self.held = HeldLogs(self.flow, limit=300)
        self.sent: list[dict[str, Any]] = []

    def offer(self, n: int, level: str = "info") -> None:
        self.held.offer(self.sent.append, {"level": level, "data": f"{n:03d}" + "x" * 90})

    def test_passed_on_at_once_while_the_stream_keeps_up(self) -> None:
        self.offer(1)
        self.assertEqual(len(self.sent), 1)
        self.assertEqual(self.held.held, 0)

    def test_held_then_dropped_then_told(self) -> None:
        """
        While paused, messages are held up to the bound in bytes and the rest are
        counted; on resuming the held go out in order, then one message says how many
        were dropped, at the level of the most severe of them.
        """
        self.flow.pauseProducing()
        for n in range(5):
            self.offer(n, "warning" if n == 3 else "info")
        self.assertEqual(self.sent, [])
        self.assertLessEqual(self.held.held, 300)
        self.assertEqual(self.held.dropped, 3)
        self.flow.resumeProducing()
        self.assertEqual([m["data"][:3] for m in self.sent[:2]], ["000", "001"])
        self.assertEqual(
            self.sent[2],
            {
                "level": "warning",
                "logger": "mcpx",
                "data": "mcpx dropped 3 log messages while this client was not reading them",
            },
        )
        self.offer(9)
        self.assertEqual(len(self.sent), 4)

    def test_flushed_before_the_answer(self) -> None:
        """A call that ends while paused sends what was held before its answer."""
        self.flow.pauseProducing()
        self.offer(1)
        self.held.flush()
        self.assertEqual(len(self.sent), 1)
        self.flow.resumeProducing()
        self.assertEqual(len(self.sent), 1)

    def test_nothing_once_the_stream_is_gone(self) -> None:
        self.flow.pauseProducing()
        self.offer(1)
        self.flow.stopProducing()
        self.offer(2)
        self.assertEqual(self.sent, [])


class NoticesTests(SynchronousTestCase):
    """Notifications whose latest says all: one of each waits for a backed-up stream."""

    def test_sent_at_once_while_the_stream_keeps_up(self) -> None:
        sent: list[str] = []
        Notices().send(Flow(), "a", lambda: sent.append("a"))
        Notices().send(None, "a", lambda: sent.append("b"))
        self.assertEqual(sent, ["a", "b"])

    def test_the_latest_of_each_waits_in_the_place_of_the_first(self) -> None:
        flow = Flow()
        notices = Notices()
        sent: list[str] = []
        flow.pauseProducing()
        for n in range(100):
            notices.send(flow, "a", partial(sent.append, f"a{n}"))
            notices.send(flow, "b", partial(sent.append, f"b{n}"))
        self.assertEqual((sent, notices.waiting(flow)), ([], 2))
        flow.resumeProducing()
        self.assertEqual(sent, ["a99", "b99"])
        self.assertEqual(notices.waiting(flow), 0)

    def test_nothing_once_the_stream_is_gone(self) -> None:
        flow = Flow()
        notices = Notices()
        sent: list[str] = []
        flow.pauseProducing()
        notices.send(flow, "a", lambda: sent.append("a"))
        flow.stopProducing()
        self.assertEqual((sent, notices.waiting(flow)), ([], 0))
