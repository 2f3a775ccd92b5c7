# -*- test-case-name: tests.server.test_passthrough -*-
"""
The names two pass-through servers both offer, as the last listing found them, for
C{GET /v1/servers} (and C{mcpx servers}) to show beside the server left out.

The pass-through surface (L{mcpx.server.passthrough}) keeps the first server's tool or
prompt of a name and leaves the other's out; each time it merges a list it records here what
it left out, replacing what it recorded for that list before, so what is shown is what hosts
are offered now.  Nothing is known before a host has listed: that is when a name is shadowed.

The gateway's own names are reserved (L{Clash.reserved}): a pass-through server's tool
named like mcpx's tools (C{mcpx_call}, any C{mcpx_...}), its prompt named as the gateway
names another server's (C{<server>_<prompt>}), and its resource or template under an
C{mcpx://} URI are left out for the gateway's, and recorded here the same way, with
L{GATEWAY} as the one whose name is offered.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from typing import Final

from attrs import frozen

from mcpx.ops import uris

#: What a clash over a reserved name says kept it: the gateway itself.
GATEWAY: Final = "mcpx"


@frozen
class Clash:
    """
    A name two pass-through servers offer, or a pass-through server offers that is the
    gateway's own.

    @ivar kind: C{"tool"} or C{"prompt"}; for a reserved name also C{"resource"} or
        C{"template"}.
    @ivar kept: the server whose C{name} is offered (passed through first), or
        L{GATEWAY} for a reserved name.
    @ivar left_out: the server whose C{name} is not.
    @ivar reserved: the name is the gateway's own: hosts reach the gateway by it.
    """

    kind: str
    name: str
    kept: str
    left_out: str
    reserved: bool = False

    @classmethod
    def of_gateway(cls, kind: str, name: str, left_out: str) -> Clash:
        """C{left_out}'s C{kind} C{name}, left out since the gateway's name is reserved."""
        return cls(kind, name, GATEWAY, left_out, reserved=True)

    def message(self) -> str:
        """What is said of it: which is offered, and how to offer both."""
        if self.reserved:
            return self._reserved_message()
        remedy = (
            f'give {self.left_out!r} a "toolPrefix" in its server entry to offer both'
            if self.kind == "tool"
            else f"pass only one of them through to reach {self.left_out!r}'s"
        )
        return (
            f"{self.kind} {self.name!r} is offered by both pass-through servers "
            f"{self.kept!r} and {self.left_out!r}; only {self.kept!r}'s is offered ({remedy})"
        )

    def _reserved_message(self) -> str:
        what = f"{self.kind} {self.name!r} of pass-through server {self.left_out!r}"
        if self.kind == "tool":
            return (
                f"{what} is not offered: it is named like mcpx's own tools (every name "
                f"starting with 'mcpx_' is reserved), and a call of {self.name!r} reaches "
                f'mcpx (give {self.left_out!r} a "toolPrefix" in its server entry, not '
                "starting with 'mcpx_', to offer it)"
            )
        if self.kind == "prompt":
            return (
                f"{what} is not offered: it is the name mcpx gives another configured "
                f"server's prompt (<server>_<prompt>), and a prompts/get of {self.name!r} "
                "reaches mcpx"
            )
        return (
            f"{what} is not offered: {uris.PREFIX} URIs are mcpx's own, and a read of "
            f"{self.name!r} reaches mcpx"
        )

    def to_json(self) -> dict[str, object]:
        found: dict[str, object] = {
            "kind": self.kind,
            "name": self.name,
            "by": self.kept,
            "message": self.message(),
        }
        if self.reserved:
            found["reserved"] = True
        return found


class Clashes:
    """The clashes each pass-through list last had, by the servers passed through and kind."""

    #: At most this many clashes are kept per list.
    LIMIT = 1000

    def __init__(self) -> None:
        self._lists: dict[tuple[tuple[str, ...], str], tuple[Clash, ...]] = {}

    def record(self, servers: tuple[str, ...], kind: str, clashes: Iterable[Clash]) -> None:
        """What a merge of C{servers}' C{kind} (C{tools}, C{prompts}) left out, just now."""
        found = tuple(dict.fromkeys(clashes))[: self.LIMIT]
        if found:
            self._lists[servers, kind] = found
        else:
            self._lists.pop((servers, kind), None)

    def shadowed(self, server: str, configured: Container[str] | None = None) -> list[Clash]:
        """
        The names of C{server} left out for another server's, in no list twice; with
        C{configured}, only those of whose servers both are still configured.
        """
        found: dict[Clash, None] = {}
        for clashes in self._lists.values():
            for clash in clashes:
                if clash.left_out != server:
                    continue
                if configured is not None and not clash.reserved and clash.kept not in configured:
                    continue
                found[clash] = None
        return list(found)
