"""
A pass-through answer reaches the host as the bytes the upstream sent, with only its id
(and on 2026-07-28 the envelope) written by mcpx: the same bytes the parsed path writes,
on every revision, for errors, large answers and non-ASCII ones, without the result
being encoded a second time (L{mcpx.wire.jsontext.read_result},
L{mcpx.wire.messages.spelled_as_read}).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx import call
from mcpx.call import Call
from mcpx.policy.errors import InvalidArguments
from mcpx.pool import requests
from mcpx.pool.pool import Pool
from mcpx.pool.progress import ProgressSink
from mcpx.server import catalogues, dispatch, passthrough, passthrough_names, passthrough_routes
from mcpx.server.conn import Context
from mcpx.server.forwarding import guarded, upstream_meta
from mcpx.server.log_relay import LogRelay, asking_for_logs
from mcpx.server.param_headers import NO_HEADERS, HeaderPaths
from mcpx.server.passthrough import PassThrough, refused_arguments, tool_failure
from mcpx.server.passthrough_names import PassedThrough
from mcpx.server.passthrough_routes import FETCH, OfferedTool, Routes
from mcpx.spec import downgrade
from mcpx.spec.apps import UI_EXTENSION
from mcpx.spec.feature import TASKS_EXTENSION
from mcpx.spec.matrix import capability_in
from mcpx.spec.meta_keys import CLIENT_CAPABILITIES_KEY, CLIENT_INFO_KEY, PROTOCOL_VERSION_KEY
from mcpx.spec.revision import NEWEST, Revision
from mcpx.upstream.handlers import UpstreamHandlers, declaring, questions_declared
from mcpx.upstream.http import modern_request_headers
from mcpx.upstream.modern_session import ModernSession
from mcpx.upstream.records import CLIENT_INFO
from mcpx.upstream.tasks import declares_extension, task_support
from mcpx.wire import jsontext, messages
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import Request
from tests.pool.fakes import FakeChannel, FakeUpstream
from tests.server import Harness, Session, test_passthrough
from tests.server.test_passthrough import passed_through, scripts
from tests.upstream.memory import FakeServer, MemoryChannel, discover_result

#: A tool result of about 300 KB, most of it not ASCII.
LARGE = "Grüße, 世界, ça va? 🙂 " * 15_000
#: The answer of the tool C{big}, asked for with a small request: about 300 KB.
BIG = "ünïcödé ☃ " * 20_000


class BytesHarness(Harness):
    """A L{Harness} that keeps the bytes of every frame the server wrote."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        Harness.__init__(self, *args, **kwargs)
        self.written: list[bytes] = []

    def _to_client(self, data: bytes) -> None:
        self.written.append(data)
        Harness._to_client(self, data)


class CountingEncoder:
    """mcpx's encoder (L{messages._encoder}), counting the texts it writes that hold L{BIG}."""

    def __init__(self) -> None:
        self.big = 0
        self._chunks = messages._encoder

    def __call__(self, value: Any, level: int) -> list[str] | tuple[str, ...]:
        chunks = self._chunks(value, level)
        if BIG in "".join(chunks):
            self.big += 1
        return chunks


SCRIPTED_CALL = test_passthrough._call


def _call(upstream: FakeUpstream, params: Mapping[str, Any]) -> Any:
    """The scripted upstreams' tools, and C{big}, whose answer is L{BIG} as text."""
    if params.get("name") == "big":
        return {"content": [{"type": "text", "text": BIG}]}
    return SCRIPTED_CALL(upstream, params)


def calls_made(
    case: SynchronousTestCase, revision: Revision, scripted: dict[str, Any]
) -> tuple[BytesHarness, Any, Session]:
    """
    A host on C{revision} passed through to C{scripted} (with a C{big} tool more), after
    four calls: C{big}, and C{echo} of a small, a large and a non-ASCII text.
    """
    case.patch(test_passthrough, "_call", _call)
    scripted["alpha"]["tools"] = [
        *scripted["alpha"]["tools"],
        {"name": "big", "inputSchema": {"type": "object"}},
    ]
    harness, connector = passed_through(scripted=scripted, harness_type=BytesHarness)
    assert isinstance(harness, BytesHarness)
    session = Session(revision, harness)
    session.call("big")
    session.call("echo", {"text": "x"})
    session.call("echo", {"text": LARGE})
    session.call("echo", {"text": 'ça, 世界, \u2028 \x01 "quoted" \\ 🙂'})
    return harness, connector, session


def answers(case: SynchronousTestCase, revision: Revision) -> list[bytes]:
    """
    The bytes of the answers a host on C{revision} receives for pass-through requests:
    results small, large (asked for with a small request), non-ASCII and rich (which
    older revisions spell down), an upstream's error, a resource and a prompt.
    """
    harness, _, session = calls_made(case, revision, scripts())
    session.call("rich")
    session.error("tools/call", {"name": "nope", "arguments": {}})
    session.result("resources/read", {"uri": "alpha://doc"})
    session.result("prompts/get", {"name": "greet", "arguments": {"who": "wörld"}})
    ids = {request_id for request_id, method in harness.methods.items() if method != "initialize"}
    return [
        data
        for data in harness.written
        if json.loads(data).get("id") in ids and "method" not in json.loads(data)
    ]


class PassThroughBytesTests(SynchronousTestCase):
    def parsed(self, revision: Revision) -> list[bytes]:
        """L{answers} by the parsed path: every answer read whole and encoded again."""
        self.patch(jsontext, "read_result", lambda data: None)
        try:
            return answers(self, revision)
        finally:
            self.patch(jsontext, "read_result", READ_RESULT)

    def test_same_bytes_as_the_parsed_path(self) -> None:
        """
        On each of the five revisions, what a host receives for each answer is the same
        bytes, byte for byte, whether the upstream's answer was passed on as it came or
        read whole and encoded again.
        """
        for revision in Revision:
            passed = answers(self, revision)
            parsed = self.parsed(revision)
            self.assertEqual(len(passed), 8, revision)
            for mine, theirs in zip(passed, parsed, strict=True):
                self.assertEqual(mine, theirs, revision)
            self.assertIn(BIG.encode("utf-8"), passed[0])
            self.assertIn(LARGE.encode("utf-8"), passed[2])
            self.assertIn(b'"error"', passed[5])

    def test_large_answer_not_encoded_again(self) -> None:
        """
        A large answer is written once, by the upstream: mcpx passes its bytes on
        instead of encoding the result a second time, on every revision (on
        2026-07-28, whose envelope is written around the upstream's bytes, too).
        """
        for revision in Revision:
            encoder = CountingEncoder()
            self.patch(messages, "_encoder", encoder)
            found = answers(self, revision)
            self.assertIn(BIG.encode("utf-8"), found[0])
            self.assertEqual(encoder.big, 1, revision)


READ_RESULT = jsontext.read_result


class _ViaDeferred:
    """
    How the pool ran an upstream request before L{requests._Watched}: the coroutine
    driven by a Deferred of its own (C{Deferred.fromCoroutine}), cancelled through it.
    """

    def __init__(self, coroutine: Any) -> None:
        self._work: Deferred[Any] = Deferred.fromCoroutine(coroutine)
        self.cancel = self._work.cancel

    def __await__(self) -> Any:
        return self._work.__await__()


def exchanged(case: SynchronousTestCase, revision: Revision) -> tuple[list[bytes], list[bytes]]:
    """
    Every frame a host on C{revision} receives, and every message the upstream receives,
    for pass-through calls: small, large, non-ASCII, an upstream's JSON-RPC error, one
    that times out (C{pool.callTimeout}) and one the host cancels.
    """
    upstream: list[bytes] = []

    def send(channel: FakeChannel, data: bytes) -> None:
        upstream.append(data)
        SEND(channel, data)

    def send_request(channel: FakeChannel, data: bytes, request: Request) -> None:
        upstream.append(data)
        SEND_REQUEST(channel, data, request)

    case.patch(FakeChannel, "send", send)
    case.patch(FakeChannel, "send_request", send_request)
    harness, connector, session = calls_made(case, revision, test_passthrough.refusing_nope())
    session.error("tools/call", {"name": "nope", "arguments": {}})
    connector.holding.add("tools/call")
    slow = session.request("tools/call", {"name": "echo", "arguments": {"text": "slow"}})
    harness.clock.advance(60)
    case.failureResultOf(slow)
    dropped = session.request("tools/call", {"name": "add", "arguments": {"n": "ü"}})
    dropped.addErrback(lambda failure: failure.trap(CancelledError))
    dropped.cancel()
    connector.holding.discard("tools/call")
    session.call("echo", {"text": "after"})
    if revision is NEWEST:
        # Each request declares its own capabilities: equal ones in new objects, and
        # others that ask the pool for an instance of their own, then the first again.
        for declared in DECLARATIONS:
            session.call("echo", {"text": "ü"}, **{CLIENT_CAPABILITIES_KEY: dict(declared)})
    return harness.written, upstream


#: What the 2026-07-28 requests of L{exchanged} declare, in turn.
DECLARATIONS: list[dict[str, Any]] = [
    {"elicitation": {}},
    {"elicitation": {}},
    {},
    {"sampling": {}, "roots": {}},
    {"sampling": {}, "roots": {}},
    {"elicitation": {}},
    {},
]


SEND = FakeChannel.send
SEND_REQUEST = FakeChannel.send_request


class PoolDriverTests(SynchronousTestCase):
    def test_same_bytes_as_a_deferred_of_its_own(self) -> None:
        """
        On each of the five revisions, what the host receives and what the upstream
        receives are the same bytes, byte for byte, whether the pool awaits an upstream
        request in place (L{requests._Watched}) or drives it by a Deferred of its own as
        it did: answers small, large and non-ASCII, an upstream's error, a call timed out
        (its upstream told C{notifications/cancelled}) and one the host cancelled.
        """
        for revision in Revision:
            host, upstream = exchanged(self, revision)
            self.patch(requests, "_Watched", _ViaDeferred)
            try:
                host_before, upstream_before = exchanged(self, revision)
            finally:
                self.patch(requests, "_Watched", WATCHED)
            self.assertEqual(host, host_before, revision)
            self.assertEqual(upstream, upstream_before, revision)
            self.assertEqual(
                [b"notifications/cancelled" in data for data in upstream].count(True), 2, revision
            )
            self.assertTrue(any(LARGE.encode("utf-8") in data for data in host), revision)
            self.assertTrue(any(b"within 60s" in data for data in host), revision)
            self.assertTrue(any(b'"text":"after"' in data for data in host), revision)


WATCHED = requests._Watched


def _cached_catalogue_before(
    self: Pool, server: str, kind: str, *, client: str = ""
) -> list[dict[str, Any]] | None:
    """L{Pool.cached_catalogue} as it was: the scope found through L{Pool.scope_key}."""
    slots = self._instances.slots
    if server not in slots.servers.servers:
        return None
    instance = slots.find(server, self.scope_key(server, client))
    if instance is None or not instance.usable:
        return None
    return instance.catalogue.cached(kind)


def _folded_name_before(name: str) -> str:
    """L{passthrough_names.folded_name} as it was: every name normalised."""
    return unicodedata.normalize("NFKC", name).casefold().replace("-", "_")


def _prefix_of_before(self: PassedThrough, server: str) -> str:
    """L{PassedThrough.prefix_of} as it was: looked up in the configuration each time."""
    configured = self.gateway.host.servers
    if configured is None or server not in configured:
        return ""
    return configured[server].tool_prefix


def _narrowed_before(capabilities: Mapping[str, Any]) -> dict[str, Any]:
    """L{mcpx.call.narrowed} as it was: every declaration looked through."""
    declared = {
        name: dict(value)
        for name in ("elicitation", "sampling")
        if isinstance(value := capabilities.get(name), Mapping)
    }
    if isinstance(capabilities.get("roots"), Mapping):
        declared["roots"] = {}
    return declared


async def _call_tool_before(
    self: PassThrough,
    context: Context,
    server: str,
    tool: str,
    params: Mapping[str, Any],
    *,
    on_progress: ProgressSink | None = None,
    on_log: LogRelay | None = None,
) -> dict[str, Any]:
    """
    L{PassThrough.call_tool} as it was: L{tool_failure} in L{guarded}, each a coroutine
    (C{tool} the upstream's name, as the route now has it).
    """
    arguments = params.get("arguments")
    if arguments is None:
        arguments = {}
    elif type(arguments) is not dict:
        raise RpcError.invalid_params("params.arguments must be an object")
    calling = self.pool.call_tool(
        server,
        tool,
        arguments,
        client=catalogues.upstream_client(context),
        meta=asking_for_logs(_upstream_meta_before(params.get("_meta")), on_log),
        on_progress=on_progress,
        call=context.call,
    )
    try:
        return await guarded(
            self.gateway.host.events, context, server, tool_failure(calling), on_log
        )
    except InvalidArguments as e:
        return refused_arguments(e)


def _upstream_client_before(context: Context) -> str:
    """L{catalogues.upstream_client} as it was: its mark worked out for every request."""
    declared = questions_declared(context.capabilities)
    questions = frozenset(
        question
        for question in declared
        if capability_in("client", question.partition(".")[0], context.revision)
    )
    return declaring(context.identity, questions)


def _param_headers_before(
    self: Routes, server: str, tools: Mapping[str, OfferedTool], name: str
) -> HeaderPaths:
    """L{Routes._param_headers} as it was: the offered name put back together."""
    tool = tools.get(self.passed.prefix_of(server) + self.passed.upstream_name(server, name))
    return tool.headers if tool is not None else NO_HEADERS


def _tool_route_now_before(self: Routes, context: Context, name: str) -> object:
    """
    L{Routes.tool_route_now} as it was: the name told not to be the gateway's, each
    server's tools offered and the route worked out again at every call.
    """
    if self.passed.reserved_tool(name):
        return None
    offered: list[tuple[str, Mapping[str, OfferedTool]]] = []
    for server in self.passed.servers:
        listed = self._catalogues.cached("tools", server, context)
        if listed is None:
            known = self._tools_known(context, name)
            return FETCH if known is None else known
        offered.append((server, self._tools.of(server, self.passed.offered_tools(server, listed))))
    return self._routed(name, offered, {})


def _upstream_meta_before(meta: object) -> dict[str, Any] | None:
    """L{forwarding.upstream_meta} as it was: a dict made, then dropped when empty."""
    if type(meta) is not dict or not meta:
        return None
    kept = {
        key: value
        for key, value in meta.items()
        if key != "progressToken" and not key.startswith(("io.modelcontextprotocol/", "dev.mcpx/"))
    }
    return kept or None


def _offered_task_support_before(
    self: Routes, tools: Mapping[str, OfferedTool], name: str
) -> str | None:
    """L{Routes._offered_task_support} as it was: the definition found, then read."""
    tool = tools.get(name)
    if tool is not None:
        return task_support(tool.definition)
    for definition in self.gateway.tool_definitions:
        if definition["name"] == name:
            return task_support(definition)
    return None


def _envelope_before(
    result: Mapping[str, Any],
    method: str,
    *,
    server_info: Mapping[str, Any],
    list_max_age: float,
    read_max_age: float,
) -> dict[str, Any]:
    """L{downgrade.envelope} as it was: L{downgrade.downgrade} asked for 2026-07-28."""
    out = dict(downgrade.downgrade(result, method, Revision.V2026_07_28))
    kind = out.get("resultType")
    if kind not in ("input_required", "task"):
        out["resultType"] = kind = "complete"
    meta = out.get("_meta")
    tagged = dict(meta) if isinstance(meta, Mapping) else {}
    tagged[downgrade.SERVER_INFO_KEY] = server_info
    out["_meta"] = tagged
    scope = downgrade.CACHE_SCOPES.get(method)
    if kind == "complete" and scope is not None:
        age = list_max_age if scope == "public" else read_max_age
        out["ttlMs"] = max(0, round(age * 1000))
        out["cacheScope"] = scope
    elif kind == "input_required":
        out.pop("ttlMs", None)
        out.pop("cacheScope", None)
    return out


class ShortcutTests(SynchronousTestCase):
    def test_same_bytes_as_before_the_shortcuts(self) -> None:
        """
        On each of the five revisions, what the host and the upstream receive are the
        same bytes, byte for byte, with the pool's and the route's shortcuts (a call
        answered in one coroutine, not three, when no log relay is asked for; the
        2026-07-28 envelope spelled with its plans at hand; a call
        with no bound of its own takes C{pool.callTimeout} as it is, the cached
        catalogue found with one look-up, the prefixes kept per configuration, an ASCII
        name folded without normalising, an empty declaration not looked through, the
        questions a request declares worked out once for equal declarations, a call's
        C{Mcp-Param-*} headers found by its offered name, the route of a name listed kept
        with what its calls read) as without them: answers
        small, large and non-ASCII, an upstream's error, a call timed out, one the host
        cancelled, and 2026-07-28 calls declaring equal and different capabilities.
        """
        for revision in Revision:
            host, upstream = exchanged(self, revision)
            with self._before():
                host_before, upstream_before = exchanged(self, revision)
            self.assertEqual(host, host_before, revision)
            self.assertEqual(upstream, upstream_before, revision)
            self.assertTrue(any(b"within 60s" in data for data in host), revision)
            self.assertTrue(any(b'"text":"after"' in data for data in host), revision)
            # And rich results (spelled down for older revisions), resources and prompts.
            passed = answers(self, revision)
            with self._before():
                self.assertEqual(passed, answers(self, revision), revision)
            self.assertEqual(len(passed), 8, revision)

    @contextmanager
    def _before(self) -> Iterator[None]:
        before: list[tuple[object, str, object]] = [
            (dispatch, "envelope", _envelope_before),
            (PassThrough, "call_tool", _call_tool_before),
            (Pool, "cached_catalogue", _cached_catalogue_before),
            (passthrough_names, "folded_name", _folded_name_before),
            (PassedThrough, "prefix_of", _prefix_of_before),
            (call, "narrowed", _narrowed_before),
            (catalogues, "upstream_client", _upstream_client_before),
            (passthrough, "upstream_client", _upstream_client_before),
            (passthrough_routes, "upstream_client", _upstream_client_before),
            (Routes, "_param_headers", _param_headers_before),
            (Routes, "_offered_task_support", _offered_task_support_before),
            (Routes, "tool_route_now", _tool_route_now_before),
        ]
        saved = [(owner, name, getattr(owner, name)) for owner, name, _ in before]
        for owner, name, replacement in before:
            setattr(owner, name, replacement)
        try:
            yield
        finally:
            for owner, name, kept in saved:
                setattr(owner, name, kept)

    def test_upstream_meta_as_before(self) -> None:
        """
        The C{_meta} passed upstream is what it was (a 2026-07-28 request's own keys,
        the progress token and mcpx's session left out, every other key kept in order),
        now that nothing is made for a C{_meta} of which nothing is kept.
        """
        metas: list[object] = [
            None,
            [],
            {},
            {"progressToken": 1},
            {
                "io.modelcontextprotocol/protocolVersion": NEWEST.value,
                CLIENT_CAPABILITIES_KEY: {},
                "dev.mcpx/session": "s",
            },
            {"b": 1, "progressToken": "t", "a": {"x": [1]}, "io.modelcontextprotocol/x": 2},
            {"io.modelcontextprotocol/logLevel": "info", "z": None},
        ]
        for meta in metas:
            kept = upstream_meta(meta)
            self.assertEqual(kept, _upstream_meta_before(meta), meta)
            self.assertEqual(list(kept or ()), list(_upstream_meta_before(meta) or ()), meta)
        self.assertEqual(upstream_meta(metas[5]), {"b": 1, "a": {"x": [1]}})

    def test_ascii_names_folded_as_before(self) -> None:
        """
        Every ASCII character, alone and in a gateway-like name, folds as NFKC and
        case-folding fold it; so do names that are not ASCII.
        """
        names = [chr(code) for code in range(128)]
        names += [f"MCPX-{chr(code)}_Call" for code in range(128)]
        names += ["\uff4d\uff43\uff50\uff58_read", "Straße", "ﬁle", "İx", "mcpx\u2010call"]
        for name in names:
            self.assertEqual(passthrough_names.folded_name(name), _folded_name_before(name))

    def test_an_empty_declaration_narrows_to_a_fresh_one(self) -> None:
        """Nothing declared narrows to an empty declaration of the call's own."""
        first, second = call.narrowed({}), call.narrowed({})
        self.assertEqual(first, {})
        self.assertIsNot(first, second)
        declared = {"sampling": {}, "roots": {"listChanged": True}, "other": {}}
        self.assertEqual(call.narrowed(declared), _narrowed_before(declared))


def _meta_before(
    self: ModernSession, meta: Any, call: Call | None = None, *, tasks: bool = False
) -> dict[str, Any]:
    """L{ModernSession._meta} as it was: the capabilities made anew for every request."""
    merged = dict(meta) if isinstance(meta, Mapping) else {}
    merged[PROTOCOL_VERSION_KEY] = NEWEST.value
    merged[CLIENT_CAPABILITIES_KEY] = self._capabilities_made(call, tasks)
    merged[CLIENT_INFO_KEY] = CLIENT_INFO
    return merged


def _stage_param_headers_before(self: ModernSession, params: Mapping[str, Any]) -> None:
    """
    L{ModernSession._stage_param_headers} as it was: a new empty staging every call
    whose tool asks for no header (what it stages for one that does is unchanged).
    """
    name = params.get("name")
    wanted = self._tool_headers.get(name) if isinstance(name, str) else None
    if not wanted or not isinstance(params.get("arguments"), Mapping):
        self.channel.negotiated.param_headers = {}
        return
    MODERN_STAGE(self, params)


def _spelled_before(
    self: ModernSession, method: str, params: Mapping[str, Any] | None, call: Call | None
) -> dict[str, Any] | None:
    """L{ModernSession._spelled} as it was: the tasks extension and staging asked each call."""
    spelled = dict(params) if params is not None else {}
    calling = method == "tools/call"
    spelled["_meta"] = self._meta(
        spelled.get("_meta"),
        call,
        tasks=calling and declares_extension(self.capabilities),
    )
    if calling:
        self._stage_param_headers(spelled)
    return spelled


class HeadedChannel(MemoryChannel):
    """A L{MemoryChannel} keeping each request as an HTTP channel sends it: heads, body."""

    def __init__(self, server: FakeServer) -> None:
        MemoryChannel.__init__(self, server)
        self.sent: list[bytes] = []

    def send_request(self, data: bytes, request: Request) -> None:
        heads = modern_request_headers(request, self.negotiated)
        self.sent.append(repr(sorted(heads.items())).encode("utf-8") + b"\n" + data)
        MemoryChannel.send_request(self, data, request)


#: A tool whose C{region} argument travels in an C{Mcp-Param-Region} header too.
DEPLOY: Mapping[str, Any] = {
    "name": "deploy",
    "inputSchema": {
        "type": "object",
        "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
    },
}


#: A tool whose C{label} argument travels in an C{Mcp-Param-Label} header too.
TAG: Mapping[str, Any] = {
    "name": "tag",
    "inputSchema": {
        "type": "object",
        "properties": {"label": {"type": "string", "x-mcp-header": "Label"}},
    },
}


def modern_sent(case: SynchronousTestCase, *, tasks: bool) -> list[bytes]:
    """
    The requests (heads and body) a 2026-07-28 upstream receives, declaring the tasks
    extension when C{tasks}, for calls made for hosts declaring nothing, equal
    capabilities in new objects, other ones (MCP Apps among them), through the gateway
    (not narrowed) and for none, of a tool with C{Mcp-Param-*} headers and one without,
    and of that tool once listed without them.
    """
    capabilities: dict[str, Any] = {"tools": {}}
    if tasks:
        capabilities["extensions"] = {TASKS_EXTENSION: {}}
    listed = [dict(DEPLOY), {"name": "echo", "inputSchema": {"type": "object"}}]
    server = FakeServer(
        {
            "server/discover": lambda p: discover_result(**capabilities),
            "tools/list": lambda p: {"tools": list(listed), "resultType": "complete"},
            "tools/call": lambda p: {"content": [], "resultType": "complete"},
            "prompts/get": lambda p: {"messages": [], "resultType": "complete"},
        }
    )
    channel = HeadedChannel(server)
    session = ModernSession(
        name="fake",
        channel=channel,
        clock=Clock(),
        handlers=UpstreamHandlers(sampling=lambda params: succeed({})),
    )
    case.successResultOf(Deferred.fromCoroutine(session.open()))
    case.successResultOf(Deferred.fromCoroutine(session.list_tools()))
    ui = {"mimeTypes": ["text/html;profile=mcp-app"]}
    declarations: list[tuple[dict[str, Any], bool]] = [
        ({}, True),
        ({}, True),
        ({"elicitation": {"form": {}}}, True),
        ({"elicitation": {"form": {}}}, True),
        ({"elicitation": {"form": {}}}, False),
        ({"sampling": {}, "roots": {"listChanged": True}, "extensions": {UI_EXTENSION: ui}}, True),
        ({"sampling": {}, "roots": {"listChanged": True}, "extensions": {UI_EXTENSION: ui}}, True),
        ({"extensions": {UI_EXTENSION: ui}}, False),
        ({}, True),
    ]
    for declared, narrow in declarations:
        for name, arguments in (("echo", {"text": "ü"}), ("deploy", {"region": "eu-ü"})):
            caller = Call("c", json.loads(json.dumps(declared)), narrow=narrow)
            case.successResultOf(
                Deferred.fromCoroutine(session.call_tool(name, arguments, call=caller))
            )
        # Another request of the same host declares its capabilities without the tasks
        # extension mcpx adds to its calls.
        case.successResultOf(
            Deferred.fromCoroutine(session.request("prompts/get", {"name": "p"}, call=caller))
        )
    for params in (
        {"name": "deploy", "arguments": {"region": "us"}},
        {"name": "deploy", "arguments": "not an object"},
        {"name": "deploy", "arguments": {"region": "us"}, "_meta": {"progressToken": 1}},
        {"name": "echo", "arguments": {}},
        # A _meta that is not the params' last member; one naming a member mcpx writes
        # after the caller's own (written where the caller put it); and params only
        # ASCII escapes can write (the whole request is then written so).
        {"_meta": {"progressToken": 2}, "name": "echo", "arguments": {}},
        {"name": "echo", "arguments": {}, "_meta": {"a": 1, CLIENT_INFO_KEY: {"name": "x"}}},
        {"name": "echo", "arguments": {"text": "\ud800"}, "_meta": {"progressToken": 3}},
    ):
        case.successResultOf(Deferred.fromCoroutine(session.request("tools/call", params)))
    case.successResultOf(
        Deferred.fromCoroutine(session.call_tool("echo", {}, call=Call("d", {}, narrow=True)))
    )
    # The server lists deploy again without its annotation, and another tool with one:
    # no header goes with deploy now; then none with any: none goes with that tool.
    case.successResultOf(Deferred.fromCoroutine(session.call_tool("deploy", {"region": "eu"})))
    listed[:] = [{"name": "deploy", "inputSchema": {"type": "object"}}, dict(TAG)]
    case.successResultOf(Deferred.fromCoroutine(session.list_tools()))
    for name in ("deploy", "tag"):
        case.successResultOf(
            Deferred.fromCoroutine(session.call_tool(name, {"region": "eu", "label": "l"}))
        )
    listed[:] = [{"name": "tag", "inputSchema": {"type": "object"}}]
    case.successResultOf(Deferred.fromCoroutine(session.list_tools()))
    case.successResultOf(
        Deferred.fromCoroutine(session.call_tool("tag", {"label": "l"}, call=caller))
    )
    return channel.sent


class ModernSessionBytesTests(SynchronousTestCase):
    def test_same_requests_as_before(self) -> None:
        """
        A 2026-07-28 upstream receives the same requests, heads and body byte for byte,
        now that a session keeps the capabilities it made for the last equal declaration
        and tasks flag, and stages no C{Mcp-Param-*} headers for a tool that asks for
        none: for hosts declaring nothing, equal capabilities in new objects, others
        (MCP Apps among them), through the gateway and for no call, for a tool with
        C{Mcp-Param-*} headers and one without (and once listed again without them), a
        request other than a call, from a server with the tasks extension and one
        without.
        """
        for tasks in (False, True):
            sent = modern_sent(self, tasks=tasks)
            self.patch(ModernSession, "_meta", _meta_before)
            self.patch(ModernSession, "_spelled", _spelled_before)
            self.patch(ModernSession, "_stage_param_headers", _stage_param_headers_before)
            try:
                before = modern_sent(self, tasks=tasks)
            finally:
                self.patch(ModernSession, "_meta", MODERN_META)
                self.patch(ModernSession, "_spelled", MODERN_SPELLED)
                self.patch(ModernSession, "_stage_param_headers", MODERN_STAGE)
            self.assertEqual(sent, before, tasks)
            self.assertEqual(len(sent), 43, tasks)
            self.assertEqual(
                [b"('Mcp-Param-Region', " in data for data in sent].count(True), 12, tasks
            )
            self.assertEqual(
                [TASKS_EXTENSION.encode("utf-8") in data for data in sent].count(True),
                30 if tasks else 0,
            )
            self.assertEqual(
                [UI_EXTENSION.encode("utf-8") in data for data in sent].count(True), 9, tasks
            )
            self.assertEqual([b"Mcp-Param-Label" in data for data in sent].count(True), 1, tasks)


MODERN_META = ModernSession._meta
MODERN_STAGE = ModernSession._stage_param_headers
MODERN_SPELLED = ModernSession._spelled
