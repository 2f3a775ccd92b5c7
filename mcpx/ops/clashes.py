# -*- test-case-name: tests.server.test_passthrough -*-
"""
The names two pass-through servers both offer, as the last listing found them, for
C{GET /v1/servers} (and C{mcpx servers}) to show beside the server left out.

The pass-through surface (L{mcpx.server.passthrough}) keeps the first server's tool or
prompt of a name and leaves the other's out; each time it merges a list it records here what
it left out, replacing what it recorded for that list before, so what is shown is what hosts
are offered now.  Nothing is known before a host has listed: that is when a name is shadowed.
"""

from __future__ import annotations

from collections.abc import Container, Iterable

from attrs import frozen


@frozen
class Clash:
    """
    A name two pass-through servers offer.

    @ivar kind: C{"tool"} or C{"prompt"}.
    @ivar kept: the server whose C{name} is offered (passed through first).
    @ivar left_out: the server whose C{name} is not.
    """

    kind: str
    name: str
    kept: str
    left_out: str

    def message(self) -> str:
        """What is said of it: which is offered, and how to offer both."""
        remedy = (
            f'give {self.left_out!r} a "toolPrefix" in its server entry to offer both'
            if self.kind == "tool"
            else f"pass only one of them through to reach {self.left_out!r}'s"
        )
        return (
            f"{self.kind} {self.name!r} is offered by both pass-through servers "
            f"{self.kept!r} and {self.left_out!r}; only {self.kept!r}'s is offered ({remedy})"
        )

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "name": self.name, "by": self.kept, "message": self.message()}


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
                if configured is not None and clash.kept not in configured:
                    continue
                found[clash] = None
        return list(found)
