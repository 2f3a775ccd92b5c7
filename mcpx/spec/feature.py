# -*- test-case-name: tests.spec.test_matrix -*-
"""
The row of the revision matrix: a L{Feature}, with what it may be (L{Kind}) and who
sends it (L{Direction}).  The rows themselves are in L{mcpx.spec.matrix_rows}; the
questions asked of them, in L{mcpx.spec.matrix}.
"""

from __future__ import annotations

import enum
from typing import Any

from attrs import field, frozen

from mcpx.spec.revision import ALL_REVISIONS, Revision


class Kind(enum.StrEnum):
    """What sort of thing a row describes.  Plain strings compare equal to these."""

    METHOD = "method"
    INPUT_REQUEST = "input request"
    NOTIFICATION = "notification"
    CLIENT_CAPABILITY = "client capability"
    SERVER_CAPABILITY = "server capability"
    FIELD = "field"
    TRANSPORT = "transport"
    ERROR_CODE = "error code"
    AUTHORIZATION = "authorization"
    BEHAVIOUR = "behaviour"


class Direction(enum.StrEnum):
    """Who sends a message.  C{BOTH} means either side may."""

    CLIENT_TO_SERVER = "client-to-server"
    SERVER_TO_CLIENT = "server-to-client"
    BOTH = "both"


#: The 2026-07-28 tasks extension (ext-tasks), negotiated per request.
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"

#: The order kinds are listed in.
KIND_ORDER: dict[Kind, int] = {kind: i for i, kind in enumerate(Kind)}


class MatrixError(ValueError):
    """A table that contradicts itself: overlapping rows, or a feature removed before it began."""


def _check_removed_in(instance: Feature, attribute: Any, value: Revision | None) -> None:
    if value is not None and value <= instance.floor:
        raise MatrixError(
            f"{instance.kind} {instance.name!r}: removed_in {value.value} "
            f"is not after its floor {instance.floor.value}"
        )


def _check_deprecated_in(instance: Feature, attribute: Any, value: Revision | None) -> None:
    if value is None:
        return
    if value < instance.floor or (instance.removed_in is not None and value >= instance.removed_in):
        raise MatrixError(
            f"{instance.kind} {instance.name!r}: deprecated_in {value.value} "
            "is outside the revisions that have it"
        )


@frozen
class Feature:
    """
    One row of the revision matrix.

    @ivar kind: what sort of thing C{name} is.
    @ivar name: the wire name (method, notification, capability path such as
        C{elicitation.url}, C{Definition.property} for fields, header name,
        error code as a string).
    @ivar floor: the first revision that has it.
    @ivar removed_in: the first revision that no longer has it, or C{None}.
    @ivar direction: who sends it, for messages; C{None} where it does not apply.
    @ivar note: what changes across revisions, in a few words.
    @ivar spec: where the specification says so (a path in the
        modelcontextprotocol repository, or C{ext-tasks:...}).
    @ivar extension: the extension that contributes this row, or C{None} for core.
    @ivar deprecated_in: the revision that deprecated it without removing it.
    @ivar schema: where the official C{schema.json} shows it: a definition name
        followed by property names (through C{$ref}, C{allOf} and C{anyOf}).
        Empty when the schema has no single place for it.
    """

    kind: Kind
    name: str
    floor: Revision
    removed_in: Revision | None = field(validator=_check_removed_in)
    direction: Direction | None
    note: str
    spec: str
    extension: str | None = None
    deprecated_in: Revision | None = field(default=None, validator=_check_deprecated_in)
    schema: tuple[str, ...] = ()

    def present_in(self, rev: Revision) -> bool:
        """Whether a peer speaking C{rev} has this feature."""
        return self.floor <= rev and (self.removed_in is None or rev < self.removed_in)

    @property
    def revisions(self) -> tuple[Revision, ...]:
        """Every revision that has this feature, oldest first."""
        return tuple(rev for rev in ALL_REVISIONS if self.present_in(rev))

    @property
    def senders(self) -> frozenset[Direction]:
        """The concrete directions: C{BOTH} (or no direction) is either one."""
        if self.direction is None or self.direction is Direction.BOTH:
            return EITHER_WAY
        return frozenset((self.direction,))

    def to_json(self) -> dict[str, Any]:
        """This row for C{GET /v1/protocol}."""
        return {
            "kind": self.kind.value,
            "name": self.name,
            "floor": self.floor.value,
            "removed_in": None if self.removed_in is None else self.removed_in.value,
            "deprecated_in": None if self.deprecated_in is None else self.deprecated_in.value,
            "direction": None if self.direction is None else self.direction.value,
            "extension": self.extension,
            "revisions": [rev.value for rev in self.revisions],
            "note": self.note,
            "spec": self.spec,
            "schema": list(self.schema),
        }


#: The concrete directions a message may travel in.
EITHER_WAY = frozenset((Direction.CLIENT_TO_SERVER, Direction.SERVER_TO_CLIENT))

#: The transport row that L{mcpx.spec.matrix.RevisionMatrix.batch_allowed} reads.
JSONRPC_BATCH = "jsonrpc batch"
