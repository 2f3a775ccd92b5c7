"""The event bus, and C{GET /v1/events} as server-sent events."""

from __future__ import annotations

import json
from typing import Any, cast

from jsonschema import Draft202012Validator
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IConsumer, IProducer, IPushProducer, ITransport
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.iweb import IRequest
from twisted.web.test.requesthelper import DummyRequest
from zope.interface import implementer

from mcpx.daemon.event_stream import serve_events
from mcpx.ops.events import Event, EventBus, split_filter
from mcpx.ops.table import BY_NAME
from mcpx.wire.sse import SSEDecoder
from tests.daemon.fake_pool import Harness, default_settings, result_of


class EventBusTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(50)
        self.bus = EventBus(self.clock, queue_limit=3)
        self.seen: list[Event] = []

    def test_event_shape(self) -> None:
        """An event is its kind, server and time, then its data; data cannot override those."""
        self.bus.subscribe(self.seen.append)
        self.bus.publish("server.started", "files", era="legacy", time="forged")
        [event] = self.seen
        self.assertEqual(
            event.to_json(),
            {"kind": "server.started", "server": "files", "time": 50.0, "era": "legacy"},
        )

    def test_filter_by_resource(self) -> None:
        """A subscriber watching resources gets only their updates, other kinds as asked."""
        self.bus.subscribe(self.seen.append, resources=[("files", "file:///a")])
        self.bus.publish("resource.updated", "files", uri="file:///a")
        self.bus.publish("resource.updated", "files", uri="file:///b")
        self.bus.publish("resource.updated", "other", uri="file:///a")
        self.bus.publish("warning", "files", message="kept")
        self.assertEqual(
            [(e.kind, e.server, e.data.get("uri")) for e in self.seen],
            [("resource.updated", "files", "file:///a"), ("warning", "files", None)],
        )

    def test_ids_increase(self) -> None:
        """Each event has the next id, counting events nobody was listening to."""
        self.bus.publish("warning", message="before anyone listened")
        self.bus.subscribe(self.seen.append)
        self.bus.publish("warning", message="a")
        self.bus.publish("warning", message="b")
        self.assertEqual([e.id for e in self.seen], [2, 3])

    def test_filter_by_server(self) -> None:
        """A server filter keeps that server's events and drops the daemon's own."""
        self.bus.subscribe(self.seen.append, servers=["files"])
        self.bus.publish("server.started", "files")
        self.bus.publish("server.started", "search")
        self.bus.publish("warning", None, message="daemon-wide")
        self.assertEqual([(e.kind, e.server) for e in self.seen], [("server.started", "files")])

    def test_filter_by_kind(self) -> None:
        """Kinds are exact names, or families as server.* or server."""
        exact: list[Event] = []
        family: list[Event] = []
        bare: list[Event] = []
        self.bus.subscribe(exact.append, kinds=["server.exited", "warning"])
        self.bus.subscribe(family.append, kinds=["server.*"])
        self.bus.subscribe(bare.append, kinds=["server"])
        for kind in ("server.started", "server.exited", "progress", "warning", "serverless"):
            self.bus.publish(kind, "files")
        self.assertEqual([e.kind for e in exact], ["server.exited", "warning"])
        self.assertEqual([e.kind for e in family], ["server.started", "server.exited"])
        self.assertEqual([e.kind for e in bare], ["server.started", "server.exited"])

    def test_split_filter(self) -> None:
        """Filter values may be repeated, comma-separated, or both."""
        self.assertEqual(split_filter(["a,b", " c ", "", "d,"]), ["a", "b", "c", "d"])

    def test_paused_then_resumed(self) -> None:
        """Events wait while a subscriber is paused and arrive in order when it resumes."""
        subscription = self.bus.subscribe(self.seen.append)
        subscription.pause()
        for n in range(3):
            self.bus.publish("progress", "files", progress=n)
        self.assertEqual((self.seen, subscription.queued), ([], 3))
        subscription.resume()
        self.assertEqual([e.data["progress"] for e in self.seen], [0, 1, 2])
        self.assertEqual(subscription.queued, 0)

    def test_slow_subscriber_dropped(self) -> None:
        """A paused subscriber whose queue overflows is dropped and told why; others go on."""
        reasons: list[str] = []
        slow = self.bus.subscribe(lambda e: None, on_dropped=reasons.append)
        self.bus.subscribe(self.seen.append)
        slow.pause()
        for n in range(4):
            self.bus.publish("progress", "files", progress=n)
        self.assertEqual(len(reasons), 1)
        self.assertIn("3 events", reasons[0])
        self.assertFalse(slow.active)
        self.assertEqual(self.bus.subscribers, 1)
        self.assertEqual(len(self.seen), 4)

    def test_slow_subscriber_dropped_by_bytes(self) -> None:
        """
        A paused subscriber is dropped once its queue would hold more than the bus's
        bytes per subscriber, however few events that is; resumed, it would have had
        what was queued, and the bytes it held are counted no more.
        """
        bus = EventBus(self.clock, queue_limit=100, queue_bytes=3000)
        reasons: list[str] = []
        slow = bus.subscribe(lambda e: None, on_dropped=reasons.append)
        slow.pause()
        bus.publish("server.log", "files", data="x" * 1000)
        bus.publish("server.log", "files", data="x" * 1000)
        self.assertEqual((slow.queued, reasons), (2, []))
        self.assertEqual(bus.queued_bytes, slow.queued_bytes)
        bus.publish("server.log", "files", data="x" * 1000)
        self.assertEqual(len(reasons), 1)
        self.assertIn("3000 bytes of events", reasons[0])
        self.assertFalse(slow.active)
        self.assertEqual(bus.queued_bytes, 0)

    def test_slow_subscribers_dropped_by_bytes_in_all(self) -> None:
        """
        Several paused subscribers together hold no more than the bus's bytes in all:
        the one whose next event would pass it is dropped; delivered events free theirs.
        """
        bus = EventBus(self.clock, queue_limit=100, queue_bytes=10000, queues_bytes=4000)
        reasons: list[str] = []
        first = bus.subscribe(lambda e: None, on_dropped=reasons.append)
        second = bus.subscribe(lambda e: None, on_dropped=reasons.append)
        first.pause()
        second.pause()
        bus.publish("server.log", "files", data="x" * 1500)
        self.assertEqual(reasons, [])
        bus.publish("server.log", "files", data="x" * 1500)
        self.assertEqual(len(reasons), 1)
        self.assertIn("4000 bytes of events", reasons[0])
        self.assertIn("in all", reasons[0])
        # The first was offered the event first; what it held made room for the second.
        self.assertEqual((first.active, second.active), (False, True))
        self.assertEqual(second.queued, 2)
        self.assertEqual(bus.queued_bytes, second.queued_bytes)
        second.resume()
        self.assertEqual((second.queued, bus.queued_bytes), (0, 0))

    def test_failing_subscriber_dropped(self) -> None:
        """A subscriber that raises is logged and dropped; the publisher never sees it."""

        def broken(event: Event) -> None:
            raise RuntimeError("broken pipe")

        self.bus.subscribe(broken)
        self.bus.subscribe(self.seen.append)
        self.bus.publish("warning", message="x")
        self.bus.publish("warning", message="y")
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        self.assertEqual(len(self.seen), 2)
        self.assertEqual(self.bus.subscribers, 1)

    def test_cancel(self) -> None:
        """A cancelled subscription receives nothing more; cancelling twice is harmless."""
        subscription = self.bus.subscribe(self.seen.append)
        subscription.cancel()
        subscription.cancel()
        self.bus.publish("warning")
        self.assertEqual((self.seen, self.bus.subscribers), ([], 0))

    def test_close(self) -> None:
        """Closing the bus drops every subscriber, saying the daemon is stopping."""
        reasons: list[str] = []
        self.bus.subscribe(self.seen.append, on_dropped=reasons.append)
        self.bus.subscribe(self.seen.append, on_dropped=reasons.append)
        self.bus.close()
        self.assertEqual(reasons, ["the daemon is stopping"] * 2)
        self.assertEqual(self.bus.subscribers, 0)

    def test_frame_encoded_once(self) -> None:
        """The SSE frame of an event is built once, whatever the number of streams."""
        frames: list[bytes] = []
        self.bus.subscribe(lambda e: frames.append(e.sse_frame()))
        self.bus.subscribe(lambda e: frames.append(e.sse_frame()))
        self.bus.publish("warning", message="x")
        self.assertIs(frames[0], frames[1])
        self.assertTrue(frames[0].startswith(b"event: warning\nid: 1\ndata: "))


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


def events_of(data: bytes) -> list[tuple[str, str | None, Any]]:
    """The events in an SSE body: (type, id, data as JSON)."""
    decoder = SSEDecoder()
    return [(e.event, e.id, json.loads(e.data)) for e in decoder.feed(data)]


class EventsRouteTests(SynchronousTestCase):
    def setUp(self) -> None:
        settings = default_settings(**{"transport.sseKeepAlive": "5s"})
        self.harness = Harness(settings=settings)
        self.bus = self.harness.http.host.events
        self.clock = self.harness.clock

    def open(self, query: str = "") -> tuple[Any, _Body]:
        response = result_of(self.finish_headers(self.harness.start("GET", "/v1/events" + query)))
        body = _Body()
        response.deliverBody(body)
        self.harness.stub.flush()
        return response, body

    def finish_headers(self, started: Deferred[Any]) -> Deferred[Any]:
        self.harness.stub.flush()
        return started

    def test_too_many_uris(self) -> None:
        """More resources than one stream may watch is a 400 naming the limit."""
        query = "?" + "&".join(f"uri=mcpx://files/r{n}" for n in range(65))
        response = result_of(self.finish_headers(self.harness.start("GET", "/v1/events" + query)))
        self.assertEqual(response.code, 400)

    def test_stream(self) -> None:
        """The answer is an event stream of matching events, each data matching the schema."""
        response, body = self.open("?server=files&kind=server.started,warning")
        self.assertEqual(response.code, 200)
        self.assertEqual(response.headers.getRawHeaders(b"content-type"), [b"text/event-stream"])
        self.assertEqual(response.headers.getRawHeaders(b"cache-control"), [b"no-cache"])
        self.bus.publish("server.started", "files", era="legacy", revision="2025-06-18")
        self.bus.publish("server.started", "search", era="modern")
        self.bus.publish("server.log", "files", level="info", data="hello")
        self.bus.publish("warning", "files", message="slow start")
        self.harness.stub.flush()
        events = events_of(body.data)
        self.assertEqual(
            [(kind, id_) for kind, id_, _ in events], [("server.started", "1"), ("warning", "4")]
        )
        schema = Draft202012Validator(BY_NAME["events"].output_schema)
        for _, _, data in events:
            schema.validate(data)
        self.assertEqual(events[0][2]["revision"], "2025-06-18")
        self.assertEqual(events[1][2]["message"], "slow start")

    def test_repeated_filters(self) -> None:
        """Filters may be repeated in the query."""
        _, body = self.open("?kind=progress&kind=warning")
        for kind in ("progress", "server.started", "warning"):
            self.bus.publish(kind, "files")
        self.harness.stub.flush()
        self.assertEqual([kind for kind, _, _ in events_of(body.data)], ["progress", "warning"])

    def test_keep_alive(self) -> None:
        """A keep-alive comment is sent every transport.sseKeepAlive on the clock."""
        _, body = self.open()
        start = body.data
        self.clock.advance(4.9)
        self.harness.stub.flush()
        self.assertEqual(body.data, start)
        self.clock.advance(0.1)
        self.harness.stub.flush()
        self.assertEqual(body.data, start + b": keep-alive\n")
        for _ in range(2):
            self.clock.advance(5)
        self.harness.stub.flush()
        self.assertEqual(body.data.count(b": keep-alive\n"), 3)

    def test_unsubscribe_on_disconnect(self) -> None:
        """A client that goes away is unsubscribed and its keep-alive timer stopped."""
        _, body = self.open()
        self.assertEqual(self.bus.subscribers, 1)
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        transport = cast(ITransport, body.transport)
        cast(IPushProducer, transport).stopProducing()
        self.harness.stub.flush()
        self.assertEqual(self.bus.subscribers, 0)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        # Publishing after the client left writes nowhere and raises nothing.
        self.bus.publish("warning", message="anyone?")

    def test_bus_closed(self) -> None:
        """When the daemon stops, each stream gets a dropped event and ends."""
        _, body = self.open()
        self.harness.http.close()
        self.harness.stub.flush()
        events = events_of(body.data)
        self.assertEqual(events[-1][0], "dropped")
        self.assertEqual(events[-1][2]["reason"], "the daemon is stopping")
        self.assertEqual(len(body.ended), 1)
        self.assertEqual(self.clock.getDelayedCalls(), [])


@implementer(IConsumer)
class ProducerRequest(DummyRequest):
    """A request that keeps the producer registered on it, as a real transport would."""

    def __init__(self) -> None:
        super().__init__([b""])
        self.producer: IPushProducer | None = None
        self.unregistered = 0

    def registerProducer(self, producer: IProducer, streaming: bool) -> None:
        assert streaming and self.producer is None
        self.producer = cast(IPushProducer, producer)

    def unregisterProducer(self) -> None:
        self.producer = None
        self.unregistered += 1


class SlowConsumerTests(SynchronousTestCase):
    """A stream whose transport cannot keep up is dropped, not buffered without bound."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.bus = EventBus(self.clock, queue_limit=3)
        self.request = ProducerRequest()
        self.serving = Deferred.fromCoroutine(
            serve_events(cast(IRequest, self.request), self.bus, self.clock, keep_alive=5)
        )
        assert self.request.producer is not None
        self.producer = self.request.producer

    def written(self) -> bytes:
        return b"".join(self.request.written)

    def test_paused_then_resumed(self) -> None:
        """While the transport is full, events wait (and keep-alives are skipped)."""
        self.producer.pauseProducing()
        self.bus.publish("warning", message="1")
        self.bus.publish("warning", message="2")
        self.clock.advance(5)
        self.assertEqual(self.written(), b": subscribed\n")
        self.producer.resumeProducing()
        self.assertEqual([data["message"] for _, _, data in events_of(self.written())], ["1", "2"])
        self.assertNoResult(self.serving)

    def test_dropped(self) -> None:
        """Past the queue's bound the stream ends with a dropped event, and is released."""
        self.producer.pauseProducing()
        for n in range(4):
            self.bus.publish("progress", "files", progress=n)
        events = events_of(self.written())
        self.assertEqual([kind for kind, _, _ in events], ["dropped"])
        self.assertIn("slow consumer", events[0][2]["reason"])
        self.assertIsNone(self.successResultOf(self.serving))
        self.assertEqual(self.bus.subscribers, 0)
        self.assertEqual(self.request.unregistered, 1)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_cancelled(self) -> None:
        """Cancelling the handler (Klein does, on disconnect) releases everything."""
        self.serving.cancel()
        self.failureResultOf(self.serving, CancelledError)
        self.assertEqual(self.bus.subscribers, 0)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_stopped_by_the_transport(self) -> None:
        """A transport that stops its producer ends the stream."""
        self.producer.stopProducing()
        self.assertIsNone(self.successResultOf(self.serving))
        self.assertEqual(self.bus.subscribers, 0)
