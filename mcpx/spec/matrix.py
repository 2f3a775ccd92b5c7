# -*- test-case-name: tests.spec.test_matrix -*-
"""
Which MCP names exist in which revision, as one table.

Every method, notification, capability, result field, transport mechanism and
error code mcpx deals with is a L{Feature} row: the first revision that has it
(C{floor}), the revision that dropped it (C{removed_in}, or C{None}), who sends
it, and where the specification says so.  Gates all over mcpx ask this table
instead of comparing revisions by hand, and C{GET /v1/protocol} serves it.

A feature is present in C{rev} when C{floor <= rev < removed_in}.  Rows that an
extension contributes carry its identifier in C{extension} and count only when
the caller says that extension is in force.  One name may have several rows
when the revisions disagree about its shape: C{notifications/progress} has one
row per direction (the client's copy ends with 2026-07-28), and
C{sampling/createMessage} is both a C{method} row (the JSON-RPC request, gone in
2026-07-28) and an C{input request} row (the C{inputRequests} entry that
replaced it).

The rows are declared in L{mcpx.spec.matrix_rows}, the row record in
L{mcpx.spec.feature}; this module asks them questions.  The answers are
precomputed into sets when this module is imported, so a question costs a
dictionary lookup and a set membership test.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, Literal

from mcpx.spec.feature import (
    EITHER_WAY,
    JSONRPC_BATCH,
    KIND_ORDER,
    Direction,
    Feature,
    Kind,
    MatrixError,
)
from mcpx.spec.matrix_rows import FEATURES
from mcpx.spec.policy import ConflictPolicy
from mcpx.spec.revision import ALL_REVISIONS, Revision

_Key = tuple[str, str]
_SentKey = tuple[str, str, Direction]
_Layer = tuple[Revision, str | None]


class RevisionMatrix:
    """
    A table of L{Feature} rows, indexed once for fast questions.

    @raise MatrixError: when two rows for the same name, kind and extension
        could both describe the same direction in the same revision.
    """

    def __init__(self, rows: Iterable[Feature]) -> None:
        self.rows: tuple[Feature, ...] = tuple(rows)
        by_key: dict[tuple[str, str, str | None], list[Feature]] = {}
        for row in self.rows:
            siblings = by_key.setdefault((row.kind, row.name, row.extension), [])
            for other in siblings:
                if other.senders & row.senders and _overlap(other, row):
                    raise MatrixError(
                        f"two rows describe {row.kind} {row.name!r}"
                        + (f" (extension {row.extension})" if row.extension else "")
                        + " for the same direction and revisions"
                    )
            siblings.append(row)
        self._by_key = {key: tuple(found) for key, found in by_key.items()}

        present: dict[_Layer, set[_Key]] = {}
        sent: dict[_Layer, set[_SentKey]] = {}
        for row in self.rows:
            for rev in row.revisions:
                layer = (rev, row.extension)
                present.setdefault(layer, set()).add((row.kind, row.name))
                bucket = sent.setdefault(layer, set())
                for way in row.senders:
                    bucket.add((row.kind, row.name, way))
        self._present: dict[_Layer, frozenset[_Key]] = {
            layer: frozenset(keys) for layer, keys in present.items()
        }
        self._sent: dict[_Layer, frozenset[_SentKey]] = {
            layer: frozenset(keys) for layer, keys in sent.items()
        }
        #: Per revision, every (kind, name) core has: the set the fast paths read.
        self.core: dict[Revision, frozenset[_Key]] = {
            rev: self._present.get((rev, None), frozenset()) for rev in ALL_REVISIONS
        }
        self.extensions: tuple[str, ...] = tuple(
            sorted({row.extension for row in self.rows if row.extension is not None})
        )
        # Everything present in some layer (core or any extension), per revision:
        # a method an extension still defines has not been removed, it has moved.
        anywhere: dict[Revision, set[_Key]] = {rev: set() for rev in ALL_REVISIONS}
        for (rev, _), keys in self._present.items():
            anywhere[rev] |= keys
        removed: dict[str, dict[Revision, set[str]]] = {
            kind: {rev: set() for rev in ALL_REVISIONS} for kind in Kind
        }
        for rev in ALL_REVISIONS:
            for row in self.rows:
                if (
                    row.removed_in is not None
                    and row.removed_in <= rev
                    and (row.kind, row.name) not in anywhere[rev]
                ):
                    removed[row.kind][rev].add(row.name)
        self._removed: dict[str, dict[Revision, frozenset[str]]] = {
            kind: {rev: frozenset(names) for rev, names in by_rev.items()}
            for kind, by_rev in removed.items()
        }
        self._introduced_in: dict[Revision, tuple[Feature, ...]] = {
            rev: tuple(row for row in self.rows if row.floor is rev) for rev in ALL_REVISIONS
        }
        self._removed_in: dict[Revision, tuple[Feature, ...]] = {
            rev: tuple(row for row in self.rows if row.removed_in is rev) for rev in ALL_REVISIONS
        }
        self._batching = frozenset(
            rev for rev in ALL_REVISIONS if (Kind.TRANSPORT, JSONRPC_BATCH) in self.core[rev]
        )
        self._ordered: tuple[Feature, ...] = tuple(
            sorted(
                self.rows,
                key=lambda row: (
                    KIND_ORDER[row.kind],
                    row.name,
                    row.extension or "",
                    row.direction.value if row.direction else "",
                    row.floor.index,
                ),
            )
        )

    def has(
        self,
        kind: Kind,
        name: str,
        revision: Revision,
        *,
        direction: Direction | None = None,
        extensions: Collection[str] = (),
    ) -> bool:
        """
        Whether a peer speaking C{revision} has C{name}.

        @param direction: only count rows this side may send; C{BOTH} asks
            whether either side may send it.
        @param extensions: the extensions in force; rows they contribute count too.
        """
        if direction is None:
            key = (kind, name)
            if key in self.core[revision]:
                return True
            return any(key in self._present.get((revision, ext), ()) for ext in extensions)
        if direction is Direction.BOTH:
            return self.has(
                kind,
                name,
                revision,
                direction=Direction.CLIENT_TO_SERVER,
                extensions=extensions,
            ) and self.has(
                kind,
                name,
                revision,
                direction=Direction.SERVER_TO_CLIENT,
                extensions=extensions,
            )
        sent = (kind, name, direction)
        if sent in self._sent.get((revision, None), ()):
            return True
        return any(sent in self._sent.get((revision, ext), ()) for ext in extensions)

    def removed_for(self, name: str, revision: Revision, kind: Kind = Kind.METHOD) -> bool:
        """
        Whether C{name} existed in an earlier revision and C{revision} no longer has it.

        A method from a newer revision is not removed for an older peer (read
        liberally).  A method that lives on under an extension is not removed
        either: whether the peer negotiated that extension is a separate question
        (see L{extension_for}).
        """
        return name in self._removed[kind][revision]

    def removed_names(self, revision: Revision, kind: Kind = Kind.METHOD) -> frozenset[str]:
        """Every C{kind} name that L{removed_for} is true for."""
        return self._removed[kind][revision]

    def extension_for(self, kind: Kind, name: str, revision: Revision) -> str | None:
        """
        The extension that supplies C{name} in C{revision}, when core does not.

        C{None} when core has it, or when nothing has it.
        """
        key = (kind, name)
        if key in self.core[revision]:
            return None
        for ext in self.extensions:
            if key in self._present.get((revision, ext), ()):
                return ext
        return None

    def names_in(
        self, kind: Kind, revision: Revision, *, extensions: Collection[str] = ()
    ) -> frozenset[str]:
        """Every C{kind} name present in C{revision} (core, plus the given extensions)."""
        names = {name for k, name in self.core[revision] if k == kind}
        for ext in extensions:
            names.update(name for k, name in self._present.get((revision, ext), ()) if k == kind)
        return frozenset(names)

    def batch_allowed(self, revision: Revision) -> bool:
        """Whether JSON-RPC batches are part of C{revision} (only 2025-03-26)."""
        return revision in self._batching

    def introduced_in(self, revision: Revision) -> tuple[Feature, ...]:
        """The rows whose floor is C{revision}, in table order."""
        return self._introduced_in[revision]

    def removed_in(self, revision: Revision) -> tuple[Feature, ...]:
        """The rows that C{revision} removed, in table order."""
        return self._removed_in[revision]

    def lookup(
        self,
        kind: Kind,
        name: str,
        *,
        extension: str | None = None,
        direction: Direction | None = None,
    ) -> Feature:
        """
        The row for C{name}.

        @param direction: needed only for names with one row per direction.
        @raise KeyError: naming what was asked for, when there is no such row or
            when the name has several rows and C{direction} does not pick one.
        """
        found = self._by_key.get((kind, name, extension))
        if not found:
            where = f" in extension {extension}" if extension else ""
            elsewhere = [
                ext for ext in (None, *self.extensions) if (kind, name, ext) in self._by_key
            ]
            hint = f"; it has one with extension={elsewhere[0]!r}" if elsewhere else ""
            raise KeyError(f"the revision matrix has no {kind} named {name!r}{where}{hint}")
        if direction is not None:
            wanted = EITHER_WAY if direction is Direction.BOTH else frozenset((direction,))
            matching = [row for row in found if wanted <= row.senders]
            if len(matching) == 1:
                return matching[0]
            found = tuple(matching)
        if len(found) == 1:
            return found[0]
        if not found:
            raise KeyError(f"the revision matrix has no {kind} {name!r} sent {direction}")
        ways = ", ".join(sorted(str(row.direction) for row in found))
        raise KeyError(
            f"the revision matrix has one {kind} row per direction for {name!r} ({ways}); "
            "pass direction= to pick one"
        )

    def ordered(self) -> tuple[Feature, ...]:
        """Every row in the stable order C{GET /v1/protocol} uses: by kind, then name."""
        return self._ordered

    def to_json(self) -> dict[str, Any]:
        """The revisions and every row, ready for C{json.dumps}."""
        return {
            "revisions": [
                {"value": rev.value, "era": rev.era.value, "index": rev.index}
                for rev in ALL_REVISIONS
            ],
            "kinds": [kind.value for kind in Kind],
            "extensions": list(self.extensions),
            "features": [row.to_json() for row in self._ordered],
        }


def _overlap(a: Feature, b: Feature) -> bool:
    return bool(set(a.revisions) & set(b.revisions))


#: The matrix mcpx consults.
MATRIX = RevisionMatrix(FEATURES)

_CORE = MATRIX.core
_REMOVED_METHODS = {rev: MATRIX.removed_names(rev) for rev in ALL_REVISIONS}
_METHOD = Kind.METHOD
_NOTIFICATION = Kind.NOTIFICATION
_FIELD = Kind.FIELD

has = MATRIX.has
extension_for = MATRIX.extension_for
names_in = MATRIX.names_in
batch_allowed = MATRIX.batch_allowed
introduced_in = MATRIX.introduced_in
removed_in = MATRIX.removed_in
lookup = MATRIX.lookup


def _in(
    kind: Kind,
    name: str,
    revision: Revision,
    direction: Direction | None,
    extensions: Collection[str],
) -> bool:
    """
    L{RevisionMatrix.has}, with the common question (a core row, sent either way) read
    straight from the core set: it is asked for every message.
    """
    if direction is None and not extensions:
        return (kind, name) in _CORE[revision]
    return MATRIX.has(kind, name, revision, direction=direction, extensions=extensions)


def method_in(
    method: str,
    revision: Revision,
    *,
    direction: Direction | None = None,
    extensions: Collection[str] = (),
) -> bool:
    """Whether C{method} is a JSON-RPC request in C{revision}."""
    return _in(_METHOD, method, revision, direction, extensions)


def input_request_in(method: str, revision: Revision) -> bool:
    """Whether C{method} may appear as an C{inputRequests} entry in C{revision}."""
    return MATRIX.has(Kind.INPUT_REQUEST, method, revision)


def notification_in(
    name: str,
    revision: Revision,
    *,
    direction: Direction | None = None,
    extensions: Collection[str] = (),
) -> bool:
    """Whether notification C{name} exists in C{revision} (optionally: sent that way)."""
    return _in(_NOTIFICATION, name, revision, direction, extensions)


def capability_in(
    side: Literal["client", "server"],
    name: str,
    revision: Revision,
    *,
    extensions: Collection[str] = (),
) -> bool:
    """Whether C{side} may declare capability C{name} (a dotted path) in C{revision}."""
    kind = Kind.CLIENT_CAPABILITY if side == "client" else Kind.SERVER_CAPABILITY
    return MATRIX.has(kind, name, revision, extensions=extensions)


def field_in(name: str, revision: Revision, *, extensions: Collection[str] = ()) -> bool:
    """Whether field C{name} (as the matrix spells it) exists in C{revision}."""
    return _in(_FIELD, name, revision, None, extensions)


def content_type_in(content_type: str, revision: Revision) -> bool:
    """Whether a content block of C{type} C{content_type} exists in C{revision}."""
    return MATRIX.has(Kind.FIELD, f"content:{content_type}", revision)


def error_code_in(code: int, revision: Revision) -> bool:
    """Whether C{revision} defines error C{code}."""
    return MATRIX.has(Kind.ERROR_CODE, str(code), revision)


def removed_methods(revision: Revision) -> frozenset[str]:
    """The requests a peer on C{revision} must get C{-32601} for: they were removed."""
    return _REMOVED_METHODS[revision]


def removed_for(name: str, revision: Revision, kind: Kind = Kind.METHOD) -> bool:
    """
    Whether C{name} existed in an earlier revision and C{revision} no longer has it.

    A peer on C{revision} that sends such a request gets C{-32601}.  A name
    from a newer revision is not removed for an older peer, and a method an
    extension still defines (C{tasks/get} in 2026-07-28) is not removed either;
    see L{extension_for}.
    """
    if kind is _METHOD:
        return name in _REMOVED_METHODS[revision]
    return MATRIX.removed_for(name, revision, kind)


def matrix_json() -> dict[str, Any]:
    """The revisions and every feature, for C{GET /v1/protocol}."""
    return MATRIX.to_json()


def protocol_json(policy: ConflictPolicy) -> dict[str, Any]:
    """The matrix plus the effective conflict policy under C{"spec"}."""
    document = MATRIX.to_json()
    document["spec"] = policy.to_json()
    return document
