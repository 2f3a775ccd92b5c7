# -*- test-case-name: tests.spec.test_policy -*-
"""
What decides a conflict between revisions that the peer's own revision leaves open.

Most differences between revisions are settled by the revision a peer states.  For
the few where two revisions ask for incompatible behaviour and nothing the peer
said decides it, C{spec.precedence} orders the revisions (first wins) and
C{spec.lenient} names the revisions mcpx does not hold to the letter.
C{spec.first} moves one revision to the front of the precedence.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from attrs import frozen

from mcpx.spec.revision import NEWEST_FIRST, Revision


class PolicyError(ValueError):
    """A precedence that names a revision twice."""


@frozen
class ConflictPolicy:
    """
    The effective C{spec.precedence} and C{spec.lenient}.

    @ivar precedence: every revision, in the order their rules win.
    @ivar lenient: revisions whose rules are not enforced strictly.
    """

    precedence: tuple[Revision, ...]
    lenient: frozenset[Revision]

    @classmethod
    def build(
        cls,
        precedence: Sequence[Revision] = (),
        lenient: Iterable[Revision] = (),
        first: Revision | None = None,
    ) -> ConflictPolicy:
        """
        Complete a possibly partial precedence and apply C{spec.first}.

        The revisions a partial list leaves out follow it, newest first.

        @raise PolicyError: when C{precedence} names a revision twice.
        """
        seen: set[Revision] = set()
        for rev in precedence:
            if rev in seen:
                raise PolicyError(
                    f"spec.precedence names {rev.value} twice; list each revision at most once"
                )
            seen.add(rev)
        order = list(precedence) + [rev for rev in NEWEST_FIRST if rev not in seen]
        if first is not None:
            order.remove(first)
            order.insert(0, first)
        return cls(precedence=tuple(order), lenient=frozenset(lenient))

    def first(self) -> Revision:
        """The revision whose rules win a conflict."""
        return self.precedence[0]

    def strict(self, rev: Revision) -> bool:
        """Whether C{rev}'s rules are enforced to the letter."""
        return rev not in self.lenient

    def to_json(self) -> dict[str, Any]:
        return {
            "precedence": [rev.value for rev in self.precedence],
            "first": self.first().value,
            "lenient": [rev.value for rev in NEWEST_FIRST if rev in self.lenient],
            "strict": [rev.value for rev in NEWEST_FIRST if rev not in self.lenient],
        }


DEFAULT_POLICY = ConflictPolicy.build()
