# -*- test-case-name: tests.server.test_passthrough -*-
"""
Which pass-through, if any, each connection is offered ahead of the gateway.

A connection may name servers of its own (C{mcpx serve --passthrough},
L{mcpx.server.conn.Conn.passthrough}); otherwise it gets C{mcp.passthrough}'s.  Which
of the servers named are passed through is decided at each request against the
configuration in force: one a reload adds is served from then on, one it removes is
gone.
"""

from __future__ import annotations

from collections.abc import Sequence

from mcpx.server.conn import Conn
from mcpx.server.passthrough import PassThrough
from mcpx.server.surface import Surface


class Offering:
    """
    The pass-throughs of one MCP server, one per distinct list of servers named.

    @ivar default: the pass-through of C{mcp.passthrough}, or C{None} when it names
        none: what a connection that names no servers of its own is offered.
    """

    def __init__(self, surface: Surface, default: Sequence[str]) -> None:
        """
        @param default: the servers C{mcp.passthrough} names, in order.
        """
        self._surface = surface
        self.default = PassThrough(surface, default) if default else None
        #: The pass-through of each distinct list of servers a connection named.
        self._named: dict[tuple[str, ...], PassThrough | None] = {}

    def catalogues_changed(self) -> None:
        """A server's tools changed, or the configuration did: see L{PassThrough.tools}."""
        for passthrough in (self.default, *self._named.values()):
            if passthrough is not None:
                passthrough.catalogues_changed()

    def serving(self, conn: Conn) -> PassThrough | None:
        """
        The pass-through serving C{conn} now: the servers it named itself, else the
        daemon's default; C{None} while none of them is configured, when the gateway
        serves alone.
        """
        # Every request that may go upstream asks this, some more than once: the common
        # case (the daemon's default) without a call to asked, and active read straight.
        named = self.default if conn.passthrough is None else self.asked(conn)
        return named if named is not None and named.passed.servers else None

    def asked(self, conn: Conn) -> PassThrough | None:
        """
        The pass-through C{conn} asked for, whether or not its servers are configured
        now (what it is declared and told about).

        Names the daemon does not configure when a list is first seen are warned of once;
        they are passed through as soon as a reload configures them.
        """
        names = conn.passthrough
        if names is None:
            return self.default
        try:
            return self._named[names]
        except KeyError:
            built = self._named[names] = self._build(names)
            return built

    def _build(self, names: tuple[str, ...]) -> PassThrough | None:
        if not names:
            return None
        configured = self._surface.host.servers
        unknown = [name for name in names if configured is not None and name not in configured]
        if unknown:
            self._surface.warn(
                None,
                "pass-through asked for by a connection ignores servers not configured: "
                + ", ".join(repr(name) for name in unknown),
            )
        return PassThrough(self._surface, names)
