# -*- test-case-name: tests.server.test_passthrough -*-
"""
What pass-through remembers of its servers' catalogues.

A server that is down or backing off keeps the names it listed last, in the lists as in
routing, so a host is not told they vanished and came back; a server a reload removed
keeps none.  Who listed each tool name is remembered beyond that (L{Catalogues.lister_of}),
so a call of a tool whose server cannot be listed now, or no longer lists it, still
goes to that server, or is refused naming it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from mcpx.ops.errors import error_from
from mcpx.pool.errors import PoolError, UnknownServer
from mcpx.server.conn import Context
from mcpx.server.surface import Surface
from mcpx.upstream.session import UpstreamError
from mcpx.wire.errors import RpcError

log = Logger()

#: Past this many tool names remembered, the memory of who listed them starts afresh.
_REMEMBERED_TOOLS: Final = 65536


class Catalogues:
    """The catalogues of one pass-through's servers, as listed last."""

    def __init__(self, gateway: Surface) -> None:
        self._gateway = gateway
        #: Each server's catalogue of each kind as it was last listed, by kind then
        #: server: what a server that cannot be listed now is taken to offer.
        self._last: dict[str, dict[str, list[dict[str, Any]]]] = {}
        #: The server that last listed each tool name.
        self._listed_by: dict[str, str] = {}

    async def each(
        self, context: Context, what: str, kind: str, servers: Sequence[str]
    ) -> list[tuple[str, list[dict[str, Any]]]]:
        """
        The C{kind} catalogue of each of C{servers} (the gateway's C{what} when it
        warns), a server that cannot be listed now standing on the one it listed last.
        """
        fetch = getattr(self._gateway.pool, kind)
        last = self._last.setdefault(kind, {})

        async def listing(server: str) -> list[dict[str, Any]]:
            try:
                items: list[dict[str, Any]] = await fetch(server, client=context.identity)
            except UnknownServer:
                # No longer configured (a reload removed it): it has no names left.
                last.pop(server, None)
                raise
            except (PoolError, UpstreamError, RpcError):
                if server not in last:
                    raise
                # Down or backing off: its names are still its own, in the lists as in
                # routing, so a host is not told they vanished and came back.
                return last[server]
            last[server] = items
            return items

        return await self._gateway.each_server(
            what, lambda name: Deferred.fromCoroutine(listing(name)), names=servers
        )

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
        last = self._last.setdefault(kind, {})
        try:
            items: list[dict[str, Any]] = await getattr(self._gateway.pool, kind)(
                server, client=context.identity
            )
        except UnknownServer:
            last.pop(server, None)
            return []
        except (PoolError, UpstreamError, RpcError) as e:
            remembered = last.get(server)
            if remembered is not None:
                return remembered
            why = error_from(e).message if isinstance(e, PoolError | UpstreamError) else str(e)
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

    def cached(self, kind: str, server: str, context: Context) -> list[dict[str, Any]] | None:
        """
        One server's catalogue as L{of} would give it, when the pool has it cached now
        (L{mcpx.pool.interface.PoolInterface.cached_catalogue}); else C{None}, and L{of} is
        what fetches it, or stands on what was listed last.
        """
        items = self._gateway.pool.cached_catalogue(server, kind, client=context.identity)
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
