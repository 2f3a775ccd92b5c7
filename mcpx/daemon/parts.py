# -*- test-case-name: tests.daemon.test_parts -*-
"""
What the daemon's parts built before the pool hear from the parts built after it.

L{mcpx.daemon.service.make_service} builds the parts bottom-up: the tasks, the question
store and the broker, the relay, the pool (given the relay's handlers), the guarded pool,
the scripts; then the ops' host, one record of them (L{mcpx.ops.host.OpHost}); then the
MCP server over the host (given the upstream notices it hears, L{UpstreamNotices}), and
the HTTP app over both.  Each part is given the parts below it when it is made.  Three
things go the other way, from the pool's upstream sessions up to parts built after the
pool, and all are done in one place, L{connect_upward}: the relay is told whose each
question is by the pool, the sampling guard reads the policies of the pool's servers,
and the MCP server is the source of the roots no single call asks for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Protocol

from attrs import define, field

from mcpx.policy.sampling import SamplingGuard
from mcpx.questions.caller import Asker
from mcpx.questions.relay import Attribution, Relay
from mcpx.settings.server_policy import ServerPolicy
from mcpx.settings.servers import ServersConfig
from mcpx.upstream.handlers import NotificationSink

__all__ = ["UpstreamNotices", "connect_upward"]

#: Told of each notification an upstream server sends: (server, method, params).
NoticeListener = Callable[[str, str, "Mapping[str, Any] | None"], None]


@define
class UpstreamNotices:
    """
    The upstream notifications the parts above the pool hear (resource updates, the
    tool list changes of pass-through servers).  Made before the pool, whose handlers
    tell it; the MCP server, made after, is given its L{listen} and listens.
    """

    _listeners: list[NoticeListener] = field(factory=list)

    def listen(self, listener: NoticeListener) -> None:
        self._listeners.append(listener)

    def sink(self, server: str) -> NotificationSink:
        """What the handlers of one of C{server}'s instances tell."""

        def heard(method: str, params: Mapping[str, Any] | None) -> None:
            for listener in self._listeners:
                listener(server, method, params)

        return heard


class HasServers(Protocol):
    """The pool, as read for a server's policy: its servers change with each reload."""

    @property
    def servers(self) -> ServersConfig: ...


class UpperServer(Protocol):
    """The MCP server, as the parts below it reach it (L{mcpx.server.dispatch.McpServer})."""

    def roots_source(self, server: str, scope_key: str) -> Asker | None: ...


def _policy(pool: HasServers, server: str) -> ServerPolicy:
    """C{server}'s policy in the pool's servers of the moment."""
    return pool.servers.policy(server)


def connect_upward(
    *,
    relay: Relay | None,
    sampling: SamplingGuard | None,
    pool: Attribution | None,
    servers_of: HasServers | None,
    mcp: UpperServer | None,
) -> None:
    """
    The one place a part is given a part built after it, once all are built and
    before the daemon serves anyone.  Each is a cycle: the relay and the sampling guard
    are in the handlers the pool is built with, and the MCP server is built over the
    host that holds the relay.

      - the relay asks the pool whose each question is (L{Relay.attribute_to});
      - the sampling guard reads each server's policy from the pool's servers;
      - the relay asks the MCP server for the roots a C{roots/list} outside any one
        call gets.
    """
    if relay is not None and pool is not None:
        relay.attribute_to(pool)
    if sampling is not None and servers_of is not None:
        sampling.follow(partial(_policy, servers_of))
    if mcp is not None and relay is not None:
        relay.roots_source = mcp.roots_source
