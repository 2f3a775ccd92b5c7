# -*- test-case-name: tests.server.test_passthrough -*-
"""
What pass-through remembers of its servers' catalogues.

A server that is down or backing off keeps the names it listed last, in the lists as in
routing, so a host is not told they vanished and came back; a server a reload removed
keeps none.  Who listed each tool name is remembered beyond that (L{Catalogues.lister_of}),
so a call of a tool whose server cannot be listed now, or no longer lists it, still
goes to that server, or is refused naming it.

No request waits long on a server it does not need (issue 43, item 9): a catalogue is
waited for at most C{pool.listWait} (L{mcpx.ops.listing.within}), and not at all for a
server that is failing (its last start or instance failed and none is ready since);
then the server stands on what it listed last, or is left out, and its start goes on
in the background, so a later request finds its catalogue cached.  Routing reads what
is known first (L{Catalogues.known}) and fetches only when that does not say.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger

from mcpx.ops.errors import OpError, error_from
from mcpx.ops.listing import server_wait, within
from mcpx.pool.errors import PoolError, UnknownServer
from mcpx.pool.instance import scope_for
from mcpx.pool.status import ServerState
from mcpx.server.conn import Context
from mcpx.server.surface import Surface
from mcpx.spec.matrix import capability_in
from mcpx.spec.revision import Revision
from mcpx.upstream.handlers import declaring, questions_declared
from mcpx.upstream.records import UpstreamError
from mcpx.wire.errors import RpcError

log = Logger()

T = TypeVar("T")

#: Past this many tool names remembered, the memory of who listed them starts afresh.
_REMEMBERED_TOOLS: Final = 65536


def upstream_client(context: Context) -> str:
    """
    The client identity a pass-through request reaches the pool under: the caller's,
    marked with the questions its host declared (L{declaring}), so the instance it
    reaches declares no more upstream and lists what the server lists to such a host
    (a revision's missing capability counts as undeclared, as for L{mcpx.call.Call}).
    """
    capabilities = context.capabilities
    revision = context.revision
    last = _LAST_MARK
    # A call asks twice with the same request's capabilities (its route, then the call),
    # and a 2026-07-28 host restates equal ones in each request's own new object.
    if last[1] is revision and (last[0] is capabilities or last[0] == capabilities):
        kept: str = last[2]
        return context.identity + kept
    declared = questions_declared(capabilities)
    mark = _MARKS.get((declared, revision))
    if mark is None:
        questions = frozenset(
            question
            for question in declared
            if capability_in("client", question.partition(".")[0], revision)
        )
        # What declaring appends to any identity: worked out once for each set of
        # questions (some of four) and revision.
        mark = _MARKS[declared, revision] = declaring("", questions)
    last[:] = (capabilities, revision, mark)
    return context.identity + mark


#: The mark L{upstream_client} puts on an identity, by the questions its host declared
#: and its revision (a few dozen at most).
_MARKS: dict[tuple[frozenset[str], Revision], str] = {}
#: The capabilities and revision L{upstream_client} was last asked of and their mark: the
#: capabilities of a request (or a legacy session's) are not changed once received, and
#: equal capabilities declare the same questions.
_LAST_MARK: list[Any] = [None, None, ""]


class Catalogues:
    """The catalogues of one pass-through's servers, as listed last."""

    def __init__(self, gateway: Surface) -> None:
        self._gateway = gateway
        #: Each server's catalogue of each kind as it was last listed, by kind then
        #: server: what a server that cannot be listed now is taken to offer.
        self._last: dict[str, dict[str, list[dict[str, Any]]]] = {}
        #: The server that last listed each tool name.
        self._listed_by: dict[str, str] = {}
        #: The servers a request stopped waiting for (a catalogue, a session) whose
        #: listing has not ended yet: the next requests stand on what is known at once.
        self._overdue: set[str] = set()

    async def each(
        self, context: Context, what: str, kind: str, servers: Sequence[str]
    ) -> list[tuple[str, list[dict[str, Any]]]]:
        """
        The C{kind} catalogue of each of C{servers} (the gateway's C{what} when it
        warns), a server that cannot be listed now standing on the one it listed last.
        """
        last = self._last.setdefault(kind, {})

        async def listing(server: str) -> list[dict[str, Any]]:
            try:
                items: list[dict[str, Any]] = await self._bounded(kind, server, context, failing)
            except UnknownServer:
                # No longer configured (a reload removed it): it has no names left.
                last.pop(server, None)
                raise
            except (PoolError, UpstreamError, RpcError, OpError):
                if server not in last:
                    raise
                # Down or backing off: its names are still its own, in the lists as in
                # routing, so a host is not told they vanished and came back.
                return last[server]
            last[server] = items
            return items

        pool = self._gateway.pool
        client = upstream_client(context)

        def taken(server: str) -> list[dict[str, Any]] | None:
            # What the pool has cached is what its listing would give at once: taken
            # without the listing's coroutines and its wait's timer.
            cached = pool.cached_catalogue(server, kind, client=client)
            if cached is None:
                return None
            self._overdue.discard(server)
            # Not copied: the cache's list is replaced, never changed, and nothing that
            # takes a catalogue from here changes it (L{cached} keeps it as it is, too).
            last[server] = cached
            return cached

        found: list[tuple[str, list[dict[str, Any]]]] = []
        for server in servers:
            items = taken(server)
            if items is None:
                break
            found.append((server, items))
        else:
            # Every one cached: nothing to wait for, nothing that may fail, and so no
            # need of the failing servers (the pool's status of every server, the most
            # of a cached pass-through listing's cost when it was worked out first).
            return found
        failing = self.failing(context)
        before = dict(found)

        def fetch(server: str) -> Deferred[list[dict[str, Any]]]:
            items = before.get(server)
            if items is None:
                items = taken(server)
            if items is None:
                return Deferred.fromCoroutine(listing(server))
            return succeed(items)

        return await self._gateway.each_server(what, fetch, names=servers)

    async def of(
        self,
        kind: str,
        server: str,
        context: Context,
        unlisted: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """
        One server's catalogue from the pool's cache; when it cannot be listed now, the
        last one it listed (its names stay its own while it is down), else empty.

        @param unlisted: given, receives the server's name and why it could not be
            listed, when nothing it listed before is remembered.
        """
        return await self.fetching(kind, server, context, unlisted, self.failing(context))

    def fetching(
        self,
        kind: str,
        server: str,
        context: Context,
        unlisted: dict[str, str] | None,
        failing: frozenset[str],
    ) -> Deferred[list[dict[str, Any]]]:
        """
        L{of}, begun now: several servers' catalogues are fetched at once, so a request
        waits for the slowest of them, not their sum.

        @param failing: the servers not waited for at all (L{failing}).
        """
        return Deferred.fromCoroutine(self._of(kind, server, context, unlisted, failing))

    async def _of(
        self,
        kind: str,
        server: str,
        context: Context,
        unlisted: dict[str, str] | None,
        failing: frozenset[str],
    ) -> list[dict[str, Any]]:
        last = self._last.setdefault(kind, {})
        try:
            items: list[dict[str, Any]] = await self._bounded(kind, server, context, failing)
        except UnknownServer:
            last.pop(server, None)
            return []
        except (PoolError, UpstreamError, RpcError, OpError) as e:
            remembered = last.get(server)
            if remembered is not None:
                return remembered
            if isinstance(e, PoolError | UpstreamError):
                why = error_from(e).message
            else:
                why = e.message if isinstance(e, OpError) else str(e)
            log.debug(
                "pass-through routing: the {kind} of {server} cannot be listed: {why}",
                kind=kind,
                server=server,
                why=why,
            )
            if unlisted is not None:
                unlisted[server] = why
            return []
        last[server] = items
        return items

    def failing(self, context: Context | None = None) -> frozenset[str]:
        """
        The servers not waited for: misconfigured, or whose last start or instance
        failed with none ready since (a crash loop, a start that failed and is tried
        again): their catalogues are what they listed last, while they start again in
        the background.  For C{context}'s host, judged by the instance its requests
        use (L{mcpx.pool.status.ServerStatus.failing_scopes}): a host whose own instance
        of a server starts afresh (it declares other questions, L{declaring}) waits for
        it as for any start, though the server's other instances crashed.
        """
        client = None if context is None else upstream_client(context)
        servers = self._gateway.host.servers
        configured = servers.servers if servers is not None else {}
        found: set[str] = set()
        for status in self._gateway.pool.status():
            if status.state is ServerState.MISCONFIGURED:
                found.add(status.name)
                continue
            if status.last_error is None or status.state is ServerState.READY:
                continue
            config = configured.get(status.name)
            if (
                client is None
                or config is None
                or scope_for(config, client) in status.failing_scopes
            ):
                found.add(status.name)
        return frozenset(found)

    async def _bounded(
        self, kind: str, server: str, context: Context, failing: frozenset[str]
    ) -> list[dict[str, Any]]:
        """
        The pool's C{kind} catalogue of C{server}, waited for at most C{pool.listWait}
        (not at all for a server L{failing}, nor while a listing of it that was given
        up on still goes on); then what the pool or this pass-through
        has cached (L{known}), else L{mcpx.ops.listing.still_starting}.  The listing goes
        on after the wait.
        """
        fetch = getattr(self._gateway.pool, kind)
        return await self.waited(
            server,
            failing,
            Deferred.fromCoroutine(fetch(server, client=upstream_client(context))),
            lambda: self.known(kind, server, context),
        )

    async def waited(
        self,
        server: str,
        failing: frozenset[str],
        listing: Deferred[T],
        known: Callable[[], T | None],
    ) -> T:
        """
        C{listing}'s result (a catalogue of C{server}, its session) if it comes
        within C{pool.listWait} (longer for a server whose era is still to be probed:
        L{mcpx.ops.listing.server_wait}), or at once for a server
        L{failing} or while an earlier such wait that was given up on still goes on;
        else what C{known} gives then, else L{mcpx.ops.listing.still_starting}.
        C{listing} goes on after the wait.
        """
        # Per server: a server slow to list is as slow to give its session.
        key = server
        waiting = server in failing or key in self._overdue
        gateway = self._gateway
        wait = 0.0 if waiting else server_wait(gateway.host.settings, gateway.pool, server)
        ended = False

        def end(result: object) -> object:
            nonlocal ended
            ended = True
            self._overdue.discard(key)
            return result

        listing.addBoth(end)
        try:
            found: T = await within(self._gateway.host.clock, wait, server, listing, known)
        finally:
            if not ended:
                # Given up on: the next request does not wait for it either, until it
                # has listed (or failed to).
                self._overdue.add(key)
        return found

    def known(self, kind: str, server: str, context: Context) -> list[dict[str, Any]] | None:
        """
        One server's catalogue as known now, without waiting: the pool's cache
        (L{cached}), else what it listed last here, else C{None}.
        """
        items = self.cached(kind, server, context)
        if items is None:
            items = self._last.get(kind, {}).get(server)
        return items

    def current(
        self, kind: str, server: str, context: Context, failing: frozenset[str]
    ) -> list[dict[str, Any]] | None:
        """
        One server's catalogue as it stands now, for routing without waiting: the
        pool's cache, or what it listed last when it cannot be listed now (L{failing},
        or a listing of it was given up on and goes on); else C{None}, to be fetched.
        A server that can be listed and has no cache (its tools changed, it was
        restarted) is not routed by what it listed before.
        """
        items = self.cached(kind, server, context)
        if items is None and (server in failing or server in self._overdue):
            items = self._last.get(kind, {}).get(server)
        return items

    def cached(self, kind: str, server: str, context: Context) -> list[dict[str, Any]] | None:
        """
        One server's catalogue as L{of} would give it, when the pool has it cached now
        (L{mcpx.pool.interface.PoolInterface.cached_catalogue}); else C{None}, and L{of} is
        what fetches it, or stands on what was listed last.
        """
        items = self._gateway.pool.cached_catalogue(server, kind, client=upstream_client(context))
        if items is not None:
            self._last.setdefault(kind, {})[server] = items
        return items

    def listed_tools(self, owners: Mapping[str, str]) -> None:
        """Remember the server that listed each tool name of C{owners}."""
        if len(self._listed_by) > _REMEMBERED_TOOLS:
            self._listed_by.clear()
        self._listed_by.update(owners)

    def routed(self, name: str, server: str) -> None:
        """A call of tool C{name} was routed to C{server}, which lists it."""
        self._listed_by[name] = server

    def lister_of(self, name: str) -> str | None:
        """The server that last listed tool C{name}, if any did."""
        return self._listed_by.get(name)
