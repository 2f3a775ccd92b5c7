# -*- test-case-name: tests.daemon.test_events -*-
"""
C{GET /v1/events}: the event bus (L{mcpx.ops.events}) as a server-sent event stream.

Each stream is its request's push producer: a client that does not read pauses it, and
events then wait in its subscription, up to the bus's bounds (a count and bytes).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IConsumer, IPushProducer, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.web.iweb import IRequest
from zope.interface import implementer

from mcpx.ops.events import WATCHING, Event, EventBus, Subscription
from mcpx.wire.sse import comment, encode_event

_log = Logger()


@implementer(IPushProducer)
@define(eq=False)
class EventStream:
    """
    One C{GET /v1/events} response: SSE frames written as events arrive.

    Registered as the request's push producer, so a transport whose buffer is full
    pauses it (events then queue in its subscription, up to the bound) and a lost
    connection stops it.

    @ivar ended: fires (with C{None}) when the stream ends from this side: dropped,
        stopped, or the bus closed.
    """

    request: IRequest
    subscription: Subscription | None = None
    ended: Deferred[None] = field(factory=Deferred)
    connected: bool = True

    def write_event(self, event: Event) -> None:
        self.request.write(event.sse_frame())

    def keep_alive(self) -> None:
        if self.subscription is not None and not self.subscription.paused:
            self.request.write(comment("keep-alive"))

    def dropped(self, reason: str) -> None:
        """The last frame says why the stream ends, so the client knows to reconnect."""
        frame = json.dumps({"kind": "dropped", "reason": reason}, separators=(",", ":"))
        self.request.write(encode_event(frame, event="dropped"))
        self._end()

    def _end(self) -> None:
        if not self.ended.called:
            self.ended.callback(None)

    def disconnected(self, outcome: object) -> None:
        """The response finished or its connection was lost: nothing more may be written."""
        self.connected = False

    def pauseProducing(self) -> None:
        if self.subscription is not None:
            self.subscription.pause()

    def resumeProducing(self) -> None:
        if self.subscription is not None:
            self.subscription.resume()

    def stopProducing(self) -> None:
        if self.subscription is not None:
            self.subscription.cancel()
        self._end()


async def serve_events(
    request: IRequest,
    bus: EventBus,
    clock: IReactorTime,
    *,
    servers: Iterable[str] = (),
    kinds: Iterable[str] = (),
    keep_alive: float = 15.0,
    resources: Iterable[tuple[str, str]] | None = None,
    first: Mapping[str, Any] | None = None,
    sees: Callable[[str | None], bool] | None = None,
) -> None:
    """
    Stream matching events to C{request} until it is dropped or the client goes away.

    Klein cancels the awaiting coroutine when the client disconnects; the subscription
    and the keep-alive timer are released in C{finally} either way.

    @param resources: only these (server, upstream URI) pairs' C{resource.updated}.
    @param first: the data of a L{WATCHING} event sent before any other (what a
        C{?uri=} stream subscribed to, and why anything was not).
    @param sees: whose events the reader may see (L{Subscription.sees}); C{None}, all.
    """
    request.setResponseCode(200)
    request.setHeader(b"content-type", b"text/event-stream")
    request.setHeader(b"cache-control", b"no-cache")
    request.setHeader(b"x-accel-buffering", b"no")
    stream = EventStream(request)
    # notifyFinish is on every twisted.web request, though IRequest does not declare it.
    finished: Deferred[None] = request.notifyFinish()  # type: ignore[attr-defined]
    finished.addBoth(stream.disconnected)
    stream.subscription = bus.subscribe(
        stream.write_event,
        servers=servers,
        kinds=kinds,
        on_dropped=stream.dropped,
        resources=resources,
        sees=sees,
    )
    # The first bytes send the headers, so the client knows it is subscribed.
    request.write(comment("subscribed"))
    if first is not None:
        shown = {"kind": WATCHING, "server": None, "time": clock.seconds(), **first}
        request.write(encode_event(json.dumps(shown, separators=(",", ":")), event=WATCHING))
    consumer = IConsumer(request)
    consumer.registerProducer(stream, True)
    beat = LoopingCall(stream.keep_alive)
    beat.clock = clock
    if keep_alive > 0:
        beat.start(keep_alive, now=False).addErrback(
            lambda failure: _log.failure("keep-alive failed", failure)
        )
    try:
        await stream.ended
    finally:
        stream.subscription.cancel()
        if beat.running:
            beat.stop()
        if stream.connected:
            consumer.unregisterProducer()
