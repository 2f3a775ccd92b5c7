# -*- test-case-name: tests.server.test_resource_updates -*-
"""
What a host hears of changes upstream: its resource subscriptions, and the
C{list_changed} notifications fanned out to every client that can hear them.

A legacy client that can be pushed to subscribes with C{resources/subscribe} and hears
C{notifications/resources/updated} on its connection, under the name it subscribed by
(the C{mcpx://} URI, or the upstream's own in pass-through).  Each connection holds its
own interest in the pool, which counts them across connections, identities and eras: the
last one released unsubscribes upstream.

Every list a host sees can change with a reload (the gateway's prompts and resources
merge every server's), so each reload that changes a server is announced
(L{Subscriptions.configuration_changed}): to legacy clients on their connection, to
2026-07-28 ones on their listens (L{mcpx.server.listen}).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any
from weakref import WeakSet

from twisted.logger import Logger

from mcpx.ops import uris
from mcpx.ops.watch import unsubscribe
from mcpx.pool.status import ReloadReport
from mcpx.server.conn import HTTP_MODERN, Conn, Context
from mcpx.server.flow import Notices
from mcpx.server.listen import LIST_CHANGES, Listener, Listening
from mcpx.server.offering import Offering
from mcpx.server.surface import Surface, UnknownName
from mcpx.spec.matrix import capability_in
from mcpx.spec.methods import (
    PROMPTS_CHANGED,
    RESOURCE_UPDATED,
    RESOURCES_CHANGED,
    SUBSCRIBE,
    TOOLS_CHANGED,
    UNSUBSCRIBE,
)
from mcpx.wire.errors import RpcError

log = Logger()

#: A watched upstream resource: its server, the identity it is watched under, its URI.
_Key = tuple[str, str, str]


def _uri_of(conn: Conn, params: Mapping[str, Any], method: str) -> str:
    """
    The URI a C{resources/subscribe} or C{resources/unsubscribe} names.

    @raise RpcError: C{-32601} where the method was not declared (the connection has
        nowhere to receive updates); C{-32602} for a URI that is not a string.
    """
    if not conn.can_push:
        raise RpcError.method_not_found(method)
    uri = params.get("uri")
    if not isinstance(uri, str):
        raise RpcError.invalid_params("params.uri must be a string")
    return uri


def _push(conn: Conn, method: str, params: dict[str, Any] | None) -> None:
    """Push to C{conn} if it is still open (a notice may have waited for it to read)."""
    if conn.push is not None and not conn.closed:
        conn.push(method, params)


class Subscriptions:
    """
    The resource subscriptions of one MCP server's connections, and the connections
    it can push to, for what concerns them all.
    """

    def __init__(self, surface: Surface, offering: Offering, listening: Listening) -> None:
        self._surface = surface
        self._offering = offering
        self._listening = listening
        #: Who watches each upstream resource: each connection watching it and how it
        #: named it (C{True}: by the upstream's own URI, in pass-through; C{False}: by
        #: its mcpx:// URI).
        self._watchers: dict[_Key, dict[Conn, set[bool]]] = {}
        #: The open connections mcpx can push to.
        self._pushable: WeakSet[Conn] = WeakSet()
        #: What waits, once each, for a connection that is not reading.
        self._notices = Notices()

    # Connections

    def opened(self, conn: Conn) -> None:
        """
        C{conn} opened; it hears what concerns everyone if it can be pushed to and can
        agree a revision (L{_announce}): a 2026-07-28 request's own connection never
        does, that revision having no C{initialize}, so it is not kept.
        """
        if conn.push is not None and conn.transport != HTTP_MODERN:
            self._pushable.add(conn)

    def closed(self, conn: Conn) -> None:
        """C{conn} closed: its subscriptions are released."""
        if conn.transport != HTTP_MODERN:
            self._pushable.discard(conn)
        if conn.subscriptions:
            for key in tuple(conn.subscriptions):
                self._unwatch(conn, key)

    # resources/subscribe and resources/unsubscribe

    async def subscribe(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        uri, key = await self._key(conn, context, params, SUBSCRIBE)
        if key is None:
            self._surface.warn(None, f"no updates will be delivered for {uri}: no server owns it")
            return {}
        server, _, upstream = key
        bare = not uris.is_mcpx(uri)
        if key in conn.subscriptions:
            self._watchers[key][conn].add(bare)
            return {}
        pool = self._surface.pool
        session = await self._surface.guard(pool.session(server, context.identity))
        declaration = session.declaration
        if declaration is not None and not declaration.declares("resources.subscribe"):
            self._surface.warn(
                server,
                f"no updates will be delivered for {uri}: server {server!r} does not "
                "offer resource subscriptions",
            )
            return {}
        await self._surface.guard(pool.request(server, SUBSCRIBE, {"uri": upstream}, client=key[1]))
        if key in conn.subscriptions:
            # The same connection subscribed twice at once: one interest is enough.
            self._watchers[key][conn].add(bare)
            self._release_interest(key)
            return {}
        self._watchers.setdefault(key, {}).setdefault(conn, set()).add(bare)
        conn.subscriptions.add(key)
        if conn.closed:
            self._unwatch(conn, key)
        return {}

    async def unsubscribe(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        uri, key = await self._key(conn, context, params, UNSUBSCRIBE)
        if key is not None and key in conn.subscriptions:
            named = self._watchers[key][conn]
            named.discard(not uris.is_mcpx(uri))
            if not named:
                self._unwatch(conn, key)
        return {}

    async def _key(
        self, conn: Conn, context: Context, params: dict[str, Any], method: str
    ) -> tuple[str, _Key | None]:
        """The URI C{params} name, and what its subscription is kept under (C{None}: no owner)."""
        uri = _uri_of(conn, params, method)
        try:
            server, upstream = await self._owner(conn, context, uri)
        except UnknownName:
            return uri, None
        return uri, (server, context.identity, upstream)

    async def subscribe_uri(self, conn: Conn, context: Context, uri: str) -> bool:
        """
        Watch C{uri} for C{conn} as C{resources/subscribe} would (for a 2026-07-28
        listen's C{resourceSubscriptions}).

        @return: whether an upstream took the subscription.
        """
        await self.subscribe(conn, context, {"uri": uri})
        try:
            server, upstream = await self._owner(conn, context, uri)
        except UnknownName:
            return False
        return (server, context.identity, upstream) in conn.subscriptions

    async def _owner(self, conn: Conn, context: Context, uri: str) -> tuple[str, str]:
        passthrough = self._offering.serving(conn)
        if passthrough is not None:
            return await passthrough.routes.subscription_owner(context, uri)
        return await self._surface.resource_owner(context, uri)

    def _unwatch(self, conn: Conn, key: _Key) -> None:
        conn.subscriptions.discard(key)
        watchers = self._watchers.get(key)
        if watchers is None:
            return
        if watchers.pop(conn, None) is None:
            return
        if not watchers:
            del self._watchers[key]
        self._release_interest(key)

    def _release_interest(self, key: _Key) -> None:
        """Give back one connection's interest in an upstream resource to the pool."""
        pool = self._surface.host.pool
        if pool is None:
            return
        server, identity, upstream = key
        unsubscribe(pool, server, upstream, identity)

    # What changed upstream

    def watching(self, server: str, uri: str) -> list[Conn]:
        """The connections subscribed to C{uri} of C{server}, through any identity."""
        return [
            conn
            for (owner, _, watched), conns in self._watchers.items()
            if owner == server and watched == uri
            for conn in conns
        ]

    def resource_updated(self, server: str, uri: str) -> int:
        """
        Tell every connection subscribed to C{uri} of C{server} that it changed (for
        whatever hears the upstream's C{notifications/resources/updated}), under the
        name it subscribed by: the C{mcpx://} URI, or the upstream's own in pass-through.

        @return: how many connections were told.
        """
        told = 0
        gateway_name = uris.to_mcpx(server, uri)
        for (owner, _, watched), conns in tuple(self._watchers.items()):
            if owner != server or watched != uri:
                continue
            for conn, named in tuple(conns.items()):
                if conn.push is None or conn.closed:
                    continue
                flow = conn.flow_for(None)
                for bare in sorted(named):
                    shown = uri if bare else gateway_name
                    self._notices.send(
                        flow,
                        (id(conn), RESOURCE_UPDATED, shown),
                        partial(_push, conn, RESOURCE_UPDATED, {"uri": shown}),
                    )
                told += 1
        return told

    def list_changed(self, server: str, method: str) -> int:
        """
        Tell every legacy client mcpx can push to that a list changed (C{method}, one of
        the three C{list_changed} notifications) when that list holds C{server}'s: tools
        where C{server} is passed through to it, prompts and resources everywhere (the
        gateway's merge every server's); the pool has already forgotten the list it cached.

        @return: how many connections were told.
        """
        return self._announce(method, frozenset((server,)))

    def _hears(self, conn: Conn, method: str, servers: frozenset[str]) -> bool:
        """Whether a change of C{servers} changes the list C{method} announces, for C{conn}."""
        if method != TOOLS_CHANGED:
            return True
        passthrough = self._offering.asked(conn)
        return passthrough is not None and not servers.isdisjoint(passthrough.passed.named)

    def _announce(self, method: str, servers: frozenset[str]) -> int:
        told = 0
        kind = method.split("/")[1]
        for conn in tuple(self._pushable):
            push = conn.push
            # Declared at initialize, so only to a connection that agreed a revision.
            revision = conn.revision
            if push is None or conn.closed or revision is None:
                continue
            if not capability_in("server", f"{kind}.listChanged", revision):
                continue
            if not self._hears(conn, method, servers):
                continue
            # It concerns none of the client's requests: a legacy HTTP session sends it
            # on its GET stream.
            self._notices.send(
                conn.flow_for(None), (id(conn), method), partial(_push, conn, method, None)
            )
            told += 1
        return told

    def configuration_changed(self, report: ReloadReport) -> int:
        """
        A reload changed servers (for L{mcpx.ops.reloading.Reloads}): every host that
        can hear of it is told of each of its lists that may have changed, legacy clients
        on their connection, 2026-07-28 ones on their listens.

        @return: how many notifications went out.
        """
        servers = frozenset(
            (*report.removed, *report.added, *report.changed, *report.policy_changed)
        )
        if not servers:
            return 0
        told = 0
        for method in (TOOLS_CHANGED, PROMPTS_CHANGED, RESOURCES_CHANGED):
            told += self._announce(method, servers)

            def hears(listener: Listener, method: str = method) -> bool:
                conn = listener.conn
                return conn is not None and self._hears(conn, method, servers)

            told += self._listening.announce(method, hears)
        return told

    def upstream_notification(
        self, server: str, method: str, params: Mapping[str, Any] | None
    ) -> None:
        """
        What concerns hosts of a notification an upstream sent (for the pool's
        notification sink): resource updates and, in pass-through, tool list changes.
        """
        if method in LIST_CHANGES:
            # 2026-07-28 clients hear of it on the listens that asked.
            self._listening.heard(server, method)
        if method == RESOURCE_UPDATED:
            uri = params.get("uri") if params else None
            if isinstance(uri, str):
                self.resource_updated(server, uri)
        elif method in LIST_CHANGES:
            self.list_changed(server, method)
