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

The answers are precomputed into sets when this module is imported, so a
question costs a dictionary lookup and a set membership test.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable
from typing import Any, Literal

from attrs import field, frozen

from mcpx.spec.policy import ConflictPolicy
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

_KIND_ORDER: dict[Kind, int] = {kind: i for i, kind in enumerate(Kind)}


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
            return _EITHER_WAY
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


_EITHER_WAY = frozenset((Direction.CLIENT_TO_SERVER, Direction.SERVER_TO_CLIENT))

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
                    _KIND_ORDER[row.kind],
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
            wanted = _EITHER_WAY if direction is Direction.BOTH else frozenset((direction,))
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


#: The transport row that L{RevisionMatrix.batch_allowed} reads.
JSONRPC_BATCH = "jsonrpc batch"

_V1 = Revision.V2024_11_05
_V2 = Revision.V2025_03_26
_V3 = Revision.V2025_06_18
_V4 = Revision.V2025_11_25
_V5 = Revision.V2026_07_28

_C2S = Direction.CLIENT_TO_SERVER
_S2C = Direction.SERVER_TO_CLIENT
_BOTH = Direction.BOTH


def _doc(rev: Revision, page: str) -> str:
    return f"docs/specification/{rev.value}/{page}.mdx"


def _ts(rev: Revision) -> str:
    return f"schema/{rev.value}/schema.ts"


_TASKS_SPEC = "ext-tasks:specification/2026-07-28/tasks.md"


def _method(
    name: str,
    floor: Revision,
    removed_in: Revision | None,
    direction: Direction,
    *,
    note: str,
    spec: str,
    extension: str | None = None,
    deprecated_in: Revision | None = None,
) -> Feature:
    return Feature(
        Kind.METHOD,
        name,
        floor,
        removed_in,
        direction,
        note,
        spec,
        extension=extension,
        deprecated_in=deprecated_in,
    )


def _notification(
    name: str,
    floor: Revision,
    removed_in: Revision | None,
    direction: Direction,
    *,
    note: str,
    spec: str,
    extension: str | None = None,
    deprecated_in: Revision | None = None,
) -> Feature:
    return Feature(
        Kind.NOTIFICATION,
        name,
        floor,
        removed_in,
        direction,
        note,
        spec,
        extension=extension,
        deprecated_in=deprecated_in,
    )


def _capability(
    side: Kind,
    name: str,
    floor: Revision,
    removed_in: Revision | None,
    *,
    note: str,
    spec: str,
    extension: str | None = None,
    deprecated_in: Revision | None = None,
) -> Feature:
    return Feature(
        side,
        name,
        floor,
        removed_in,
        None,
        note,
        spec,
        extension=extension,
        deprecated_in=deprecated_in,
    )


def _field(
    name: str,
    floor: Revision,
    removed_in: Revision | None,
    *,
    note: str,
    spec: str,
    schema: tuple[str, ...] = (),
    extension: str | None = None,
    deprecated_in: Revision | None = None,
) -> Feature:
    return Feature(
        Kind.FIELD,
        name,
        floor,
        removed_in,
        None,
        note,
        spec,
        extension=extension,
        deprecated_in=deprecated_in,
        schema=schema,
    )


def _plain(
    kind: Kind,
    name: str,
    floor: Revision,
    removed_in: Revision | None,
    *,
    note: str,
    spec: str,
    deprecated_in: Revision | None = None,
) -> Feature:
    return Feature(kind, name, floor, removed_in, None, note, spec, deprecated_in=deprecated_in)


_METHODS: tuple[Feature, ...] = (
    _method(
        "initialize",
        _V1,
        _V5,
        _C2S,
        note="legacy handshake; never inside a batch; a dual-era server still accepts it "
        "to switch the connection to a legacy revision",
        spec=_doc(_V1, "basic/lifecycle"),
    ),
    _method(
        "ping",
        _V1,
        _V5,
        _BOTH,
        note="either side may ping until 2026-07-28, which removed it",
        spec=_doc(_V1, "basic/utilities/ping"),
    ),
    _method(
        "server/discover",
        _V5,
        None,
        _C2S,
        note="servers MUST implement it; clients MAY call it; result is cacheable",
        spec=_doc(_V5, "server/discover"),
    ),
    _method(
        "subscriptions/listen",
        _V5,
        None,
        _C2S,
        note="long-lived stream for list_changed and resource updates",
        spec=_doc(_V5, "basic/patterns/subscriptions"),
    ),
    _method(
        "resources/list",
        _V1,
        None,
        _C2S,
        note="paginated; 2026-07-28 adds ttlMs/cacheScope",
        spec=_doc(_V1, "server/resources"),
    ),
    _method(
        "resources/templates/list",
        _V1,
        None,
        _C2S,
        note="paginated; 2026-07-28 adds ttlMs/cacheScope",
        spec=_doc(_V1, "server/resources"),
    ),
    _method(
        "resources/read",
        _V1,
        None,
        _C2S,
        note="2026-07-28: cacheable, may answer input_required, not found is -32602",
        spec=_doc(_V1, "server/resources"),
    ),
    _method(
        "resources/subscribe",
        _V1,
        _V5,
        _C2S,
        note="replaced by subscriptions/listen resourceSubscriptions",
        spec=_doc(_V5, "server/resources"),
    ),
    _method(
        "resources/unsubscribe",
        _V1,
        _V5,
        _C2S,
        note="replaced by closing the subscriptions/listen stream",
        spec=_doc(_V5, "server/resources"),
    ),
    _method(
        "prompts/list",
        _V1,
        None,
        _C2S,
        note="paginated; 2026-07-28 adds ttlMs/cacheScope",
        spec=_doc(_V1, "server/prompts"),
    ),
    _method(
        "prompts/get",
        _V1,
        None,
        _C2S,
        note="2026-07-28: may answer input_required",
        spec=_doc(_V1, "server/prompts"),
    ),
    _method(
        "tools/list",
        _V1,
        None,
        _C2S,
        note="paginated; 2026-07-28 adds ttlMs/cacheScope and forbids per-connection variation",
        spec=_doc(_V1, "server/tools"),
    ),
    _method(
        "tools/call",
        _V1,
        None,
        _C2S,
        note="2025-11-25: params.task; 2026-07-28: may answer input_required, "
        "and resultType task under the tasks extension",
        spec=_doc(_V1, "server/tools"),
    ),
    _method(
        "logging/setLevel",
        _V1,
        _V5,
        _C2S,
        note="2026-07-28 asks per request through _meta io.modelcontextprotocol/logLevel",
        spec=_doc(_V5, "server/utilities/logging"),
    ),
    _method(
        "completion/complete",
        _V1,
        None,
        _C2S,
        note="2025-06-18 adds params.context; never answers input_required",
        spec=_doc(_V1, "server/utilities/completion"),
    ),
    _method(
        "sampling/createMessage",
        _V1,
        _V5,
        _S2C,
        note="2026-07-28 keeps it only as an inputRequests entry",
        spec=_doc(_V1, "client/sampling"),
    ),
    _method(
        "roots/list",
        _V1,
        _V5,
        _S2C,
        note="2026-07-28 keeps it only as an inputRequests entry",
        spec=_doc(_V1, "client/roots"),
    ),
    _method(
        "elicitation/create",
        _V3,
        _V5,
        _S2C,
        note="form mode 2025-06-18, url mode 2025-11-25; "
        "2026-07-28 keeps it only as an inputRequests entry",
        spec=_doc(_V3, "client/elicitation"),
    ),
    _method(
        "tasks/get",
        _V4,
        _V5,
        _BOTH,
        note="core tasks (experimental); 2026-07-28 moves it to the tasks extension",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
    _method(
        "tasks/result",
        _V4,
        _V5,
        _BOTH,
        note="core tasks; the 2026-07-28 tasks extension answers -32601",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
    _method(
        "tasks/list",
        _V4,
        _V5,
        _BOTH,
        note="core tasks; gone in 2026-07-28",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
    _method(
        "tasks/cancel",
        _V4,
        _V5,
        _BOTH,
        note="core tasks, returns the Task; 2026-07-28 moves it to the tasks extension",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
    _method(
        "tasks/get",
        _V5,
        None,
        _C2S,
        note="tasks extension: result is the DetailedTask with resultType complete",
        spec=_TASKS_SPEC,
        extension=TASKS_EXTENSION,
    ),
    _method(
        "tasks/update",
        _V5,
        None,
        _C2S,
        note="tasks extension: answers a task's inputRequests; empty acknowledgement",
        spec=_TASKS_SPEC,
        extension=TASKS_EXTENSION,
    ),
    _method(
        "tasks/cancel",
        _V5,
        None,
        _C2S,
        note="tasks extension: cooperative, empty acknowledgement",
        spec=_TASKS_SPEC,
        extension=TASKS_EXTENSION,
    ),
)

_INPUT_REQUESTS: tuple[Feature, ...] = (
    Feature(
        Kind.INPUT_REQUEST,
        "sampling/createMessage",
        _V5,
        None,
        _S2C,
        "bare {method, params} in InputRequiredResult.inputRequests; no _meta or task",
        _doc(_V5, "client/sampling"),
        deprecated_in=_V5,
    ),
    Feature(
        Kind.INPUT_REQUEST,
        "roots/list",
        _V5,
        None,
        _S2C,
        "bare {method, params} in InputRequiredResult.inputRequests",
        _doc(_V5, "client/roots"),
        deprecated_in=_V5,
    ),
    Feature(
        Kind.INPUT_REQUEST,
        "elicitation/create",
        _V5,
        None,
        _S2C,
        "form and url modes, without elicitationId",
        _doc(_V5, "client/elicitation"),
    ),
)

_NOTIFICATIONS: tuple[Feature, ...] = (
    _notification(
        "notifications/initialized",
        _V1,
        _V5,
        _C2S,
        note="ends the legacy handshake",
        spec=_doc(_V1, "basic/lifecycle"),
    ),
    _notification(
        "notifications/cancelled",
        _V1,
        None,
        _BOTH,
        note="never for tasks (2025-11-25 on); 2026-07-28: clients send it on stdio only "
        "(HTTP closes the stream), servers only to end a subscriptions/listen stream",
        spec=_doc(_V5, "basic/patterns/cancellation"),
    ),
    _notification(
        "notifications/progress",
        _V1,
        _V5,
        _C2S,
        note="a client reporting progress on a server's request; 2026-07-28 has no server requests",
        spec=_doc(_V5, "basic/patterns/progress"),
    ),
    _notification(
        "notifications/progress",
        _V1,
        None,
        _S2C,
        note="message added in 2025-03-26; 2026-07-28 sends it on the request's own stream",
        spec=_doc(_V1, "basic/utilities/progress"),
    ),
    _notification(
        "notifications/message",
        _V1,
        None,
        _S2C,
        note="2026-07-28: only for a request whose _meta set a logLevel, on its stream",
        spec=_doc(_V5, "server/utilities/logging"),
        deprecated_in=_V5,
    ),
    _notification(
        "notifications/resources/list_changed",
        _V1,
        None,
        _S2C,
        note="2026-07-28: only on a subscriptions/listen stream (resourcesListChanged)",
        spec=_doc(_V5, "basic/patterns/subscriptions"),
    ),
    _notification(
        "notifications/resources/updated",
        _V1,
        None,
        _S2C,
        note="after resources/subscribe; 2026-07-28: on a listen stream (resourceSubscriptions)",
        spec=_doc(_V5, "basic/patterns/subscriptions"),
    ),
    _notification(
        "notifications/prompts/list_changed",
        _V1,
        None,
        _S2C,
        note="2026-07-28: only on a subscriptions/listen stream (promptsListChanged)",
        spec=_doc(_V5, "basic/patterns/subscriptions"),
    ),
    _notification(
        "notifications/tools/list_changed",
        _V1,
        None,
        _S2C,
        note="2026-07-28: only on a subscriptions/listen stream (toolsListChanged)",
        spec=_doc(_V5, "basic/patterns/subscriptions"),
    ),
    _notification(
        "notifications/roots/list_changed",
        _V1,
        _V5,
        _C2S,
        note="needs the roots.listChanged client capability",
        spec=_doc(_V1, "client/roots"),
    ),
    _notification(
        "notifications/elicitation/complete",
        _V4,
        _V5,
        _S2C,
        note="ends a url-mode elicitation (elicitationId)",
        spec=_doc(_V4, "client/elicitation"),
    ),
    _notification(
        "notifications/tasks/status",
        _V4,
        _V5,
        _BOTH,
        note="core tasks; the extension renames it notifications/tasks",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
    _notification(
        "notifications/subscriptions/acknowledged",
        _V5,
        None,
        _S2C,
        note="first message on a subscriptions/listen stream: the honoured filter",
        spec=_doc(_V5, "basic/patterns/subscriptions"),
    ),
    _notification(
        "notifications/tasks",
        _V5,
        None,
        _S2C,
        note="tasks extension: full DetailedTask, only via subscriptions/listen taskIds",
        spec=_TASKS_SPEC,
        extension=TASKS_EXTENSION,
    ),
)

_CC = Kind.CLIENT_CAPABILITY
_SC = Kind.SERVER_CAPABILITY
_LIFECYCLE = _doc(_V1, "basic/lifecycle")
_CAPS_2026 = _ts(_V5)

_CAPABILITIES: tuple[Feature, ...] = (
    _capability(_CC, "experimental", _V1, None, note="free-form", spec=_LIFECYCLE),
    _capability(
        _CC,
        "roots",
        _V1,
        None,
        note="2026-07-28: roots{} only",
        spec=_doc(_V1, "client/roots"),
        deprecated_in=_V5,
    ),
    _capability(
        _CC,
        "roots.listChanged",
        _V1,
        _V5,
        note="promise to send notifications/roots/list_changed",
        spec=_doc(_V1, "client/roots"),
    ),
    _capability(
        _CC,
        "sampling",
        _V1,
        None,
        note="2026-07-28: answered as an input request",
        spec=_doc(_V1, "client/sampling"),
        deprecated_in=_V5,
    ),
    _capability(
        _CC,
        "sampling.context",
        _V4,
        None,
        note="allows includeContext thisServer/allServers",
        spec=_doc(_V4, "client/sampling"),
    ),
    _capability(
        _CC,
        "sampling.tools",
        _V4,
        None,
        note="allows tools/toolChoice in sampling",
        spec=_doc(_V4, "client/sampling"),
    ),
    _capability(
        _CC,
        "elicitation",
        _V3,
        None,
        note="{} means form mode only",
        spec=_doc(_V3, "client/elicitation"),
    ),
    _capability(
        _CC, "elicitation.form", _V4, None, note="form mode", spec=_doc(_V4, "client/elicitation")
    ),
    _capability(
        _CC, "elicitation.url", _V4, None, note="url mode", spec=_doc(_V4, "client/elicitation")
    ),
    _capability(
        _CC,
        "tasks",
        _V4,
        _V5,
        note="client-hosted core tasks (sampling, elicitation)",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
    _capability(
        _CC, "tasks.list", _V4, _V5, note="core tasks", spec=_doc(_V4, "basic/utilities/tasks")
    ),
    _capability(
        _CC, "tasks.cancel", _V4, _V5, note="core tasks", spec=_doc(_V4, "basic/utilities/tasks")
    ),
    _capability(
        _CC,
        "tasks.requests",
        _V4,
        _V5,
        note="sampling.createMessage, elicitation.create",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
    _capability(
        _CC,
        "extensions",
        _V5,
        None,
        note="per-request extension negotiation",
        spec=_doc(_V5, "basic/versioning"),
    ),
    _capability(
        _CC,
        f"extensions.{TASKS_EXTENSION}",
        _V5,
        None,
        note="the client accepts task results on this request",
        spec=_TASKS_SPEC,
        extension=TASKS_EXTENSION,
    ),
    _capability(_SC, "experimental", _V1, None, note="free-form", spec=_LIFECYCLE),
    _capability(
        _SC,
        "logging",
        _V1,
        None,
        note="notifications/message",
        spec=_doc(_V1, "server/utilities/logging"),
        deprecated_in=_V5,
    ),
    _capability(
        _SC,
        "completions",
        _V2,
        None,
        note="completion/complete",
        spec=_doc(_V2, "server/utilities/completion"),
    ),
    _capability(_SC, "prompts", _V1, None, note="prompts/*", spec=_doc(_V1, "server/prompts")),
    _capability(
        _SC,
        "prompts.listChanged",
        _V1,
        None,
        note="notifications/prompts/list_changed",
        spec=_doc(_V1, "server/prompts"),
    ),
    _capability(
        _SC, "resources", _V1, None, note="resources/*", spec=_doc(_V1, "server/resources")
    ),
    _capability(
        _SC,
        "resources.subscribe",
        _V1,
        None,
        note="2026-07-28: honours resourceSubscriptions on subscriptions/listen",
        spec=_doc(_V5, "server/resources"),
    ),
    _capability(
        _SC,
        "resources.listChanged",
        _V1,
        None,
        note="notifications/resources/list_changed",
        spec=_doc(_V1, "server/resources"),
    ),
    _capability(_SC, "tools", _V1, None, note="tools/*", spec=_doc(_V1, "server/tools")),
    _capability(
        _SC,
        "tools.listChanged",
        _V1,
        None,
        note="notifications/tools/list_changed",
        spec=_doc(_V1, "server/tools"),
    ),
    _capability(
        _SC,
        "tasks",
        _V4,
        _V5,
        note="server-hosted core tasks (tools/call)",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
    _capability(
        _SC, "tasks.list", _V4, _V5, note="core tasks", spec=_doc(_V4, "basic/utilities/tasks")
    ),
    _capability(
        _SC, "tasks.cancel", _V4, _V5, note="core tasks", spec=_doc(_V4, "basic/utilities/tasks")
    ),
    _capability(
        _SC,
        "tasks.requests",
        _V4,
        _V5,
        note="tools.call",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
    _capability(
        _SC,
        "extensions",
        _V5,
        None,
        note="advertised in DiscoverResult.capabilities",
        spec=_doc(_V5, "basic/versioning"),
    ),
    _capability(
        _SC,
        f"extensions.{TASKS_EXTENSION}",
        _V5,
        None,
        note="the server may answer tools/call with a task",
        spec=_TASKS_SPEC,
        extension=TASKS_EXTENSION,
    ),
)

_FIELDS: tuple[Feature, ...] = (
    _field(
        "Result._meta",
        _V1,
        None,
        note="2026-07-28: typed ResultMetaObject",
        spec=_ts(_V1),
        schema=("Result", "_meta"),
    ),
    _field(
        "Result.resultType",
        _V5,
        None,
        note="required on every result; complete | input_required | extension values; "
        "missing means complete",
        spec=_doc(_V5, "basic/index"),
        schema=("Result", "resultType"),
    ),
    _field(
        "InitializeResult.instructions",
        _V1,
        _V5,
        note="moves to DiscoverResult.instructions",
        spec=_ts(_V1),
        schema=("InitializeResult", "instructions"),
    ),
    _field(
        "InitializeResult.serverInfo",
        _V1,
        _V5,
        note="server identity moves to result _meta io.modelcontextprotocol/serverInfo",
        spec=_ts(_V1),
        schema=("InitializeResult", "serverInfo"),
    ),
    _field(
        "DiscoverResult.supportedVersions",
        _V5,
        None,
        note="what a modern server speaks",
        spec=_doc(_V5, "server/discover"),
        schema=("DiscoverResult", "supportedVersions"),
    ),
    _field(
        "CacheableResult.ttlMs",
        _V5,
        None,
        note="required on discover, list and resources/read results; absent means 0",
        spec=_doc(_V5, "server/utilities/caching"),
        schema=("CacheableResult", "ttlMs"),
    ),
    _field(
        "CacheableResult.cacheScope",
        _V5,
        None,
        note="public | private; same on every page of a list",
        spec=_doc(_V5, "server/utilities/caching"),
        schema=("CacheableResult", "cacheScope"),
    ),
    _field(
        "InputRequiredResult.inputRequests",
        _V5,
        None,
        note="MRTR: only tools/call, resources/read and prompts/get may answer it",
        spec=_doc(_V5, "basic/patterns/mrtr"),
        schema=("InputRequiredResult", "inputRequests"),
    ),
    _field(
        "InputRequiredResult.requestState",
        _V5,
        None,
        note="MRTR: opaque, echoed exactly on the retry",
        spec=_doc(_V5, "basic/patterns/mrtr"),
        schema=("InputRequiredResult", "requestState"),
    ),
    _field(
        "inputResponses",
        _V5,
        None,
        note="MRTR retry params (tools/call, prompts/get, resources/read)",
        spec=_doc(_V5, "basic/patterns/mrtr"),
        schema=("CallToolRequest", "params", "inputResponses"),
    ),
    _field(
        "CallToolResult.isError",
        _V1,
        None,
        note="tool failure reported in the result",
        spec=_doc(_V1, "server/tools"),
        schema=("CallToolResult", "isError"),
    ),
    _field(
        "CallToolResult.structuredContent",
        _V3,
        None,
        note="a JSON object until 2025-11-25; any JSON value in 2026-07-28",
        spec=_doc(_V3, "server/tools"),
        schema=("CallToolResult", "structuredContent"),
    ),
    _field(
        "Tool.outputSchema",
        _V3,
        None,
        note="object schema until 2025-11-25; any 2020-12 schema in 2026-07-28",
        spec=_doc(_V3, "server/tools"),
        schema=("Tool", "outputSchema"),
    ),
    _field(
        "Tool.title",
        _V3,
        None,
        note="BaseMetadata.title",
        spec=_doc(_V3, "changelog"),
        schema=("Tool", "title"),
    ),
    _field(
        "Tool.icons",
        _V4,
        None,
        note="Icon list",
        spec=_doc(_V4, "basic/index"),
        schema=("Tool", "icons"),
    ),
    _field(
        "Tool.annotations",
        _V2,
        None,
        note="ToolAnnotations: title and the read-only/destructive/idempotent/open-world hints",
        spec=_doc(_V2, "changelog"),
        schema=("Tool", "annotations"),
    ),
    _field(
        "Tool.execution",
        _V4,
        _V5,
        note="execution.taskSupport forbidden | optional | required",
        spec=_doc(_V4, "server/tools"),
        schema=("Tool", "execution"),
    ),
    _field(
        "Tool._meta",
        _V3,
        None,
        note="widespread _meta",
        spec=_doc(_V3, "changelog"),
        schema=("Tool", "_meta"),
    ),
    _field(
        "Prompt.title",
        _V3,
        None,
        note="BaseMetadata.title",
        spec=_doc(_V3, "changelog"),
        schema=("Prompt", "title"),
    ),
    _field(
        "Resource.title",
        _V3,
        None,
        note="BaseMetadata.title",
        spec=_doc(_V3, "changelog"),
        schema=("Resource", "title"),
    ),
    _field(
        "ResourceTemplate.title",
        _V3,
        None,
        note="BaseMetadata.title",
        spec=_doc(_V3, "changelog"),
        schema=("ResourceTemplate", "title"),
    ),
    _field(
        "Prompt.icons",
        _V4,
        None,
        note="Icon list",
        spec=_doc(_V4, "basic/index"),
        schema=("Prompt", "icons"),
    ),
    _field(
        "Resource.icons",
        _V4,
        None,
        note="Icon list",
        spec=_doc(_V4, "basic/index"),
        schema=("Resource", "icons"),
    ),
    _field(
        "ResourceTemplate.icons",
        _V4,
        None,
        note="Icon list",
        spec=_doc(_V4, "basic/index"),
        schema=("ResourceTemplate", "icons"),
    ),
    _field(
        "ResourceLink.icons",
        _V4,
        None,
        note="Icon list",
        spec=_doc(_V4, "basic/index"),
        schema=("ResourceLink", "icons"),
    ),
    _field(
        "Implementation.title",
        _V3,
        None,
        note="BaseMetadata.title",
        spec=_doc(_V3, "changelog"),
        schema=("Implementation", "title"),
    ),
    _field(
        "Implementation.description",
        _V4,
        None,
        note="free text about the client or server",
        spec=_ts(_V4),
        schema=("Implementation", "description"),
    ),
    _field(
        "Implementation.icons",
        _V4,
        None,
        note="Icon list",
        spec=_ts(_V4),
        schema=("Implementation", "icons"),
    ),
    _field(
        "Implementation.websiteUrl",
        _V4,
        None,
        note="home page of the client or server",
        spec=_ts(_V4),
        schema=("Implementation", "websiteUrl"),
    ),
    _field(
        "annotations",
        _V1,
        None,
        note="audience/priority on content and resources: the Annotated mixin in 2024-11-05, "
        "the Annotations type from 2025-03-26",
        spec=_ts(_V1),
        schema=("TextContent", "annotations"),
    ),
    _field(
        "Annotations.lastModified",
        _V3,
        None,
        note="ISO 8601 timestamp",
        spec=_doc(_V3, "changelog"),
        schema=("TextContent", "annotations", "lastModified"),
    ),
    _field(
        "content._meta",
        _V3,
        None,
        note="_meta on content blocks; 2026-07-28: typed MetaObject",
        spec=_doc(_V3, "changelog"),
        schema=("TextContent", "_meta"),
    ),
    _field(
        "content:text", _V1, None, note="TextContent", spec=_ts(_V1), schema=("TextContent", "type")
    ),
    _field(
        "content:image",
        _V1,
        None,
        note="ImageContent",
        spec=_ts(_V1),
        schema=("ImageContent", "type"),
    ),
    _field(
        "content:resource",
        _V1,
        None,
        note="EmbeddedResource",
        spec=_ts(_V1),
        schema=("EmbeddedResource", "type"),
    ),
    _field(
        "content:audio",
        _V2,
        None,
        note="AudioContent",
        spec=_ts(_V2),
        schema=("AudioContent", "type"),
    ),
    _field(
        "content:resource_link",
        _V3,
        None,
        note="ResourceLink, part of the ContentBlock union",
        spec=_doc(_V3, "server/tools"),
        schema=("ResourceLink", "type"),
    ),
    _field(
        "content:tool_use",
        _V4,
        None,
        note="sampling only",
        spec=_doc(_V4, "client/sampling"),
        schema=("ToolUseContent", "type"),
    ),
    _field(
        "content:tool_result",
        _V4,
        None,
        note="sampling only; a message holding tool results holds nothing else",
        spec=_doc(_V4, "client/sampling"),
        schema=("ToolResultContent", "type"),
    ),
    _field(
        "ProgressNotification.message",
        _V2,
        None,
        note="human-readable progress text",
        spec=_doc(_V2, "changelog"),
        schema=("ProgressNotification", "params", "message"),
    ),
    _field(
        "CompleteRequest.params.context",
        _V3,
        None,
        note="already-resolved arguments",
        spec=_doc(_V3, "server/utilities/completion"),
        schema=("CompleteRequest", "params", "context"),
    ),
    _field(
        "ElicitRequest.params.mode",
        _V4,
        None,
        note="form | url; absent means form",
        spec=_doc(_V4, "client/elicitation"),
        schema=("ElicitRequest", "params", "mode"),
    ),
    _field(
        "ElicitRequestURLParams.elicitationId",
        _V4,
        _V5,
        note="correlates notifications/elicitation/complete; 2026-07-28 correlates by requestState",
        spec=_doc(_V5, "client/elicitation"),
        schema=("ElicitRequestURLParams", "elicitationId"),
    ),
    _field(
        "elicitation enums: titled and multi-select",
        _V4,
        None,
        note="SEP-1330; LegacyTitledEnumSchema keeps enumNames",
        spec=_doc(_V4, "client/elicitation"),
        schema=("TitledMultiSelectEnumSchema",),
    ),
    _field(
        "elicitation defaults",
        _V4,
        None,
        note="SEP-1034: every primitive may carry a default",
        spec=_doc(_V4, "client/elicitation"),
        schema=("StringSchema", "default"),
    ),
    _field(
        "ElicitResult.content string[]",
        _V4,
        None,
        note="multi-select answers",
        spec=_ts(_V4),
    ),
    _field(
        "CreateMessageRequest.params.tools",
        _V4,
        None,
        note="gated on sampling.tools",
        spec=_doc(_V4, "client/sampling"),
        schema=("CreateMessageRequest", "params", "tools"),
    ),
    _field(
        "CreateMessageRequest.params.toolChoice",
        _V4,
        None,
        note="auto | required | none",
        spec=_doc(_V4, "client/sampling"),
        schema=("CreateMessageRequest", "params", "toolChoice"),
    ),
    _field(
        "includeContext thisServer/allServers",
        _V1,
        None,
        note="soft-deprecated in 2025-11-25 unless sampling.context is declared",
        spec=_doc(_V5, "deprecated"),
        schema=("CreateMessageRequest", "params", "includeContext"),
        deprecated_in=_V4,
    ),
    _field(
        "CreateMessageResult.content array",
        _V4,
        None,
        note="a single block or an array",
        spec=_ts(_V4),
    ),
    _field(
        "CallToolRequest.params.task",
        _V4,
        _V5,
        note="task augmentation; ignored under the 2026-07-28 extension",
        spec=_doc(_V4, "basic/utilities/tasks"),
        schema=("CallToolRequest", "params", "task"),
    ),
    _field(
        "CreateMessageRequest.params.task",
        _V4,
        _V5,
        note="client-hosted task augmentation",
        spec=_doc(_V4, "basic/utilities/tasks"),
        schema=("CreateMessageRequest", "params", "task"),
    ),
    _field(
        "ElicitRequest.params.task",
        _V4,
        _V5,
        note="client-hosted task augmentation",
        spec=_doc(_V4, "basic/utilities/tasks"),
        schema=("ElicitRequest", "params", "task"),
    ),
    _field(
        "CreateTaskResult.task",
        _V4,
        _V5,
        note="{task: Task}; the extension returns a flat Result & Task instead",
        spec=_doc(_V4, "basic/utilities/tasks"),
        schema=("CreateTaskResult", "task"),
    ),
    _field(
        "Task.ttl",
        _V4,
        _V5,
        note="the extension renames it ttlMs (and pollInterval to pollIntervalMs)",
        spec=_ts(_V4),
        schema=("Task", "ttl"),
    ),
    _field(
        '_meta["io.modelcontextprotocol/related-task"]',
        _V4,
        _V5,
        note="on tasks/result answers and task-related messages",
        spec=_doc(_V4, "basic/utilities/tasks"),
        schema=("RelatedTaskMetadata",),
    ),
    _field(
        '_meta["io.modelcontextprotocol/protocolVersion"]',
        _V5,
        None,
        note="required on every request",
        spec=_doc(_V5, "basic/index"),
        schema=("RequestMetaObject", "io.modelcontextprotocol/protocolVersion"),
    ),
    _field(
        '_meta["io.modelcontextprotocol/clientCapabilities"]',
        _V5,
        None,
        note="required on every request; {} declares nothing",
        spec=_doc(_V5, "basic/index"),
        schema=("RequestMetaObject", "io.modelcontextprotocol/clientCapabilities"),
    ),
    _field(
        '_meta["io.modelcontextprotocol/clientInfo"]',
        _V5,
        None,
        note="optional, SHOULD be sent",
        spec=_doc(_V5, "basic/index"),
        schema=("RequestMetaObject", "io.modelcontextprotocol/clientInfo"),
    ),
    _field(
        '_meta["io.modelcontextprotocol/logLevel"]',
        _V5,
        None,
        note="replaces logging/setLevel; no log notifications without it",
        spec=_doc(_V5, "server/utilities/logging"),
        schema=("RequestMetaObject", "io.modelcontextprotocol/logLevel"),
        deprecated_in=_V5,
    ),
    _field(
        '_meta["io.modelcontextprotocol/serverInfo"]',
        _V5,
        None,
        note="server identity on every result (SHOULD)",
        spec=_doc(_V5, "basic/index"),
        schema=("ResultMetaObject", "io.modelcontextprotocol/serverInfo"),
    ),
    _field(
        '_meta["io.modelcontextprotocol/subscriptionId"]',
        _V5,
        None,
        note="required on everything sent on a subscriptions/listen stream",
        spec=_doc(_V5, "basic/patterns/subscriptions"),
        schema=("NotificationMetaObject", "io.modelcontextprotocol/subscriptionId"),
    ),
    _field(
        "_meta traceparent/tracestate/baggage",
        _V5,
        None,
        note="OpenTelemetry keys, exempt from the prefix rule (SEP-414)",
        spec=_doc(_V5, "basic/index"),
    ),
    _field(
        "SubscriptionFilter.taskIds",
        _V5,
        None,
        note="tasks extension: ask for notifications/tasks",
        spec=_TASKS_SPEC,
        extension=TASKS_EXTENSION,
    ),
    _field(
        "Result.resultType=task",
        _V5,
        None,
        note="tasks extension: tools/call answered with a flat CreateTaskResult",
        spec=_TASKS_SPEC,
        extension=TASKS_EXTENSION,
    ),
    _field(
        "Task.ttlMs",
        _V5,
        None,
        note="tasks extension: number or null (not the cache ttlMs)",
        spec=_TASKS_SPEC,
        extension=TASKS_EXTENSION,
    ),
)

_TR = Kind.TRANSPORT
_HTTP_2025 = _doc(_V2, "basic/transports")
_HTTP_2026 = _doc(_V5, "basic/transports/streamable-http")

_TRANSPORTS: tuple[Feature, ...] = (
    _plain(
        _TR,
        "stdio",
        _V1,
        None,
        note="newline-delimited messages",
        spec=_doc(_V1, "basic/transports"),
    ),
    _plain(
        _TR,
        "http+sse",
        _V1,
        None,
        note="GET SSE endpoint plus the POST URI from its endpoint event",
        spec=_doc(_V5, "deprecated"),
        deprecated_in=_V2,
    ),
    _plain(
        _TR,
        "streamable http",
        _V2,
        None,
        note="one endpoint; 2026-07-28: POST only",
        spec=_HTTP_2025,
    ),
    _plain(
        _TR,
        "streamable http GET stream",
        _V2,
        _V5,
        note="server-initiated stream; 2026-07-28 answers GET with 405",
        spec=_HTTP_2026,
    ),
    _plain(
        _TR,
        "streamable http DELETE",
        _V2,
        _V5,
        note="ends a session; 2026-07-28 answers DELETE with 405",
        spec=_HTTP_2026,
    ),
    _plain(
        _TR,
        "Mcp-Session-Id",
        _V2,
        _V5,
        note="minted at initialize; spelled MCP-Session-Id in 2025-11-25; 2026-07-28 ignores it",
        spec=_HTTP_2026,
    ),
    _plain(
        _TR,
        "Last-Event-ID",
        _V2,
        _V5,
        note="SSE resumption by GET; 2026-07-28 ignores it",
        spec=_HTTP_2026,
    ),
    _plain(
        _TR,
        "sse polling",
        _V4,
        _V5,
        note="priming event and retry (SEP-1699); gone with resumption (inferred, not stated)",
        spec=_doc(_V4, "basic/transports"),
    ),
    _plain(
        _TR,
        JSONRPC_BATCH,
        _V2,
        _V3,
        note="MAY send, MUST accept; never with initialize",
        spec=_doc(_V2, "basic/index"),
    ),
    _plain(
        _TR,
        "MCP-Protocol-Version",
        _V3,
        None,
        note="2025-03-26 sent it only during auth discovery; "
        "2026-07-28: every POST, must match _meta (else -32020)",
        spec=_doc(_V3, "basic/transports"),
    ),
    _plain(
        _TR,
        "Mcp-Method",
        _V5,
        None,
        note="required on every request POST",
        spec=_HTTP_2026,
    ),
    _plain(
        _TR,
        "Mcp-Name",
        _V5,
        None,
        note="tools/call, prompts/get (params.name), resources/read (params.uri), "
        "extension task methods (params.taskId)",
        spec=_HTTP_2026,
    ),
    _plain(
        _TR,
        "Mcp-Param-*",
        _V5,
        None,
        note="from x-mcp-header tool arguments; =?base64?...?= for unsafe values",
        spec=_HTTP_2026,
    ),
    _plain(
        _TR,
        "origin validation",
        _V1,
        None,
        note="MUST validate Origin",
        spec=_doc(_V1, "basic/transports"),
    ),
    _plain(
        _TR,
        "origin 403",
        _V4,
        None,
        note="an invalid Origin gets 403",
        spec=_doc(_V4, "basic/transports"),
    ),
)

_EC = Kind.ERROR_CODE
_BASIC_2026 = _doc(_V5, "basic/index")

_ERROR_CODES: tuple[Feature, ...] = (
    _plain(_EC, "-32700", _V1, None, note="parse error", spec=_BASIC_2026),
    _plain(_EC, "-32600", _V1, None, note="invalid request", spec=_BASIC_2026),
    _plain(
        _EC,
        "-32601",
        _V1,
        None,
        note="method not found, or behind a capability that was not advertised",
        spec=_BASIC_2026,
    ),
    _plain(
        _EC,
        "-32602",
        _V1,
        None,
        note="invalid params; 2026-07-28 also for resource not found",
        spec=_BASIC_2026,
    ),
    _plain(_EC, "-32603", _V1, None, note="internal error", spec=_BASIC_2026),
    _plain(
        _EC,
        "-32002",
        _V1,
        _V5,
        note="resource not found; modern peers MUST NOT emit it but SHOULD accept it",
        spec=_doc(_V5, "server/resources"),
    ),
    _plain(
        _EC,
        "-1",
        _V1,
        _V5,
        note="user rejected sampling (the spec's example)",
        spec=_doc(_V1, "client/sampling"),
    ),
    _plain(
        _EC,
        "-32042",
        _V4,
        _V5,
        note="URLElicitationRequiredError, data.elicitations",
        spec=_doc(_V4, "client/elicitation"),
    ),
    _plain(
        _EC,
        "-32020",
        _V5,
        None,
        note="HeaderMismatch (HTTP 400)",
        spec=_HTTP_2026,
    ),
    _plain(
        _EC,
        "-32021",
        _V5,
        None,
        note="MissingRequiredClientCapability (HTTP 400), data.requiredCapabilities",
        spec=_BASIC_2026,
    ),
    _plain(
        _EC,
        "-32022",
        _V5,
        None,
        note="UnsupportedProtocolVersion (HTTP 400), data{supported, requested}",
        spec=_doc(_V5, "basic/versioning"),
    ),
)

_AU = Kind.AUTHORIZATION

_AUTHORIZATION: tuple[Feature, ...] = (
    _plain(
        _AU,
        "oauth 2.1",
        _V2,
        None,
        note="HTTP transports; stdio takes credentials from the environment",
        spec=_doc(_V2, "basic/authorization"),
    ),
    _plain(
        _AU,
        "default authorization endpoints",
        _V2,
        _V3,
        note="/authorize, /token, /register when metadata is missing",
        spec=_doc(_V2, "basic/authorization"),
    ),
    _plain(
        _AU,
        "dynamic client registration",
        _V2,
        None,
        note="RFC 7591",
        spec=_doc(_V5, "deprecated"),
        deprecated_in=_V5,
    ),
    _plain(
        _AU,
        "protected resource metadata",
        _V3,
        None,
        note="RFC 9728; WWW-Authenticate on 401",
        spec=_doc(_V3, "basic/authorization"),
    ),
    _plain(
        _AU,
        "resource indicator",
        _V3,
        None,
        note="RFC 8707 resource parameter; audience-checked tokens",
        spec=_doc(_V3, "basic/authorization"),
    ),
    _plain(
        _AU,
        "oidc discovery",
        _V4,
        None,
        note="OpenID Connect Discovery alongside RFC 8414",
        spec=_doc(_V4, "basic/authorization"),
    ),
    _plain(
        _AU,
        "client id metadata documents",
        _V4,
        None,
        note="CIMD, preferred over DCR",
        spec=_doc(_V4, "basic/authorization"),
    ),
    _plain(
        _AU,
        "step-up scope",
        _V4,
        None,
        note="403 insufficient_scope",
        spec=_doc(_V4, "basic/authorization"),
    ),
    _plain(
        _AU,
        "issuer validation",
        _V5,
        None,
        note="RFC 9207 iss; application_type on DCR; credentials keyed by issuer",
        spec="docs/specification/2026-07-28/basic/authorization/index.mdx",
    ),
)

_BE = Kind.BEHAVIOUR

_BEHAVIOURS: tuple[Feature, ...] = (
    _plain(
        _BE,
        "server-to-client requests",
        _V1,
        _V5,
        note="replaced by input_required results (MRTR)",
        spec=_doc(_V5, "basic/patterns/mrtr"),
    ),
    _plain(
        _BE,
        "per-request version and capabilities",
        _V5,
        None,
        note="no handshake; every request restates its version and capabilities in _meta",
        spec=_BASIC_2026,
    ),
    _plain(
        _BE,
        "multi round-trip requests",
        _V5,
        None,
        note="input_required, inputRequests, inputResponses, requestState",
        spec=_doc(_V5, "basic/patterns/mrtr"),
    ),
    _plain(
        _BE,
        "json schema 2020-12 default dialect",
        _V4,
        None,
        note="when $schema is absent",
        spec=_doc(_V4, "basic/index"),
    ),
    _plain(
        _BE,
        "client-hosted tasks",
        _V4,
        _V5,
        note="sampling and elicitation as tasks; the extension hosts tasks on servers only",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
)

#: Every row, in the order written above.
FEATURES: tuple[Feature, ...] = (
    _METHODS
    + _INPUT_REQUESTS
    + _NOTIFICATIONS
    + _CAPABILITIES
    + _FIELDS
    + _TRANSPORTS
    + _ERROR_CODES
    + _AUTHORIZATION
    + _BEHAVIOURS
)

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


def method_in(
    method: str,
    revision: Revision,
    *,
    direction: Direction | None = None,
    extensions: Collection[str] = (),
) -> bool:
    """Whether C{method} is a JSON-RPC request in C{revision}."""
    if direction is None and not extensions:
        return (_METHOD, method) in _CORE[revision]
    return MATRIX.has(_METHOD, method, revision, direction=direction, extensions=extensions)


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
    if direction is None and not extensions:
        return (_NOTIFICATION, name) in _CORE[revision]
    return MATRIX.has(_NOTIFICATION, name, revision, direction=direction, extensions=extensions)


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
    if not extensions:
        return (_FIELD, name) in _CORE[revision]
    return MATRIX.has(_FIELD, name, revision, extensions=extensions)


def content_type_in(content_type: str, revision: Revision) -> bool:
    """Whether a content block of C{type} C{content_type} exists in C{revision}."""
    return MATRIX.has(Kind.FIELD, f"content:{content_type}", revision)


def transport_in(name: str, revision: Revision) -> bool:
    """Whether transport mechanism C{name} belongs to C{revision}."""
    return MATRIX.has(Kind.TRANSPORT, name, revision)


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
