"""
Tests for the gateway surface (L{mcpx.server.surface}) as a host sees it over MCP: the
tools, namespaced prompts, mcpx:// resources, routing, pagination.
"""

from __future__ import annotations

import json
from typing import Any

from attrs import evolve
from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from mcpx.ops import uris
from mcpx.ops.events import Event
from mcpx.ops.table import OPS
from mcpx.pool.errors import ServerUnavailable
from mcpx.server.conn import Context
from mcpx.server.gateway_tools import gateway_tools
from mcpx.server.pages import decode_cursor, encode_cursor
from mcpx.server.surface import Surface
from mcpx.spec.revision import LEGACY_REVISIONS, NEWEST, Revision
from mcpx.wire.errors import INVALID_PARAMS, RESOURCE_NOT_FOUND, RpcError
from tests.daemon.fake_pool import FakePool, FakeServer, default_settings
from tests.server import RICH_RESULT, Harness, Session, gateway_servers, result_of
from tests.server.test_passthrough import GATEWAY_NAMES, names_of, passed_through
from tests.server.test_uris import TEMPLATES, TRICKY, expand

#: C{pool.listWait} as the harness's default settings have it.
LIST_WAIT = default_settings().duration("pool.listWait")

CALL = {"server": "search", "tool": "web_search", "arguments": {"q": "mcp"}}


class ToolListTests(SynchronousTestCase):
    def test_gateway_tools(self) -> None:
        """
        Every revision lists mcpx_call and the discovery tools, one per gateway op, each
        with an object input schema.
        """
        expected = len([op for op in OPS if op.gateway])
        for revision in Revision:
            tools = Session(revision).result("tools/list")["tools"]
            names = [tool["name"] for tool in tools]
            self.assertEqual(names[0], "mcpx_call")
            for name in ("mcpx_servers", "mcpx_tools", "mcpx_describe"):
                self.assertIn(name, names)
            self.assertEqual(len(names), expected)
            for tool in tools:
                self.assertEqual(tool["inputSchema"]["type"], "object", tool["name"])

    def test_describe_and_list_say_whose_words_they_show(self) -> None:
        """
        mcpx_describe tells the model a tool's annotations are its server's claims, and
        mcpx_tools that titles and descriptions are the servers' own words.
        """
        tools = {tool.name: tool.definition for tool in gateway_tools()}
        self.assertIn(
            "annotations (readOnlyHint, destructiveHint, ...) are the server's claims, "
            "passed on unverified",
            tools["mcpx_describe"]["description"],
        )
        self.assertIn("the servers' own words", tools["mcpx_tools"]["description"])

    def test_mcpx_call_schema(self) -> None:
        """mcpx_call takes server, tool, arguments and timeout; server and tool required."""
        call = gateway_tools()[0].definition
        schema = call["inputSchema"]
        self.assertEqual(set(schema["properties"]), {"server", "tool", "arguments", "timeout"})
        self.assertEqual(schema["required"], ["server", "tool"])

    def test_discovery_tools_declare_their_output(self) -> None:
        """From 2025-06-18, a discovery tool declares the op's output schema."""
        tools = Session(Revision.V2025_06_18).result("tools/list")["tools"]
        servers = next(tool for tool in tools if tool["name"] == "mcpx_servers")
        self.assertEqual(servers["outputSchema"]["required"], ["servers"])
        tools = Session(Revision.V2025_03_26).result("tools/list")["tools"]
        self.assertNotIn("outputSchema", tools[1])


class CallTests(SynchronousTestCase):
    def test_result_carried_verbatim(self) -> None:
        """
        From 2025-06-18, mcpx_call answers with the upstream's result as it sent it:
        every block, isError, structuredContent and _meta; only resource URIs change.
        """
        for revision in (Revision.V2025_06_18, Revision.V2025_11_25, NEWEST):
            result = Session(revision).call("mcpx_call", CALL)
            content = result["content"]
            self.assertEqual(content[0], RICH_RESULT["content"][0])
            self.assertEqual(content[1], RICH_RESULT["content"][1])
            self.assertEqual(
                content[2],
                {
                    "type": "resource_link",
                    "uri": uris.to_mcpx("search", "file:///a b.txt"),
                    "name": "a b",
                },
            )
            self.assertEqual(content[3]["resource"]["uri"], uris.to_mcpx("search", "/abs/doc"))
            self.assertEqual(content[3]["resource"]["text"], "doc")
            self.assertIs(result["isError"], True)
            self.assertEqual(result["structuredContent"], {"answer": 42})
            self.assertEqual(result["_meta"]["example.com/trace"], "t-1")

    def test_older_revisions_get_a_faithful_copy(self) -> None:
        """Before 2025-06-18 structured content and links are given as text instead."""
        for revision in (Revision.V2024_11_05, Revision.V2025_03_26):
            result = Session(revision).call("mcpx_call", CALL)
            self.assertNotIn("structuredContent", result)
            texts = [block["text"] for block in result["content"] if block["type"] == "text"]
            self.assertIn({"answer": 42}, [json.loads(t) for t in texts if t.startswith("{")])
            self.assertTrue(any(uris.to_mcpx("search", "file:///a b.txt") in t for t in texts))

    def test_upstream_dict_untouched(self) -> None:
        """Rewriting URIs never edits the upstream's result in place."""
        session = Session(Revision.V2025_06_18)
        stored = session.harness.pool.servers["search"].answers["tools/call"]
        session.call("mcpx_call", CALL)
        self.assertEqual(stored, RICH_RESULT)

    def test_arguments_reach_the_pool(self) -> None:
        """Server, tool, arguments and timeout go to the pool, with the caller."""
        session = Session(Revision.V2025_06_18)
        session.call("mcpx_call", {**CALL, "timeout": 5})
        self.assertEqual(
            session.harness.pool.calls[-1], ("search", "web_search", {"q": "mcp"}, "host-pid-1", 5)
        )

    def test_failures_are_tool_errors(self) -> None:
        """
        An unknown server, a server that is down, an upstream JSON-RPC error and bad
        arguments are isError results the model can read.
        """
        servers = gateway_servers()
        servers["search"].answers["tools/call"] = RpcError(-32602, "Unknown tool: nope")
        servers["files"].failure = ServerUnavailable("files", "it crashed", 3.0)
        session = Session(Revision.V2025_06_18, Harness(FakePool(servers)))
        cases: list[tuple[dict[str, Any], str]] = [
            ({"server": "nowhere", "tool": "x"}, "nowhere"),
            ({"server": "files", "tool": "read_file"}, "unavailable"),
            ({"server": "search", "tool": "nope"}, "-32602"),
            ({"server": "search"}, "tool must be"),
            ({"server": "search", "tool": "x", "arguments": []}, "arguments must be"),
            ({"server": "search", "tool": "x", "timeout": -1}, "timeout"),
            ({"server": "search", "tool": "x", "extra": 1}, "extra"),
        ]
        for arguments, said in cases:
            result = session.call("mcpx_call", arguments)
            self.assertIs(result["isError"], True, arguments)
            self.assertIn(said, result["content"][0]["text"], arguments)

    def test_unknown_tool(self) -> None:
        """A tool mcpx does not have is -32602 naming it, not an isError result."""
        for revision in Revision:
            error = Session(revision).error("tools/call", {"name": "web_search", "arguments": {}})
            self.assertEqual(error.code, INVALID_PARAMS)
            self.assertIn("no tool named 'web_search'", error.message)


class DiscoveryToolTests(SynchronousTestCase):
    def test_servers(self) -> None:
        """mcpx_servers answers the configured servers as structured content and text."""
        result = Session(Revision.V2025_06_18).call("mcpx_servers")
        names = [server["name"] for server in result["structuredContent"]["servers"]]
        self.assertEqual(names, ["files", "search"])
        self.assertEqual(json.loads(result["content"][0]["text"]), result["structuredContent"])
        self.assertIs(result["isError"], False)

    def test_search_and_describe(self) -> None:
        """mcpx_tools searches every server's tools; mcpx_describe shows one."""
        session = Session(NEWEST)
        found = session.call("mcpx_tools", {"search": "web"})["structuredContent"]["tools"]
        self.assertEqual([(t["server"], t["name"]) for t in found], [("search", "web_search")])
        described = session.call("mcpx_describe", {"server": "files", "tool": "read_file"})
        self.assertEqual(described["structuredContent"]["tool"]["name"], "read_file")

    def test_bad_input_is_a_tool_error(self) -> None:
        """Input the op refuses, or an unknown tool to describe, is an isError result."""
        session = Session(Revision.V2025_06_18)
        refused = session.call("mcpx_describe", {"server": "files"})
        self.assertIs(refused["isError"], True)
        self.assertIn("tool", refused["content"][0]["text"])
        unknown = session.call("mcpx_describe", {"server": "files", "tool": "nope"})
        self.assertIs(unknown["isError"], True)


class PromptTests(SynchronousTestCase):
    def test_namespaced(self) -> None:
        """Every server's prompts are listed as <server>_<prompt>, fields kept."""
        prompts = Session(Revision.V2025_06_18).result("prompts/list")["prompts"]
        self.assertEqual([p["name"] for p in prompts], ["files_review", "search_query"])
        self.assertEqual(prompts[0]["title"], "Review")
        self.assertEqual(prompts[0]["arguments"], [{"name": "path", "required": True}])

    def test_get_is_routed(self) -> None:
        """prompts/get goes to the owning server under its own name; URIs are rewritten."""
        session = Session(Revision.V2025_06_18)
        result = session.result("prompts/get", {"name": "files_review", "arguments": {"path": "a"}})
        self.assertEqual(
            session.harness.pool.requests[-1],
            ("files", "prompts/get", {"name": "review", "arguments": {"path": "a"}}, "host-pid-1"),
        )
        self.assertEqual(result["messages"][0]["content"]["text"], "review it")
        self.assertEqual(
            result["messages"][1]["content"]["resource"]["uri"],
            uris.to_mcpx("files", "file:///a b.txt"),
        )

    def test_longest_server_name_wins(self) -> None:
        """With servers a and a_b, a_b_x is prompt x of a_b."""
        pool = FakePool(
            {
                "a": FakeServer("a", answers={"prompts/get": {"messages": []}}),
                "a_b": FakeServer("a_b", answers={"prompts/get": {"messages": []}}),
            }
        )
        session = Session(Revision.V2025_06_18, Harness(pool))
        session.result("prompts/get", {"name": "a_b_x"})
        self.assertEqual(pool.requests[-1][:3], ("a_b", "prompts/get", {"name": "x"}))

    def test_unknown_prompt(self) -> None:
        """A prompt name no server owns is -32602."""
        error = Session(Revision.V2025_06_18).error("prompts/get", {"name": "nowhere_x"})
        self.assertEqual(error.code, INVALID_PARAMS)

    def test_failing_server_is_left_out(self) -> None:
        """A server that cannot be listed is skipped, with a warning event."""
        servers = gateway_servers()
        servers["files"].failure = ServerUnavailable("files", "it crashed")
        harness = Harness(FakePool(servers))
        seen: list[Event] = []
        harness.host.events.subscribe(seen.append)
        prompts = Session(Revision.V2025_06_18, harness).result("prompts/list")["prompts"]
        self.assertEqual([p["name"] for p in prompts], ["search_query"])
        self.assertEqual([(e.kind, e.server) for e in seen], [("warning", "files")])

    def test_hung_server_is_left_out_within_the_wait(self) -> None:
        """A server hung at start-up holds prompts/list only for pool.listWait; then the
        others' prompts are answered and it is left out with a warning."""
        servers = gateway_servers()
        servers["files"].hung = Deferred()
        servers["files"].cached = False
        harness = Harness(FakePool(servers))
        seen: list[Event] = []
        harness.host.events.subscribe(seen.append)
        session = Session(Revision.V2025_06_18, harness)
        asked = session.request("prompts/list")
        self.assertNoResult(asked)
        harness.clock.advance(LIST_WAIT)
        prompts = self.successResultOf(asked)["prompts"]
        self.assertEqual([p["name"] for p in prompts], ["search_query"])
        self.assertEqual([(e.kind, e.server) for e in seen], [("warning", "files")])
        self.assertIn("pool.listWait", seen[0].data["message"])


class ResourceTests(SynchronousTestCase):
    def test_listed_under_mcpx_uris(self) -> None:
        """Resources and templates are listed under their mcpx:// names."""
        session = Session(Revision.V2025_06_18)
        resources = session.result("resources/list")["resources"]
        self.assertEqual(
            [r["uri"] for r in resources],
            [uris.to_mcpx("files", "file:///a b.txt"), uris.to_mcpx("files", "/abs/doc")],
        )
        templates = session.result("resources/templates/list")["resourceTemplates"]
        self.assertEqual(templates[0]["uriTemplate"], "mcpx://files/!file:///{+path}{?rev}")

    def test_every_uri_reads_back(self) -> None:
        """Reading the listed name of any upstream URI asks the upstream for that URI."""
        servers = gateway_servers()
        servers["files"].resources = [{"uri": uri, "name": str(i)} for i, uri in enumerate(TRICKY)]
        servers["files"].answers["resources/read"] = {"contents": [{"uri": "x:y", "text": ""}]}
        pool = FakePool(servers)
        session = Session(NEWEST, Harness(pool))
        listed = session.result("resources/list")["resources"]
        self.assertEqual(len(listed), len(TRICKY))
        for entry, uri in zip(listed, TRICKY, strict=True):
            result = session.result("resources/read", {"uri": entry["uri"]})
            self.assertEqual(pool.requests[-1][:3], ("files", "resources/read", {"uri": uri}))
            self.assertEqual(result["contents"][0]["uri"], uris.to_mcpx("files", "x:y"))
            self.assertEqual(result["cacheScope"], "private")

    def test_filled_template_reads_back(self) -> None:
        """A template the client filled in is read as the upstream's own filled URI."""
        servers = gateway_servers()
        servers["files"].templates = [{"uriTemplate": t, "name": "t"} for t, _ in TEMPLATES]
        pool = FakePool(servers)
        session = Session(Revision.V2025_11_25, Harness(pool))
        listed = session.result("resources/templates/list")["resourceTemplates"]
        for entry, (template, values) in zip(listed, TEMPLATES, strict=True):
            session.result("resources/read", {"uri": expand(entry["uriTemplate"], values)})
            self.assertEqual(pool.requests[-1][2], {"uri": expand(template, values)})

    def test_not_found(self) -> None:
        """An unknown URI is -32002 on legacy revisions and -32602 on 2026-07-28."""
        for revision in Revision:
            session = Session(revision)
            for uri in ("file:///a", "mcpx://nowhere/x", "mcpx://files/!no://template"):
                error = session.error("resources/read", {"uri": uri})
                expected = INVALID_PARAMS if revision is NEWEST else RESOURCE_NOT_FOUND
                self.assertEqual(error.code, expected, (revision, uri))
                self.assertEqual(error.data, {"uri": uri})

    def test_server_name_case(self) -> None:
        """A client that lower-cased the server name still reaches it."""
        pool = FakePool({"Docs": FakeServer("Docs", answers={"resources/read": {"contents": []}})})
        session = Session(Revision.V2025_06_18, Harness(pool))
        session.result("resources/read", {"uri": "mcpx://docs/a"})
        self.assertEqual(pool.requests[-1][:3], ("Docs", "resources/read", {"uri": "a"}))


class PaginationTests(SynchronousTestCase):
    def test_pages(self) -> None:
        """Following nextCursor visits every tool once, in order, on every revision."""
        for revision in Revision:
            session = Session(revision, Harness(page_size=5))
            everything = Session(revision).result("tools/list")["tools"]
            seen: list[dict[str, Any]] = []
            params: dict[str, Any] = {}
            pages = 0
            while True:
                page = session.result("tools/list", params)
                pages += 1
                seen.extend(page["tools"])
                if "nextCursor" not in page:
                    break
                params = {"cursor": page["nextCursor"]}
            self.assertEqual(seen, everything)
            self.assertEqual(pages, -(-len(everything) // 5))

    def test_page_size_setting(self) -> None:
        """C{mcp.pageSize} is the most items a page of a list holds."""
        settings = default_settings(**{"mcp.pageSize": "3"})
        session = Session(Revision.V2025_06_18, Harness(settings=settings))
        first = session.result("tools/list")
        self.assertEqual(len(first["tools"]), 3)
        second = session.result("tools/list", {"cursor": first["nextCursor"]})
        self.assertEqual(len(second["tools"]), 3)
        self.assertNotEqual(names_of(first["tools"]), names_of(second["tools"]))

    def test_a_thousand_a_page(self) -> None:
        """
        By default a page holds 1000 items: a host reading only the first page of 1200
        pass-through tools sees 1000 of them, and the next page has the rest.
        """
        tools = [{"name": f"t{i}", "inputSchema": {"type": "object"}} for i in range(1200)]
        scripted = {"alpha": {"tools": tools, "prompts": [], "resources": [], "templates": []}}
        harness, _ = passed_through(("alpha",), scripted=scripted)
        session = Session(NEWEST, harness)
        first = session.result("tools/list")
        self.assertEqual(names_of(first["tools"]), names_of(tools[:1000]))
        second = session.result("tools/list", {"cursor": first["nextCursor"]})
        self.assertEqual(names_of(second["tools"]), names_of(tools[1000:]) + GATEWAY_NAMES)
        self.assertNotIn("nextCursor", second)

    def test_invalid_cursor(self) -> None:
        """A cursor mcpx did not hand out for that list is -32602."""
        session = Session(Revision.V2025_06_18, Harness(page_size=2))
        following = session.result("tools/list")["nextCursor"]
        for cursor in ("garbage", "!!!", 7, encode_cursor("tools/list", 999), following + "x"):
            error = session.error("tools/list", {"cursor": cursor})
            self.assertEqual(error.code, INVALID_PARAMS, cursor)
        error = session.error("prompts/list", {"cursor": following})
        self.assertEqual(error.code, INVALID_PARAMS)

    def test_cursor_round_trip(self) -> None:
        """A cursor is opaque text standing for an offset in one list."""
        cursor = encode_cursor("prompts/list", 50)
        self.assertEqual(decode_cursor("prompts/list", cursor), 50)
        self.assertNotIn("50", cursor)


class CompletionTests(SynchronousTestCase):
    def test_prompt_argument(self) -> None:
        """ref/prompt with a namespaced name is completed by the owning server."""
        session = Session(Revision.V2025_06_18)
        result = session.result(
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "search_query"},
                "argument": {"name": "topic", "value": "py"},
                "context": {"arguments": {"x": "y"}},
            },
        )
        self.assertEqual(result["completion"]["values"], ["python", "pytest"])
        self.assertEqual(
            session.harness.pool.requests[-1][:3],
            (
                "search",
                "completion/complete",
                {
                    "ref": {"type": "ref/prompt", "name": "query"},
                    "argument": {"name": "topic", "value": "py"},
                    "context": {"arguments": {"x": "y"}},
                },
            ),
        )

    def test_resource_template(self) -> None:
        """ref/resource with an mcpx:// template is completed with the upstream template."""
        servers = gateway_servers()
        servers["files"].capabilities["completions"] = {}
        servers["files"].answers["completion/complete"] = {"completion": {"values": ["a.txt"]}}
        pool = FakePool(servers)
        session = Session(NEWEST, Harness(pool))
        result = session.result(
            "completion/complete",
            {
                "ref": {"type": "ref/resource", "uri": "mcpx://files/!file:///{+path}{?rev}"},
                "argument": {"name": "path", "value": "a"},
            },
        )
        self.assertEqual(result["completion"]["values"], ["a.txt"])
        self.assertEqual(
            pool.requests[-1][2]["ref"], {"type": "ref/resource", "uri": "file:///{+path}{?rev}"}
        )

    def test_server_without_completions(self) -> None:
        """A server that declared no completions is not asked; the answer is empty."""
        session = Session(Revision.V2025_06_18)
        result = session.result(
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "files_review"},
                "argument": {"name": "path", "value": ""},
            },
        )
        self.assertEqual(result["completion"]["values"], [])
        self.assertNotIn("completion/complete", [r[1] for r in session.harness.pool.requests])

    def test_unknown_reference(self) -> None:
        """A reference nobody owns, or a malformed one, is -32602."""
        session = Session(Revision.V2025_06_18)
        for ref in (
            {"type": "ref/prompt", "name": "nowhere_x"},
            {"type": "ref/resource", "uri": "file:///x"},
            {"type": "ref/other"},
        ):
            error = session.error(
                "completion/complete", {"ref": ref, "argument": {"name": "a", "value": ""}}
            )
            self.assertEqual(error.code, INVALID_PARAMS, ref)

    def test_legacy_revisions(self) -> None:
        """Completion is answered on every legacy revision too."""
        for revision in LEGACY_REVISIONS:
            result = Session(revision).result(
                "completion/complete",
                {
                    "ref": {"type": "ref/prompt", "name": "search_query"},
                    "argument": {"name": "topic", "value": "py"},
                },
            )
            self.assertEqual(result["completion"]["values"], ["python", "pytest"])


class OwnerOnlyToolTests(SynchronousTestCase):
    """
    An op the owner alone may run is refused, as a tool error, to a host let in with an
    access token's subject when it is offered as a gateway tool: the gateway runs ops
    through the same L{mcpx.ops.op.Op.run} as /v1.
    """

    def surface(self) -> Surface:
        ops = [evolve(op, owner_only=True) if op.name == "list_servers" else op for op in OPS]
        return Surface(Harness().host, tools=gateway_tools(ops))

    def call(self, surface: Surface, subject: str | None) -> dict[str, Any]:
        context = Context(NEWEST, "host", {}, modern=True, subject=subject)
        called = surface.call_tool(context, {"name": "mcpx_servers", "arguments": {}})
        answer: dict[str, Any] = result_of(Deferred.fromCoroutine(called))
        return answer

    def test_subject_gets_a_tool_error(self) -> None:
        result = self.call(self.surface(), "bob")
        self.assertTrue(result["isError"], result)
        self.assertIn("owner's alone", result["content"][0]["text"])

    def test_owner_runs_it(self) -> None:
        result = self.call(self.surface(), None)
        self.assertFalse(result.get("isError", False), result)
        self.assertIn("servers", result["structuredContent"])
