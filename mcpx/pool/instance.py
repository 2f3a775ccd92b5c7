# -*- test-case-name: tests.pool.test_pool -*-
"""
The pool's records: a slot (one key, over the lives of its instances) and an
instance (one started or starting upstream server).  The parts of the pool
(L{mcpx.pool.instances}, L{mcpx.pool.attribution}, L{mcpx.pool.interests},
L{mcpx.pool.requests}) share these; each part changes only the fields it owns.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeAlias

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from mcpx.once import Once
from mcpx.pool.budget import Deadline
from mcpx.pool.catalogue import Listings
from mcpx.settings.servers import Server
from mcpx.upstream.session import UpstreamSession

#: An instance's key: (server name, scope key).
Key: TypeAlias = tuple[str, str]

#: The pool's parts log as one component, as the pool did before it was split up.
POOL_LOG = Logger(namespace="mcpx.pool.pool.Pool")


class CallToken(Protocol):
    """
    Whom a request the pool makes is for: the call it runs on behalf of
    (L{mcpx.questions.caller.Caller}).  The pool keeps it with the request, so that a
    question arriving on that connection can be tied to it
    (L{mcpx.pool.attribution.Attribution.owner}), and tells it when the request ended.
    """

    def call_ended(self) -> None:
        """The request ended: the questions it asked that still wait are withdrawn."""


@define(eq=False)
class Slot:
    """
    Everything about one key that outlives its instances: the current instance, and
    the crashes in a row that decide when the next may start.
    """

    key: Key
    config: Server
    instance: Instance | None = None
    failures: int = 0
    crashed_last: bool = False
    last_error: str | None = None
    retry_at: float | None = None
    #: Calls that chose this slot and wait for its instance to be ready.
    claims: int = 0
    #: How many holders want each resource URI's updates (see L{mcpx.pool.interests}).
    interests: dict[str, int] = field(factory=dict)

    def failure_reason(self) -> str:
        reason = self.last_error or "it failed"
        if self.failures > 1:
            what = "crashed" if self.crashed_last else "failed to start"
            reason += f"; it {what} {self.failures} times in a row"
        return reason


@define(eq=False)
class Instance:
    """One started (or starting) upstream server."""

    slot: Slot
    session: UpstreamSession | None = None
    connecting: Deferred[Any] | None = None
    ready: Once[None] = field(factory=Once)
    closed: Once[None] | None = None
    #: Why it can no longer be used, once it cannot; set once.
    ended: str | None = None
    #: Whether it ended on its own (crash, failed start) rather than being closed.
    failed: bool = False
    in_flight: int = 0
    #: Whom each request in flight is for (one entry per request, C{None} for nobody's):
    #: kept in the same step as L{in_flight}, so the two can never disagree.
    callers: list[CallToken | None] = field(factory=list)
    #: The deadlines of the requests in flight, paused while a question is pending.
    deadlines: set[Deadline] = field(factory=set)
    #: The URIs subscribed (or being subscribed) upstream on this instance, each with
    #: the outcome of its C{resources/subscribe}.
    subscriptions: dict[str, Once[None]] = field(factory=dict)
    #: Whether a new instance waits for this one, closing, to be gone (see
    #: L{mcpx.pool.instances.Instances.start}).
    claimed: bool = False
    last_used: float = 0.0
    #: When its session was ready, for telling a stable instance from a crash loop.
    up_since: float | None = None
    idle_timer: IDelayedCall | None = None
    catalogue: Listings = field(factory=Listings)

    @property
    def name(self) -> str:
        return self.slot.key[0]

    @property
    def scope(self) -> str:
        return self.slot.key[1]

    @property
    def usable(self) -> bool:
        return self.session is not None and self.ended is None

    @property
    def late(self) -> int:
        """Requests given up on that its server may still be working on."""
        session = self.session
        return session.rpc.awaiting_late if session is not None else 0
