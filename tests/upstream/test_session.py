"""
Sessions of both eras over an in-memory channel: the handshake, the per-request
C{_meta}, pagination, question rounds, server requests and the listen stream.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.call import Call
from mcpx.spec.apps import UI_EXTENSION
from mcpx.spec.meta_keys import CLIENT_CAPABILITIES_KEY, CLIENT_INFO_KEY, PROTOCOL_VERSION_KEY
from mcpx.spec.revision import Revision
from mcpx.upstream.handlers import UpstreamHandlers
from mcpx.upstream.legacy_session import LegacySession
from mcpx.upstream.modern_session import ModernSession
from mcpx.upstream.records import CLIENT_INFO, NotModern, TooManyRounds, UpstreamError
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import Request
from tests.upstream.memory import (
    FakeServer,
    MemoryChannel,
    discover_result,
    initialize_result,
    params_of,
)


def answered(value: Mapping[str, Any]) -> Any:
    async def handler(params: Mapping[str, Any]) -> Mapping[str, Any]:
        handler.asked.append(dict(params))  # type: ignore[attr-defined]
        return value

    handler.asked = []  # type: ignore[attr-defined]
    return handler


def legacy(server: FakeServer, handlers: UpstreamHandlers | None = None) -> LegacySession:
    channel = MemoryChannel(server)
    return LegacySession(
        name="fake", channel=channel, clock=Clock(), handlers=handlers or UpstreamHandlers()
    )


def modern(
    server: FakeServer,
    handlers: UpstreamHandlers | None = None,
    clock: Clock | None = None,
    lenient: bool = False,
) -> ModernSession:
    channel = MemoryChannel(server)
    return ModernSession(
        name="fake",
        channel=channel,
        clock=clock or Clock(),
        handlers=handlers or UpstreamHandlers(),
        lenient=lenient,
    )


class LegacyHandshakeTests(SynchronousTestCase):
    def test_initialize_offers_newest_legacy_and_accepts_older_answer(self) -> None:
        """mcpx offers 2025-11-25 and settles on the older revision the server answers."""
        server = FakeServer({"initialize": lambda p: initialize_result("2025-03-26", tools={})})
        session = legacy(server)
        declaration = self.successResultOf(Deferred.fromCoroutine(session.open()))
        self.assertEqual(declaration.revision, Revision.V2025_03_26)
        self.assertEqual(params_of(server.requests[0])["protocolVersion"], "2025-11-25")
        self.assertEqual(params_of(server.requests[0])["clientInfo"]["name"], "mcpx")
        self.assertEqual([n.method for n in server.notifications], ["notifications/initialized"])
        channel = session.channel
        assert isinstance(channel, MemoryChannel)
        self.assertEqual(channel.negotiated.revision, Revision.V2025_03_26)
        self.assertFalse(channel.negotiated.modern)
        self.assertEqual(channel.initialized_calls, 1)
        self.assertTrue(session.rpc.allow_batches, "2025-03-26 is the one revision with batches")
        self.assertEqual(session.server_info["name"], "fake-legacy")

    def test_unknown_revision_answer_is_refused_clearly(self) -> None:
        """A server answering a revision mcpx does not speak fails the open, naming it."""
        server = FakeServer({"initialize": lambda p: initialize_result("2099-01-01")})
        failure = self.failureResultOf(Deferred.fromCoroutine(legacy(server).open()), UpstreamError)
        self.assertIn("'2099-01-01'", str(failure.value))
        self.assertIn("2024-11-05", str(failure.value))
        self.assertIn("fake", str(failure.value))

    def test_capabilities_declared_only_for_handlers(self) -> None:
        """Only the questions mcpx can answer are declared, spelled for the offered revision."""
        server = FakeServer({"initialize": lambda p: initialize_result()})
        handlers = UpstreamHandlers(elicitation=answered({"action": "decline"}))
        self.successResultOf(Deferred.fromCoroutine(legacy(server, handlers).open()))
        capabilities = params_of(server.requests[0])["capabilities"]
        self.assertEqual(capabilities, {"elicitation": {"form": {}}})

    def test_legacy_result_gains_result_type_complete(self) -> None:
        """A legacy result without resultType is read as complete."""
        server = FakeServer(
            {
                "initialize": lambda p: initialize_result(),
                "tools/call": lambda p: {"content": [{"type": "text", "text": "hi"}]},
            }
        )
        session = legacy(server)
        self.successResultOf(Deferred.fromCoroutine(session.open()))
        result = self.successResultOf(Deferred.fromCoroutine(session.call_tool("echo", {"t": 1})))
        self.assertEqual(result["resultType"], "complete")
        self.assertEqual(server.requests[-1].params, {"name": "echo", "arguments": {"t": 1}})


class LegacyServerRequestTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.elicit = answered({"action": "accept", "content": {"name": "Ada"}})
        self.server = FakeServer({"initialize": lambda p: initialize_result()})
        self.session = legacy(self.server, UpstreamHandlers(elicitation=self.elicit))
        self.successResultOf(Deferred.fromCoroutine(self.session.open()))

    def test_elicitation_is_answered_by_the_handler(self) -> None:
        """The server's elicitation/create reaches the injected handler; its answer goes back."""
        answer = self.successResultOf(
            self.server.ask("elicitation/create", {"message": "name?", "requestedSchema": {}})
        )
        self.assertEqual(answer, {"action": "accept", "content": {"name": "Ada"}})
        self.assertEqual(self.elicit.asked, [{"message": "name?", "requestedSchema": {}}])

    def test_ping_is_answered(self) -> None:
        """A server's ping gets an empty result."""
        self.assertEqual(self.successResultOf(self.server.ask("ping")), {})

    def test_undeclared_question_is_method_not_found(self) -> None:
        """Sampling was not declared, so a sampling request is -32601, not a guess."""
        failure = self.failureResultOf(self.server.ask("sampling/createMessage", {}), RpcError)
        self.assertEqual(failure.value.code, -32601)

    def test_url_mode_not_declared_is_refused(self) -> None:
        """A url-mode elicitation to a form-only handler is refused as invalid params."""
        failure = self.failureResultOf(
            self.server.ask("elicitation/create", {"mode": "url", "url": "https://x"}), RpcError
        )
        self.assertEqual(failure.value.code, -32602)

    def test_notifications_reach_the_handler(self) -> None:
        """Log messages and list changes from the server are handed to the notification sink."""
        heard: list[tuple[str, Any]] = []
        self.session.handlers.notification = lambda m, p: heard.append((m, p))
        self.server.notify("notifications/tools/list_changed")
        self.server.notify("notifications/message", {"level": "info", "data": "x"})
        self.assertEqual(
            heard,
            [
                ("notifications/tools/list_changed", None),
                ("notifications/message", {"level": "info", "data": "x"}),
            ],
        )


class LegacySessionExpiryTests(SynchronousTestCase):
    def test_expired_session_reinitializes_once_and_retries(self) -> None:
        """A request failing with SessionExpired re-initialises, resubscribes, and is retried."""
        calls = {"n": 0}

        def tools_list(params: Mapping[str, Any]) -> Any:
            calls["n"] += 1
            return {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}

        server = FakeServer(
            {
                "initialize": lambda p: initialize_result(resources={"subscribe": True}),
                "tools/list": tools_list,
                "resources/subscribe": lambda p: {},
            }
        )
        session = legacy(server)
        channel = session.channel
        assert isinstance(channel, MemoryChannel)
        self.successResultOf(Deferred.fromCoroutine(session.open()))
        self.successResultOf(Deferred.fromCoroutine(session.subscribe("file:///a")))

        channel.expire_next.add("tools/list")
        tools = self.successResultOf(Deferred.fromCoroutine(session.list_tools()))
        self.assertEqual([t["name"] for t in tools], ["t"])
        self.assertEqual(channel.resets, 1)
        self.assertEqual(
            server.methods(),
            [
                "initialize",
                "resources/subscribe",
                "initialize",
                "resources/subscribe",
                "tools/list",
            ],
        )


class PaginationTests(SynchronousTestCase):
    def test_every_page_is_followed(self) -> None:
        """list_tools follows nextCursor to the end and returns every tool in order."""
        pages = {
            None: {"tools": [{"name": "a"}, {"name": "b"}], "nextCursor": "p2"},
            "p2": {"tools": [{"name": "c"}], "nextCursor": "p3"},
            "p3": {"tools": [{"name": "d"}]},
        }
        server = FakeServer(
            {
                "initialize": lambda p: initialize_result(),
                "tools/list": lambda p: pages[p.get("cursor")],
            }
        )
        session = legacy(server)
        self.successResultOf(Deferred.fromCoroutine(session.open()))
        tools = self.successResultOf(Deferred.fromCoroutine(session.list_tools()))
        self.assertEqual([t["name"] for t in tools], ["a", "b", "c", "d"])

    def test_a_repeated_cursor_is_an_error_not_a_loop(self) -> None:
        """A server handing back the same cursor forever is reported instead of looping."""
        server = FakeServer(
            {
                "initialize": lambda p: initialize_result(),
                "prompts/list": lambda p: {"prompts": [], "nextCursor": "same"},
            }
        )
        session = legacy(server)
        self.successResultOf(Deferred.fromCoroutine(session.open()))
        failure = self.failureResultOf(
            Deferred.fromCoroutine(session.list_prompts()), UpstreamError
        )
        self.assertIn("repeated the cursor", str(failure.value))


class ModernSessionTests(SynchronousTestCase):
    def test_a_hosts_apps_declaration_travels_with_its_call(self) -> None:
        """
        A host's MCP Apps declaration (C{extensions["io.modelcontextprotocol/ui"]}) goes
        upstream with its call as it spelled it, in pass-through and through the gateway;
        a call of a host that did not declare it declares no such extension, so the
        server answers as to a text-only host.
        """
        server = FakeServer(
            {
                "server/discover": lambda p: discover_result(tools={}),
                "tools/call": lambda p: {"content": [], "resultType": "complete"},
            }
        )
        session = modern(server, UpstreamHandlers(sampling=answered({})))
        self.successResultOf(Deferred.fromCoroutine(session.open()))
        ui = {"mimeTypes": ["text/html;profile=mcp-app"]}
        declaring = {"extensions": {UI_EXTENSION: ui}, "roots": {}}
        callers = [
            Call("a", declaring, narrow=True),
            Call("b", declaring),
            Call("c", {"roots": {}}, narrow=True),
            Call("d", {"roots": {}}),
        ]
        for caller in callers:
            self.successResultOf(Deferred.fromCoroutine(session.call_tool("echo", {}, call=caller)))
        sent = [
            params_of(r)["_meta"]["io.modelcontextprotocol/clientCapabilities"]
            for r in server.requests
            if r.method == "tools/call"
        ]
        self.assertEqual(sent[0], {"roots": {}, "extensions": {UI_EXTENSION: ui}})
        self.assertEqual(sent[1]["extensions"], {UI_EXTENSION: ui})
        self.assertEqual(sent[2], {"roots": {}})
        self.assertNotIn("extensions", sent[3])

    def test_own_capabilities_follow_the_handlers(self) -> None:
        """
        A call of mcpx's own (no host's declaration to pass on) declares the handlers'
        capabilities as they are at that call: the same _meta, in the same order,
        call after call; what a handler added or removed since, from the next call on;
        and never what a host's call added to its own (its MCP Apps declaration).
        """
        server = FakeServer(
            {
                "server/discover": lambda p: discover_result(tools={}),
                "tools/call": lambda p: {"content": [], "resultType": "complete"},
            }
        )
        handlers = UpstreamHandlers(sampling=answered({}))
        session = modern(server, handlers)
        self.successResultOf(Deferred.fromCoroutine(session.open()))
        ui = {"mimeTypes": ["text/html;profile=mcp-app"]}

        def call(caller: Call | None = None) -> None:
            self.successResultOf(Deferred.fromCoroutine(session.call_tool("echo", {}, call=caller)))

        call()
        call()
        call(Call("b", {"extensions": {UI_EXTENSION: ui}}))
        call()
        handlers.roots = answered({"roots": []})
        call()
        handlers.roots = None
        call()
        metas = [params_of(r)["_meta"] for r in server.requests if r.method == "tools/call"]
        declared = [meta["io.modelcontextprotocol/clientCapabilities"] for meta in metas]
        own: dict[str, Any] = {"sampling": {}}
        self.assertEqual(
            declared,
            [
                own,
                own,
                {"sampling": {}, "extensions": {UI_EXTENSION: ui}},
                own,
                {"roots": {}, "sampling": {}},
                own,
            ],
        )
        written = [json.dumps(meta) for meta in metas]
        self.assertEqual([written[1], written[3], written[5]], [written[0]] * 3)

    def test_every_request_carries_version_capabilities_and_identity(self) -> None:
        """server/discover and every later request restate the revision in _meta."""
        server = FakeServer(
            {
                "server/discover": lambda p: discover_result(tools={}),
                "tools/call": lambda p: {"content": [], "resultType": "complete"},
            }
        )
        handlers = UpstreamHandlers(sampling=answered({}))
        session = modern(server, handlers)
        declaration = self.successResultOf(Deferred.fromCoroutine(session.open()))
        self.assertEqual(declaration.revision, Revision.V2026_07_28)
        self.assertEqual(declaration.server_info, {"name": "fake", "version": "1"})
        self.assertEqual(declaration.instructions, "be nice")
        self.successResultOf(
            Deferred.fromCoroutine(
                session.call_tool("echo", {"x": 1}, meta={"progressToken": "p1"})
            )
        )
        for request in server.requests:
            meta = params_of(request)["_meta"]
            self.assertEqual(meta["io.modelcontextprotocol/protocolVersion"], "2026-07-28")
            self.assertEqual(meta["io.modelcontextprotocol/clientInfo"]["name"], "mcpx")
            self.assertEqual(meta["io.modelcontextprotocol/clientCapabilities"], {"sampling": {}})
        self.assertEqual(params_of(server.requests[-1])["_meta"]["progressToken"], "p1")
        channel = session.channel
        assert isinstance(channel, MemoryChannel)
        self.assertTrue(channel.negotiated.modern)
        self.assertEqual(server.notifications, [], "no handshake notification in 2026-07-28")

    def test_unsupported_version_is_retried_when_supported(self) -> None:
        """-32022 naming 2026-07-28 among the supported versions is retried once."""
        answers = iter(
            [
                RpcError(-32022, "no", {"supported": ["2026-07-28"], "requested": "x"}),
                discover_result(),
            ]
        )

        def discover(params: Mapping[str, Any]) -> Any:
            outcome = next(answers)
            if isinstance(outcome, RpcError):
                raise outcome
            return outcome

        server = FakeServer({"server/discover": discover})
        session = modern(server)
        self.successResultOf(Deferred.fromCoroutine(session.open()))
        self.assertEqual(server.methods(), ["server/discover", "server/discover"])

    def test_unsupported_version_without_modern_is_not_modern(self) -> None:
        """-32022 listing only legacy versions says the server is not modern, with its list."""

        def discover(params: Mapping[str, Any]) -> Any:
            raise RpcError(-32022, "no", {"supported": ["2025-06-18"], "requested": "2026-07-28"})

        failure = self.failureResultOf(
            Deferred.fromCoroutine(modern(FakeServer({"server/discover": discover})).open()),
            NotModern,
        )
        self.assertEqual(failure.value.supported, ("2025-06-18",))

    def test_server_requests_are_not_answered(self) -> None:
        """2026-07-28 has no server-to-client requests: mcpx sends no response at all."""
        server = FakeServer({"server/discover": lambda p: discover_result()})
        session = modern(server, UpstreamHandlers(roots=answered({"roots": []})))
        self.successResultOf(Deferred.fromCoroutine(session.open()))
        asked = server.ask("roots/list")
        self.assertNoResult(asked)
        self.flushLoggedErrors()

    def test_lenient_answers_server_requests(self) -> None:
        """With 2026-07-28 in spec.lenient, a modern server's request is answered as legacy."""
        server = FakeServer({"server/discover": lambda p: discover_result()})
        session = modern(server, UpstreamHandlers(roots=answered({"roots": []})), lenient=True)
        self.successResultOf(Deferred.fromCoroutine(session.open()))
        self.assertEqual(self.successResultOf(server.ask("roots/list")), {"roots": []})

    def test_param_headers_are_staged_for_annotated_arguments(self) -> None:
        """A tool whose schema asks for x-mcp-header gets Mcp-Param headers from its arguments."""
        tool = {
            "name": "deploy",
            "inputSchema": {
                "type": "object",
                "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
            },
        }
        server = FakeServer(
            {
                "server/discover": lambda p: discover_result(tools={}),
                "tools/list": lambda p: {"tools": [tool], "resultType": "complete"},
                "tools/call": lambda p: {"content": [], "resultType": "complete"},
            }
        )
        session = modern(server)
        self.successResultOf(Deferred.fromCoroutine(session.open()))
        self.successResultOf(Deferred.fromCoroutine(session.list_tools()))
        self.successResultOf(Deferred.fromCoroutine(session.call_tool("deploy", {"region": "eu"})))
        self.assertEqual(session.channel.negotiated.param_headers, {"deploy": {"Region": "eu"}})


def annotated(name: str, **properties: Mapping[str, Any]) -> dict[str, Any]:
    """A tool whose input schema has C{properties}."""
    return {"name": name, "inputSchema": {"type": "object", "properties": dict(properties)}}


class ParamHeaderTests(SynchronousTestCase):
    """2026-07-28 C{x-mcp-header}: which tools a modern session keeps, and what it mirrors."""

    def listed(self, *tools: Mapping[str, Any]) -> tuple[ModernSession, list[str]]:
        server = FakeServer(
            {
                "server/discover": lambda p: discover_result(tools={}),
                "tools/list": lambda p: {"tools": list(tools), "resultType": "complete"},
                "tools/call": lambda p: {"content": [], "resultType": "complete"},
            }
        )
        session = modern(server)
        self.successResultOf(Deferred.fromCoroutine(session.open()))
        names = [
            tool["name"]
            for tool in self.successResultOf(Deferred.fromCoroutine(session.list_tools()))
        ]
        return session, names

    def test_tools_with_invalid_annotations_are_left_out(self) -> None:
        """
        Tools whose x-mcp-header is empty, not a header token, on a non-primitive or
        number property, or repeated ignoring case, are not in the tools/list view;
        the valid tools around them are.
        """
        string = {"type": "string"}
        _, names = self.listed(
            annotated("valid", region={**string, "x-mcp-header": "Region"}),
            annotated("empty", v={**string, "x-mcp-header": ""}),
            annotated("space", v={**string, "x-mcp-header": "My Region"}),
            annotated("colon", v={**string, "x-mcp-header": "Region:Primary"}),
            annotated("accent", v={**string, "x-mcp-header": "Région"}),
            annotated("tab", v={**string, "x-mcp-header": "Region\t1"}),
            annotated("object", v={"type": "object", "x-mcp-header": "Data"}),
            annotated("number", v={"type": "number", "x-mcp-header": "Score"}),
            annotated("untyped", v={"x-mcp-header": "Loose"}),
            annotated(
                "twice",
                a={**string, "x-mcp-header": "MyField"},
                b={**string, "x-mcp-header": "myfield"},
            ),
            annotated("plain", query=string),
        )
        self.assertEqual(names, ["valid", "plain"])
        self.flushLoggedErrors()

    def test_annotation_outside_a_properties_chain_is_invalid(self) -> None:
        """An x-mcp-header reached through items or anyOf makes its tool invalid."""
        under_items = annotated(
            "items",
            xs={
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"h": {"type": "string", "x-mcp-header": "H"}},
                },
            },
        )
        under_any_of = annotated(
            "anyof", v={"anyOf": [{"type": "string", "x-mcp-header": "V"}, {"type": "integer"}]}
        )
        _, names = self.listed(under_items, under_any_of, annotated("plain"))
        self.assertEqual(names, ["plain"])

    def test_nested_property_is_mirrored(self) -> None:
        """An annotation reached through nested properties is mirrored from that path."""
        tool = annotated(
            "deploy",
            target={
                "type": "object",
                "properties": {
                    "region": {"type": "string", "x-mcp-header": "Region"},
                    "replicas": {"type": "integer", "x-mcp-header": "Replicas"},
                    "dry": {"type": ["boolean", "null"], "x-mcp-header": "Dry"},
                },
            },
        )
        session, names = self.listed(tool)
        self.assertEqual(names, ["deploy"])
        arguments = {"target": {"region": "eu", "replicas": 3, "dry": None}}
        self.successResultOf(Deferred.fromCoroutine(session.call_tool("deploy", arguments)))
        self.assertEqual(
            session.channel.negotiated.param_headers,
            {"deploy": {"Region": "eu", "Replicas": "3"}},
        )

    def test_unannotated_call_stages_no_headers(self) -> None:
        """A call to a tool without annotations carries none left from an earlier call."""
        session, _ = self.listed(
            annotated("deploy", region={"type": "string", "x-mcp-header": "Region"}),
            annotated("plain"),
        )
        self.successResultOf(Deferred.fromCoroutine(session.call_tool("deploy", {"region": "eu"})))
        self.successResultOf(Deferred.fromCoroutine(session.call_tool("plain", {})))
        self.assertEqual(session.channel.negotiated.param_headers, {})


class InputRoundTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.rounds: list[Mapping[str, Any]] = []

        def call(params: Mapping[str, Any]) -> Any:
            self.rounds.append(dict(params))
            responses = params.get("inputResponses")
            if responses is None:
                return {
                    "resultType": "input_required",
                    "inputRequests": {
                        "who": {
                            "method": "elicitation/create",
                            "params": {"message": "name?", "requestedSchema": {}},
                        }
                    },
                    "requestState": "state-1",
                }
            name = responses["who"]["content"]["name"]
            return {"content": [{"type": "text", "text": f"hi {name}"}], "resultType": "complete"}

        self.server = FakeServer(
            {"server/discover": lambda p: discover_result(tools={}), "tools/call": call}
        )
        self.elicit = answered({"action": "accept", "content": {"name": "Ada"}})
        self.session = modern(self.server, UpstreamHandlers(elicitation=self.elicit))
        self.successResultOf(Deferred.fromCoroutine(self.session.open()))

    def test_rounds_are_answered_by_the_same_handlers(self) -> None:
        """input_required is answered through the handlers and re-sent with the exact state."""
        result = self.successResultOf(
            Deferred.fromCoroutine(self.session.call_tool("greet", {"x": 1}))
        )
        self.assertEqual(result["content"][0]["text"], "hi Ada")
        first, second = self.rounds
        self.assertNotIn("inputResponses", first)
        self.assertEqual(second["requestState"], "state-1")
        self.assertEqual(second["arguments"], {"x": 1})
        self.assertEqual(
            second["inputResponses"], {"who": {"action": "accept", "content": {"name": "Ada"}}}
        )
        ids = [r.id for r in self.server.requests if r.method == "tools/call"]
        self.assertEqual(len(set(ids)), 2, "each round is a new request id")

    def test_rounds_can_be_left_to_the_caller(self) -> None:
        """Without resolve_inputs the caller sees the round and can resume it itself."""
        result = self.successResultOf(
            Deferred.fromCoroutine(self.session.call_tool("greet", {}, resolve_inputs=False))
        )
        self.assertEqual(result["resultType"], "input_required")
        round_ = self.session.input_round("tools/call", {"name": "greet", "arguments": {}}, result)
        self.assertEqual(round_.request_state, "state-1")
        final = self.successResultOf(
            Deferred.fromCoroutine(
                self.session.resume(
                    round_, {"who": {"action": "accept", "content": {"name": "Bo"}}}
                )
            )
        )
        self.assertEqual(final["content"][0]["text"], "hi Bo")

    def test_a_server_that_never_stops_asking_is_cut_off(self) -> None:
        """Past max_rounds the call fails, naming the server, instead of asking forever."""
        self.server.answers["tools/call"] = lambda p: {
            "resultType": "input_required",
            "inputRequests": {
                "again": {"method": "elicitation/create", "params": {"message": "?"}}
            },
        }
        self.session.max_rounds = 3
        failure = self.failureResultOf(
            Deferred.fromCoroutine(self.session.call_tool("greet", {})), TooManyRounds
        )
        self.assertIn("3 rounds", str(failure.value))
        self.assertEqual(len(self.elicit.asked), 3)


class ListenTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.listens: list[Deferred[Any]] = []

        def listen(params: Mapping[str, Any]) -> Any:
            d: Deferred[Any] = Deferred()
            self.listens.append(d)
            self.server.notify(
                "notifications/subscriptions/acknowledged",
                {"notifications": params["notifications"]},
            )
            return d

        self.server = FakeServer(
            {
                "server/discover": lambda p: discover_result(
                    tools={"listChanged": True}, resources={"subscribe": True}
                ),
                "subscriptions/listen": listen,
            }
        )
        self.heard: list[str] = []
        self.session = modern(
            self.server,
            UpstreamHandlers(notification=lambda m, p: self.heard.append(m)),
            clock=self.clock,
        )
        self.successResultOf(Deferred.fromCoroutine(self.session.open()))

    def filters(self) -> list[Any]:
        return [
            params_of(r)["notifications"]
            for r in self.server.requests
            if r.method == "subscriptions/listen"
        ]

    def test_listen_opens_for_what_the_server_declared(self) -> None:
        """A server declaring tools.listChanged gets one listen stream asking for exactly that."""
        self.assertEqual(self.filters(), [{"toolsListChanged": True}])
        self.assertEqual(self.session.acknowledged, {"toolsListChanged": True})
        self.server.notify("notifications/tools/list_changed")
        self.assertEqual(self.heard, ["notifications/tools/list_changed"])

    def test_subscribing_reopens_with_the_uri(self) -> None:
        """subscribe adds the URI to a new listen stream and gives up the old one."""
        self.successResultOf(Deferred.fromCoroutine(self.session.subscribe("file:///a")))
        self.assertEqual(
            self.filters()[-1], {"toolsListChanged": True, "resourceSubscriptions": ["file:///a"]}
        )
        channel = self.session.channel
        assert isinstance(channel, MemoryChannel)
        self.assertEqual(len(channel.abandoned), 1, "the previous stream is closed")
        self.successResultOf(Deferred.fromCoroutine(self.session.unsubscribe("file:///a")))
        self.assertEqual(self.filters()[-1], {"toolsListChanged": True})

    def test_a_stream_the_server_ends_is_reopened_after_a_pause(self) -> None:
        """When the server ends the listen stream, mcpx listens again after listen_retry."""
        self.listens[0].callback({"resultType": "complete", "_meta": {}})
        self.assertEqual(len(self.filters()), 1)
        self.clock.advance(ModernSession.listen_retry)
        self.assertEqual(len(self.filters()), 2)

    def test_close_stops_listening(self) -> None:
        """Closing the session closes the stream and schedules nothing more."""
        self.listens[0].callback({"resultType": "complete", "_meta": {}})
        self.successResultOf(self.session.close())
        self.assertEqual(self.clock.getDelayedCalls(), [])


class ClientCapabilityTests(SynchronousTestCase):
    def test_capabilities_follow_the_revision(self) -> None:
        """Elicitation only from 2025-06-18, modes from 2025-11-25, sampling.tools only if able."""
        handlers = UpstreamHandlers(
            elicitation=answered({}),
            elicitation_modes=frozenset({"form", "url"}),
            sampling=answered({}),
            sampling_tools=True,
            roots=answered({}),
        )
        self.assertEqual(
            handlers.client_capabilities(Revision.V2025_03_26), {"roots": {}, "sampling": {}}
        )
        self.assertEqual(
            handlers.client_capabilities(Revision.V2025_06_18),
            {"roots": {}, "sampling": {}, "elicitation": {}},
        )
        self.assertEqual(
            handlers.client_capabilities(Revision.V2025_11_25),
            {"roots": {}, "sampling": {"tools": {}}, "elicitation": {"form": {}, "url": {}}},
        )
        self.assertEqual(UpstreamHandlers().client_capabilities(Revision.V2026_07_28), {})

    def test_worked_out_once_the_same_each_time(self) -> None:
        """
        Asked again, the capabilities are those worked out afresh, for every set of
        handlers and revision, and also after a handler is changed; what one caller
        does to its copy is not seen by the next.
        """
        question = answered({})
        kinds = [
            {},
            {"relay": lambda *args: None},
            {"roots": question},
            {"sampling": question},
            {"sampling": question, "sampling_tools": True},
            {"elicitation": question},
            {"elicitation": question, "elicitation_modes": frozenset({"form", "url"})},
            {"elicitation": question, "elicitation_modes": frozenset({"url"})},
        ]
        for kind in kinds:
            handlers = UpstreamHandlers(**kind)
            for revision in Revision:
                fresh = handlers._capabilities_at(revision)
                first = handlers.client_capabilities(revision)
                self.assertEqual(first, fresh, (kind, revision))
                for value in first.values():
                    value["changed"] = {}
                first["changed"] = {}
                self.assertEqual(handlers.client_capabilities(revision), fresh, (kind, revision))
        handlers = UpstreamHandlers(sampling=question)
        self.assertEqual(handlers.client_capabilities(Revision.V2025_11_25), {"sampling": {}})
        handlers.sampling_tools = True
        self.assertEqual(
            handlers.client_capabilities(Revision.V2025_11_25), {"sampling": {"tools": {}}}
        )
        handlers.sampling = None
        self.assertEqual(handlers.client_capabilities(Revision.V2025_11_25), {})
        # What was worked out is not part of the handlers' equality.
        self.assertEqual(UpstreamHandlers(sampling=question), UpstreamHandlers(sampling=question))
        asked = UpstreamHandlers(sampling=question)
        asked.client_capabilities(Revision.V2025_11_25)
        self.assertEqual(asked, UpstreamHandlers(sampling=question))


class ServerCancellationTests(SynchronousTestCase):
    def test_server_cancelling_its_question_ends_the_handler_without_an_answer(self) -> None:
        """A notifications/cancelled for the server's own request stops the handler; no reply."""
        cancelled: list[bool] = []

        def elicit(params: Mapping[str, Any]) -> Deferred[Mapping[str, Any]]:
            return Deferred(lambda _: cancelled.append(True))

        server = FakeServer({"initialize": lambda p: initialize_result()})
        session = legacy(server, UpstreamHandlers(elicitation=elicit))
        self.successResultOf(Deferred.fromCoroutine(session.open()))
        asked = server.ask("elicitation/create", {"message": "?", "requestedSchema": {}})
        self.assertEqual(session.rpc.in_flight_incoming, 1)
        server.notify("notifications/cancelled", {"requestId": 1})  # the fake's first id
        self.assertEqual(cancelled, [True])
        self.assertEqual(session.rpc.in_flight_incoming, 0)
        self.assertNoResult(asked)


class ServerStreamWaitTests(SynchronousTestCase):
    """Opening a legacy session waits, boundedly, for the server's own message stream."""

    def setUp(self) -> None:
        self.server = FakeServer({"initialize": lambda p: initialize_result()})
        self.clock = Clock()
        self.channel = MemoryChannel(self.server)
        self.stream: Deferred[None] = Deferred()
        self.channel.initialized = lambda: self.stream  # type: ignore[method-assign,assignment]
        self.session = LegacySession(name="fake", channel=self.channel, clock=self.clock)

    def test_open_returns_once_the_stream_is_answered(self) -> None:
        """The first request is not sent before the server has somewhere to put its own."""
        opening = Deferred.fromCoroutine(self.session.open())
        self.assertNoResult(opening)
        self.stream.callback(None)
        self.successResultOf(opening)

    def test_a_slow_stream_does_not_hold_the_session(self) -> None:
        """A server slow to answer its GET stream delays the open by SERVER_STREAM_WAIT at most."""
        from mcpx.upstream.legacy_session import SERVER_STREAM_WAIT

        opening = Deferred.fromCoroutine(self.session.open())
        self.clock.advance(SERVER_STREAM_WAIT)
        self.successResultOf(opening)


class _RecordingChannel(MemoryChannel):
    """A memory channel that keeps the bytes of every request sent on it."""

    def __init__(self, server: FakeServer) -> None:
        super().__init__(server)
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.sent.append(data)
        super().send(data)

    def send_request(self, data: bytes, request: Request) -> None:
        self.sent.append(data)
        super().send_request(data, request)


def _compact(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class CallersDictsTests(SynchronousTestCase):
    """
    A C{tools/call}'s arguments and C{_meta}, as its caller gives them: sent upstream
    as they are (with, in 2026-07-28, the revision, capabilities and identity after the
    caller's own members), and left as they were, in either era, for a caller's
    C{_meta} with or without members of mcpx's own.
    """

    def _calls(self, session: Any, channel: _RecordingChannel) -> list[bytes]:
        arguments = {"text": "héllo", "nested": {"list": [1, 2.5, None]}}
        metas: list[dict[str, Any]] = [
            {"progressToken": 7, "trace": {"id": "abc"}},
            {"progressToken": 8, "trace": {"id": "abc"}},
            {"progressToken": 9, PROTOCOL_VERSION_KEY: "1999-01-01", "x": True},
        ]
        given = copy.deepcopy((arguments, metas))
        before = len(channel.sent)
        for meta in metas:
            self.successResultOf(
                Deferred.fromCoroutine(session.call_tool("echo", arguments, meta=meta))
            )
            # A caller's dicts, as they were, after each call.
            self.assertEqual((arguments, metas), given)
        return channel.sent[before:]

    def test_modern(self) -> None:
        server = FakeServer(
            {
                "server/discover": lambda p: discover_result(tools={}),
                "tools/call": lambda p: {"content": [], "resultType": "complete"},
            }
        )
        channel = _RecordingChannel(server)
        session = ModernSession(
            name="fake", channel=channel, clock=Clock(), handlers=UpstreamHandlers()
        )
        self.successResultOf(Deferred.fromCoroutine(session.open()))
        sent = self._calls(session, channel)
        capabilities = params_of(server.requests[-1])["_meta"][CLIENT_CAPABILITIES_KEY]
        own = {
            PROTOCOL_VERSION_KEY: "2026-07-28",
            CLIENT_CAPABILITIES_KEY: capabilities,
            CLIENT_INFO_KEY: CLIENT_INFO,
        }
        arguments = {"text": "héllo", "nested": {"list": [1, 2.5, None]}}
        metas = [
            {"progressToken": 7, "trace": {"id": "abc"}, **own},
            {"progressToken": 8, "trace": {"id": "abc"}, **own},
            {"progressToken": 9, PROTOCOL_VERSION_KEY: "2026-07-28", "x": True, **own},
        ]
        self.assertEqual(
            sent,
            [
                _compact(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "method": "tools/call",
                        "params": {"name": "echo", "arguments": arguments, "_meta": meta},
                    }
                )
                for request_id, meta in zip((2, 3, 4), metas, strict=True)
            ],
        )

    def test_legacy(self) -> None:
        server = FakeServer(
            {
                "initialize": lambda p: initialize_result(),
                "tools/call": lambda p: {"content": []},
            }
        )
        channel = _RecordingChannel(server)
        session = LegacySession(
            name="fake", channel=channel, clock=Clock(), handlers=UpstreamHandlers()
        )
        self.successResultOf(Deferred.fromCoroutine(session.open()))
        sent = self._calls(session, channel)
        arguments = {"text": "héllo", "nested": {"list": [1, 2.5, None]}}
        metas = [
            {"progressToken": 7, "trace": {"id": "abc"}},
            {"progressToken": 8, "trace": {"id": "abc"}},
            {"progressToken": 9, PROTOCOL_VERSION_KEY: "1999-01-01", "x": True},
        ]
        self.assertEqual(
            sent,
            [
                _compact(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "method": "tools/call",
                        "params": {"name": "echo", "arguments": arguments, "_meta": meta},
                    }
                )
                for request_id, meta in zip((2, 3, 4), metas, strict=True)
            ],
        )
