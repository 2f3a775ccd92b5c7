# -*- test-case-name: tests.server.test_asking -*-
"""
Whose roots a server gets when it asks for them outside any one call.

Roots stay with their host.  A C{roots/list} that belongs to a call is put to that
call's host (L{mcpx.questions.relay.Relay.ask}); one that belongs to no call goes to a
host only when the instance asking is that host's own (a C{client}-scoped server): a
C{shared} instance serves every host, and is answered with the configured roots
(C{proto.roots}), never with those of whichever host declared roots last.

A legacy connection that declared roots is remembered as a roots client of each
server it uses (its pass-through servers once it is initialized, the server each
C{mcpx_call} names), most recently active last.  A C{roots/list} outside any call
from a C{client}-scoped instance goes to the latest one of that instance's client
still open (L{Roots.source}).  A client's C{notifications/roots/list_changed} is
passed on to its own instances of the C{client}-scoped servers it uses, and to no
C{shared} instance: what a shared instance is answered outside a call (the configured
roots) did not change, and another host's change is none of its business.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mcpx.ops.host import OpHost
from mcpx.pool.instance import own_scope
from mcpx.server.conn import Conn
from mcpx.server.resumable import ConnAsker
from mcpx.settings.servers import Scope
from mcpx.spec.methods import ROOTS_CHANGED
from mcpx.upstream.handlers import declared_in


class Roots:
    """The legacy connections that declared roots, by each server they use."""

    def __init__(self, host: OpHost) -> None:
        self._host = host
        #: Most recently active last.
        self._users: dict[str, list[Conn]] = {}

    def uses(self, conn: Conn, servers: Sequence[str]) -> None:
        """C{conn} uses C{servers}: if it declared roots, it is their latest roots client."""
        if conn.closed or conn.ask is None:
            return
        if not isinstance(conn.client_capabilities.get("roots"), Mapping):
            return
        for server in servers:
            users = self._users.setdefault(server, [])
            if users and users[-1] is conn:
                continue
            if conn in users:
                users.remove(conn)
            users.append(conn)

    def closed(self, conn: Conn) -> None:
        """C{conn} closed: it is nobody's roots client any more."""
        if conn.ask is None:
            # Never one (L{uses}): a 2026-07-28 request's connection, or any that cannot ask.
            return
        for server in tuple(self._users):
            users = self._users[server]
            if conn in users:
                users.remove(conn)
                if not users:
                    del self._users[server]

    def source(self, server: str, scope_key: str) -> ConnAsker | None:
        """
        The client a C{roots/list} from C{server}'s instance for C{scope_key} is put to
        when no call's client can answer it: for a C{client}-scoped server, the most
        recently active open connection of that instance's own client that declared
        roots and uses it; for a C{shared} one, nobody (the configured roots answer).
        """
        if not self._own_instances(server):
            return None
        for conn in reversed(self._users.get(server, ())):
            if conn.closed or conn.identity != own_scope(declared_in(scope_key)[0]):
                continue
            return ConnAsker(conn, None)
        return None

    def _own_instances(self, server: str) -> bool:
        """Whether C{server} gives each client an instance of its own (C{client} scope)."""
        configured = self._host.servers
        config = configured.servers.get(server) if configured is not None else None
        return config is not None and config.scope is Scope.CLIENT

    def changed(self, conn: Conn) -> None:
        """
        A client's roots changed: its own running instance of each C{client}-scoped
        server it uses hears it; no C{shared} instance does (see the module docstring).
        """
        pool = self._host.pool
        if pool is None:
            return
        servers = [name for name, users in self._users.items() if conn in users]
        self.uses(conn, servers)
        for server in servers:
            if self._own_instances(server):
                pool.notify(server, conn.identity, ROOTS_CHANGED)
