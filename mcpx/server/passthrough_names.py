# -*- test-case-name: tests.server.test_passthrough -*-
"""
Which configured servers a pass-through offers now, and under what names
(L{PassedThrough}): the servers named that the configuration in force holds, each
one's C{toolPrefix}, and the clashes of a name two of them offer, each reported once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from twisted.logger import Logger

from mcpx.ops.clashes import Clash
from mcpx.server.derived import Derived, objects_with
from mcpx.server.surface import Surface

log = Logger()

#: Past this many clashes reported, the memory of which were reported starts afresh.
REMEMBERED_CLASHES: Final = 4096


def clash_message(kind: str, name: str, first: str, second: str) -> str:
    """What is said, once, of a tool or prompt name two pass-through servers both offer."""
    return Clash(kind, name, first, second).message()


class PassedThrough:
    """
    The servers one pass-through offers under their own names.

    @ivar named: the servers asked for, in order, configured or not.
    @ivar gateway: the gateway surface, whose host holds the configuration in force.
    """

    def __init__(self, gateway: Surface, servers: Sequence[str]) -> None:
        if not servers:
            raise ValueError("pass-through needs at least one server")
        self.gateway = gateway
        self.named: tuple[str, ...] = tuple(dict.fromkeys(servers))
        #: The configuration L{servers} was last worked out for, and the result.
        self._configured_for: object = None
        self._servers: tuple[str, ...] = self.named
        #: Each prefix's renaming of the catalogues of the servers that have it, worked
        #: out once per catalogue listed.
        self._renamed: dict[str, Derived[list[dict[str, Any]]]] = {}
        #: The clashes reported: (kind, name, kept server, left-out server).
        self._clashes: set[tuple[str, str, str, str]] = set()

    @property
    def servers(self) -> tuple[str, ...]:
        """The servers passed through now: those named that the configuration holds."""
        configured = self.gateway.host.servers
        if configured is None:
            return self.named
        if configured is not self._configured_for:
            # Worked out once per configuration: a reload replaces the object.
            self._servers = tuple(name for name in self.named if name in configured)
            self._configured_for = configured
        return self._servers

    def prefix_of(self, server: str) -> str:
        """The C{toolPrefix} of C{server} in the configuration in force (empty: none)."""
        configured = self.gateway.host.servers
        if configured is None or server not in configured:
            return ""
        return configured[server].tool_prefix

    def upstream_name(self, server: str, name: str) -> str:
        """The name C{server} knows its tool by, offered to the host as C{name}."""
        prefix = self.prefix_of(server)
        return name[len(prefix) :] if prefix and name.startswith(prefix) else name

    def offered_tools(self, server: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """C{server}'s tools as offered: under their prefixed names when it has a prefix."""
        prefix = self.prefix_of(server)
        if not prefix:
            return items
        renamed = self._renamed.get(prefix)
        if renamed is None:
            if len(self._renamed) >= REMEMBERED_CLASHES:
                self._renamed.clear()
            renamed = self._renamed[prefix] = Derived(
                lambda tools: [
                    {**tool, "name": prefix + tool["name"]} for tool in objects_with(tools, "name")
                ]
            )
        return renamed.of(server, items)

    @property
    def active(self) -> bool:
        """Whether any server named is configured now (else the gateway serves alone)."""
        return bool(self.servers)

    def owns(self, server: str) -> bool:
        """Whether C{server} is (or, removed, was asked to be) offered under its own names."""
        return server in self.named

    def clashed(self, kind: str, name: str, first: str, second: str) -> None:
        """Report, once per name and pair of servers, that C{second}'s C{name} is left out."""
        key = (kind, name, first, second)
        if key in self._clashes:
            return
        if len(self._clashes) >= REMEMBERED_CLASHES:
            self._clashes.clear()
        self._clashes.add(key)
        message = clash_message(kind, name, first, second)
        log.warn("pass-through: {message}", message=message)
        self.gateway.host.events.publish("warning", second, message=message)
