# -*- test-case-name: tests.spec.test_revision -*-
"""
The five MCP revisions mcpx speaks, as an ordered type.

Revisions compare by date, so C{rev >= Revision.V2025_06_18} reads as "has what
2025-06-18 introduced".  The era splits them: the legacy revisions negotiate once
with C{initialize}; the modern one restates its version on every request.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class Era(enum.Enum):
    """How a revision agrees on a version: once per connection, or per request."""

    LEGACY = "legacy"
    MODERN = "modern"


class UnknownRevision(ValueError):
    """A string that names none of the revisions mcpx speaks."""

    def __init__(self, given: str, where: str = "") -> None:
        self.given = given
        self.where = where
        place = f" in {where}" if where else ""
        super().__init__(
            f"unknown MCP revision {given!r}{place}; valid revisions are: "
            + ", ".join(r.value for r in Revision)
        )


@enum.unique
class Revision(enum.Enum):
    """An MCP protocol revision, ordered oldest to newest."""

    V2024_11_05 = "2024-11-05"
    V2025_03_26 = "2025-03-26"
    V2025_06_18 = "2025-06-18"
    V2025_11_25 = "2025-11-25"
    V2026_07_28 = "2026-07-28"

    @property
    def era(self) -> Era:
        """The legacy revisions handshake; 2026-07-28 is stateless."""
        return Era.MODERN if self is Revision.V2026_07_28 else Era.LEGACY

    @property
    def is_modern(self) -> bool:
        return self is Revision.V2026_07_28

    @property
    def index(self) -> int:
        """Position from oldest (0) to newest."""
        return self._rank  # type: ignore[attr-defined,no-any-return]

    @classmethod
    def parse(cls, text: str, where: str = "") -> Revision:
        """
        Read a revision from its date string.

        @param where: where the string came from, named in the error.
        @raise UnknownRevision: listing every valid revision.
        """
        found = _BY_VALUE.get(text.strip()) if isinstance(text, str) else None
        if found is None:
            raise UnknownRevision(str(text), where)
        return found

    @classmethod
    def find(cls, text: object) -> Revision | None:
        """The revision C{text} names, or C{None}: for reading peers liberally."""
        return _BY_VALUE.get(text) if isinstance(text, str) else None

    @classmethod
    def parse_list(cls, items: Iterable[str], where: str = "") -> tuple[Revision, ...]:
        """Read several revisions; the first unknown one is refused."""
        return tuple(cls.parse(item, where) for item in items)

    # A revision is a dict key and compared on every request's path: hashed by
    # identity in C (a member is its only instance, equal only to itself) rather than
    # by Enum's hash of its name in Python, and ordered by the rank each member keeps.
    __hash__ = object.__hash__

    def __lt__(self, other: object) -> bool:
        if other.__class__ is not Revision:
            return NotImplemented
        return self._rank < other._rank  # type: ignore[attr-defined,no-any-return]

    def __le__(self, other: object) -> bool:
        if other.__class__ is not Revision:
            return NotImplemented
        return self._rank <= other._rank  # type: ignore[attr-defined,no-any-return]

    def __gt__(self, other: object) -> bool:
        if other.__class__ is not Revision:
            return NotImplemented
        return self._rank > other._rank  # type: ignore[attr-defined,no-any-return]

    def __ge__(self, other: object) -> bool:
        if other.__class__ is not Revision:
            return NotImplemented
        return self._rank >= other._rank  # type: ignore[attr-defined,no-any-return]

    def __str__(self) -> str:
        return self.value


_INDEX: dict[Revision, int] = {rev: i for i, rev in enumerate(Revision)}
for _revision, _rank in _INDEX.items():
    #: Position from oldest (0) to newest, kept on each member for the comparisons.
    _revision._rank = _rank  # type: ignore[attr-defined]
_BY_VALUE: dict[str, Revision] = {rev.value: rev for rev in Revision}

ALL_REVISIONS: tuple[Revision, ...] = tuple(Revision)
NEWEST_FIRST: tuple[Revision, ...] = tuple(reversed(ALL_REVISIONS))
OLDEST = Revision.V2024_11_05
NEWEST = Revision.V2026_07_28
LEGACY_REVISIONS: tuple[Revision, ...] = tuple(r for r in Revision if r.era is Era.LEGACY)
NEWEST_LEGACY = LEGACY_REVISIONS[-1]

#: A request that declared no revision at all is spelled for the oldest one:
#: every shape it defines is understood by every later revision.
UNDECLARED = OLDEST

#: A Streamable HTTP request without C{MCP-Protocol-Version}: 2024-11-05 had no
#: Streamable HTTP, so the transport pages say to assume 2025-03-26.
HEADERLESS_HTTP = Revision.V2025_03_26
