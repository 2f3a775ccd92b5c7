"""
Tests for L{mcpx.server.dispatch}: which revision a request is served in, what mcpx
declares to each connection, and which methods each revision gets.
"""

from __future__ import annotations

from typing import Any

from attrs import evolve, fields
from twisted.trial.unittest import SynchronousTestCase

from mcpx.server.conn import Context
from mcpx.server.request_context import SUPPORTED_VERSIONS
from mcpx.spec.matrix import removed_methods
from mcpx.spec.revision import LEGACY_REVISIONS, NEWEST, Revision
from mcpx.wire.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    UNSUPPORTED_PROTOCOL_VERSION,
    RpcError,
)
from mcpx.wire.messages import Request
from tests.server import CLIENT_CAPABILITIES, PROTOCOL_VERSION, Harness, Session, modern_meta

FIVE = ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]


class InitializeTests(SynchronousTestCase):
    def test_each_legacy_revision_is_agreed(self) -> None:
        """A legacy client asking for a revision mcpx has gets that revision."""
        for revision in LEGACY_REVISIONS:
            session = Session(revision)
            self.assertEqual(session.initialize_result["protocolVersion"], revision.value)
            self.assertIs(session.harness.conn.revision, revision)
            self.assertEqual(session.initialize_result["serverInfo"]["name"], "mcpx")
            self.assertIn("mcpx_call", session.initialize_result["instructions"])

    def test_other_versions_get_the_newest_legacy_one(self) -> None:
        """
        An unknown version, or the modern one asked for through initialize, is answered
        with 2025-11-25 (the client decides whether it can use it).
        """
        for asked in ("1999-01-01", "2026-07-28"):
            harness = Harness()
            answer = harness.result("initialize", {"protocolVersion": asked, "capabilities": {}})
            self.assertEqual(answer["protocolVersion"], "2025-11-25")

    def test_initialized_notification(self) -> None:
        """notifications/initialized is recorded on the connection."""
        session = Session(Revision.V2025_06_18)
        self.assertTrue(session.harness.conn.initialized)

    def test_client_capabilities_are_kept(self) -> None:
        """What initialize declared is the connection's for later requests."""
        harness = Harness()
        harness.result(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "host", "version": "2"},
            },
        )
        self.assertEqual(harness.conn.client_capabilities, {"elicitation": {}})

    def test_second_initialize_is_refused(self) -> None:
        """
        On a connection that has agreed a revision (the MCP socket behind C{mcpx serve}), a
        second initialize is -32600 "already initialized", and the agreed revision and
        capabilities stay as they were.
        """
        session = Session(Revision.V2024_11_05)
        harness = session.harness
        error = harness.error(
            "initialize", {"protocolVersion": "2025-06-18", "capabilities": {"roots": {}}}
        )
        self.assertEqual(error.code, INVALID_REQUEST)
        self.assertIn("already initialized", error.message)
        self.assertIs(harness.conn.revision, Revision.V2024_11_05)
        self.assertEqual(harness.conn.client_capabilities, {})

    def test_protocol_version_is_required(self) -> None:
        """initialize without a protocolVersion string is -32602."""
        self.assertEqual(Harness().error("initialize", {"capabilities": {}}).code, INVALID_PARAMS)


class CapabilityTests(SynchronousTestCase):
    def capabilities(self, revision: Revision, can_push: bool = True) -> dict[str, Any]:
        session = Session(revision, Harness(can_push=can_push))
        if revision.is_modern:
            found: dict[str, Any] = session.result("server/discover")["capabilities"]
            return found
        found = session.initialize_result["capabilities"]
        return found

    def test_legacy_with_push(self) -> None:
        """
        A legacy connection that can push gets tools, prompts and resources (whose lists
        change with the upstreams' and with reloads), resources with subscribe, logging,
        completions from 2025-03-26 on, and core tasks (list, cancel, tools/call) at
        2025-11-25 only; never extensions.
        """
        for revision in LEGACY_REVISIONS:
            expected: dict[str, Any] = {
                "tools": {},
                "prompts": {"listChanged": True},
                "resources": {"subscribe": True, "listChanged": True},
                "logging": {},
            }
            if revision >= Revision.V2025_03_26:
                expected["completions"] = {}
            if revision is Revision.V2025_11_25:
                expected["tasks"] = {
                    "list": {},
                    "cancel": {},
                    "requests": {"tools": {"call": {}}},
                }
            self.assertEqual(self.capabilities(revision), expected, revision)

    def test_legacy_without_push(self) -> None:
        """A connection that cannot push is not offered resource subscriptions."""
        for revision in LEGACY_REVISIONS:
            capabilities = self.capabilities(revision, can_push=False)
            self.assertEqual(capabilities["resources"], {}, revision)
            self.assertEqual(capabilities["logging"], {}, revision)

    def test_modern(self) -> None:
        """
        A 2026-07-28 client gets no logging, resource subscriptions and the prompt and
        resource list changes (on a subscriptions/listen stream), and the tasks extension
        instead of core tasks; through the gateway its tools never change.
        """
        self.assertEqual(
            self.capabilities(NEWEST),
            {
                "tools": {},
                "prompts": {"listChanged": True},
                "resources": {"subscribe": True, "listChanged": True},
                "completions": {},
                "extensions": {"io.modelcontextprotocol/tasks": {}},
            },
        )


class DiscoverTests(SynchronousTestCase):
    def test_discover(self) -> None:
        """server/discover lists the five revisions, instructions and public cache hints."""
        result = Session(NEWEST).result("server/discover")
        self.assertEqual(result["supportedVersions"], FIVE)
        self.assertEqual(list(SUPPORTED_VERSIONS), FIVE)
        self.assertEqual(result["resultType"], "complete")
        self.assertEqual(result["cacheScope"], "public")
        self.assertEqual(result["ttlMs"], 60_000)
        self.assertEqual(result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "mcpx")
        self.assertIn("mcpx_call", result["instructions"])

    def test_legacy_client_may_discover(self) -> None:
        """
        A legacy client's server/discover is answered (accept liberally), spelled for its
        revision: no resultType, no cache hints.
        """
        for revision in LEGACY_REVISIONS:
            result = Session(revision).result("server/discover")
            self.assertEqual(result["supportedVersions"], FIVE)
            for absent in ("resultType", "ttlMs", "cacheScope"):
                self.assertNotIn(absent, result)


class RemovedMethodTests(SynchronousTestCase):
    def test_removed_for_modern(self) -> None:
        """Every method 2026-07-28 removed is -32601 to a 2026-07-28 request."""
        session = Session(NEWEST)
        removed = removed_methods(NEWEST)
        for method in (
            "initialize",
            "ping",
            "logging/setLevel",
            "resources/subscribe",
            "resources/unsubscribe",
        ):
            self.assertIn(method, removed)
        for method in removed:
            error = session.error(method, {"protocolVersion": "2025-06-18", "uri": "x"})
            self.assertEqual(error.code, METHOD_NOT_FOUND, method)

    def test_legacy_keeps_them(self) -> None:
        """ping and logging/setLevel are answered on every legacy revision."""
        for revision in LEGACY_REVISIONS:
            session = Session(revision)
            self.assertEqual(session.result("ping"), {})
            self.assertEqual(session.result("logging/setLevel", {"level": "info"}), {})
            self.assertEqual(session.harness.conn.log_level, "info")

    def test_bad_level(self) -> None:
        """A level that is not a syslog severity is -32602."""
        error = Session(Revision.V2025_06_18).error("logging/setLevel", {"level": "loud"})
        self.assertEqual(error.code, INVALID_PARAMS)

    def test_level_of_the_wrong_type(self) -> None:
        """A level that is an array or an object is -32602 too, not an internal error."""
        levels: list[object] = [[], {}, ["info"]]
        for level in levels:
            session = Session(Revision.V2025_06_18)
            error = session.error("logging/setLevel", {"level": level})
            self.assertEqual(error.code, INVALID_PARAMS)
            self.assertIn("params.level", error.message)

    def test_unknown_method(self) -> None:
        """A method mcpx does not have is -32601 on every revision."""
        for revision in Revision:
            error = Session(revision).error("tools/frobnicate")
            self.assertEqual(error.code, METHOD_NOT_FOUND)

    def test_one_era_switches_per_request(self) -> None:
        """
        On one connection, a modern request is served statelessly even after a legacy
        handshake, and legacy requests keep the agreed revision.
        """
        session = Session(Revision.V2025_03_26)
        harness = session.harness
        modern = harness.result("tools/list", {"_meta": modern_meta()})
        self.assertEqual(modern["resultType"], "complete")
        legacy = harness.result("tools/list")
        self.assertNotIn("resultType", legacy)
        self.assertEqual(harness.error("ping", {"_meta": modern_meta()}).code, METHOD_NOT_FOUND)


class MetaTests(SynchronousTestCase):
    def test_modern_transport_needs_meta(self) -> None:
        """A request on a 2026-07-28 HTTP connection without _meta is -32602."""
        harness = Harness(transport="http-modern", can_push=False)
        error = harness.error("tools/list")
        self.assertEqual(error.code, INVALID_PARAMS)
        self.assertIn(PROTOCOL_VERSION, error.message)

    def test_version_is_needed(self) -> None:
        """_meta with modern keys but no protocol version is -32602."""
        error = Harness().error("tools/list", {"_meta": {CLIENT_CAPABILITIES: {}}})
        self.assertEqual(error.code, INVALID_PARAMS)

    def test_capabilities_are_needed(self) -> None:
        """A 2026-07-28 request without clientCapabilities is -32602."""
        error = Harness().error("tools/list", {"_meta": {PROTOCOL_VERSION: "2026-07-28"}})
        self.assertEqual(error.code, INVALID_PARAMS)

    def test_log_level_of_the_wrong_type(self) -> None:
        """
        A 2026-07-28 request whose _meta logLevel is an array or an object is -32602
        naming it, not an internal error.
        """
        levels: list[object] = [[], {}, ["info"], 3]
        for level in levels:
            meta = {**modern_meta(), "io.modelcontextprotocol/logLevel": level}
            error = Harness().error("tools/list", {"_meta": meta})
            self.assertEqual(error.code, INVALID_PARAMS)
            self.assertIn("is not a logging level", error.message)

    def test_meta_must_be_an_object(self) -> None:
        """A _meta that is not an object is -32602."""
        self.assertEqual(Harness().error("tools/list", {"_meta": 3}).code, INVALID_PARAMS)

    def test_unsupported_version(self) -> None:
        """An unknown version is -32022 naming the five mcpx supports and the one asked for."""
        for harness in (Harness(), Harness(transport="http-modern", can_push=False)):
            error = harness.error(
                "tools/list", {"_meta": {**modern_meta(), PROTOCOL_VERSION: "2030-01-01"}}
            )
            self.assertEqual(error.code, UNSUPPORTED_PROTOCOL_VERSION)
            self.assertEqual(error.data, {"supported": FIVE, "requested": "2030-01-01"})

    def test_bad_log_level(self) -> None:
        """A 2026-07-28 logLevel that is not a level is -32602."""
        meta = {**modern_meta(), "io.modelcontextprotocol/logLevel": "chatty"}
        self.assertEqual(Harness().error("tools/list", {"_meta": meta}).code, INVALID_PARAMS)

    def test_params_must_be_an_object(self) -> None:
        """Positional params are -32602."""
        harness = Harness()
        deferred = harness.client.request("tools/list", [1, 2])
        failures: list[Any] = []
        deferred.addErrback(failures.append)
        self.assertEqual(failures[0].value.code, INVALID_PARAMS)


class UndeclaredTests(SynchronousTestCase):
    def test_nothing_declared_is_2024_11_05(self) -> None:
        """A request before any initialize, naming no version, is served as 2024-11-05."""
        harness = Harness()
        result = harness.result("server/discover")
        self.assertNotIn("completions", result["capabilities"])
        self.assertIs(
            harness.server.context(harness.conn, Request(1, "tools/list")).revision,
            Revision.V2024_11_05,
        )

    def test_headerless_http_is_2025_03_26(self) -> None:
        """The transport can say a request without a version header is 2025-03-26."""
        harness = Harness(
            transport="http-post", can_push=False, default_revision=Revision.V2025_03_26
        )
        result = harness.result("server/discover")
        self.assertIn("completions", result["capabilities"])
        self.assertIs(
            harness.server.context(harness.conn, Request(1, "ping")).revision,
            Revision.V2025_03_26,
        )

    def test_context_revision(self) -> None:
        """
        A request's revision comes from its envelope: a modern _meta or transport (and
        one that looks modern without naming a version is -32602), else the
        connection's.
        """
        harness = Harness()
        server, conn = harness.server, harness.conn
        modern_context = server.context(conn, Request(1, "tools/list", {"_meta": modern_meta()}))
        self.assertIs(modern_context.revision, NEWEST)
        self.assertTrue(modern_context.modern)
        with self.assertRaises(RpcError) as unnamed:
            server.context(conn, Request(1, "tools/list", {"_meta": {CLIENT_CAPABILITIES: {}}}))
        self.assertEqual(unnamed.exception.code, INVALID_PARAMS)
        modern = Harness(transport="http-modern", can_push=False)
        with self.assertRaises(RpcError) as bare:
            modern.server.context(modern.conn, Request(1, "tools/list"))
        self.assertEqual(bare.exception.code, INVALID_PARAMS)
        Session(Revision.V2025_06_18, harness)
        self.assertIs(server.context(conn, Request(2, "tools/list")).revision, Revision.V2025_06_18)


class IdentityTests(SynchronousTestCase):
    def call(self, session: Session, **meta: Any) -> str:
        session.call("mcpx_call", {"server": "search", "tool": "web_search"}, **meta)
        client: str = session.harness.pool.calls[-1][3]
        return client

    def test_legacy_uses_the_connection(self) -> None:
        """A legacy request counts as the connection's identity (the host process)."""
        session = Session(Revision.V2025_06_18)
        self.assertEqual(self.call(session), "host-pid-1")
        self.assertEqual(self.call(session), "host-pid-1")

    def test_named_session_wins(self) -> None:
        """_meta dev.mcpx/session names the caller, in either era."""
        for revision in (Revision.V2025_06_18, NEWEST):
            session = Session(revision)
            self.assertEqual(self.call(session, **{"dev.mcpx/session": "agent-7"}), "agent-7")

    def test_modern_requests_each_get_a_scope(self) -> None:
        """Two 2026-07-28 requests on one connection never share a caller identity."""
        session = Session(NEWEST)
        first, second = self.call(session), self.call(session)
        self.assertNotEqual(first, second)
        self.assertNotEqual(first, "host-pid-1")

    def test_discovery_tools_use_it_too(self) -> None:
        """The ops behind the discovery tools are run as the request's caller."""
        session = Session(Revision.V2025_06_18)
        session.call("mcpx_tools", {"server": "files"}, **{"dev.mcpx/session": "s-1"})
        self.assertIn(("tools", "files", "s-1"), session.harness.pool.listed)


class ContextCopyTests(SynchronousTestCase):
    """L{Context.with_call}, the copy each call that goes upstream is made with."""

    def test_every_field_is_kept(self) -> None:
        """
        The copy is the context with its call set and every other field as it was: what
        C{attrs.evolve} gives, so a field added to L{Context} and left out of the copy
        fails here rather than reaching the upstream as its default.
        """
        values: dict[str, Any] = {field.name: object() for field in fields(Context)}
        context = Context(**values)
        call: Any = object()
        copied = context.with_call(call)
        self.assertEqual(copied, evolve(context, call=call))
        self.assertIs(copied.call, call)
        for name, value in values.items():
            if name != "call":
                self.assertIs(getattr(copied, name), value, name)

    def test_equal_and_hashed_by_value(self) -> None:
        """
        Contexts with the same fields are equal and hash alike, one field apart they are
        not, as when the class was frozen (it is frozen only to the type checker now).
        """
        values: dict[str, Any] = {field.name: object() for field in fields(Context)}
        context = Context(**values)
        same = Context(**values)
        self.assertIsNot(context, same)
        self.assertEqual(context, same)
        self.assertEqual(hash(context), hash(same))
        for name in values:
            changed: dict[str, Any] = {name: object()}
            other = evolve(context, **changed)
            self.assertNotEqual(context, other, name)
        with self.assertRaises(TypeError):
            hash(evolve(context, capabilities={}))
