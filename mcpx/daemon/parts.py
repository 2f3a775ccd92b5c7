# -*- test-case-name: tests.daemon.test_parts -*-
"""
The upstream notifications the parts above the pool hear (L{UpstreamNotices}).

L{mcpx.daemon.service.make_service} builds the daemon's parts bottom-up, each given
what it calls when it is made; where a part calls one made after it (the pool's
handlers, the relay and the sampling guard, made over the pool; the relay's roots, the
MCP server's, made over the host), it is given a small callable that reads the later
part when it is called, after the daemon is built.  This is the one interface a later
part registers with: made before the pool, whose handlers tell it, and given to the MCP
server, which listens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attrs import define, field

from mcpx.upstream.handlers import NotificationSink, UpstreamListener

__all__ = ["UpstreamNotices"]


@define
class UpstreamNotices:
    """
    The upstream notifications the parts above the pool hear (resource updates, the
    tool list changes of pass-through servers).  Made before the pool, whose handlers
    tell it; the MCP server, made after, is given its L{listen} and listens.
    """

    _listeners: list[UpstreamListener] = field(factory=list)

    def listen(self, listener: UpstreamListener) -> None:
        self._listeners.append(listener)

    def sink(self, server: str) -> NotificationSink:
        """What the handlers of one of C{server}'s instances tell."""

        def heard(method: str, params: Mapping[str, Any] | None) -> None:
            for listener in self._listeners:
                listener(server, method, params)

        return heard
