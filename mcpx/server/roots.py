# -*- test-case-name: tests.server.test_asking -*-
"""
Whose roots a server gets when it asks for them outside any one call.

A legacy connection that declared roots is remembered as a roots client of each
server it uses (its pass-through servers once it is initialized, the server each
C{mcpx_call} names), most recently active last.  A C{roots/list} that belongs to no
call goes to the latest one still open (L{Roots.source}); a client's
C{notifications/roots/list_changed} is passed on to every server it uses.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping, Sequence

from mcpx.ops.host import OpHost
from mcpx.server.conn import Conn
from mcpx.server.resumable import ConnAsker
from mcpx.settings.servers import Scope

#: What a client sends when its roots changed; passed on to the servers it uses.
ROOTS_CHANGED = "notifications/roots/list_changed"


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
        for server in tuple(self._users):
            users = self._users[server]
            if conn in users:
                users.remove(conn)
                if not users:
                    del self._users[server]

    def source(self, server: str, scope_key: str) -> ConnAsker | None:
        """
        The client a C{roots/list} from C{server}'s instance for C{scope_key} is put to
        when it belongs to no one call: the most recently active open connection that
        declared roots and uses that server (for a C{client}-scoped server, one of that
        instance's own client).
        """
        users = self._users.get(server)
        if not users:
            return None
        configured = self._host.servers
        config = configured.servers.get(server) if configured is not None else None
        own_only = config is not None and config.scope is Scope.CLIENT
        for conn in reversed(users):
            if conn.closed or (own_only and conn.identity != scope_key):
                continue
            return ConnAsker(conn, contextvars.Context())
        return None

    def changed(self, conn: Conn) -> None:
        """A client's roots changed: every server it uses that is running hears it."""
        pool = self._host.pool
        notify = getattr(pool, "notify", None)
        if notify is None:
            return
        servers = [name for name, users in self._users.items() if conn in users]
        self.uses(conn, servers)
        for server in servers:
            notify(server, conn.identity, ROOTS_CHANGED)
