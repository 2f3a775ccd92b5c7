# -*- test-case-name: tests.server.test_passthrough -*-
"""
Which configured servers a pass-through offers now, and under what names
(L{PassedThrough}): the servers named that the configuration in force holds, each
one's C{toolPrefix}, and the clashes of a name two of them offer, each reported once.

The gateway's names are reserved: a pass-through server's tool named like mcpx's own
(any C{mcpx_...}, present tools and future ones, in any case, with C{-} for C{_} and in
any Unicode compatibility form: C{MCPX_CALL}, C{mcpx-call}, L{reserved_tool}), its prompt under the
name the gateway gives another configured server's (C{<server>_<prompt>},
L{reserved_prompt}) and its resource or template under an C{mcpx://} URI
(L{reserved_uri}) are never offered, and a request of such a name goes to the gateway
whatever the servers list: a host's C{mcpx_call} meant for one server, its credentials in
the arguments, never reaches a server that lists a tool of that name.  Each such name is
reported once, as a clash is (L{Clash.of_gateway}).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any, Final

from twisted.logger import Logger

from mcpx.ops import uris
from mcpx.ops.clashes import Clash
from mcpx.server.derived import Derived, objects_with
from mcpx.server.gateway_tools import RESERVED_PREFIX
from mcpx.server.surface import Surface, UnknownName

log = Logger()

#: Past this many clashes reported, the memory of which were reported starts afresh.
REMEMBERED_CLASHES: Final = 4096


def folded_name(name: str) -> str:
    """
    C{name} as it is compared with the gateway's reserved prefix: NFKC-normalised
    (fullwidth and other compatibility forms become their plain letters), case-folded,
    and with C{-} read as C{_}, so that C{MCPX_CALL}, C{mcpx-call} and C{mcpx_call} in
    fullwidth letters all read as C{mcpx_call}.
    """
    if name.isascii():
        # Every call's name: NFKC leaves ASCII as it is, and case-folds it as lower does.
        return name.lower().replace("-", "_")
    return unicodedata.normalize("NFKC", name).casefold().replace("-", "_")


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
        #: The configuration L{prefix_of} was last asked under, and its servers' prefixes.
        self._prefixed_for: object = None
        self._prefixes: dict[str, str] = {}
        #: Each prefix's renaming of the catalogues of the servers that have it, worked
        #: out once per catalogue listed.
        self._renamed: dict[str, Derived[list[dict[str, Any]]]] = {}
        #: The clashes reported.
        self._clashes: set[Clash] = set()

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
        if configured is None:
            return ""
        if configured is not self._prefixed_for:
            # Asked several times a call: kept per configuration (a reload replaces it).
            self._prefixes = {}
            self._prefixed_for = configured
        prefix = self._prefixes.get(server)
        if prefix is None:
            if server not in configured:
                return ""
            # As many as the configuration has servers.
            prefix = self._prefixes[server] = configured[server].tool_prefix
        return prefix

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

    def reserved_tool(self, name: str) -> bool:
        """
        Whether a tool offered as C{name} would take a gateway tool's name, or one a host
        or a person could take for it (L{folded_name}: C{MCPX_CALL}, C{mcpx-call}).
        """
        return folded_name(name).startswith(RESERVED_PREFIX) or self.gateway.has_tool(name)

    def reserved_prompt(self, name: str) -> bool:
        """
        Whether a prompt offered as C{name} would take the name the gateway gives a
        prompt of a configured server not passed through (C{<server>_<prompt>}).
        """
        try:
            server, _ = self.gateway.prompt_owner(name)
        except UnknownName:
            return False
        return server not in self.servers

    @staticmethod
    def reserved_uri(uri: str) -> bool:
        """Whether a resource's URI (or a template) is in the gateway's C{mcpx://} scheme."""
        return uris.is_mcpx(uri)

    def clashed(self, kind: str, name: str, first: str, second: str) -> None:
        """Report, once per name and pair of servers, that C{second}'s C{name} is left out."""
        self._report(Clash(kind, name, first, second))

    def reserved(self, kind: str, name: str, server: str) -> Clash:
        """Report, once per name and server, that C{server}'s C{name} is the gateway's."""
        clash = Clash.of_gateway(kind, name, server)
        self._report(clash)
        return clash

    def _report(self, clash: Clash) -> None:
        if clash in self._clashes:
            return
        if len(self._clashes) >= REMEMBERED_CLASHES:
            self._clashes.clear()
        self._clashes.add(clash)
        message = clash.message()
        log.warn("pass-through: {message}", message=message)
        self.gateway.host.events.publish("warning", clash.left_out, message=message)
