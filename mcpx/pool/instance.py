# -*- test-case-name: tests.pool.test_pool -*-
"""
The pool's records: a slot (one key, over the lives of its instances), an instance
(one started or starting upstream server), and the registry of every slot
(L{Slots}).  The parts of the pool (L{mcpx.pool.instances}, L{mcpx.pool.attribution},
L{mcpx.pool.interests}, L{mcpx.pool.requests}) share these; each part changes only
the fields it owns.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, TypeAlias

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from mcpx.auth.caller import OWNER, per_person, principal_of
from mcpx.call import Call
from mcpx.once import Once
from mcpx.pool.budget import Deadline
from mcpx.pool.catalogue import Listings
from mcpx.pool.errors import UnknownServer
from mcpx.settings.servers import Scope, Server, ServersConfig
from mcpx.upstream.handlers import mark_of
from mcpx.upstream.session import UpstreamSession

#: An instance's key: (server name, scope key).
Key: TypeAlias = tuple[str, str]

#: The pool's parts log as one component, as the pool did before it was split up.
POOL_LOG = Logger(namespace="mcpx.pool.pool.Pool")

#: What the scope key of a dual-era server's legacy-era instance begins with: the
#: instance that meets the calls of handshake-era hosts in their own era (era
#: mirroring, spec/era-mirroring.md), beside the one under the plain scope key.
LEGACY_ERA_PREFIX = "legacy|"


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
    #: The call each request in flight is made for (one entry per request, C{None} for
    #: nobody's), which the pool tells when the request ended
    #: (L{mcpx.call.Call.call_ended}): kept in the same step as L{in_flight}, so the two
    #: can never disagree.
    calls: list[Call | None] = field(factory=list)
    #: Whose each request in flight is (the subject identity it was made for, C{None}
    #: for the owner's and nobody's), in the same step: what the server says meanwhile
    #: (its log, its progress) is that principal's when every request is the same one's.
    principals: list[str | None] = field(factory=list)
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

    def late_calls(self) -> list[Call | None]:
        """Whom each of the L{late} requests was made for (C{None}: nobody)."""
        session = self.session
        return session.rpc.late_for_whom() if session is not None else []


def scope_for(config: Server, client: str) -> str:
    """
    The scope key of C{client}'s calls to a server configured C{config}: the client's
    identity for a C{client}-scoped server; for a shared one, the principal of the
    client (L{principal_of}) when each principal signs in to it for itself
    (L{per_person}), so one principal's calls never travel on another's sign-in; else
    C{""}, one instance for every caller.  A client marked with the questions its host
    declares (L{mcpx.upstream.handlers.declaring}, in pass-through) keeps the mark on its
    key: an instance of its own for that set, declaring no more upstream.
    """
    mark = mark_of(client)
    if config.scope is Scope.CLIENT:
        return client
    if per_person(config):
        return principal_of(client) + mark
    return mark


def principal_of_scope(scope_key: str) -> str:
    """Whose sign-in an instance under C{scope_key} is reached with (L{scope_for})."""
    scope_key = own_scope(scope_key)
    return principal_of(scope_key) if scope_key else OWNER


def mirrored_scope(scope_key: str) -> str:
    """The scope key of the legacy-era instance beside C{scope_key}'s (era mirroring)."""
    return LEGACY_ERA_PREFIX + scope_key


def is_mirrored(scope_key: str) -> bool:
    """Whether C{scope_key} is a legacy-era instance's of a dual-era server."""
    return scope_key.startswith(LEGACY_ERA_PREFIX)


def own_scope(scope_key: str) -> str:
    """C{scope_key} without the legacy-era mark: the scope it is mirrored from."""
    return scope_key.removeprefix(LEGACY_ERA_PREFIX)


class Slots:
    """
    Every slot of the pool, by server and scope key.

    @ivar servers: the configuration the slots are made from (replaced by a reload).
    """

    def __init__(self, servers: ServersConfig) -> None:
        self.servers = servers
        self._by_server: dict[str, dict[str, Slot]] = {}
        #: The server, client and instance L{running} found last.
        self._last_running: tuple[str, str, Instance | None] = ("", "", None)

    def find(self, server: str, scope_key: str) -> Instance | None:
        """The instance of (C{server}, C{scope_key}), if it has one; none is started."""
        slot = self._by_server.get(server, {}).get(scope_key)
        return slot.instance if slot is not None else None

    def running(self, server: str, client: str) -> Instance | None:
        """
        The usable instance serving C{client}'s calls to C{server} now (on the slot
        L{slot} gives), if one runs; none is started, an unknown server has none.

        Asked three times a pass-through call (its route, its policy, the pool), with
        equal names: the last one found is kept (one), and is the answer while it is
        usable.  A usable instance is its slot's, and its slot is kept while it is
        (L{forget}); a reload that changes or removes its server's configuration, a
        restart, a crash or a reaping end it first.
        """
        last = self._last_running
        if last[0] == server and last[1] == client:
            instance = last[2]
            if instance is not None and instance.session is not None and instance.ended is None:
                return instance
        # One look-up of the server's configuration, none of L{slot}'s refusal.
        config = self.servers.servers.get(server)
        if config is None:
            return None
        instance = self.find(server, scope_for(config, client))
        # Instance.usable, without the property's call (as above).
        if instance is None or instance.session is None or instance.ended is not None:
            return None
        self._last_running = (server, client, instance)
        return instance

    def existing(self, key: Key) -> Slot | None:
        """The slot of C{key}, if there is one; none is made."""
        return self._by_server.get(key[0], {}).get(key[1])

    def of(self, server: str) -> Mapping[str, Slot]:
        """The slots of C{server}, by scope key."""
        return self._by_server.get(server, {})

    def every(self) -> Iterator[Slot]:
        """Every slot of every server."""
        for slots in self._by_server.values():
            yield from slots.values()

    def add(self, key: Key, config: Server) -> Slot:
        """A new slot under C{key}, which must not have one."""
        slot = self._by_server.setdefault(key[0], {})[key[1]] = Slot(key, config)
        return slot

    def pop(self, server: str, principal: str | None = None) -> dict[str, Slot]:
        """
        Forget every slot of C{server} (to close them), or only those reached with
        C{principal}'s sign-in when given, and return them.
        """
        if principal is None:
            return self._by_server.pop(server, {})
        by_scope = self._by_server.get(server, {})
        taken = {
            scope: slot
            for scope, slot in by_scope.items()
            if principal_of_scope(scope) == principal
        }
        for scope in taken:
            del by_scope[scope]
        if not by_scope:
            self._by_server.pop(server, None)
        return taken

    def slot(self, server: str, client: str, *, legacy: bool = False) -> Slot:
        """
        The slot a call from C{client} to C{server} uses, made if need be.

        @param legacy: the slot of the legacy-era instance beside it (era mirroring).
        """
        config = self.servers.servers.get(server)
        if config is None:
            raise UnknownServer(server, self.servers)
        scope = scope_for(config, client)
        if legacy:
            scope = mirrored_scope(scope)
        by_scope = self._by_server.get(server)
        if by_scope is None:
            by_scope = self._by_server[server] = {}
        slot = by_scope.get(scope)
        if slot is None:
            slot = by_scope[scope] = Slot((server, scope), config)
        return slot

    def forget(self, slot: Slot) -> None:
        """Drop a slot with nothing worth keeping, so callers that come and go cost nothing."""
        if slot.instance is not None or slot.failures or slot.interests:
            return
        name, scope = slot.key
        by_scope = self._by_server.get(name)
        if by_scope is not None and by_scope.get(scope) is slot:
            del by_scope[scope]
            if not by_scope:
                del self._by_server[name]

    def clear(self) -> None:
        """Forget every slot (the pool stops)."""
        self._by_server.clear()
