"""
The revision matrix: what each revision has, checked against the digest's
tables and, row by row, against the official C{schema.json} of every revision.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from mcpx.spec import matrix
from mcpx.spec.feature import (
    JSONRPC_BATCH,
    TASKS_EXTENSION,
    Direction,
    Feature,
    Kind,
    MatrixError,
)
from mcpx.spec.matrix import MATRIX, RevisionMatrix
from mcpx.spec.matrix_rows import FEATURES
from mcpx.spec.policy import DEFAULT_POLICY, ConflictPolicy
from mcpx.spec.revision import ALL_REVISIONS, LEGACY_REVISIONS, Revision

V1 = Revision.V2024_11_05
V2 = Revision.V2025_03_26
V3 = Revision.V2025_06_18
V4 = Revision.V2025_11_25
V5 = Revision.V2026_07_28

C2S = Direction.CLIENT_TO_SERVER
S2C = Direction.SERVER_TO_CLIENT

#: The requests a modern-only server refuses with -32601 (digest section 2).
REMOVED_IN_2026 = frozenset(
    {
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "tasks/result",
        "tasks/list",
    }
)


def present(kind: Kind, name: str, **kwargs: Any) -> list[Revision]:
    """The revisions in which the matrix says C{name} exists."""
    return [rev for rev in ALL_REVISIONS if matrix.has(kind, name, rev, **kwargs)]


class RemovalTests(SynchronousTestCase):
    """What 2026-07-28 removed, and that nothing older lost a method."""

    def test_removed_in_2026(self) -> None:
        """A 2026-07-28 peer gets -32601 for every request the digest lists as removed."""
        for method in REMOVED_IN_2026:
            self.assertTrue(matrix.removed_for(method, V5), method)
            self.assertFalse(matrix.method_in(method, V5), method)
            self.assertIn(method, matrix.removed_methods(V5))

    def test_server_requests_removed_in_2026(self) -> None:
        """The server-to-client requests are removed as JSON-RPC requests in 2026-07-28."""
        for method in ("sampling/createMessage", "roots/list", "elicitation/create"):
            self.assertTrue(matrix.removed_for(method, V5), method)

    def test_removed_set_is_exactly_those(self) -> None:
        """Nothing else is removed for 2026-07-28: the removals are the digest's list."""
        self.assertEqual(
            matrix.removed_methods(V5),
            REMOVED_IN_2026 | {"sampling/createMessage", "roots/list", "elicitation/create"},
        )

    def test_older_revisions_keep_them(self) -> None:
        """Every revision before 2026-07-28 still has the removed methods from their floor."""
        for method in REMOVED_IN_2026:
            floor = matrix.lookup(Kind.METHOD, method).floor
            for rev in LEGACY_REVISIONS:
                self.assertFalse(matrix.removed_for(method, rev), (method, rev))
                self.assertEqual(matrix.method_in(method, rev), rev >= floor, (method, rev))

    def test_no_legacy_revision_removes_a_method(self) -> None:
        """No legacy revision answers -32601 for a method an older legacy revision had."""
        for rev in LEGACY_REVISIONS:
            self.assertEqual(matrix.removed_methods(rev), frozenset(), rev)

    def test_newer_method_is_not_removed_for_older_peer(self) -> None:
        """A method from a newer revision is not 'removed' for an older peer."""
        for rev in LEGACY_REVISIONS:
            self.assertFalse(matrix.removed_for("server/discover", rev))
            self.assertFalse(matrix.removed_for("subscriptions/listen", rev))
        self.assertFalse(matrix.removed_for("tools/call", V5))
        self.assertFalse(matrix.removed_for("no/such/method", V5))

    def test_initialize_removed_for_modern(self) -> None:
        """C{initialize} is removed for 2026-07-28 and present in every legacy revision."""
        self.assertTrue(matrix.removed_for("initialize", V5))
        self.assertEqual(present(Kind.METHOD, "initialize"), list(LEGACY_REVISIONS))

    def test_extension_methods_are_not_removed(self) -> None:
        """
        C{tasks/get} and C{tasks/cancel} moved to the tasks extension in 2026-07-28:
        not removed, not core, and the extension that supplies them is named.
        """
        for method in ("tasks/get", "tasks/cancel"):
            self.assertFalse(matrix.removed_for(method, V5))
            self.assertFalse(matrix.method_in(method, V5))
            self.assertTrue(matrix.method_in(method, V5, extensions=[TASKS_EXTENSION]))
            self.assertEqual(matrix.extension_for(Kind.METHOD, method, V5), TASKS_EXTENSION)
        self.assertIsNone(matrix.extension_for(Kind.METHOD, "tasks/get", V4))
        self.assertIsNone(matrix.extension_for(Kind.METHOD, "tasks/result", V5))

    def test_removed_notifications(self) -> None:
        """The notifications 2026-07-28 dropped are removed for it, and only for it."""
        for name in (
            "notifications/initialized",
            "notifications/roots/list_changed",
            "notifications/elicitation/complete",
            "notifications/tasks/status",
        ):
            self.assertTrue(matrix.removed_for(name, V5, Kind.NOTIFICATION), name)
            self.assertFalse(matrix.removed_for(name, V4, Kind.NOTIFICATION), name)
        self.assertFalse(matrix.removed_for("notifications/progress", V5, Kind.NOTIFICATION))

    def test_progress_from_client_removed(self) -> None:
        """2026-07-28 keeps progress from the server but no longer from the client."""
        self.assertTrue(matrix.notification_in("notifications/progress", V5))
        self.assertTrue(matrix.notification_in("notifications/progress", V5, direction=S2C))
        self.assertFalse(matrix.notification_in("notifications/progress", V5, direction=C2S))
        self.assertTrue(matrix.notification_in("notifications/progress", V4, direction=C2S))
        self.assertTrue(
            matrix.notification_in("notifications/progress", V4, direction=Direction.BOTH)
        )
        self.assertFalse(
            matrix.notification_in("notifications/progress", V5, direction=Direction.BOTH)
        )


class FloorTests(SynchronousTestCase):
    """When things arrived, per the digest's tables."""

    def test_batching_only_2025_03_26(self) -> None:
        """JSON-RPC batches belong to 2025-03-26 alone."""
        self.assertEqual([rev for rev in ALL_REVISIONS if matrix.batch_allowed(rev)], [V2])
        self.assertEqual(present(Kind.TRANSPORT, JSONRPC_BATCH), [V2])

    def test_2025_06_18_fields(self) -> None:
        """Structured output, output schemas, titles and resource links start in 2025-06-18."""
        for name in (
            "CallToolResult.structuredContent",
            "Tool.outputSchema",
            "Tool.title",
            "content:resource_link",
        ):
            self.assertEqual(present(Kind.FIELD, name), [V3, V4, V5], name)
        self.assertFalse(matrix.content_type_in("resource_link", V2))
        self.assertTrue(matrix.content_type_in("resource_link", V3))

    def test_2025_03_26_additions(self) -> None:
        """Audio, tool annotations and the completions capability start in 2025-03-26."""
        self.assertEqual(present(Kind.FIELD, "content:audio"), [V2, V3, V4, V5])
        self.assertEqual(present(Kind.FIELD, "Tool.annotations"), [V2, V3, V4, V5])
        self.assertEqual(present(Kind.SERVER_CAPABILITY, "completions"), [V2, V3, V4, V5])
        self.assertEqual(present(Kind.FIELD, "ProgressNotification.message"), [V2, V3, V4, V5])
        self.assertFalse(matrix.capability_in("server", "completions", V1))
        self.assertTrue(matrix.capability_in("server", "completions", V2))

    def test_content_annotations_from_2024(self) -> None:
        """
        Content C{annotations} (audience, priority) are in the 2024-11-05 schema
        already, through the C{Annotated} mixin; C{lastModified} came in 2025-06-18.
        """
        self.assertEqual(present(Kind.FIELD, "annotations"), list(ALL_REVISIONS))
        self.assertEqual(present(Kind.FIELD, "Annotations.lastModified"), [V3, V4, V5])

    def test_elicitation(self) -> None:
        """Elicitation starts in 2025-06-18; url mode and its capability in 2025-11-25."""
        self.assertEqual(present(Kind.METHOD, "elicitation/create"), [V3, V4])
        self.assertEqual(present(Kind.CLIENT_CAPABILITY, "elicitation"), [V3, V4, V5])
        self.assertEqual(present(Kind.CLIENT_CAPABILITY, "elicitation.url"), [V4, V5])
        self.assertEqual(present(Kind.FIELD, "ElicitRequest.params.mode"), [V4, V5])
        self.assertEqual(present(Kind.FIELD, "ElicitRequestURLParams.elicitationId"), [V4])
        self.assertTrue(matrix.capability_in("client", "elicitation.url", V4))
        self.assertFalse(matrix.capability_in("client", "elicitation.url", V3))

    def test_input_request_forms(self) -> None:
        """The former server requests exist as C{inputRequests} entries from 2026-07-28."""
        for method in ("sampling/createMessage", "roots/list", "elicitation/create"):
            self.assertEqual(present(Kind.INPUT_REQUEST, method), [V5], method)
            self.assertTrue(matrix.input_request_in(method, V5))
            self.assertFalse(matrix.method_in(method, V5))
        self.assertFalse(matrix.input_request_in("tools/call", V5))

    def test_modern_only(self) -> None:
        """resultType, server/discover and subscriptions/listen exist only in 2026-07-28."""
        self.assertEqual(present(Kind.FIELD, "Result.resultType"), [V5])
        self.assertEqual(present(Kind.METHOD, "server/discover"), [V5])
        self.assertEqual(present(Kind.METHOD, "subscriptions/listen"), [V5])
        self.assertEqual(present(Kind.FIELD, "CacheableResult.ttlMs"), [V5])
        self.assertEqual(present(Kind.FIELD, "CacheableResult.cacheScope"), [V5])
        self.assertEqual(
            present(Kind.NOTIFICATION, "notifications/subscriptions/acknowledged"), [V5]
        )

    def test_core_tasks_only_2025_11_25(self) -> None:
        """Core tasks (methods, notification, capabilities, fields) are 2025-11-25 only."""
        for method in ("tasks/get", "tasks/result", "tasks/list", "tasks/cancel"):
            self.assertEqual(present(Kind.METHOD, method), [V4], method)
            self.assertEqual(matrix.lookup(Kind.METHOD, method).direction, Direction.BOTH)
        self.assertEqual(present(Kind.NOTIFICATION, "notifications/tasks/status"), [V4])
        self.assertEqual(present(Kind.CLIENT_CAPABILITY, "tasks"), [V4])
        self.assertEqual(present(Kind.SERVER_CAPABILITY, "tasks"), [V4])
        self.assertEqual(present(Kind.FIELD, "Tool.execution"), [V4])

    def test_tasks_extension(self) -> None:
        """
        The extension's methods exist in 2026-07-28 only when the extension is in
        force, are sent by the client only, and C{tasks/update} is theirs alone.
        """
        ext = [TASKS_EXTENSION]
        expected = {
            # method: (present with the extension, of which sent by the server)
            "tasks/get": ([V4, V5], [V4]),
            "tasks/cancel": ([V4, V5], [V4]),
            "tasks/update": ([V5], []),
        }
        for method, (with_ext, from_server) in expected.items():
            self.assertEqual(present(Kind.METHOD, method, extensions=ext), with_ext, method)
            self.assertEqual(
                present(Kind.METHOD, method, extensions=ext, direction=S2C), from_server, method
            )
            row = matrix.lookup(Kind.METHOD, method, extension=TASKS_EXTENSION)
            self.assertEqual((row.floor, row.removed_in, row.direction), (V5, None, C2S))
        self.assertFalse(matrix.method_in("tasks/update", V5))
        self.assertTrue(
            matrix.notification_in("notifications/tasks", V5, extensions=[TASKS_EXTENSION])
        )
        self.assertFalse(matrix.notification_in("notifications/tasks", V5))
        self.assertFalse(matrix.method_in("tasks/update", V5, extensions=["example.com/other"]))

    def test_extensions_capability(self) -> None:
        """The C{extensions} capability exists on both sides in 2026-07-28 only."""
        self.assertEqual(present(Kind.CLIENT_CAPABILITY, "extensions"), [V5])
        self.assertEqual(present(Kind.SERVER_CAPABILITY, "extensions"), [V5])

    def test_error_codes(self) -> None:
        """-32042 is 2025-11-25 only, -32002 ends with it, and -32020..-32022 are modern."""
        self.assertEqual(present(Kind.ERROR_CODE, "-32042"), [V4])
        self.assertEqual(present(Kind.ERROR_CODE, "-32002"), list(LEGACY_REVISIONS))
        for code in (-32020, -32021, -32022):
            self.assertEqual([r for r in ALL_REVISIONS if matrix.error_code_in(code, r)], [V5])
        for code in (-32700, -32600, -32601, -32602, -32603):
            self.assertTrue(all(matrix.error_code_in(code, r) for r in ALL_REVISIONS))

    def test_transports(self) -> None:
        """Sessions, the GET stream and resumption end in 2026-07-28; headers arrive on time."""
        legacy_http = [V2, V3, V4]
        for name in ("streamable http GET stream", "Mcp-Session-Id", "Last-Event-ID"):
            self.assertEqual(present(Kind.TRANSPORT, name), legacy_http, name)
        self.assertEqual(present(Kind.TRANSPORT, "MCP-Protocol-Version"), [V3, V4, V5])
        self.assertEqual(present(Kind.TRANSPORT, "Mcp-Method"), [V5])
        self.assertEqual(present(Kind.TRANSPORT, "Mcp-Name"), [V5])
        self.assertTrue(matrix.has(Kind.TRANSPORT, "http+sse", V1))
        self.assertEqual(matrix.lookup(Kind.TRANSPORT, "http+sse").deprecated_in, V2)

    def test_listings(self) -> None:
        """C{introduced_in} and C{removed_in} list exactly the rows with that floor or end."""
        for rev in ALL_REVISIONS:
            self.assertEqual(
                set(matrix.introduced_in(rev)), {f for f in FEATURES if f.floor is rev}
            )
            self.assertEqual(
                set(matrix.removed_in(rev)), {f for f in FEATURES if f.removed_in is rev}
            )
        self.assertIn(matrix.lookup(Kind.METHOD, "server/discover"), matrix.introduced_in(V5))
        self.assertIn(matrix.lookup(Kind.METHOD, "ping"), matrix.removed_in(V5))
        self.assertIn(matrix.lookup(Kind.TRANSPORT, JSONRPC_BATCH), matrix.removed_in(V3))
        self.assertEqual(matrix.removed_in(V1), ())

    def test_plain_strings_work_as_kinds(self) -> None:
        """Callers may spell the kind as a plain string."""
        self.assertTrue(matrix.has("method", "tools/call", V1))  # type: ignore[arg-type]
        self.assertEqual(matrix.lookup("method", "ping").name, "ping")  # type: ignore[arg-type]


class LookupTests(SynchronousTestCase):
    """Finding one row."""

    def test_lookup(self) -> None:
        """A known name gives its row, with floor, end, direction and a spec path."""
        row = matrix.lookup(Kind.METHOD, "ping")
        self.assertEqual((row.floor, row.removed_in, row.direction), (V1, V5, Direction.BOTH))
        self.assertTrue(row.spec.startswith("docs/specification/"))

    def test_unknown_name(self) -> None:
        """An unknown name raises a KeyError that names the kind and the name."""
        error = self.assertRaises(KeyError, matrix.lookup, Kind.METHOD, "tools/explode")
        self.assertIn("tools/explode", str(error))
        self.assertIn("method", str(error))

    def test_extension_row_needs_its_extension(self) -> None:
        """tasks/update has no core row: asking without the extension is a KeyError."""
        error = self.assertRaises(KeyError, matrix.lookup, Kind.METHOD, "tasks/update")
        self.assertIn("tasks/update", str(error))
        self.assertIn(TASKS_EXTENSION, str(error))

    def test_one_row_per_direction(self) -> None:
        """A name with a row per direction needs C{direction=}; the error says so."""
        error = self.assertRaises(
            KeyError, matrix.lookup, Kind.NOTIFICATION, "notifications/progress"
        )
        self.assertIn("direction", str(error))
        client = matrix.lookup(Kind.NOTIFICATION, "notifications/progress", direction=C2S)
        server = matrix.lookup(Kind.NOTIFICATION, "notifications/progress", direction=S2C)
        self.assertEqual((client.removed_in, server.removed_in), (V5, None))
        both = matrix.lookup(Kind.METHOD, "ping", direction=Direction.BOTH)
        self.assertEqual(both.direction, Direction.BOTH)
        self.assertEqual(matrix.lookup(Kind.METHOD, "ping", direction=C2S), both)
        self.assertRaises(KeyError, matrix.lookup, Kind.METHOD, "tools/call", direction=S2C)


class TableIntegrityTests(SynchronousTestCase):
    """The table refuses to contradict itself."""

    def test_removed_before_floor(self) -> None:
        """A row whose end is not after its floor is refused."""
        self.assertRaises(MatrixError, Feature, Kind.METHOD, "x", V3, V3, Direction.BOTH, "n", "s")
        self.assertRaises(MatrixError, Feature, Kind.METHOD, "x", V3, V2, Direction.BOTH, "n", "s")

    def test_deprecated_outside_life(self) -> None:
        """A deprecation outside the revisions that have the row is refused."""
        self.assertRaises(
            MatrixError,
            Feature,
            Kind.FIELD,
            "x",
            V3,
            V5,
            None,
            "n",
            "s",
            deprecated_in=V5,
        )

    def test_overlapping_rows(self) -> None:
        """Two rows that describe the same direction in the same revision are refused."""
        a = Feature(Kind.METHOD, "m", V1, V4, Direction.BOTH, "n", "s")
        b = Feature(Kind.METHOD, "m", V3, None, C2S, "n", "s")
        self.assertRaises(MatrixError, RevisionMatrix, [a, b])
        c = Feature(Kind.METHOD, "m", V4, None, C2S, "n", "s")
        RevisionMatrix([a, c])

    def test_every_row_cites_the_spec(self) -> None:
        """Every row has a note and a spec path."""
        for row in FEATURES:
            self.assertTrue(row.note, row)
            self.assertTrue(
                row.spec.startswith(("docs/specification/", "schema/", "ext-tasks:")), row
            )

    def test_digest_section_3_is_covered(self) -> None:
        """Every line of the digest's floor/ceiling matrix has a row."""
        wanted = [
            (Kind.METHOD, "initialize"),
            (Kind.NOTIFICATION, "notifications/initialized"),
            (Kind.BEHAVIOUR, "per-request version and capabilities"),
            (Kind.TRANSPORT, "stdio"),
            (Kind.TRANSPORT, "http+sse"),
            (Kind.TRANSPORT, "streamable http"),
            (Kind.TRANSPORT, "streamable http DELETE"),
            (Kind.TRANSPORT, "sse polling"),
            (Kind.TRANSPORT, "Mcp-Param-*"),
            (Kind.TRANSPORT, "origin validation"),
            (Kind.NOTIFICATION, "notifications/cancelled"),
            (Kind.FIELD, '_meta["io.modelcontextprotocol/logLevel"]'),
            (Kind.NOTIFICATION, "notifications/message"),
            (Kind.FIELD, "CreateMessageRequest.params.tools"),
            (Kind.CLIENT_CAPABILITY, "sampling.tools"),
            (Kind.CLIENT_CAPABILITY, "sampling.context"),
            (Kind.FIELD, "includeContext thisServer/allServers"),
            (Kind.BEHAVIOUR, "server-to-client requests"),
            (Kind.FIELD, "elicitation enums: titled and multi-select"),
            (Kind.FIELD, "elicitation defaults"),
            (Kind.METHOD, "completion/complete"),
            (Kind.FIELD, "CompleteRequest.params.context"),
            (Kind.FIELD, "content._meta"),
            (Kind.FIELD, "Tool.icons"),
            (Kind.FIELD, "Implementation.description"),
            (Kind.FIELD, "Implementation.websiteUrl"),
            (Kind.BEHAVIOUR, "json schema 2020-12 default dialect"),
            (Kind.BEHAVIOUR, "multi round-trip requests"),
            (Kind.FIELD, "InputRequiredResult.requestState"),
            (Kind.AUTHORIZATION, "oauth 2.1"),
            (Kind.AUTHORIZATION, "default authorization endpoints"),
            (Kind.AUTHORIZATION, "protected resource metadata"),
            (Kind.AUTHORIZATION, "oidc discovery"),
            (Kind.AUTHORIZATION, "dynamic client registration"),
            (Kind.AUTHORIZATION, "issuer validation"),
            (Kind.FIELD, "_meta traceparent/tracestate/baggage"),
        ]
        for kind, name in wanted:
            matrix.lookup(kind, name)
        self.assertEqual(present(Kind.AUTHORIZATION, "default authorization endpoints"), [V2])
        self.assertEqual(
            matrix.lookup(Kind.AUTHORIZATION, "dynamic client registration").deprecated_in, V5
        )


def schema_root() -> Path:
    """The shared folder of official schemas, from C{$MCPX_SHARED_DIR} or beside the repo."""
    shared = os.environ.get("MCPX_SHARED_DIR")
    base = Path(shared) if shared else Path(__file__).resolve().parents[3] / "shared"
    return base / "mcp-schemas"


@functools.cache
def load_schema(folder: str) -> dict[str, Any] | str:
    """The parsed C{schema.json}, or why it could not be read."""
    path = schema_root() / folder / "schema.json"
    try:
        with path.open(encoding="utf-8") as stream:
            document: dict[str, Any] = json.load(stream)
    except OSError as e:
        return (
            f"cannot read the official MCP schema {path} ({e.strerror}); the cross-check "
            "needs /work/shared/mcp-schemas/<rev>/schema.json, or set MCPX_SHARED_DIR "
            "to the folder that holds mcp-schemas/"
        )
    return document


class Schema:
    """Just enough of a C{schema.json} to ask what it defines."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.defs: dict[str, Any] = document.get("$defs") or document.get("definitions") or {}

    def method_const(self, node: Any) -> str | None:
        """The C{method} const of a definition, directly or in an C{allOf} part."""
        if not isinstance(node, dict):
            return None
        const = node.get("properties", {}).get("method", {}).get("const")
        if isinstance(const, str):
            return const
        for part in node.get("allOf", ()):
            found = self.method_const(part)
            if found is not None:
                return found
        return None

    def method_consts(self) -> dict[str, str]:
        """Definition name to method const, for every definition that has one."""
        found = {}
        for name, node in self.defs.items():
            const = self.method_const(node)
            if const is not None:
                found[name] = const
        return found

    def union(self, name: str) -> list[str]:
        """The method consts of a union definition's members (itself, if it is one message)."""
        node = self.defs.get(name)
        if node is None:
            return []
        own = self.method_const(node)
        if own is not None:
            return [own]
        members = []
        for member in [*node.get("anyOf", []), *node.get("oneOf", [])]:
            target = self.resolve(member)
            const = self.method_const(target)
            if const is not None:
                members.append(const)
        return members

    def resolve(self, node: Any) -> Any:
        while isinstance(node, dict) and "$ref" in node:
            node = self.defs.get(node["$ref"].rsplit("/", 1)[-1])
        return node

    def properties(self, node: Any) -> dict[str, Any]:
        """Every property a node allows, through C{$ref}, C{allOf}, C{anyOf} and C{oneOf}."""
        found: dict[str, Any] = {}
        for part in self._parts(self.resolve(node), set()):
            found.update(part.get("properties", {}))
        return found

    def _parts(self, node: Any, seen: set[int]) -> Iterator[dict[str, Any]]:
        if not isinstance(node, dict) or id(node) in seen:
            return
        seen.add(id(node))
        yield node
        for key in ("allOf", "anyOf", "oneOf"):
            for part in node.get(key, ()):
                yield from self._parts(self.resolve(part), seen)

    def has_path(self, path: tuple[str, ...]) -> bool:
        """Whether definition C{path[0]} exists and allows the nested properties after it."""
        node = self.defs.get(path[0])
        if node is None:
            return False
        for step in path[1:]:
            node = self.properties(node).get(step)
            if node is None:
                return False
        return True

    def capability_paths(self, name: str) -> set[str]:
        """C{top} and C{top.sub} for every capability a capabilities definition allows."""
        paths = set()
        for top, node in self.properties(self.defs[name]).items():
            paths.add(top)
            paths.update(f"{top}.{sub}" for sub in self.properties(node))
        return paths

    def error_codes(self) -> set[int]:
        """Every error C{code} the schema pins with a const."""
        codes: set[int] = set()

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                code = node.get("code")
                if isinstance(code, dict) and isinstance(code.get("const"), int):
                    codes.add(code["const"])
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(self.defs)
        return codes


def directions(names: dict[str, set[Direction]]) -> set[tuple[str, Direction]]:
    return {(name, way) for name, ways in names.items() for way in ways}


class SchemaCrossCheckTests(SynchronousTestCase):
    """
    The matrix agrees with the official schemas.  Where the digest and a schema
    disagree the schema wins, so these tests are the last word on presence.
    """

    def schema(self, folder: str) -> Schema:
        loaded = load_schema(folder)
        if isinstance(loaded, str):
            self.fail(loaded)
        return Schema(loaded)

    def messages(self, rev: Revision) -> dict[str, set[tuple[str, Direction]]]:
        """The schema's requests, notifications and input requests, with directions."""
        schema = self.schema(rev.value)
        found: dict[str, set[tuple[str, Direction]]] = {
            "request": set(),
            "notification": set(),
            "input": set(),
        }
        for union, bucket, way in (
            ("ClientRequest", "request", C2S),
            ("ServerRequest", "request", S2C),
            ("ClientNotification", "notification", C2S),
            ("ServerNotification", "notification", S2C),
            ("InputRequest", "input", S2C),
        ):
            found[bucket].update((name, way) for name in schema.union(union))
        classified = {name for pairs in found.values() for name, _ in pairs}
        stray = set(schema.method_consts().values()) - classified
        self.assertEqual(
            stray, set(), f"{rev}: method consts outside every request/notification union"
        )
        return found

    def matrix_pairs(
        self, kind: Kind, rev: Revision, extension: str | None = None
    ) -> set[tuple[str, Direction]]:
        return {
            (row.name, way)
            for row in FEATURES
            if row.kind == kind and row.extension == extension and row.present_in(rev)
            for way in row.senders
        }

    def test_schema_folder_present(self) -> None:
        """The official schemas are where the cross-check looks for them."""
        for rev in ALL_REVISIONS:
            self.schema(rev.value)
        self.schema("ext-tasks")

    def test_methods_match_schema(self) -> None:
        """
        Per revision, the methods the matrix has as JSON-RPC requests, and who
        sends them, are exactly the schema's C{ClientRequest}/C{ServerRequest} members.
        """
        for rev in ALL_REVISIONS:
            self.assertEqual(
                self.matrix_pairs(Kind.METHOD, rev), self.messages(rev)["request"], rev
            )

    def test_notifications_match_schema(self) -> None:
        """Per revision, notifications and their senders match the schema's unions."""
        for rev in ALL_REVISIONS:
            self.assertEqual(
                self.matrix_pairs(Kind.NOTIFICATION, rev),
                self.messages(rev)["notification"],
                rev,
            )

    def test_input_requests_match_schema(self) -> None:
        """The C{inputRequests} forms are exactly the schema's C{InputRequest} members."""
        for rev in ALL_REVISIONS:
            self.assertEqual(
                self.matrix_pairs(Kind.INPUT_REQUEST, rev), self.messages(rev)["input"], rev
            )

    def test_method_consts_are_all_known(self) -> None:
        """Every C{method} const in a revision's schema is a row the matrix has for it."""
        for rev in ALL_REVISIONS:
            consts = set(self.schema(rev.value).method_consts().values())
            known = (
                matrix.names_in(Kind.METHOD, rev)
                | matrix.names_in(Kind.NOTIFICATION, rev)
                | matrix.names_in(Kind.INPUT_REQUEST, rev)
            )
            self.assertEqual(consts, known, rev)

    def test_tasks_extension_matches_its_schema(self) -> None:
        """The extension rows name exactly the requests and notifications of ext-tasks."""
        schema = self.schema("ext-tasks")
        requests, notifications = set(), set()
        input_requests = set(schema.union("InputRequest"))
        for node in schema.defs.values():
            const = schema.method_const(node)
            refs = {part.get("$ref", "").rsplit("/", 1)[-1] for part in node.get("allOf", ())}
            if const is None or const in input_requests:
                continue
            if "JSONRPCRequest" in refs:
                requests.add(const)
            elif "JSONRPCNotification" in refs:
                notifications.add(const)
        self.assertEqual(
            {name for name, _ in self.matrix_pairs(Kind.METHOD, V5, TASKS_EXTENSION)}, requests
        )
        self.assertEqual(
            {name for name, _ in self.matrix_pairs(Kind.NOTIFICATION, V5, TASKS_EXTENSION)},
            notifications,
        )
        self.assertEqual(input_requests, matrix.names_in(Kind.INPUT_REQUEST, V5))

    def test_capabilities_match_schema(self) -> None:
        """Each side's capabilities, one level deep, are exactly the schema's per revision."""
        for kind, definition in (
            (Kind.CLIENT_CAPABILITY, "ClientCapabilities"),
            (Kind.SERVER_CAPABILITY, "ServerCapabilities"),
        ):
            for rev in ALL_REVISIONS:
                self.assertEqual(
                    matrix.names_in(kind, rev),
                    self.schema(rev.value).capability_paths(definition),
                    (kind, rev),
                )

    def test_fields_match_schema(self) -> None:
        """Every field row that points into the schema is there exactly in its revisions."""
        checked = 0
        for row in FEATURES:
            if not row.schema or row.extension is not None:
                continue
            for rev in ALL_REVISIONS:
                self.assertEqual(
                    self.schema(rev.value).has_path(row.schema),
                    row.present_in(rev),
                    f"{row.name} ({'.'.join(row.schema)}) in {rev}",
                )
            checked += 1
        self.assertGreater(checked, 40)

    def test_error_codes_in_schema_are_known(self) -> None:
        """Every error code a schema pins is one the matrix has for that revision."""
        for rev in ALL_REVISIONS:
            for code in self.schema(rev.value).error_codes():
                self.assertTrue(matrix.error_code_in(code, rev), (code, rev))


class RenderingTests(SynchronousTestCase):
    """The document C{GET /v1/protocol} serves."""

    def test_round_trip(self) -> None:
        """The matrix survives C{json.dumps} and C{json.loads} unchanged."""
        document = matrix.matrix_json()
        self.assertEqual(json.loads(json.dumps(document)), document)

    def test_revisions(self) -> None:
        """Revisions are listed oldest first with their era and index."""
        self.assertEqual(
            matrix.matrix_json()["revisions"],
            [
                {"value": "2024-11-05", "era": "legacy", "index": 0},
                {"value": "2025-03-26", "era": "legacy", "index": 1},
                {"value": "2025-06-18", "era": "legacy", "index": 2},
                {"value": "2025-11-25", "era": "legacy", "index": 3},
                {"value": "2026-07-28", "era": "modern", "index": 4},
            ],
        )

    def test_every_feature(self) -> None:
        """Every row appears once, with floor, end, direction, note and spec as strings."""
        rendered = matrix.matrix_json()["features"]
        self.assertEqual(len(rendered), len(FEATURES))
        ping = [
            entry for entry in rendered if entry["kind"] == "method" and entry["name"] == "ping"
        ]
        self.assertEqual(len(ping), 1)
        self.assertEqual(ping[0]["floor"], "2024-11-05")
        self.assertEqual(ping[0]["removed_in"], "2026-07-28")
        self.assertEqual(ping[0]["direction"], "both")
        self.assertEqual(
            ping[0]["revisions"], ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
        )
        self.assertTrue(ping[0]["note"])
        self.assertTrue(ping[0]["spec"])
        discover = next(e for e in rendered if e["name"] == "server/discover")
        self.assertIsNone(discover["removed_in"])
        self.assertIsNone(discover["extension"])
        update = next(e for e in rendered if e["name"] == "tasks/update")
        self.assertEqual(update["extension"], TASKS_EXTENSION)

    def test_stable_order(self) -> None:
        """Rows are ordered by kind (in L{Kind} order), then name; two renderings agree."""
        first = matrix.matrix_json()["features"]
        self.assertEqual(first, matrix.matrix_json()["features"])
        kinds = [kind.value for kind in Kind]
        keys = [(kinds.index(e["kind"]), e["name"]) for e in first]
        self.assertEqual(keys, sorted(keys))

    def test_protocol_json_carries_policy(self) -> None:
        """C{protocol_json} is the matrix plus the conflict policy under C{spec}."""
        policy = ConflictPolicy.build(first=V3, lenient=[V1])
        document = matrix.protocol_json(policy)
        self.assertEqual(document["spec"], policy.to_json())
        self.assertEqual(document["spec"]["first"], "2025-06-18")
        self.assertEqual(document["features"], matrix.matrix_json()["features"])
        self.assertEqual(json.loads(json.dumps(document)), document)
        self.assertEqual(
            matrix.protocol_json(DEFAULT_POLICY)["spec"]["precedence"][0], "2026-07-28"
        )

    def test_rendering_is_fresh(self) -> None:
        """Changing a returned document does not change the next one."""
        document = matrix.matrix_json()
        document["features"].clear()
        self.assertEqual(len(matrix.matrix_json()["features"]), len(MATRIX.rows))
