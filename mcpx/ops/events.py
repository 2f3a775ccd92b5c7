# -*- test-case-name: tests.daemon.test_events -*-
"""
What happens in the daemon, as events: the bus the pool publishes on, which
C{GET /v1/events} streams (L{mcpx.daemon.event_stream}).

The pool is handed L{EventBus.publish} as a plain callable and never imports this module.
Each subscriber has its own bounded queue: events wait in it only while the subscriber is
paused (an HTTP stream whose transport buffer is full), and a subscriber whose queue
overflows (by count, by bytes, or past the bytes all queues may hold together) is dropped
rather than allowed to grow without bound.  A publisher never waits
for a subscriber and never sees a subscriber's failure.

Each event may name the principal whose call produced it (L{Event.principal}: an access
token's subject, L{mcpx.auth.caller.principal_of}); a subscriber that is such a subject
sees only its own events (L{Subscription.sees}), and what no subject's call produced
(servers starting and stopping, an upstream's log between calls, reloads) is the
owner's alone.
"""

from __future__ import annotations

import contextlib
import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from attrs import define, field
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from mcpx.settings.secrets import SecretMasker
from mcpx.wire.sse import encode_event

_log = Logger()

#: How many events wait for a paused subscriber before it is dropped.
DEFAULT_QUEUE_LIMIT = 256

#: How many bytes of events (as SSE frames) wait for a paused subscriber before it is
#: dropped: an upstream's log messages can be as large as one message may be.
DEFAULT_QUEUE_BYTES = 16 * 1024 * 1024

#: How many bytes of events wait for all paused subscribers together; a subscriber whose
#: next event would go past it is dropped.
DEFAULT_QUEUES_BYTES = 128 * 1024 * 1024

#: The kinds the pool publishes; others are allowed, these are the documented ones.
KINDS = (
    "server.starting",
    "server.started",
    "server.exited",
    "server.restarted",
    "server.failed",
    "server.reaped",
    "server.log",
    "progress",
    "warning",
    "question.asked",
    "question.closed",
    "config.reloaded",
    "config.reload_failed",
    "task.created",
    "task.working",
    "task.input_required",
    "task.completed",
    "task.failed",
    "task.cancelled",
    "resource.updated",
    "call.finished",
)

#: The kind of the first event of a stream that watches resources (C{?uri=}).
WATCHING = "watching"


@define
class Event:
    """
    One thing that happened.

    @ivar id: the bus's sequence number, the SSE event id.
    @ivar server: the server it is about, or C{None} for the daemon itself.
    @ivar time: the clock's seconds when it was published.
    @ivar data: the kind's own fields.
    @ivar principal: the subject identity whose call it came from, or C{None} when it
        is nobody's or the owner's (then only the owner's subscribers see it).
    """

    id: int
    kind: str
    server: str | None
    time: float
    data: Mapping[str, Any]
    principal: str | None = None
    _frame: bytes | None = field(default=None, init=False, repr=False, eq=False)

    def to_json(self) -> dict[str, Any]:
        """C{{"kind", "server", "time", ...data}}; data never overrides the three."""
        shown: dict[str, Any] = {"kind": self.kind, "server": self.server, "time": self.time}
        for key, value in self.data.items():
            shown.setdefault(key, value)
        return shown

    def sse_frame(self) -> bytes:
        """The event as an SSE frame, encoded once however many streams carry it."""
        if self._frame is None:
            text = json.dumps(self.to_json(), separators=(",", ":"), default=str)
            self._frame = encode_event(text, event=self.kind, id=str(self.id))
        return self._frame


def _kind_matcher(kinds: Iterable[str]) -> Callable[[str], bool] | None:
    """
    A test for kinds: exact names, or a family as C{server.*} (or just C{server}).

    C{None} means every kind.
    """
    exact: set[str] = set()
    families: list[str] = []
    for kind in kinds:
        if kind.endswith(".*"):
            families.append(kind[:-1])
        elif "." not in kind and kind not in KINDS:
            families.append(kind + ".")
            exact.add(kind)
        else:
            exact.add(kind)
    if not exact and not families:
        return None
    prefixes = tuple(families)
    return lambda kind: kind in exact or kind.startswith(prefixes)


@define(eq=False)
class Subscription:
    """
    One subscriber: its filter, its queue, and whether it may be delivered to now.

    @ivar deliver: called with each matching event while not paused.
    @ivar on_dropped: called once, with the reason, when the subscriber is dropped (its
        queue overflowed, its delivery failed, or the bus closed).
    @ivar sees: whether it may see an event of that principal (L{Event.principal});
        C{None}, the owner's, sees every event.  A resource it watches itself is the
        exception: its C{resource.updated} reaches it whoever's call it came on.
    """

    _bus: EventBus
    deliver: Callable[[Event], None]
    servers: frozenset[str]
    _kind_test: Callable[[str], bool] | None
    limit: int
    on_dropped: Callable[[str], None] | None = None
    #: The (server, upstream URI) pairs whose C{resource.updated} events it wants, or
    #: C{None} for every resource's.
    resources: frozenset[tuple[str, str]] | None = None
    sees: Callable[[str | None], bool] | None = None
    paused: bool = False
    active: bool = True
    _queue: deque[Event] = field(factory=deque)
    #: The bytes of the events in the queue, as SSE frames.
    queued_bytes: int = 0

    def matches(self, event: Event) -> bool:
        if self.servers and event.server not in self.servers:
            return False
        watched = False
        if self.resources is not None and event.kind == "resource.updated":
            if (event.server, event.data.get("uri")) not in self.resources:
                return False
            watched = True
        if not watched and self.sees is not None and not self.sees(event.principal):
            return False
        return self._kind_test is None or self._kind_test(event.kind)

    def offer(self, event: Event) -> None:
        """Deliver C{event} now, or queue it while paused; overflow drops the subscriber."""
        if self.paused:
            if len(self._queue) >= self.limit:
                self.drop(f"more than {self.limit} events waited for a slow consumer")
                return
            size = len(event.sse_frame())
            bus = self._bus
            if self.queued_bytes + size > bus.queue_bytes:
                self.drop(f"more than {bus.queue_bytes} bytes of events waited for a slow consumer")
                return
            if bus.queued_bytes + size > bus.queues_bytes:
                self.drop(
                    f"more than {bus.queues_bytes} bytes of events waited for slow consumers in all"
                )
                return
            self._queue.append(event)
            self.queued_bytes += size
            bus.queued_bytes += size
            return
        self._deliver(event)

    def _deliver(self, event: Event) -> None:
        try:
            self.deliver(event)
        except Exception:
            _log.failure("an event subscriber failed; dropping it")
            self.drop("delivery failed")

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        """Deliver what waited, in order, until empty or paused again."""
        self.paused = False
        while self._queue and not self.paused and self.active:
            event = self._queue.popleft()
            self._forget(event)
            self._deliver(event)

    def _forget(self, event: Event) -> None:
        size = len(event.sse_frame())
        self.queued_bytes -= size
        self._bus.queued_bytes -= size

    @property
    def queued(self) -> int:
        return len(self._queue)

    def cancel(self) -> None:
        """Stop receiving events; idempotent."""
        if self.active:
            self.active = False
            self._bus.queued_bytes -= self.queued_bytes
            self.queued_bytes = 0
            self._queue.clear()
            self._bus._remove(self)

    def drop(self, reason: str) -> None:
        """Cancel, and tell the subscriber why."""
        if not self.active:
            return
        self.cancel()
        if self.on_dropped is not None:
            self.on_dropped(reason)


@define
class EventBus:
    """
    Fan-out of daemon events to subscribers, each with a filter and a bounded queue.

    @ivar clock: stamps each event's C{time}.
    @ivar queue_limit: the default bound of a subscriber's queue.
    @ivar masker: hides the configured credentials in every event's data.
    @ivar queue_bytes: the bound of a subscriber's queue in bytes.
    @ivar queues_bytes: the bound in bytes of all subscribers' queues together.
    @ivar queued_bytes: the bytes waiting in all subscribers' queues now.
    """

    clock: IReactorTime
    queue_limit: int = DEFAULT_QUEUE_LIMIT
    masker: SecretMasker | None = None
    queue_bytes: int = field(default=DEFAULT_QUEUE_BYTES, kw_only=True)
    queues_bytes: int = field(default=DEFAULT_QUEUES_BYTES, kw_only=True)
    queued_bytes: int = field(default=0, init=False)
    _subscriptions: list[Subscription] = field(factory=list, init=False)
    _last_id: int = field(default=0, init=False)

    def publish(
        self, kind: str, server: str | None = None, *, principal: str | None = None, **data: Any
    ) -> None:
        """
        Tell every matching subscriber that C{kind} happened (to C{server}).

        Never raises and never waits: a subscriber that cannot keep up is dropped.

        @param principal: the subject identity whose call it came from (L{Event.principal}).
        """
        self._last_id += 1
        if not self._subscriptions:
            return
        if self.masker:
            # After the check above: with nobody listening, nothing is masked.
            data = self.masker.mask_json(data)
        event = Event(self._last_id, kind, server, self.clock.seconds(), data, principal)
        for subscription in tuple(self._subscriptions):
            if subscription.active and subscription.matches(event):
                subscription.offer(event)

    def unheard(self) -> bool:
        """
        Whether an event published now would reach nobody; then it is taken as published
        (its id used, as L{publish} would), so a publisher on the hot path (a call ending,
        L{mcpx.ops.recent_calls}) need not spell its fields out.
        """
        if self._subscriptions:
            return False
        self._last_id += 1
        return True

    def subscribe(
        self,
        deliver: Callable[[Event], None],
        *,
        servers: Iterable[str] = (),
        kinds: Iterable[str] = (),
        limit: int | None = None,
        on_dropped: Callable[[str], None] | None = None,
        resources: Iterable[tuple[str, str]] | None = None,
        sees: Callable[[str | None], bool] | None = None,
    ) -> Subscription:
        """
        Receive events about C{servers} (all when empty) of C{kinds} (all when empty).

        A kind ending in C{.*}, or a bare family name such as C{server}, matches every
        kind in that family.

        @param resources: the (server, upstream URI) pairs whose C{resource.updated}
            events are wanted; C{None} for every resource's.
        @param sees: which principals' events it may see (L{Subscription.sees}).
        """
        subscription = Subscription(
            self,
            deliver,
            frozenset(servers),
            _kind_matcher(kinds),
            self.queue_limit if limit is None else limit,
            on_dropped,
            frozenset(resources) if resources is not None else None,
            sees,
        )
        self._subscriptions.append(subscription)
        return subscription

    @property
    def subscribers(self) -> int:
        return len(self._subscriptions)

    def watching(self, kind: str, server: str, principal: str | None = None) -> bool:
        """
        Whether a subscriber now would be given an event of C{kind} about C{server}, made
        by C{principal}'s call (a subject's own stream sees only its own calls' events).
        """
        probe = Event(self._last_id, kind, server, self.clock.seconds(), {}, principal=principal)
        return any(
            subscription.active and subscription.matches(probe)
            for subscription in self._subscriptions
        )

    @property
    def queued(self) -> int:
        """Events waiting, in all, for paused subscribers (slow stream consumers)."""
        return sum(subscription.queued for subscription in self._subscriptions)

    def _remove(self, subscription: Subscription) -> None:
        with contextlib.suppress(ValueError):
            self._subscriptions.remove(subscription)

    def close(self) -> None:
        """Drop every subscriber (the daemon is stopping); streams end cleanly."""
        for subscription in tuple(self._subscriptions):
            subscription.drop("the daemon is stopping")


def split_filter(values: Iterable[str]) -> list[str]:
    """Repeated and comma-separated query values, as one list without blanks."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]
