"""
Tests for pass-through mode (L{mcpx.server.passthrough}): configured servers offered
under their own names, over the real L{Pool} with scripted upstreams, on every
revision; and with a real daemon behind C{mcpx serve}, passing C{demo} through for
every connection (C{mcpx daemon --passthrough}) or for one (C{mcpx serve --passthrough}).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock, deferLater
from twisted.trial.unittest import SynchronousTestCase

from mcpx.demo.catalogue import INSTRUCTIONS as DEMO_INSTRUCTIONS
from mcpx.ops import uris
from mcpx.ops.uris import MAX_TEMPLATE_MATCH_UNITS
from mcpx.pool import Pool
from mcpx.server import passthrough_routes
from mcpx.server.catalogues import upstream_client
from mcpx.server.conn import Conn, Context
from mcpx.server.derived import template_pattern, template_routes
from mcpx.server.dispatch import GATEWAY_TOOLS_INSTRUCTIONS, INSTRUCTIONS, McpServer
from mcpx.server.gateway_tools import gateway_tools
from mcpx.server.http import McpHTTP
from mcpx.settings.servers import Server, ServersConfig, StdioServer
from mcpx.spec.matrix import field_in
from mcpx.spec.meta_keys import CLIENT_CAPABILITIES_KEY, PROTOCOL_VERSION_KEY
from mcpx.spec.revision import LEGACY_REVISIONS, NEWEST, Era, Revision
from mcpx.spec.schemas import definitions, load_schema, validate
from mcpx.upstream.handlers import UpstreamHandlers, declared_in
from mcpx.upstream.legacy_session import LegacySession
from mcpx.upstream.session import UpstreamSession
from mcpx.wire.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    URL_ELICITATION_REQUIRED,
    RpcError,
)
from mcpx.wire.messages import Request
from tests.cli.test_real_daemon import RealDaemonCase
from tests.daemon.fake_pool import swap_part
from tests.pool.fakes import (
    Answer,
    Events,
    FakeChannel,
    FakeConnector,
    FakeUpstream,
    servers,
    stdio,
)
from tests.server import CLIENT_CAPABILITIES, Harness, Session, result_of
from tests.server.test_http import Client, modern, modern_headers
from tests.server.test_resource_updates import Host
from tests.support.processes import REPO, kill_on_cleanup, spawn

#: A tool definition using every optional field a Tool has, in the newest shape.
ECHO_TOOL: Mapping[str, Any] = {
    "name": "echo",
    "title": "Echo",
    "description": "Says it back",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
    "outputSchema": {"type": "object", "properties": {"said": {"type": "string"}}},
    "annotations": {"readOnlyHint": True, "openWorldHint": False},
    "icons": [{"src": "https://example.com/echo.png", "mimeType": "image/png"}],
    "execution": {"taskSupport": "optional"},
}

#: A result using every kind of content block, structured content, isError and _meta.
RICH: Mapping[str, Any] = {
    "content": [
        {"type": "text", "text": "hello"},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
        {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
        {
            "type": "resource",
            "resource": {"uri": "alpha://doc", "mimeType": "text/plain", "text": "doc"},
        },
        {"type": "resource_link", "uri": "alpha://doc", "name": "doc"},
    ],
    "structuredContent": {"said": "hello"},
    "isError": True,
    "_meta": {"example.com/trace": "t-1"},
}

UNKNOWN_TOOL = RpcError(INVALID_PARAMS, "Unknown tool: nope", {"tool": "nope"})


def _name(upstream: FakeUpstream) -> str:
    assert upstream.channel is not None
    return upstream.channel.name


def _call(upstream: FakeUpstream, params: Mapping[str, Any]) -> Any:
    name = params.get("name")
    if name == "rich":
        return RICH
    if name == "echo":
        said = (params.get("arguments") or {}).get("text", "")
        return {"content": [{"type": "text", "text": said}], "structuredContent": {"said": said}}
    if name == "hidden":
        return {"content": [{"type": "text", "text": f"hidden tool of {_name(upstream)}"}]}
    if name == "mcpx_servers":
        return {"content": [{"type": "text", "text": f"{_name(upstream)}'s own mcpx_servers"}]}
    if name == "add":
        arguments = params.get("arguments") or {}
        total = arguments.get("a", 0) + arguments.get("b", 0)
        return {
            "content": [{"type": "text", "text": str(total)}],
            "structuredContent": {"sum": total},
        }
    raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}", {"tool": name})


def _read(upstream: FakeUpstream, params: Mapping[str, Any]) -> Any:
    uri = params["uri"]
    if uri == "alpha://missing":
        raise RpcError(-32002, "Resource not found", {"uri": uri})
    return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": _name(upstream)}]}


def _prompt(upstream: FakeUpstream, params: Mapping[str, Any]) -> Any:
    return {
        "description": f"{params['name']} of {_name(upstream)}",
        "messages": [
            {"role": "user", "content": {"type": "text", "text": str(params.get("arguments"))}},
            {
                "role": "user",
                "content": {"type": "resource", "resource": {"uri": "alpha://doc", "text": "d"}},
            },
        ],
    }


def _complete(upstream: FakeUpstream, params: Mapping[str, Any]) -> Any:
    ref = params["ref"]
    return {"completion": {"values": [f"{_name(upstream)}:{ref.get('name') or ref.get('uri')}"]}}


def _answers(script: Mapping[str, list[dict[str, Any]]]) -> dict[str, Answer]:
    """The answers of one scripted server (its lists read as they are at each request)."""
    tools, prompts = script["tools"], script["prompts"]
    resources, templates = script["resources"], script["templates"]
    return {
        "tools/list": lambda u, p: {"tools": [dict(tool) for tool in tools]},
        "prompts/list": lambda u, p: {"prompts": list(prompts)},
        "resources/list": lambda u, p: {"resources": list(resources)},
        "resources/templates/list": lambda u, p: {"resourceTemplates": list(templates)},
        "resources/read": _read,
        "resources/subscribe": lambda u, p: {},
        "resources/unsubscribe": lambda u, p: {},
        "prompts/get": _prompt,
        "completion/complete": _complete,
        "tools/call": _call,
    }


def scripts() -> dict[str, dict[str, Any]]:
    """
    Three upstreams: C{alpha} and C{beta} (passed through in the tests), C{other} (only
    through the gateway).  C{alpha} has a tool named like a gateway tool.
    """
    return {
        "alpha": {
            "tools": [
                dict(ECHO_TOOL),
                {"name": "rich", "inputSchema": {"type": "object"}},
                {"name": "mcpx_servers", "inputSchema": {"type": "object"}},
            ],
            "prompts": [{"name": "greet", "title": "Greet", "arguments": [{"name": "who"}]}],
            "resources": [{"uri": "alpha://doc", "name": "doc", "title": "The doc"}],
            "templates": [
                {"uriTemplate": "alpha://items/{id}", "name": "item"},
                {"uriTemplate": "shared://{name}", "name": "shared"},
            ],
        },
        "beta": {
            "tools": [{"name": "add", "inputSchema": {"type": "object"}}],
            "prompts": [{"name": "summarise"}],
            "resources": [
                {"uri": "beta://x", "name": "x"},
                {"uri": "shared://one", "name": "one"},
                {"uri": "alpha://doc", "name": "beta's copy"},
            ],
            "templates": [{"uriTemplate": "notes://{+path}", "name": "note"}],
        },
        "other": {
            "tools": [{"name": "echo", "inputSchema": {"type": "object"}}],
            "prompts": [{"name": "greet"}],
            "resources": [{"uri": "other://r", "name": "r"}],
            "templates": [],
        },
    }


def refusing_nope() -> dict[str, dict[str, Any]]:
    """L{scripts}, with beta listing a tool C{nope} it refuses as unknown when called."""
    scripted = scripts()
    scripted["beta"]["tools"] = [
        *scripted["beta"]["tools"],
        {"name": "nope", "inputSchema": {"type": "object"}},
    ]
    return scripted


class Upstreams(FakeConnector):
    """A L{FakeConnector} whose servers each have their own catalogue."""

    def __init__(self, clock: Clock, scripted: Mapping[str, Mapping[str, Any]]) -> None:
        FakeConnector.__init__(self, clock)
        self.scripted = {name: dict(script) for name, script in scripted.items()}
        self.capabilities["completions"] = {}
        #: Numbers every start, across servers.
        self.serials = itertools.count(1)

    async def connect(
        self,
        name: str,
        server: Server,
        handlers: UpstreamHandlers,
        *,
        principal: str | None = None,
        era: Era | None = None,
    ) -> UpstreamSession:
        self.connects.append((name, server, handlers))
        if self.failures:
            raise self.failures.pop(0)
        script = self.scripted[name]
        answers = _answers(script)
        # A script may declare capabilities of its own (a server without resources).
        capabilities = script.get("capabilities", self.capabilities)
        upstream = FakeUpstream(next(self.serials), answers, capabilities, self.holding)
        upstream.instructions = script.get("instructions")
        self.upstreams.append(upstream)
        channel = FakeChannel(name, upstream)
        session = LegacySession(name=name, channel=channel, clock=self.clock, handlers=handlers)
        await channel.start()
        await session.open()
        return session


def passed_through(
    names: tuple[str, ...] = ("alpha", "beta"),
    *,
    scripted: Mapping[str, Mapping[str, Any]] | None = None,
    can_push: bool = True,
    transport: str = "stdio",
    harness_type: type[Harness] = Harness,
) -> tuple[Harness, Upstreams]:
    """
    A harness over the real pool of L{scripts}, its server passing C{names} through,
    the pool's upstream notifications reaching it as they do in the daemon.

    @param harness_type: the harness made (a L{Harness} that keeps more, say).
    """
    clock = Clock()
    connector = Upstreams(clock, scripted if scripted is not None else scripts())
    cell: list[McpServer] = []

    def handlers(server: str, scope_key: str) -> UpstreamHandlers:
        def heard(method: str, params: Mapping[str, Any] | None) -> None:
            cell[0].upstream_notification(server, method, params)

        return UpstreamHandlers(notification=heard)

    pool = Pool(
        servers=servers(*(stdio(name) for name in connector.scripted)),
        connector=connector,
        clock=clock,
        call_timeout=60.0,
        idle_timeout=300.0,
        publish=Events(),
        handlers=handlers,
    )
    harness = harness_type(pool, clock=clock, can_push=can_push, transport=transport)
    harness.server = McpServer(harness.host, clock, passthrough=names)
    harness.conn = harness.server.open(
        Conn(transport, "host-pid-1", push=harness.server_peer.notify if can_push else None)
    )
    cell.append(harness.server)
    return harness, connector


def upstream(connector: Upstreams, name: str) -> FakeUpstream:
    return connector.started(name)[-1]


#: The definition each method's result is checked against, in every revision's schema.
RESULTS = {
    "initialize": "InitializeResult",
    "tools/list": "ListToolsResult",
    "tools/call": "CallToolResult",
    "prompts/list": "ListPromptsResult",
    "prompts/get": "GetPromptResult",
    "resources/list": "ListResourcesResult",
    "resources/templates/list": "ListResourceTemplatesResult",
    "resources/read": "ReadResourceResult",
    "completion/complete": "CompleteResult",
    "resources/subscribe": "EmptyResult",
    "resources/unsubscribe": "EmptyResult",
}

NOTIFICATIONS = {
    "notifications/tools/list_changed": "ToolListChangedNotification",
    "notifications/prompts/list_changed": "PromptListChangedNotification",
    "notifications/resources/list_changed": "ResourceListChangedNotification",
    "notifications/resources/updated": "ResourceUpdatedNotification",
    "notifications/progress": "ProgressNotification",
}


def check_frames(harness: Harness, revision: Revision) -> set[str]:
    """
    Validate every frame the server sent, strictly, against C{revision}'s schema.

    @return: the definitions checked.
    @raise mcpx.spec.schemas.SchemaViolation: for the first frame that does not fit.
    """
    known = definitions(revision)
    document = load_schema(revision)
    defs = document.get("$defs") or document["definitions"]
    error = "JSONRPCError" if "JSONRPCError" in known else "JSONRPCErrorResponse"
    checked: set[str] = set()
    for frame in harness.sent:
        instance: Any = frame
        if "method" in frame:
            definition = NOTIFICATIONS[frame["method"]]
            if "jsonrpc" not in defs[definition].get("properties", {}):
                instance = {key: value for key, value in frame.items() if key != "jsonrpc"}
        elif "error" in frame:
            definition = error
        elif frame["result"].get("resultType") == "input_required":
            definition, instance = "InputRequiredResult", frame["result"]
        else:
            definition, instance = RESULTS[harness.methods[frame["id"]]], frame["result"]
        validate(instance, revision, definition, strict=True)
        checked.add(definition)
    return checked


def names_of(items: Sequence[Mapping[str, Any]]) -> list[str]:
    return [item["name"] for item in items]


GATEWAY_NAMES = [tool.name for tool in gateway_tools()]


class UpstreamClientTests(SynchronousTestCase):
    """
    The identity a pass-through request reaches the pool under is its caller's, marked
    with what its host declared in its revision, however its requests follow each other
    (a call asks twice for the same request; the answer is kept for that request only).
    """

    def test_marks_follow_each_request(self) -> None:
        caps: dict[str, Any] = {"elicitation": {}, "sampling": {}, "roots": {}}
        none: dict[str, Any] = {}
        asked = [
            (Revision.V2025_06_18, "me", caps, {"sampling", "roots", "elicitation.form"}),
            (Revision.V2025_06_18, "me", caps, {"sampling", "roots", "elicitation.form"}),
            # The same capabilities in a revision without elicitation.
            (Revision.V2024_11_05, "me", caps, {"sampling", "roots"}),
            (Revision.V2024_11_05, "you", caps, {"sampling", "roots"}),
            (Revision.V2024_11_05, "you", none, set()),
            (Revision.V2024_11_05, "me", none, set()),
            (Revision.V2024_11_05, "me", {"sampling": {}}, {"sampling"}),
            (Revision.V2025_06_18, "me", caps, {"sampling", "roots", "elicitation.form"}),
        ]
        for revision, identity, capabilities, questions in asked:
            for _ in range(2):
                client = upstream_client(Context(revision, identity, capabilities, False))
                self.assertEqual(declared_in(client), (identity, frozenset(questions)))


class ToolListTests(SynchronousTestCase):
    def test_upstream_tools_first_under_their_own_names(self) -> None:
        """
        tools/list carries alpha's and beta's tools under their own names, in the order
        the servers were named, then the gateway's tools; the tool an upstream names like
        a gateway tool (alpha's mcpx_servers) is left out: the name is mcpx's.
        """
        for revision in Revision:
            harness, _ = passed_through()
            tools = Session(revision, harness).result("tools/list")["tools"]
            expected = ["echo", "rich", "add", *GATEWAY_NAMES]
            self.assertEqual(names_of(tools), expected, revision)
            (servers,) = [tool for tool in tools if tool["name"] == "mcpx_servers"]
            self.assertIn("description", servers, "mcpx's mcpx_servers, not the upstream's")
            check_frames(harness, revision)

    def test_optional_fields_spelled_per_revision(self) -> None:
        """
        A pass-through tool keeps title, annotations, icons, outputSchema and
        execution.taskSupport wherever the client's revision defines them, and loses
        only those it does not (checked strictly against each revision's schema).
        """
        for revision in Revision:
            harness, _ = passed_through()
            echo = Session(revision, harness).result("tools/list")["tools"][0]
            for key in ("title", "annotations", "icons", "outputSchema", "execution"):
                if field_in(f"Tool.{key}", revision):
                    self.assertEqual(echo[key], ECHO_TOOL[key], (revision, key))
                else:
                    self.assertNotIn(key, echo, (revision, key))
            self.assertEqual(echo["inputSchema"], ECHO_TOOL["inputSchema"])
            checked = check_frames(harness, revision)
            self.assertIn("ListToolsResult", checked)
        # The two ends, spelled out.
        harness, _ = passed_through()
        newest_legacy = Session(Revision.V2025_11_25, harness).result("tools/list")["tools"][0]
        self.assertEqual(newest_legacy, ECHO_TOOL)
        harness, _ = passed_through()
        oldest = Session(Revision.V2024_11_05, harness).result("tools/list")["tools"][0]
        self.assertEqual(set(oldest), {"name", "description", "inputSchema"})

    def test_the_catalogue_is_not_edited(self) -> None:
        """Spelling a pass-through tool down for an old revision leaves the pool's copy whole."""
        harness, _ = passed_through()
        Session(Revision.V2024_11_05, harness).result("tools/list")
        cached = result_of(Deferred.fromCoroutine(harness.pool.tools("alpha", client="x")))
        self.assertEqual(cached[0], ECHO_TOOL)

    def test_paginated(self) -> None:
        """The merged list is paginated like any other."""
        harness, _ = passed_through()
        harness.server.page_size = 3
        session = Session(Revision.V2025_06_18, harness)
        first = session.result("tools/list")
        self.assertEqual(names_of(first["tools"]), ["echo", "rich", "add"])
        second = session.result("tools/list", {"cursor": first["nextCursor"]})
        self.assertEqual(names_of(second["tools"])[0], GATEWAY_NAMES[0])

    def test_pages_cut_from_one_merge(self) -> None:
        """
        Every page of a paginated list is cut from one merge of the servers' catalogues,
        asked for once per listing (each page asking every server and merging them all
        again made listing N tools cost N squared); a server whose tools change between
        pages is asked again, and the next page shows the change.  In both eras: a
        2026-07-28 request is a caller of its own, its connection's pages one listing.
        """
        for revision in (Revision.V2025_06_18, Revision.V2026_07_28):
            self._pages_cut_from_one_merge(revision)

    def _pages_cut_from_one_merge(self, revision: Revision) -> None:
        harness, connector = passed_through()
        harness.server.page_size = 2
        merges: list[str] = []
        record = harness.host.clashes.record

        def counted(named: Any, kind: str, clashes: Any) -> None:
            merges.append(kind)
            record(named, kind, clashes)

        self.patch(harness.host.clashes, "record", counted)
        asked: list[str] = []
        tools = harness.pool.tools

        def counted_tools(server: str, **kwargs: Any) -> Any:
            asked.append(server)
            return tools(server, **kwargs)

        self.patch(harness.pool, "tools", counted_tools)
        session = Session(revision, harness)
        listed: list[str] = []
        page = session.result("tools/list")
        listed += names_of(page["tools"])
        while "nextCursor" in page:
            page = session.result("tools/list", {"cursor": page["nextCursor"]})
            listed += names_of(page["tools"])
        self.assertEqual(listed[:4], ["echo", "rich", "add", GATEWAY_NAMES[0]])
        self.assertGreater(len(listed) // 2, 2, "several pages")
        self.assertEqual(merges, ["tools"], revision)
        # The pages after the first are cut from the first page's list: the servers are
        # asked for their tools once per listing, not once per page.
        self.assertEqual(asked, ["alpha", "beta"], revision)

        first = session.result("tools/list")
        connector.scripted["beta"]["tools"].append(
            {"name": "sub", "inputSchema": {"type": "object"}}
        )
        upstream(connector, "beta").notify("notifications/tools/list_changed")
        second = session.result("tools/list", {"cursor": first["nextCursor"]})
        self.assertEqual(names_of(second["tools"]), ["add", "sub"])
        third = session.result("tools/list", {"cursor": second["nextCursor"]})
        self.assertEqual(names_of(third["tools"])[0], GATEWAY_NAMES[0])
        self.assertEqual(merges, ["tools", "tools"])

    def test_a_clash_leaves_the_rest_of_the_list(self) -> None:
        """
        A tool name two pass-through servers offer does not fail tools/list: every other
        tool of both servers and the gateway's are listed, the name is kept for the
        first server named and a call of it reaches that server alone.  The clash is
        reported once (one warning event naming both servers and toolPrefix), however
        often the tools are listed or called.
        """
        scripted = scripts()
        scripted["beta"]["tools"] = [
            {"name": "echo", "inputSchema": {"type": "object"}},
            *scripted["beta"]["tools"],
        ]
        for revision in Revision:
            harness, connector = passed_through(scripted=scripted)
            warnings: list[Any] = []
            harness.host.events.subscribe(warnings.append, kinds=["warning"])
            session = Session(revision, harness)
            tools = names_of(session.result("tools/list")["tools"])
            self.assertEqual(tools, ["echo", "rich", "add", *GATEWAY_NAMES], revision)
            session.result("tools/list")
            session.call("echo", {"text": "hi"})
            self.assertNotIn("tools/call", upstream(connector, "beta").methods())
            self.assertIn("tools/call", upstream(connector, "alpha").methods())
            # One for the clash, one for alpha's mcpx_servers (the gateway's name).
            self.assertEqual(len(warnings), 2, revision)
            (warning,) = [w for w in warnings if w.server == "beta"]
            for named in ("'echo'", "'alpha'", "'beta'", "toolPrefix"):
                self.assertIn(named, warning.data["message"])
            check_frames(harness, revision)

    def test_tool_prefix_offers_both(self) -> None:
        """
        With C{toolPrefix} "b_" on beta, beta's tools are offered as b_<name> beside
        alpha's of the same name, with no clash reported; a call of b_echo reaches
        beta's echo and a call of echo alpha's.
        """
        scripted = scripts()
        scripted["beta"]["tools"] = [
            {"name": "echo", "inputSchema": {"type": "object"}},
            *scripted["beta"]["tools"],
        ]
        for revision in Revision:
            harness, connector = passed_through(scripted=scripted)
            swap_part(
                harness.host,
                servers=ServersConfig(
                    {
                        "alpha": StdioServer("alpha", "fake-server"),
                        "beta": StdioServer("beta", "fake-server", tool_prefix="b_"),
                    },
                    "test",
                ),
            )
            warnings: list[Any] = []
            harness.host.events.subscribe(warnings.append, kinds=["warning"])
            session = Session(revision, harness)
            tools = names_of(session.result("tools/list")["tools"])
            self.assertEqual(tools[:4], ["echo", "rich", "b_echo", "b_add"])
            self.assertNotIn("add", tools)
            result = session.call("b_add", {"a": 1, "b": 2})
            self.assertEqual(result["content"][0]["text"], "3", revision)
            called = upstream(connector, "beta").last("tools/call").params
            assert isinstance(called, dict)
            self.assertEqual((called["name"], called["arguments"]), ("add", {"a": 1, "b": 2}))
            session.call("echo", {"text": "hi"})
            called = upstream(connector, "alpha").last("tools/call").params
            assert isinstance(called, dict)
            self.assertEqual(called["name"], "echo")
            self.assertEqual(upstream(connector, "beta").methods().count("tools/call"), 1)
            self.assertEqual([w.server for w in warnings], ["alpha"], "mcpx_servers only")
            check_frames(harness, revision)

    def test_tool_prefix_changed_by_a_reload(self) -> None:
        """
        A reload that changes beta's C{toolPrefix} from "b_" to "c_" is what the next
        call goes by (the prefixes are kept per configuration): c_add reaches beta's
        add, and b_add is listed no more, on every revision.
        """

        def configured(prefix: str) -> ServersConfig:
            return ServersConfig(
                {
                    "alpha": StdioServer("alpha", "fake-server"),
                    "beta": StdioServer("beta", "fake-server", tool_prefix=prefix),
                },
                "test",
            )

        for revision in Revision:
            harness, connector = passed_through()
            swap_part(harness.host, servers=configured("b_"))
            session = Session(revision, harness)
            self.assertIn("b_add", names_of(session.result("tools/list")["tools"]))
            result = session.call("b_add", {"a": 1, "b": 2})
            self.assertEqual(result["content"][0]["text"], "3", revision)
            swap_part(harness.host, servers=configured("c_"))
            self.assertIn("c_add", names_of(session.result("tools/list")["tools"]))
            result = session.call("c_add", {"a": 2, "b": 3})
            self.assertEqual(result["content"][0]["text"], "5", revision)
            called = upstream(connector, "beta").last("tools/call").params
            assert isinstance(called, dict)
            self.assertEqual((called["name"], called["arguments"]), ("add", {"a": 2, "b": 3}))
            self.assertEqual(upstream(connector, "beta").methods().count("tools/call"), 2)
            self.assertNotIn("b_add", names_of(session.result("tools/list")["tools"]))

    def test_a_server_not_passed_through_is_not_merged(self) -> None:
        """other's echo is not listed: only the named servers are passed through."""
        harness, _ = passed_through(("beta",))
        tools = Session(Revision.V2025_06_18, harness).result("tools/list")["tools"]
        self.assertEqual(names_of(tools), ["add", *GATEWAY_NAMES])


class CallTests(SynchronousTestCase):
    def test_result_verbatim(self) -> None:
        """
        From 2025-06-18 a pass-through call answers with the upstream's result as it
        came: image, audio, embedded resource and link (their own URIs),
        structuredContent, isError and _meta.
        """
        for revision in (Revision.V2025_06_18, Revision.V2025_11_25):
            harness, _ = passed_through()
            result = Session(revision, harness).call("rich")
            self.assertEqual(result, RICH, revision)
            check_frames(harness, revision)
        harness, _ = passed_through()
        modern = Session(NEWEST, harness).call("rich")
        self.assertEqual(modern["content"], RICH["content"])
        self.assertEqual(modern["structuredContent"], RICH["structuredContent"])
        self.assertIs(modern["isError"], True)
        self.assertEqual(modern["_meta"]["example.com/trace"], "t-1")
        self.assertEqual(modern["resultType"], "complete")
        check_frames(harness, NEWEST)

    def test_older_revisions_spelled_down(self) -> None:
        """
        Before 2025-06-18 the same result is spelled down (no structuredContent or
        links; before 2025-03-26 no audio), and still valid for the revision.
        """
        for revision in (Revision.V2024_11_05, Revision.V2025_03_26):
            harness, _ = passed_through()
            result = Session(revision, harness).call("rich")
            self.assertNotIn("structuredContent", result)
            self.assertEqual(result["content"][:2], RICH["content"][:2])
            self.assertIs(result["isError"], True)
            kinds = [block["type"] for block in result["content"]]
            self.assertNotIn("resource_link", kinds)
            self.assertEqual("audio" in kinds, revision is Revision.V2025_03_26)
            check_frames(harness, revision)

    def test_forwarded_with_arguments_and_identity(self) -> None:
        """The call reaches the upstream by its own name, with its arguments and _meta."""
        harness, connector = passed_through()
        session = Session(Revision.V2025_06_18, harness)
        result = session.result(
            "tools/call",
            {
                "name": "echo",
                "arguments": {"text": "hi"},
                "_meta": {"traceparent": "00-1-2-01", "example.com/k": 1},
            },
        )
        self.assertEqual(result["structuredContent"], {"said": "hi"})
        sent = upstream(connector, "alpha").last("tools/call").params
        assert isinstance(sent, dict)
        self.assertEqual(sent["name"], "echo")
        self.assertEqual(sent["arguments"], {"text": "hi"})
        # The host's _meta goes on as it is, beside the pool's own progress token.
        self.assertEqual(
            sent["_meta"],
            {"traceparent": "00-1-2-01", "example.com/k": 1, "progressToken": "mcpx-1"},
        )

    def test_second_server_routed(self) -> None:
        """A tool of the second pass-through server goes to it."""
        harness, connector = passed_through()
        result = Session(Revision.V2025_06_18, harness).call("add", {"a": 2, "b": 3})
        self.assertEqual(result["structuredContent"], {"sum": 5})
        self.assertEqual(connector.started("alpha")[-1].methods().count("tools/call"), 0)

    def test_upstream_error_relayed_as_that_error(self) -> None:
        """
        A JSON-RPC error the upstream answers is the host's error response, with its
        code, message and data: not an isError result.
        """
        for revision in Revision:
            harness, _ = passed_through(scripted=refusing_nope())
            session = Session(revision, harness)
            listed = names_of(session.result("tools/list")["tools"])
            self.assertIn("nope", listed)
            error = session.error("tools/call", {"name": "nope", "arguments": {}})
            self.assertEqual(
                (error.code, error.message, error.data),
                (UNKNOWN_TOOL.code, UNKNOWN_TOOL.message, UNKNOWN_TOOL.data),
                revision,
            )
            check_frames(harness, revision)

    def test_url_elicitation_required_per_revision(self) -> None:
        """
        An upstream's -32042 (URL elicitation required) reaches a 2025-11-25 host as it
        is; a 2026-07-28 host that declared URL elicitation is answered input_required
        with the URL, and its retry (mcpx's key taken out) calls the server again; a
        2026-07-28 host that did not, and a 2025-06-18 host (no -32042 in either
        revision), get a tool error naming the URL.
        """
        url = "https://example.com/connect"
        required = RpcError(
            URL_ELICITATION_REQUIRED,
            "Connect your account first",
            {
                "elicitations": [
                    {"mode": "url", "elicitationId": "e1", "url": url, "message": "Open to connect"}
                ]
            },
        )
        url_host: dict[str, Any] = {"elicitation": {"url": {}}}

        def start(revision: Revision, **meta: Any) -> tuple[Harness, Session, list[Any]]:
            harness, connector = passed_through(scripted=refusing_nope())
            session = Session(revision, harness)
            # Listed as the call is made: a host declaring other questions reaches
            # another instance (it is declared no more upstream than it declared).
            session.result("tools/list", **meta)
            seen: list[Any] = []

            def call(u: Any, params: Mapping[str, Any]) -> Any:
                seen.append(dict(params))
                if len(seen) == 1:
                    raise required
                return {"content": [{"type": "text", "text": "connected"}]}

            answers: Any = upstream(connector, "beta").answers
            answers["tools/call"] = call
            return harness, session, seen

        harness, session, _ = start(Revision.V2025_11_25)
        error = session.error("tools/call", {"name": "nope", "arguments": {}})
        self.assertEqual((error.code, error.data), (URL_ELICITATION_REQUIRED, required.data))
        check_frames(harness, Revision.V2025_11_25)

        capabilities = {CLIENT_CAPABILITIES: url_host}
        harness, session, seen = start(Revision.V2026_07_28, **capabilities)
        asked = session.result("tools/call", {"name": "nope", "arguments": {}}, **capabilities)
        self.assertEqual(asked["resultType"], "input_required")
        self.assertEqual(
            list(asked["inputRequests"].values()),
            [
                {
                    "method": "elicitation/create",
                    "params": {"mode": "url", "message": "Open to connect", "url": url},
                }
            ],
        )
        [key] = asked["inputRequests"]
        retried = session.result(
            "tools/call",
            {"name": "nope", "arguments": {}, "inputResponses": {key: {"action": "accept"}}},
            **capabilities,
        )
        self.assertEqual(retried["content"][0]["text"], "connected")
        self.assertEqual(len(seen), 2)
        self.assertNotIn("inputResponses", seen[1])
        check_frames(harness, Revision.V2026_07_28)

        for revision in (Revision.V2026_07_28, Revision.V2025_06_18):
            harness, session, _ = start(revision)
            result = session.result("tools/call", {"name": "nope", "arguments": {}})
            self.assertIs(result["isError"], True, revision)
            self.assertIn(url, result["content"][0]["text"], revision)
            self.assertIn("Connect your account first", result["content"][0]["text"])
            check_frames(harness, revision)

    def test_url_elicitation_required_on_prompts_and_reads(self) -> None:
        """
        An upstream's -32042 to a prompts/get or resources/read (issue 43, item 12): a
        2025-11-25 host gets it as it is; a 2026-07-28 host that declared URL elicitation
        is answered input_required with the URL and its retry reaches the server again
        without mcpx's key; a 2026-07-28 host that did not gets -32021 requiring it, and
        a 2025-06-18 host -32603, both naming the URL (neither revision has -32042).
        """
        url = "https://example.com/connect"
        required = RpcError(
            URL_ELICITATION_REQUIRED,
            "Connect your account first",
            {"elicitations": [{"mode": "url", "elicitationId": "e1", "url": url}]},
        )
        url_host: dict[str, Any] = {"elicitation": {"url": {}}}
        asks = (
            ("prompts/get", {"name": "summarise"}),
            ("resources/read", {"uri": "beta://x"}),
        )

        def start(
            revision: Revision, method: str, **meta: Any
        ) -> tuple[Harness, Session, list[Any]]:
            harness, connector = passed_through()
            session = Session(revision, harness)
            # Listed as asked: a host declaring other questions reaches another instance.
            session.result("prompts/list", **meta)
            session.result("resources/list", **meta)
            seen: list[Any] = []
            answered = _answers(scripts()["beta"])[method]

            def answer(u: Any, params: Mapping[str, Any]) -> Any:
                seen.append(dict(params))
                if len(seen) == 1:
                    raise required
                return answered(u, params)

            answers: Any = upstream(connector, "beta").answers
            answers[method] = answer
            return harness, session, seen

        for method, params in asks:
            harness, session, _ = start(Revision.V2025_11_25, method)
            error = session.error(method, dict(params))
            self.assertEqual((error.code, error.data), (required.code, required.data), method)

            capabilities = {CLIENT_CAPABILITIES: url_host}
            harness, session, seen = start(Revision.V2026_07_28, method, **capabilities)
            asked = session.result(method, dict(params), **capabilities)
            self.assertEqual(asked["resultType"], "input_required", method)
            [(key, request)] = asked["inputRequests"].items()
            self.assertEqual(request["params"]["url"], url)
            retried = session.result(
                method,
                {**params, "inputResponses": {key: {"action": "accept"}}},
                **capabilities,
            )
            self.assertEqual(retried["resultType"], "complete", method)
            self.assertEqual(len(seen), 2, method)
            self.assertNotIn("inputResponses", seen[1], method)
            check_frames(harness, Revision.V2026_07_28)

            for revision, code in (
                (Revision.V2026_07_28, MISSING_REQUIRED_CLIENT_CAPABILITY),
                (Revision.V2025_06_18, INTERNAL_ERROR),
            ):
                harness, session, _ = start(revision, method)
                error = session.error(method, dict(params))
                self.assertEqual(error.code, code, (method, revision))
                self.assertIn(url, error.message, (method, revision))
                self.assertIn("Connect your account first", error.message, (method, revision))

    def test_unlisted_name_never_forwarded(self) -> None:
        """
        With several pass-through servers, a name none lists and mcpx has no tool of is
        refused with -32602 naming it, and reaches no server (each would run what it was
        given).
        """
        names = ("alpha", "beta")
        harness, connector = passed_through(names)
        error = Session(Revision.V2025_06_18, harness).error(
            "tools/call", {"name": "hidden", "arguments": {}}
        )
        self.assertEqual(error.code, INVALID_PARAMS)
        self.assertIn("'hidden'", error.message)
        for server in names:
            self.assertNotIn("tools/call", upstream(connector, server).methods())

    def test_unlisted_name_forwarded_to_the_only_server(self) -> None:
        """
        With one pass-through server, a name it does not list and mcpx has no tool of
        goes to it, which decides (here: it answers).
        """
        harness, connector = passed_through(("alpha",))
        result = Session(Revision.V2025_06_18, harness).call("hidden")
        self.assertEqual(result["content"][0]["text"], "hidden tool of alpha")
        sent = upstream(connector, "alpha").last("tools/call").params
        assert isinstance(sent, dict)
        self.assertEqual(sent["name"], "hidden")

    def test_gateway_name_reserved(self) -> None:
        """
        mcpx_servers, which alpha also lists, is mcpx's own on every revision, with
        alpha and beta passed through or alpha alone (the one server that gets the
        names it does not list): alpha is never called, and its tool is reported as
        shadowed by mcpx.
        """
        for named, revision in itertools.product((("alpha", "beta"), ("alpha",)), Revision):
            harness, connector = passed_through(named)
            session = Session(revision, harness)
            session.result("tools/list")
            result = session.call("mcpx_servers")
            text = result["content"][0]["text"]
            self.assertNotIn("alpha's own", text, (named, revision))
            self.assertIn('"other"', text, (named, revision))
            self.assertNotIn("tools/call", upstream(connector, "alpha").methods())
            (shadowed,) = harness.host.clashes.shadowed("alpha", harness.host.servers)
            self.assertEqual(
                (shadowed.kind, shadowed.name, shadowed.kept, shadowed.reserved),
                ("tool", "mcpx_servers", "mcpx", True),
            )

    def test_reserved_prefix_never_forwarded(self) -> None:
        """
        A name starting with mcpx_ that mcpx has no tool of is refused by mcpx, not
        handed to the only pass-through server (which gets other unlisted names).
        """
        harness, connector = passed_through(("alpha",))
        session = Session(Revision.V2025_06_18, harness)
        error = session.error("tools/call", {"name": "mcpx_future", "arguments": {}})
        self.assertEqual(error.code, INVALID_PARAMS)
        self.assertIn("no tool named 'mcpx_future'", error.message)
        for started in connector.started("alpha"):
            self.assertNotIn("tools/call", started.methods())

    def test_reserved_names_refused_at_every_call(self) -> None:
        """
        The names told not to be the gateway's are remembered (at most
        REMEMBERED_NAMES, here 8, of at most MAX_REMEMBERED_NAME characters): alpha's
        echo is forwarded at each call, a reserved name refused at each, before and after
        the memory started afresh, and a longer name is never remembered.
        """
        self.patch(passthrough_routes, "REMEMBERED_NAMES", 8)
        harness, connector = passed_through(("alpha",))
        session = Session(Revision.V2025_06_18, harness)
        passthrough = harness.server.passthrough
        assert passthrough is not None
        remembered = passthrough.routes._unreserved

        def refused() -> None:
            error = session.error("tools/call", {"name": "mcpx_future", "arguments": {}})
            self.assertIn("no tool named 'mcpx_future'", error.message)

        def echoed(text: str) -> None:
            result = session.call("echo", {"text": text})
            self.assertEqual(result["structuredContent"], {"said": text})

        def unlisted(name: str) -> None:
            # The only server's to answer: forwarded, whatever it says.
            with contextlib.suppress(RpcError):
                session.call(name)

        long_name = "x" * (passthrough_routes.MAX_REMEMBERED_NAME + 1)
        for _ in range(2):
            echoed("hi")
            refused()
            unlisted(long_name)
        self.assertIn("echo", remembered)
        self.assertNotIn("mcpx_future", remembered)
        self.assertNotIn(long_name, remembered)
        for n in range(8):
            unlisted(f"t{n}")
            self.assertLessEqual(len(remembered), 8)
        self.assertNotIn("echo", remembered)
        echoed("yo")
        refused()
        calls = sum(started.methods().count("tools/call") for started in connector.started("alpha"))
        self.assertEqual(calls, 2 + 2 + 8 + 1)

    def test_reserved_prefix_in_any_spelling(self) -> None:
        """
        alpha's tools named like the gateway's in another case, with - for _, or in
        fullwidth letters (MCPX_CALL, mcpx-call, Mcpx-Exec, a fullwidth mcpx_read) are not listed
        and a call of any of them is refused by mcpx, never handed to alpha; each is
        reported as shadowed by mcpx.
        """
        looks_alike = ["MCPX_CALL", "mcpx-call", "Mcpx-Exec", "\uff4d\uff43\uff50\uff58_read"]
        scripted = scripts()
        alpha = scripted["alpha"]
        alpha["tools"] = [
            *alpha["tools"],
            *({"name": name, "inputSchema": {"type": "object"}} for name in looks_alike),
        ]
        harness, connector = passed_through(("alpha",), scripted=scripted)
        session = Session(Revision.V2025_06_18, harness)
        listed = names_of(session.result("tools/list")["tools"])
        for name in looks_alike:
            self.assertNotIn(name, listed)
            error = session.error("tools/call", {"name": name, "arguments": {}})
            self.assertEqual(error.code, INVALID_PARAMS, name)
            self.assertIn(f"no tool named {name!r}", error.message)
        for started in connector.started("alpha"):
            self.assertNotIn("tools/call", started.methods())
        shadowed = harness.host.clashes.shadowed("alpha", harness.host.servers)
        self.assertEqual(
            sorted(clash.name for clash in shadowed if clash.reserved),
            sorted([*looks_alike, "mcpx_servers"]),
        )

    def test_gateway_tools_still_work(self) -> None:
        """A gateway tool no upstream shadows still runs, and reaches every other server."""
        harness, _ = passed_through()
        session = Session(Revision.V2025_06_18, harness)
        result = session.call(
            "mcpx_call", {"server": "other", "tool": "echo", "arguments": {"text": "x"}}
        )
        self.assertEqual(result["content"][0]["text"], "x")
        described = session.call("mcpx_describe", {"server": "other", "tool": "echo"})
        self.assertIs(described["isError"], False)

    def test_one_server_lists_once_for_many_calls(self) -> None:
        """
        With one pass-through server, calls are routed by its cached catalogue: its
        tools are listed once, not once per call.
        """
        harness, connector = passed_through(("alpha",))
        session = Session(Revision.V2025_06_18, harness)
        for _ in range(3):
            session.call("echo", {"text": "a"})
        self.assertEqual(upstream(connector, "alpha").methods().count("tools/list"), 1)

    def test_pool_failure_is_internal_error(self) -> None:
        """A pass-through server that cannot be started is -32603 naming it."""
        harness, connector = passed_through(("alpha",))
        connector.failures.append(RuntimeError("no such command"))
        error = Session(Revision.V2025_06_18, harness).error(
            "tools/call", {"name": "echo", "arguments": {}}
        )
        self.assertEqual(error.code, INTERNAL_ERROR)
        self.assertIn("alpha", error.message)

    def test_progress_and_cancellation(self) -> None:
        """
        The upstream's progress reaches the host with the host's token, and cancelling
        the host's call cancels the upstream's.
        """
        harness, connector = passed_through()
        connector.holding.add("tools/call")
        session = Session(Revision.V2025_06_18, harness)
        calling = session.request(
            "tools/call", {"name": "echo", "arguments": {"text": "a"}}, progressToken="p-1"
        )
        held = upstream(connector, "alpha")
        params = held.last("tools/call").params
        assert isinstance(params, dict)
        token = params["_meta"]["progressToken"]
        self.assertNotEqual(token, "p-1")
        held.notify("notifications/progress", {"progressToken": token, "progress": 1, "total": 2})
        progress = [n for n in harness.notifications if n.method == "notifications/progress"]
        self.assertEqual(progress[0].params, {"progressToken": "p-1", "progress": 1, "total": 2})
        calling.addErrback(lambda f: f.trap(CancelledError))
        calling.cancel()
        self.assertEqual(held.cancelled, [held.last("tools/call").id])


class PromptTests(SynchronousTestCase):
    def test_listed_without_prefix_then_the_others(self) -> None:
        """
        prompts/list names alpha's and beta's prompts as they do, then the gateway's
        prompts of the servers not passed through (other_greet).
        """
        for revision in Revision:
            harness, _ = passed_through()
            prompts = Session(revision, harness).result("prompts/list")["prompts"]
            self.assertEqual(names_of(prompts), ["greet", "summarise", "other_greet"], revision)
            self.assertEqual("title" in prompts[0], field_in("Prompt.title", revision))
            check_frames(harness, revision)

    def test_get_verbatim(self) -> None:
        """
        prompts/get goes to the owner and its result comes back as it was (own URIs); a
        name no server lists is refused naming it, and sent to no server.
        """
        harness, connector = passed_through()
        session = Session(Revision.V2025_06_18, harness)
        result = session.result("prompts/get", {"name": "summarise", "arguments": {"n": "1"}})
        self.assertEqual(result["description"], "summarise of beta")
        self.assertEqual(result["messages"][1]["content"]["resource"]["uri"], "alpha://doc")
        sent = upstream(connector, "beta").last("prompts/get").params
        self.assertEqual(sent, {"name": "summarise", "arguments": {"n": "1"}})
        gateway = session.result("prompts/get", {"name": "other_greet"})
        self.assertEqual(gateway["description"], "greet of other")
        unknown = session.error("prompts/get", {"name": "unlisted"})
        self.assertEqual((unknown.code, unknown.data), (-32602, {"name": "unlisted"}))
        self.assertIn("unknown prompt 'unlisted'", unknown.message)
        asked = [
            request.params
            for name in ("alpha", "beta")
            for request in upstream(connector, name).requests
            if request.method == "prompts/get"
        ]
        self.assertNotIn({"name": "unlisted"}, asked)
        check_frames(harness, Revision.V2025_06_18)

    def test_gateway_names_reserved(self) -> None:
        """
        A pass-through server's prompt under the name the gateway gives another
        server's (alpha's other_greet) and its resource and template under mcpx:// URIs
        are not listed; prompts/get and resources/read of them reach the gateway (other),
        never alpha; each is reported as shadowed by mcpx.
        """
        scripted = scripts()
        alpha = scripted["alpha"]
        alpha["prompts"] = [*alpha["prompts"], {"name": "other_greet"}]
        stolen = uris.to_mcpx("other", "other://r")
        alpha["resources"] = [*alpha["resources"], {"uri": stolen, "name": "r"}]
        alpha["templates"] = [*alpha["templates"], {"uriTemplate": "MCPX://other/{x}"}]
        for revision in Revision:
            harness, connector = passed_through(scripted=scripted)
            session = Session(revision, harness)
            prompts = names_of(session.result("prompts/list")["prompts"])
            self.assertEqual(prompts, ["greet", "summarise", "other_greet"], revision)
            got = session.result("prompts/get", {"name": "other_greet"})
            self.assertEqual(got["description"], "greet of other")
            listed = [r["uri"] for r in session.result("resources/list")["resources"]]
            self.assertEqual(listed.count(stolen), 1, "the gateway's, not alpha's too")
            templates = session.result("resources/templates/list")["resourceTemplates"]
            self.assertNotIn("MCPX://other/{x}", [t["uriTemplate"] for t in templates])
            session.result("resources/read", {"uri": stolen})
            alpha_asked = upstream(connector, "alpha").methods()
            self.assertNotIn("prompts/get", alpha_asked)
            self.assertNotIn("resources/read", alpha_asked)
            shadowed = harness.host.clashes.shadowed("alpha", harness.host.servers)
            self.assertEqual(
                sorted((clash.kind, clash.name, clash.kept, clash.reserved) for clash in shadowed),
                [
                    ("prompt", "other_greet", "mcpx", True),
                    ("resource", stolen, "mcpx", True),
                    ("template", "MCPX://other/{x}", "mcpx", True),
                ],
                revision,
            )

    def test_gateway_naming_does_not_reach_a_passed_server(self) -> None:
        """
        In pass-through a prompt is routed only as listed: C{alpha_greet}, the gateway's
        name for alpha's C{greet}, is an unknown prompt as it would be directly, and
        alpha is not asked for C{greet} (issue 43, item 11); completion alike.
        """
        for revision in Revision:
            harness, connector = passed_through()
            session = Session(revision, harness)
            unknown = session.error("prompts/get", {"name": "alpha_greet"})
            self.assertEqual((unknown.code, unknown.data), (-32602, {"name": "alpha_greet"}))
            self.assertIn("unknown prompt 'alpha_greet'", unknown.message)
            self.assertNotIn("prompts/get", upstream(connector, "alpha").methods())
            completing = session.error(
                "completion/complete",
                {
                    "ref": {"type": "ref/prompt", "name": "alpha_greet"},
                    "argument": {"name": "who", "value": "A"},
                },
            )
            self.assertEqual(completing.code, -32602)
            self.assertNotIn("completion/complete", upstream(connector, "alpha").methods())
            check_frames(harness, revision)

    def test_duplicate_prompt_is_kept_for_the_first_server(self) -> None:
        """A prompt name both servers offer is listed once and got from the first server."""
        scripted = scripts()
        scripted["beta"]["prompts"] = [{"name": "greet"}, *scripted["beta"]["prompts"]]
        harness, connector = passed_through(scripted=scripted)
        session = Session(Revision.V2025_06_18, harness)
        prompts = names_of(session.result("prompts/list")["prompts"])
        self.assertEqual(prompts.count("greet"), 1)
        self.assertIn("summarise", prompts)
        session.result("prompts/get", {"name": "greet"})
        self.assertNotIn("prompts/get", upstream(connector, "beta").methods())


class InstructionsTests(SynchronousTestCase):
    """
    A pass-through host is given the servers' own instructions, not the gateway's
    description of names that do not apply to them (issue 43, item 6).
    """

    def given(self, session: Session) -> Any:
        if session.initialize_result is not None:
            return session.initialize_result.get("instructions")
        return session.result("server/discover").get("instructions")

    def test_one_server_verbatim_then_the_gateway_tools(self) -> None:
        """
        One server passed through: its instructions as it declared them, then what the
        gateway tools (offered after its tools) are for and how the servers not passed
        through are named; on both eras.
        """
        scripted = scripts()
        scripted["alpha"]["instructions"] = "Alpha: call echo first."
        for revision in (Revision.V2025_11_25, NEWEST):
            harness, _ = passed_through(("alpha",), scripted=scripted)
            self.assertEqual(
                self.given(Session(revision, harness)),
                "Alpha: call echo first.\n\n" + INSTRUCTIONS,
                revision,
            )

    def test_several_servers_each_under_its_name(self) -> None:
        """
        Several servers: each one's instructions under its name, in the order named,
        one that declared none left out, then the gateway's under mcpx's.
        """
        scripted = scripts()
        scripted["alpha"]["instructions"] = "Alpha: call echo first."
        scripted["beta"]["instructions"] = "Beta adds."
        for revision in (Revision.V2025_06_18, NEWEST):
            harness, _ = passed_through(scripted=scripted)
            self.assertEqual(
                self.given(Session(revision, harness)),
                "## alpha\n\nAlpha: call echo first.\n\n## beta\n\nBeta adds.\n\n"
                "## mcpx\n\n" + INSTRUCTIONS,
                revision,
            )
        del scripted["beta"]["instructions"]
        harness, _ = passed_through(scripted=scripted)
        self.assertEqual(
            self.given(Session(NEWEST, harness)),
            "## alpha\n\nAlpha: call echo first.\n\n## mcpx\n\n" + INSTRUCTIONS,
        )

    def test_every_server_passed_through(self) -> None:
        """
        With every configured server passed through, the gateway's prompt and
        resource names are not described (nothing is offered under them); a server
        without instructions adds none.
        """
        scripted = scripts()
        del scripted["other"]
        scripted["alpha"]["instructions"] = "Alpha: call echo first."
        harness, _ = passed_through(("alpha", "beta"), scripted=scripted)
        self.assertEqual(
            self.given(Session(Revision.V2025_11_25, harness)),
            "## alpha\n\nAlpha: call echo first.\n\n## mcpx\n\n" + GATEWAY_TOOLS_INSTRUCTIONS,
        )
        self.assertNotIn("mcpx://", GATEWAY_TOOLS_INSTRUCTIONS)


class FailingNeighbourTests(SynchronousTestCase):
    """
    A pass-through server that failed to start and is starting again, hung, holds up
    none of its neighbour's requests (issue 43, item 9): the clock never moves, so
    anything that waited on it would not be answered.
    """

    def test_not_waited_for(self) -> None:
        harness, connector = passed_through()
        connector.failures.append(RuntimeError("boom"))
        session = Session(Revision.V2025_11_25, harness)
        # alpha's first start fails at once: left out, beta listed.
        listed = names_of(session.result("tools/list")["tools"])
        self.assertIn("add", listed)
        self.assertNotIn("echo", listed)
        # Its back-off passes, and its next start hangs.
        connect = connector.connect
        hung: Deferred[Any] = Deferred()

        tried: list[str] = []

        async def hanging(name: str, *args: Any, **kwargs: Any) -> Any:
            tried.append(name)
            if name == "alpha":
                await hung
            return await connect(name, *args, **kwargs)

        connector.connect = hanging  # type: ignore[method-assign]
        harness.clock.advance(60)
        listing = session.request("tools/list")
        calling = session.request("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
        prompt = session.request("prompts/get", {"name": "summarise"})
        harness.clock.advance(0)
        self.assertIn("add", names_of(result_of(listing)["tools"]))
        self.assertEqual(result_of(calling)["structuredContent"], {"sum": 3})
        self.assertIn("summarise", result_of(prompt)["description"])
        # alpha is starting again meanwhile, in the background.
        self.assertEqual(tried, ["alpha"])
        pool = harness.host.pool
        assert pool is not None
        self.assertEqual(pool.status()[0].state.value, "starting")

    def test_a_hosts_own_fresh_instance_is_waited_for(self) -> None:
        """
        alpha's instance for hosts declaring every question failed to start; a host
        declaring none has an instance of its own (issue 43, item 8), which has never
        failed: its listing waits for that start as for any (within C{pool.listWait})
        and lists alpha's tools, rather than taking alpha for failing.
        """
        harness, connector = passed_through()
        connector.failures.append(RuntimeError("boom"))
        every: dict[str, Any] = {
            "elicitation": {"form": {}, "url": {}},
            "sampling": {},
            "roots": {},
        }
        asking = Session(Revision.V2026_07_28, harness)
        listed = asking.result("tools/list", **{CLIENT_CAPABILITIES: every})
        self.assertNotIn("echo", names_of(listed["tools"]))
        pool = harness.host.pool
        assert pool is not None
        self.assertIsNotNone(pool.status()[0].last_error)
        # The other host's start of alpha takes a second (of the injected clock).
        connect = connector.connect

        async def slow(name: str, *args: Any, **kwargs: Any) -> Any:
            if name == "alpha":
                await deferLater(harness.clock, 1, lambda: None)
            return await connect(name, *args, **kwargs)

        connector.connect = slow  # type: ignore[method-assign]
        plain = Session(Revision.V2026_07_28, harness)
        listing = plain.request("tools/list")
        harness.clock.advance(0)
        self.assertNoResult(listing)
        harness.clock.advance(1)
        self.assertIn("echo", names_of(result_of(listing)["tools"]))


class DownServerTests(SynchronousTestCase):
    """
    A pass-through server that died keeps its names while it is down or backing off:
    nothing meant for it reaches another server.
    """

    def crashed(self, revision: Revision) -> tuple[Harness, Upstreams, Session]:
        """alpha and beta listed once, then beta's process gone (its restart not due)."""
        harness, connector = passed_through()
        session = Session(revision, harness)
        session.result("tools/list")
        session.result("prompts/list")
        upstream(connector, "beta").crash(9)
        return harness, connector, session

    def test_call_of_a_down_servers_tool_is_not_misrouted(self) -> None:
        """
        A call of beta's tool while beta is backing off fails naming beta (and when it
        will start again); alpha is never asked.  Once the back-off passes, the same
        call restarts beta and is answered by it.
        """
        for revision in Revision:
            harness, connector, session = self.crashed(revision)
            error = session.error("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
            self.assertEqual(error.code, INTERNAL_ERROR, revision)
            self.assertIn("'beta'", error.message)
            self.assertIn("next start in", error.message)
            self.assertNotIn("tools/call", upstream(connector, "alpha").methods())
            harness.clock.advance(1)
            result = session.call("add", {"a": 1, "b": 2})
            self.assertEqual(result["content"][0]["text"], "3")
            self.assertEqual(len(connector.started("beta")), 2)
            self.assertNotIn("tools/call", upstream(connector, "alpha").methods())
            check_frames(harness, revision)

    def test_lists_keep_a_down_servers_names(self) -> None:
        """tools/list and prompts/list while beta is down still carry beta's tool and prompt."""
        for revision in Revision:
            harness, _, session = self.crashed(revision)
            tools = names_of(session.result("tools/list")["tools"])
            self.assertIn("add", tools, revision)
            self.assertEqual(tools[:4], ["echo", "rich", "add", GATEWAY_NAMES[0]])
            prompts = names_of(session.result("prompts/list")["prompts"])
            self.assertEqual(prompts[:2], ["greet", "summarise"])
            check_frames(harness, revision)

    def test_prompt_of_a_down_server_is_not_misrouted(self) -> None:
        """prompts/get of beta's prompt while beta is down fails naming beta, not alpha."""
        _, connector, session = self.crashed(Revision.V2025_06_18)
        error = session.error("prompts/get", {"name": "summarise"})
        self.assertEqual(error.code, INTERNAL_ERROR)
        self.assertIn("'beta'", error.message)
        # /v1's code for it, and when to try again.
        self.assertEqual(error.data["code"], "server_unavailable")
        self.assertGreater(error.data["retry_in"], 0)
        self.assertNotIn("prompts/get", upstream(connector, "alpha").methods())

    def test_never_listed_server_down(self) -> None:
        """
        A name no server lists, while one of them has never been listed and cannot be
        started, is refused (-32603: the gateway cannot tell, the request is not at
        fault) naming the server that could not be asked and why; no server is guessed.
        (A server a reload removed: tests.server.test_reload_announce.)
        """
        harness, connector = passed_through()
        # beta cannot be started: its command is gone (initialize, which asks each
        # server for its instructions, cannot start it either).
        del connector.scripted["beta"]
        session = Session(Revision.V2025_06_18, harness)
        error = session.error("tools/call", {"name": "add", "arguments": {}})
        self.assertEqual(error.code, INTERNAL_ERROR)
        self.assertEqual(error.data, {"name": "add", "servers": ["beta"]})
        self.assertIn("server 'beta'", error.message)
        self.assertNotIn("tools/call", upstream(connector, "alpha").methods())


class ResourceTests(SynchronousTestCase):
    def test_lists_use_own_uris(self) -> None:
        """
        resources/list and resources/templates/list carry the pass-through servers'
        own URIs (a URI two of them list, once), then the other servers' mcpx:// ones.
        """
        for revision in Revision:
            harness, _ = passed_through()
            session = Session(revision, harness)
            listed = [r["uri"] for r in session.result("resources/list")["resources"]]
            self.assertEqual(
                listed,
                [
                    "alpha://doc",
                    "beta://x",
                    "shared://one",
                    uris.to_mcpx("other", "other://r"),
                ],
            )
            templates = session.result("resources/templates/list")["resourceTemplates"]
            self.assertEqual(
                [t["uriTemplate"] for t in templates],
                ["alpha://items/{id}", "shared://{name}", "notes://{+path}"],
            )
            check_frames(harness, revision)

    def test_read_routed_by_listing_and_template(self) -> None:
        """
        A bare URI goes to the first server, in the order named, that lists it or has a
        template it falls under, else to the first whose other resources share its
        scheme; one nobody can have is refused, naming it; an mcpx:// URI goes through
        the gateway.
        """
        harness, _ = passed_through()
        session = Session(Revision.V2025_06_18, harness)

        def owner(uri: str) -> str:
            contents = session.result("resources/read", {"uri": uri})["contents"]
            self.assertEqual(contents[0]["uri"], uri)
            return str(contents[0]["text"])

        self.assertEqual(owner("alpha://doc"), "alpha")
        self.assertEqual(owner("beta://x"), "beta")
        self.assertEqual(owner("alpha://items/7"), "alpha")
        self.assertEqual(owner("notes://a/b/c"), "beta")
        # beta lists it, but alpha comes first and has a template it falls under.
        self.assertEqual(owner("shared://one"), "alpha")
        # Not listed, but of a scheme only beta's resources use.
        self.assertEqual(owner("beta://unlisted"), "beta")
        # {id} is one segment: alpha's template does not take this one; the scheme does.
        self.assertEqual(owner("alpha://items/7/8"), "alpha")
        error = session.error("resources/read", {"uri": "unknown://z"})
        self.assertEqual(error.code, -32002)
        self.assertIn("unknown://z", error.message)
        self.assertEqual(owner(uris.to_mcpx("other", "other://r")), "other")
        check_frames(harness, Revision.V2025_06_18)

    def test_read_never_sent_to_a_server_without_resources(self) -> None:
        """
        A URI nobody lists is not handed to a first server that declares no resources:
        it goes to the one server that does, and with none, is refused naming the URI
        (-32602 at 2026-07-28, where -32002 is retired).
        """
        script = scripts()
        script["alpha"] = {**script["alpha"], "resources": [], "templates": []}
        script["alpha"]["capabilities"] = {"tools": {}}
        harness, connector = passed_through(scripted=script)
        session = Session(Revision.V2025_11_25, harness)
        contents = session.result("resources/read", {"uri": "memory://nope"})["contents"]
        self.assertEqual(contents[0]["text"], "beta")
        only_alpha = {**script, "beta": {**script["alpha"]}}
        harness, connector = passed_through(scripted=only_alpha)
        for revision, code in ((Revision.V2025_11_25, -32002), (Revision.V2026_07_28, -32602)):
            error = Session(revision, harness).error("resources/read", {"uri": "memory://nope"})
            self.assertEqual(error.code, code)
            self.assertIn("memory://nope", error.message)
        asked = [
            request.method
            for upstream in connector.upstreams
            for request in upstream.requests
            if request.method == "resources/read"
        ]
        self.assertEqual(asked, [])

    def test_template_matching(self) -> None:
        """A simple expression fills one non-empty segment; + takes the rest."""

        def routes(template: str, uri: str) -> bool:
            return template_routes(((template, template_pattern(template)),), uri)

        self.assertTrue(routes("alpha://items/{id}", "alpha://items/7"))
        self.assertFalse(routes("alpha://items/{id}", "alpha://items/"))
        self.assertFalse(routes("alpha://items/{id}", "alpha://items/7/8"))
        self.assertTrue(routes("n://{+path}", "n://a/b"))
        self.assertTrue(routes("f:///{+p}{?rev}", "f:///a?rev=1"))
        self.assertFalse(routes("x://{a}.txt", "x://b.md"))
        # Sixteen {+var}s are matched by RE2, in linear time (by Python's re, thirty
        # characters took seconds and each more many times longer).
        hostile = "file://" + "".join(f"{{+v{i}}}" for i in range(16)) + "!"
        self.assertFalse(routes(hostile, "file://" + "a" * 5000))
        self.assertTrue(routes(hostile, "file://" + "a" * 5000 + "!"))

    def test_costly_template_not_tried(self) -> None:
        """
        A template whose match against a long URI would cost more than
        L{MAX_TEMPLATE_MATCH_UNITS} is not tried (the URI does not fall under it); the
        same URI still routes to a template listed as it is, and a short one matches.
        """
        template = "n://" + "".join(f"{{+v{i}}}x" for i in range(100))
        pattern = template_pattern(template)
        assert pattern is not None
        filled = "n://" + "ax" * 100
        self.assertTrue(template_routes(((template, pattern),), filled))
        long = "n://" + "a" * (MAX_TEMPLATE_MATCH_UNITS // pattern.programsize) + "ax" * 100
        self.assertFalse(template_routes(((template, pattern),), long))
        self.assertTrue(template_routes(((long, None), (template, pattern)), long))

    def test_template_too_big_for_re2(self) -> None:
        """A template RE2 cannot compile within its memory routes nothing."""
        template = "n://" + "".join(f"{{+v{i}}}x" for i in range(5000))
        self.assertIsNone(template_pattern(template))
        self.assertFalse(template_routes(((template, None),), "n://ax"))
        self.assertTrue(template_routes(((template, None),), template))

    def test_not_found_error_relayed(self) -> None:
        """
        The upstream's -32002 reaches a legacy client as it is; 2026-07-28, which
        retired the code, gets -32602 with the same message and data.
        """
        for revision in Revision:
            harness, _ = passed_through()
            error = Session(revision, harness).error("resources/read", {"uri": "alpha://missing"})
            expected = INVALID_PARAMS if revision is NEWEST else -32002
            self.assertEqual((error.code, error.data), (expected, {"uri": "alpha://missing"}))
            check_frames(harness, revision)

    def test_subscription_by_own_uri(self) -> None:
        """
        resources/subscribe takes the upstream's own URI; its update reaches the host
        under that URI, while a host subscribed by the mcpx:// URI hears that one.
        """
        for revision in LEGACY_REVISIONS:
            harness, connector = passed_through()
            session = Session(revision, harness)
            session.result("resources/subscribe", {"uri": "beta://x"})
            beta = upstream(connector, "beta")
            self.assertEqual(beta.last("resources/subscribe").params, {"uri": "beta://x"})
            mcpx_name = uris.to_mcpx("beta", "beta://x")
            session.result("resources/subscribe", {"uri": mcpx_name})
            beta.notify("notifications/resources/updated", {"uri": "beta://x"})
            updates = sorted(
                dict(n.params or {})["uri"]
                for n in harness.notifications
                if n.method == "notifications/resources/updated"
            )
            self.assertEqual(updates, sorted(["beta://x", mcpx_name]), revision)
            session.result("resources/unsubscribe", {"uri": "beta://x"})
            self.assertNotIn("resources/unsubscribe", beta.methods())
            session.result("resources/unsubscribe", {"uri": mcpx_name})
            self.assertIn("resources/unsubscribe", beta.methods())
            check_frames(harness, revision)

    def test_completion_refs(self) -> None:
        """completion/complete refs name prompts and templates as the upstream does."""
        harness, connector = passed_through()
        session = Session(Revision.V2025_06_18, harness)

        def complete(ref: dict[str, Any]) -> list[str]:
            result = session.result(
                "completion/complete", {"ref": ref, "argument": {"name": "x", "value": ""}}
            )
            return list(result["completion"]["values"])

        self.assertEqual(complete({"type": "ref/prompt", "name": "summarise"}), ["beta:summarise"])
        self.assertEqual(
            complete({"type": "ref/resource", "uri": "notes://{+path}"}), ["beta:notes://{+path}"]
        )
        self.assertEqual(
            complete({"type": "ref/resource", "uri": "alpha://items/{id}"}),
            ["alpha:alpha://items/{id}"],
        )
        self.assertEqual(complete({"type": "ref/prompt", "name": "other_greet"}), ["other:greet"])
        sent = upstream(connector, "beta").last("completion/complete").params
        assert isinstance(sent, dict)
        self.assertEqual(sent["ref"], {"type": "ref/resource", "uri": "notes://{+path}"})
        check_frames(harness, Revision.V2025_06_18)

    def test_completion_not_declared(self) -> None:
        """A pass-through server that did not declare completions is not asked."""
        harness, connector = passed_through()
        del connector.capabilities["completions"]
        result = Session(Revision.V2025_06_18, harness).result(
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "greet"},
                "argument": {"name": "x", "value": ""},
            },
        )
        self.assertEqual(result["completion"], {"values": [], "hasMore": False})
        self.assertNotIn("completion/complete", upstream(connector, "alpha").methods())


class ListChangedTests(SynchronousTestCase):
    def test_declared_where_the_connection_can_push(self) -> None:
        """
        tools.listChanged is declared to a legacy client mcpx can push to, not where it
        cannot push, and to 2026-07-28 (which hears of it on subscriptions/listen).
        """
        for revision in LEGACY_REVISIONS:
            harness, _ = passed_through()
            declared = Session(revision, harness).initialize_result["capabilities"]
            self.assertEqual(declared["tools"], {"listChanged": True}, revision)
            check_frames(harness, revision)
            harness, _ = passed_through(can_push=False, transport="http-post")
            declared = Session(revision, harness).initialize_result["capabilities"]
            self.assertEqual(declared["tools"], {}, revision)
        harness, _ = passed_through()
        discovered = Session(NEWEST, harness).result("server/discover")
        self.assertEqual(discovered["capabilities"]["tools"], {"listChanged": True})

    def test_upstream_change_relayed_and_relisted(self) -> None:
        """
        A pass-through server's tools/list_changed reaches the legacy client, valid
        for its revision, and the next tools/list shows the new list.
        """
        for revision in LEGACY_REVISIONS:
            harness, connector = passed_through()
            session = Session(revision, harness)
            session.result("tools/list")
            connector.scripted["beta"]["tools"].append(
                {"name": "sub", "inputSchema": {"type": "object"}}
            )
            upstream(connector, "beta").notify("notifications/tools/list_changed")
            changed = [
                n for n in harness.notifications if n.method == "notifications/tools/list_changed"
            ]
            self.assertEqual(len(changed), 1, revision)
            self.assertIn("sub", names_of(session.result("tools/list")["tools"]))
            self.assertIn("ToolListChangedNotification", check_frames(harness, revision))

    def test_prompt_and_resource_changes_relayed(self) -> None:
        """
        prompts.listChanged and resources.listChanged are declared to a legacy client mcpx
        can push to, and a pass-through server's prompts/ and resources/list_changed reach
        it, valid for its revision.
        """
        for revision in LEGACY_REVISIONS:
            harness, connector = passed_through()
            session = Session(revision, harness)
            declared = session.initialize_result["capabilities"]
            self.assertEqual(declared["prompts"], {"listChanged": True}, revision)
            self.assertEqual(declared["resources"].get("listChanged"), True, revision)
            session.result("prompts/list")
            for method in (
                "notifications/prompts/list_changed",
                "notifications/resources/list_changed",
            ):
                upstream(connector, "beta").notify(method)
            self.assertEqual(
                [n.method for n in harness.notifications],
                ["notifications/prompts/list_changed", "notifications/resources/list_changed"],
                revision,
            )
            checked = check_frames(harness, revision)
            self.assertIn("PromptListChangedNotification", checked)
            self.assertIn("ResourceListChangedNotification", checked)

    def test_not_relayed_from_others_or_where_nothing_was_declared(self) -> None:
        """
        A server that is not passed through changing its tools changes nothing on MCP;
        a client without a connection to push on, or not yet initialized, hears nothing.
        """
        harness, connector = passed_through()
        session = Session(Revision.V2025_06_18, harness)
        session.call("mcpx_call", {"server": "other", "tool": "echo"})
        upstream(connector, "other").notify("notifications/tools/list_changed")
        self.assertEqual(harness.notifications, [])
        unnamed = harness.server.open(Conn("stdio", "host-pid-2", push=self._fail_push))
        self.assertEqual(
            harness.server.subscriptions.list_changed("alpha", "notifications/tools/list_changed"),
            1,
        )
        self.assertIsNone(unnamed.revision)
        harness.server.close(harness.conn)
        self.assertEqual(
            harness.server.subscriptions.list_changed("alpha", "notifications/tools/list_changed"),
            0,
        )

    def _fail_push(self, method: str, params: dict[str, Any] | None) -> None:
        raise AssertionError(f"{method} pushed to a client that agreed no revision")


class GatewayUnchangedTests(SynchronousTestCase):
    def test_no_passthrough_no_change(self) -> None:
        """
        With no server passed through, the surface is the gateway's: its tools only,
        prompts and resources namespaced, tools.listChanged not declared, and upstream
        tool changes not relayed.
        """
        harness, connector = passed_through(())
        self.assertIsNone(harness.server.passthrough)
        session = Session(Revision.V2025_06_18, harness)
        self.assertEqual(session.initialize_result["capabilities"]["tools"], {})
        self.assertEqual(names_of(session.result("tools/list")["tools"]), GATEWAY_NAMES)
        prompts = names_of(session.result("prompts/list")["prompts"])
        self.assertEqual(prompts, ["alpha_greet", "beta_summarise", "other_greet"])
        resources = [r["uri"] for r in session.result("resources/list")["resources"]]
        self.assertEqual(resources[0], uris.to_mcpx("alpha", "alpha://doc"))
        error = session.error("tools/call", {"name": "echo", "arguments": {}})
        self.assertEqual(error.code, INVALID_PARAMS)
        self.assertIn("no tool named 'echo'", error.message)
        session.result("resources/read", {"uri": uris.to_mcpx("alpha", "alpha://doc")})
        upstream(connector, "alpha").notify("notifications/tools/list_changed")
        self.assertEqual(harness.notifications, [])


class ModernHTTPTests(SynchronousTestCase):
    def test_upstream_error_status(self) -> None:
        """
        On 2026-07-28 Streamable HTTP, an upstream's -32602 for a pass-through call is
        the response's error with status 400; a forwarded result is 200.
        """
        harness, _ = passed_through(scripted=refusing_nope())
        mcp = McpHTTP(harness.server, harness.clock, keep_alive=15.0)
        self.addCleanup(mcp.close)
        client = Client(mcp, harness.clock)
        call = modern(1, "tools/call", {"name": "nope", "arguments": {}})
        response, body = client.post(call, modern_headers("tools/call", **{"Mcp-Name": "nope"}))
        self.assertEqual(response.code, 400)
        self.assertEqual(body["error"], UNKNOWN_TOOL.to_json())
        call = modern(2, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
        response, body = client.post(call, modern_headers("tools/call", **{"Mcp-Name": "add"}))
        self.assertEqual(response.code, 200)
        self.assertEqual(body["result"]["structuredContent"], {"sum": 3})


class ServeHost(Host):
    """A L{Host} on C{mcpx serve} with arguments of its own."""

    def __init__(self, case: RealDaemonCase, *arguments: str) -> None:
        self.child = spawn(
            [sys.executable, "-m", "mcpx", "serve", *arguments], env=case.env, cwd=str(REPO)
        )
        case.addCleanup(kill_on_cleanup, self.child)
        self.next_id = 0
        self.claimed: set[int] = set()


class PassThroughDaemonCase(RealDaemonCase):
    """A real daemon started with pass-through flags, and hosts on mcpx serve."""

    timeout = 60

    async def _start(self, *flags: str) -> None:
        daemon = spawn(
            [sys.executable, "-m", "mcpx", "daemon", "--daemon-listen", "", *flags],
            env=self.env,
            cwd=str(REPO),
        )
        self.addCleanup(kill_on_cleanup, daemon)
        self.addCleanup(self.stop_daemon, daemon)
        await daemon.wait_for(rb"listening on unix socket", fd=2, timeout=30)
        self.daemon = daemon

    async def _initialize(self, host: Host) -> dict[str, Any]:
        initialized: dict[str, Any] = await host.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test-host", "version": "1"},
            },
        )
        host.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return initialized


class DemoPassThroughTests(PassThroughDaemonCase):
    """A real daemon started with --passthrough demo, and a host on mcpx serve."""

    async def test_demo_as_itself(self) -> None:
        """
        tools/list shows the demo's echo and add under their own names, add answers
        with structured content, an unknown argument's refusal comes back as the demo
        gave it, and a tool it does not have is its JSON-RPC error.
        """
        await self._start("--passthrough", "demo")
        host = Host(self)
        initialized = await self._initialize(host)
        self.assertEqual(initialized["capabilities"]["tools"], {"listChanged": True})
        tools = (await host.request("tools/list", {}))["tools"]
        names = names_of(tools)
        self.assertEqual(names[:2], ["echo", "add"])
        self.assertIn("mcpx_call", names)
        add = tools[1]
        self.assertEqual(add["title"], "Add two numbers")
        self.assertEqual(add["outputSchema"]["required"], ["sum"])
        added = await host.request("tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}})
        self.assertEqual(added["structuredContent"], {"sum": 5})
        # Arguments that break the tool's inputSchema never reach it (validate.input),
        # and the refusal is a tool error the model can read and correct (SEP-1303).
        refused = await host.request(
            "tools/call", {"name": "add", "arguments": {"a": 2, "b": 3, "c": 4}}
        )
        self.assertIs(refused["isError"], True)
        [said] = refused["content"]
        self.assertEqual(said["type"], "text")
        self.assertIn("'c' was unexpected", said["text"])
        self.assertIn("the call was not sent (validate.input is enforce)", said["text"])
        answer = await self._error(host, "tools/call", {"name": "nope", "arguments": {}})
        # The only pass-through server is asked, and says the name is unknown itself.
        self.assertEqual(answer["code"], INVALID_PARAMS)
        self.assertIn("nope", answer["message"])
        assert host.child.transport is not None
        host.child.transport.closeStdin()
        self.assertEqual(await host.child.ended(timeout=20), 0)

    async def test_demo_instructions(self) -> None:
        """
        A host on mcpx serve --passthrough demo is given the demo's own instructions
        first, on initialize (2025-06-18) and on server/discover (2026-07-28), then
        what the gateway tools offered after its tools are for (issue 43, item 6).
        """
        await self._start()
        legacy = ServeHost(self, "--passthrough", "demo")
        initialized = await self._initialize(legacy)
        said = initialized["instructions"]
        self.assertTrue(said.startswith(DEMO_INSTRUCTIONS + "\n\n"), said)
        self.assertIn("mcpx_call", said)
        modern_host = ServeHost(self, "--passthrough", "demo")
        meta: dict[str, Any] = {PROTOCOL_VERSION_KEY: NEWEST.value, CLIENT_CAPABILITIES_KEY: {}}
        discovered = await modern_host.request("server/discover", {"_meta": meta})
        self.assertEqual(discovered["instructions"], said)
        # A 2026-07-28 host's refused arguments are a tool error too (issue 43, item 4).
        refused = await modern_host.request(
            "tools/call", {"name": "add", "arguments": {"a": "two", "b": 3}, "_meta": meta}
        )
        self.assertIs(refused["isError"], True)
        self.assertIn("validate.input is enforce", refused["content"][0]["text"])
        for host in (legacy, modern_host):
            assert host.child.transport is not None
            host.child.transport.closeStdin()
            self.assertEqual(await host.child.ended(timeout=20), 0)

    async def test_serve_passthrough_for_one_connection(self) -> None:
        """
        With a daemon passing nothing through, a host on mcpx serve --passthrough demo
        sees the demo's echo and add first (and is told the list may change), while a
        host on plain mcpx serve, at the same time, sees the gateway's tools.
        """
        await self._start()
        passing = ServeHost(self, "--passthrough", "demo")
        plain = ServeHost(self)
        initialized = await self._initialize(passing)
        self.assertEqual(initialized["capabilities"]["tools"], {"listChanged": True})
        initialized = await self._initialize(plain)
        self.assertEqual(initialized["capabilities"]["tools"], {})
        names = names_of((await passing.request("tools/list", {}))["tools"])
        self.assertEqual(names[:2], ["echo", "add"])
        self.assertIn("mcpx_call", names)
        names = names_of((await plain.request("tools/list", {}))["tools"])
        self.assertEqual(names, GATEWAY_NAMES)
        self.assertEqual(names[0], "mcpx_call")
        added = await passing.request("tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}})
        self.assertEqual(added["structuredContent"], {"sum": 5})
        for host in (passing, plain):
            assert host.child.transport is not None
            host.child.transport.closeStdin()
            self.assertEqual(await host.child.ended(timeout=20), 0)

    async def _error(self, host: Host, method: str, params: dict[str, Any]) -> dict[str, Any]:
        host.next_id += 1
        wanted = host.next_id
        host.send({"jsonrpc": "2.0", "id": wanted, "method": method, "params": params})
        frame = await host.message(lambda m: m.get("id") == wanted and "method" not in m)
        self.assertIn("error", frame)
        error: dict[str, Any] = frame["error"]
        return error


INITIALIZE: dict[str, Any] = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "watcher", "version": "1"},
}


class SharedSubscriptionTests(SynchronousTestCase):
    """One upstream resource watched by connections of different identities."""

    def watcher(self, harness: Harness, identity: str) -> tuple[Conn, list[str]]:
        heard: list[str] = []

        def push(method: str, params: Any = None) -> None:
            if method == "notifications/resources/updated":
                heard.append(params["uri"])

        conn = harness.server.open(Conn("stdio", identity, push=push))
        self.answer(harness, conn, "initialize", INITIALIZE)
        return conn, heard

    def answer(self, harness: Harness, conn: Conn, method: str, params: dict[str, Any]) -> Any:
        return result_of(
            Deferred.fromCoroutine(harness.server.handle(conn, Request(1, method, params)))
        )

    def test_one_leaving_keeps_the_other_hearing(self) -> None:
        """
        Alice and Bob watch one shared resource; Alice unsubscribing neither
        unsubscribes upstream nor stops Bob's updates; Bob's connection ending does.
        """
        harness, connector = passed_through()
        alice, alice_heard = self.watcher(harness, "alice")
        bob, bob_heard = self.watcher(harness, "bob")
        self.answer(harness, alice, "resources/subscribe", {"uri": "beta://x"})
        self.answer(harness, bob, "resources/subscribe", {"uri": "beta://x"})
        beta = upstream(connector, "beta")
        self.assertEqual(beta.methods().count("resources/subscribe"), 1)
        self.answer(harness, alice, "resources/unsubscribe", {"uri": "beta://x"})
        self.assertNotIn("resources/unsubscribe", beta.methods())
        beta.notify("notifications/resources/updated", {"uri": "beta://x"})
        self.assertEqual((alice_heard, bob_heard), ([], ["beta://x"]))
        harness.server.close(bob)
        self.assertEqual(beta.methods().count("resources/unsubscribe"), 1)


class NotesClashTests(PassThroughDaemonCase):
    """A real daemon passing three notes servers through, two of them with the same tools."""

    async def test_clash_and_prefix(self) -> None:
        """
        With notes servers a and b (no prefix) and c (toolPrefix "c_") passed through,
        tools/list answers: rename_note once (a's), c's tools as c_<name>, and the
        gateway's; a call of rename_note reaches a alone and c_rename_note reaches c.
        """
        fixture = str(REPO / "tests" / "fixtures" / "notes_server.py")
        records = {name: Path(self.config_home) / f"{name}.jsonl" for name in "abc"}
        entries: dict[str, dict[str, Any]] = {
            name: {"command": sys.executable, "args": [fixture, "--record", str(record)]}
            for name, record in records.items()
        }
        entries["c"]["toolPrefix"] = "c_"
        config = Path(self.config_home) / "servers.json"
        config.write_text(json.dumps({"servers": entries}))
        self.env["MCPX_CONFIG"] = str(config)
        await self._start("--passthrough", "a,b,c")
        host = Host(self)
        await self._initialize(host)
        names = names_of((await host.request("tools/list", {}))["tools"])
        self.assertEqual(names.count("rename_note"), 1)
        self.assertIn("c_rename_note", names)
        self.assertNotIn("c_rename_note", names[: names.index("rename_note")])
        self.assertIn("mcpx_call", names)
        arguments = {"name": "shopping", "to": "groceries"}
        await host.request("tools/call", {"name": "rename_note", "arguments": arguments})
        await host.request("tools/call", {"name": "c_rename_note", "arguments": arguments})
        seen = {"tool": "rename_note", "arguments": arguments}
        self.assertEqual(json.loads(records["a"].read_text()), seen)
        self.assertEqual(json.loads(records["c"].read_text()), seen)
        self.assertFalse(records["b"].exists())

        # What b does not offer, and the fix, shown beside the servers.
        status = {s["name"]: s for s in (await self.ok("servers", "--json")).json()["servers"]}
        shadowed = {entry["name"]: entry for entry in status["b"]["shadowed"]}
        self.assertEqual(shadowed["rename_note"]["by"], "a")
        self.assertEqual(shadowed["rename_note"]["kind"], "tool")
        self.assertIn("toolPrefix", shadowed["rename_note"]["message"])
        self.assertNotIn("shadowed", status["a"])
        self.assertNotIn("shadowed", status["c"])
        text = (await self.ok("servers")).out
        _, shown = text.split("Not offered to hosts, shadowed in pass-through:\n")
        self.assertTrue(shown.startswith("b: tools "), shown)
        self.assertIn("rename_note", shown)
        self.assertIn("""(offered by 'a', passed through first; give 'b' a "toolPrefix" """, shown)
        assert host.child.transport is not None
        host.child.transport.closeStdin()
        self.assertEqual(await host.child.ended(timeout=20), 0)


class PolicyReloadTests(RealDaemonCase):
    """
    A real daemon passing the demo through, whose policy a reload changes between calls
    of the same tool: the routes it keeps per tool name (L{passthrough_routes.Routes})
    never let a call past the policy it runs under now.
    """

    def _configure(self, tools: dict[str, list[str]] | None) -> None:
        entry: dict[str, Any] = {"command": sys.executable, "args": ["-m", "mcpx.demo"]}
        if tools is not None:
            entry["tools"] = tools
        config = Path(self.config_home) / "servers.json"
        config.write_text(json.dumps({"servers": {"demo": entry}}))
        self.env["MCPX_CONFIG"] = str(config)

    async def _echo(self, text: str) -> dict[str, Any]:
        """One 2026-07-28 C{tools/call echo} on C{/mcp}, from a process of its own."""
        meta = {
            PROTOCOL_VERSION_KEY: "2026-07-28",
            CLIENT_CAPABILITIES_KEY: {},
            "io.modelcontextprotocol/clientInfo": {"name": "policy-test", "version": "1"},
        }
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": text}, "_meta": meta},
        }
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call",
            "Mcp-Name": "echo",
        }
        spec = {
            "method": "POST",
            "path": "/mcp",
            "unix": str(Path(self.state_dir) / "mcpx.sock"),
            "headers": headers,
            "body": body,
        }
        raw_http = str(REPO / "tests" / "support" / "raw_http.py")
        # -I: tests/support holds an http.py of its own.
        child = spawn([sys.executable, "-I", raw_http, json.dumps([spec])], env=self.env, cwd="/")
        self.addCleanup(kill_on_cleanup, child)
        self.assertEqual(await child.ended(timeout=30), 0, child.text())
        [answer] = json.loads(child.text(1))
        message: dict[str, Any] = json.loads(answer["body"])
        # A result is a 200; an error of the request's own (a refusal) a 400.
        self.assertEqual(answer["status"], 200 if "result" in message else 400, answer)
        return message

    async def test_a_tool_denied_by_a_reload_is_refused_at_its_next_call(self) -> None:
        """
        echo answers twice (its route is kept after the first); a reload denying it
        refuses the third call without the demo answering it; a reload allowing it
        again lets the fourth through.
        """
        self.env["MCPX_MCP_PASSTHROUGH"] = "demo"
        self._configure(None)
        await self.start_daemon()
        for text in ("one", "two"):
            answer = await self._echo(text)
            self.assertEqual(answer["result"]["content"][0]["text"], text, answer)

        self._configure({"deny": ["echo"]})
        await self.ok("reload")
        refused = await self._echo("three")
        self.assertEqual(refused["error"]["code"], INVALID_PARAMS, refused)
        self.assertIn("tools.deny", refused["error"]["message"])
        self.assertNotIn("three", json.dumps(refused))

        self._configure(None)
        await self.ok("reload")
        answer = await self._echo("four")
        self.assertEqual(answer["result"]["content"][0]["text"], "four", answer)
