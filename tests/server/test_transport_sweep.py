"""
The strict schema sweep over both transports, and over mcpx's upstream client.

Every method mcpx serves is driven on every revision (a handshake at each legacy
revision, 2026-07-28 per request) through the daemon's side of C{mcpx serve}
(L{StdioConnection} on a string transport) and through C{/mcp} (StubTreq on the
daemon's Klein app), with the real L{McpServer}.  Every frame mcpx writes (each line
on stdio; each JSON body, array element and C{data:} payload of an event stream on
HTTP, the GET streams included) is validated against the official schema of the
revision in force, in strict mode (properties a revision never defined are refused):
the JSON-RPC envelope, and the result, notification or request definition inside it.

The other way round, every message mcpx's upstream client writes (requests,
notifications, and its answers to a server's requests) is validated against the
revision the session agreed on.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, cast

from treq.testing import StubTreq
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web._newclient import ResponseNeverReceived

from mcpx.daemon.http import DaemonHTTP
from mcpx.ops import uris
from mcpx.pool import Pool
from mcpx.server.dispatch import McpServer
from mcpx.server.http import McpHTTP
from mcpx.server.mcp_socket import StdioFactory
from mcpx.spec.revision import (
    HEADERLESS_HTTP,
    LEGACY_REVISIONS,
    NEWEST,
    NEWEST_LEGACY,
    Revision,
)
from mcpx.spec.schemas import definitions, load_schema, violations
from mcpx.upstream.handlers import UpstreamHandlers
from mcpx.upstream.legacy_session import LegacySession
from mcpx.upstream.modern_session import ModernSession
from mcpx.upstream.session import UpstreamSession
from mcpx.wire.messages import Request
from mcpx.wire.peer import RpcPeer
from mcpx.wire.sse import SSEDecoder
from tests.daemon.fake_pool import FakePool, daemon_http, default_settings
from tests.pool.fakes import Events, FakeConnector, FakeUpstream, servers, stdio
from tests.server import gateway_servers, servers_config
from tests.upstream.memory import FakeServer, MemoryChannel, discover_result, initialize_result

PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
URL = "http://127.0.0.1:8899/mcp"
BOTH = "application/json, text/event-stream"

#: Each method: its request definition and its result definition.
METHODS: Mapping[str, tuple[str, str]] = {
    "initialize": ("InitializeRequest", "InitializeResult"),
    "ping": ("PingRequest", "EmptyResult"),
    "server/discover": ("DiscoverRequest", "DiscoverResult"),
    "tools/list": ("ListToolsRequest", "ListToolsResult"),
    "tools/call": ("CallToolRequest", "CallToolResult"),
    "prompts/list": ("ListPromptsRequest", "ListPromptsResult"),
    "prompts/get": ("GetPromptRequest", "GetPromptResult"),
    "resources/list": ("ListResourcesRequest", "ListResourcesResult"),
    "resources/templates/list": ("ListResourceTemplatesRequest", "ListResourceTemplatesResult"),
    "resources/read": ("ReadResourceRequest", "ReadResourceResult"),
    "resources/subscribe": ("SubscribeRequest", "EmptyResult"),
    "resources/unsubscribe": ("UnsubscribeRequest", "EmptyResult"),
    "logging/setLevel": ("SetLevelRequest", "EmptyResult"),
    "completion/complete": ("CompleteRequest", "CompleteResult"),
    "subscriptions/listen": ("SubscriptionsListenRequest", "SubscriptionsListenResult"),
    "roots/list": ("ListRootsRequest", "ListRootsResult"),
    "sampling/createMessage": ("CreateMessageRequest", "CreateMessageResult"),
    "elicitation/create": ("ElicitRequest", "ElicitResult"),
}

NOTIFICATIONS: Mapping[str, str] = {
    "notifications/initialized": "InitializedNotification",
    "notifications/cancelled": "CancelledNotification",
    "notifications/progress": "ProgressNotification",
    "notifications/message": "LoggingMessageNotification",
    "notifications/resources/updated": "ResourceUpdatedNotification",
    "notifications/resources/list_changed": "ResourceListChangedNotification",
    "notifications/tools/list_changed": "ToolListChangedNotification",
    "notifications/prompts/list_changed": "PromptListChangedNotification",
    "notifications/roots/list_changed": "RootsListChangedNotification",
    "notifications/subscriptions/acknowledged": "SubscriptionsAcknowledgedNotification",
    "notifications/elicitation/complete": "ElicitationCompleteNotification",
}


def _properties(revision: Revision, definition: str) -> Mapping[str, Any]:
    document = load_schema(revision)
    defs = document.get("$defs") or document["definitions"]
    properties: Mapping[str, Any] = defs[definition].get("properties", {})
    return properties


class Sweep:
    """
    Validates frames and keeps every problem found.

    @ivar problems: one line per violation, naming where the frame was seen.
    @ivar checked: how many instances were validated against each definition.
    @ivar unshaped: results that the revision in force has no definition for
        (C{server/discover} answered to a legacy client), whose envelope alone was
        checked.
    """

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.checked: Counter[tuple[Revision, str]] = Counter()
        self.unshaped: list[tuple[Revision, str]] = []

    def definitions_checked(self) -> set[str]:
        return {definition for _, definition in self.checked}

    def check(self, instance: Any, revision: Revision, definition: str, where: str) -> None:
        if definition not in definitions(revision):
            self.problems.append(f"{where}: {revision} has no {definition}")
            return
        self.checked[(revision, definition)] += 1
        self.problems.extend(
            f"{where}: {revision} {definition}: {line}"
            for line in violations(instance, revision, definition, strict=True)
        )

    def _bare(self, frame: Mapping[str, Any], revision: Revision, definition: str) -> Any:
        """The frame as C{definition} describes it: the draft-07 revisions leave out
        the JSON-RPC members (the envelope definitions check those)."""
        if definition not in definitions(revision) or "jsonrpc" in _properties(
            revision, definition
        ):
            return frame
        return {key: value for key, value in frame.items() if key not in ("jsonrpc", "id")}

    def frame(self, frame: Any, revision: Revision, methods: Mapping[Any, str], where: str) -> None:
        """
        One message, of any kind.

        @param methods: the method of each request the frame may answer, by id.
        """
        if not isinstance(frame, dict):
            self.problems.append(f"{where}: not a JSON object: {frame!r}")
            return
        known = definitions(revision)
        method = frame.get("method")
        if isinstance(method, str):
            if "id" in frame:
                self.check(frame, revision, "JSONRPCRequest", where)
                definition: str | None = METHODS.get(method, (None, None))[0]
            else:
                self.check(frame, revision, "JSONRPCNotification", where)
                definition = NOTIFICATIONS.get(method)
            if definition is None:
                self.problems.append(f"{where}: {method} is in no table of this sweep")
            else:
                self.check(self._bare(frame, revision, definition), revision, definition, where)
            return
        if "error" in frame:
            envelope = "JSONRPCError" if "JSONRPCError" in known else "JSONRPCErrorResponse"
            self.check(frame, revision, envelope, where)
            return
        answered = methods.get(frame.get("id"))
        if answered is None:
            self.problems.append(f"{where}: a result for no request sent: {frame!r}")
            return
        result = METHODS[answered][1]
        if f"{result}Response" in known:
            self.check(frame, revision, f"{result}Response", where)
        elif "JSONRPCResultResponse" in known:
            self.check(frame, revision, "JSONRPCResultResponse", where)
        else:
            self.check(frame, revision, "JSONRPCResponse", where)
        if result in known:
            self.check(frame.get("result"), revision, result, where)
        else:
            self.unshaped.append((revision, answered))


def modern_meta(**extra: Any) -> dict[str, Any]:
    return {
        PROTOCOL_VERSION: NEWEST.value,
        CLIENT_CAPABILITIES: {},
        CLIENT_INFO: {"name": "sweep", "version": "1"},
        **extra,
    }


def initialize_params(revision: Revision) -> dict[str, Any]:
    return {
        "protocolVersion": revision.value,
        "capabilities": {},
        "clientInfo": {"name": "sweep", "version": "1"},
    }


def result_of(deferred: Deferred[Any]) -> Any:
    results: list[Any] = []
    deferred.addBoth(results.append)
    if not results:
        raise AssertionError(f"{deferred!r} has not fired")
    if isinstance(results[0], Failure):
        results[0].raiseException()
    return results[0]


# The two worlds the server is driven in


def gateway_daemon(clock: Clock) -> tuple[DaemonHTTP, McpServer]:
    """Two scripted upstreams answering with everything a result can hold."""
    daemon = daemon_http(
        clock=clock,
        pid=4242,
        pool=FakePool(gateway_servers()),
        settings=default_settings(),
        servers=servers_config("files", "search"),
    )
    core = McpServer(daemon.host, clock)
    core.page_size = 5
    daemon.mcp = McpHTTP(core, clock, keep_alive=15.0)
    return daemon, core


def pooled_daemon(clock: Clock) -> tuple[DaemonHTTP, McpServer, FakeConnector]:
    """The real pool, over a scripted upstream the test can hold and make talk."""
    connector = FakeConnector(clock)
    pool = Pool(
        servers=servers(stdio("demo")),
        connector=connector,
        clock=clock,
        call_timeout=60.0,
        idle_timeout=300.0,
        publish=Events(),
    )
    daemon = daemon_http(
        clock=clock,
        pid=4242,
        pool=pool,
        settings=default_settings(),
        servers=servers_config("demo"),
    )
    core = McpServer(daemon.host, clock)
    daemon.mcp = McpHTTP(core, clock, keep_alive=15.0)
    return daemon, core, connector


# The transports, as a client drives them


class Driver:
    """
    A client of one revision on one transport: a legacy one shakes hands first; a
    2026-07-28 one puts its C{_meta} on every request.  Every frame it receives is
    handed to the sweep.
    """

    name = "?"

    def __init__(self, sweep: Sweep, revision: Revision) -> None:
        self.sweep = sweep
        self.revision = revision
        self.methods: dict[Any, str] = {}
        self.received: list[dict[str, Any]] = []
        self._ids = itertools.count(1)

    def next_id(self) -> int:
        return next(self._ids)

    def params(self, params: Mapping[str, Any] | None, **meta: Any) -> dict[str, Any]:
        given = dict(params or {})
        if self.revision.is_modern:
            given["_meta"] = {**modern_meta(), **meta}
        elif meta:
            given["_meta"] = dict(meta)
        return given

    def seen(self, frames: Iterable[Any], where: str = "") -> list[Any]:
        """Frames mcpx sent: validated, kept, and returned."""
        kept = list(frames)
        for frame in kept:
            self.sweep.frame(
                frame, self.revision, self.methods, f"{self.name}{where} {self.revision}"
            )
            if isinstance(frame, dict):
                self.received.append(frame)
        return kept

    def answer_to(self, request_id: Any) -> dict[str, Any]:
        for frame in self.received:
            if frame.get("id") == request_id and "method" not in frame:
                return frame
        raise AssertionError(f"{self.name}: no answer to {request_id}: {self.received}")

    def handshake(self) -> None:
        if not self.revision.is_modern:
            answer = self.ask("initialize", initialize_params(self.revision))
            assert answer["result"]["protocolVersion"] == self.revision.value, answer
            self.notify("notifications/initialized")

    # What each transport provides

    def ask(self, method: str, params: Mapping[str, Any] | None = None, **meta: Any) -> Any:
        raise NotImplementedError

    def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        raise NotImplementedError


class StdioDriver(Driver):
    """The daemon's side of C{mcpx serve}, on a string transport."""

    name = "stdio"

    def __init__(self, sweep: Sweep, revision: Revision, core: McpServer, clock: Clock) -> None:
        super().__init__(sweep, revision)
        self.protocol = StdioFactory(core, clock, drain=5.0).buildProtocol(None)
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)
        self.write({"mcpx": "serve", "pid": 4242, "cwd": "/", "version": "sweep"})

    def write(self, message: Any) -> None:
        self.protocol.dataReceived(json.dumps(message).encode("utf-8") + b"\n")

    def read(self) -> list[Any]:
        data = self.transport.value()
        self.transport.clear()
        frames: list[Any] = []
        for line in data.splitlines():
            decoded = json.loads(line)
            # A batch's answers come as one array; each element is a frame.
            frames.extend(decoded if isinstance(decoded, list) else [decoded])
        return self.seen(frames)

    def send(self, method: str, params: Mapping[str, Any] | None = None, **meta: Any) -> int:
        request_id = self.next_id()
        self.methods[request_id] = method
        self.write(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": method,
                "params": self.params(params, **meta),
            }
        )
        return request_id

    def ask(self, method: str, params: Mapping[str, Any] | None = None, **meta: Any) -> Any:
        request_id = self.send(method, params, **meta)
        self.read()
        return self.answer_to(request_id)

    def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        self.write(message)
        self.read()

    def cancel(self, request_id: int) -> None:
        self.notify("notifications/cancelled", {"requestId": request_id, "reason": "sweep"})


class HttpDriver(Driver):
    """
    C{/mcp} through StubTreq: a legacy client in a session (or without one, when
    C{session} is false), or a 2026-07-28 client.
    """

    name = "http"

    def __init__(
        self, sweep: Sweep, revision: Revision, daemon: DaemonHTTP, *, session: bool = True
    ) -> None:
        super().__init__(sweep, revision)
        self.stub: Any = StubTreq(daemon.resource())
        self.session_id: str | None = None
        self.use_session = session
        if not session:
            self.name = "http-post"

    def handshake(self) -> None:
        if self.use_session:
            super().handshake()

    def headers(self, message: Mapping[str, Any]) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": BOTH}
        if self.revision.is_modern:
            params = message.get("params") or {}
            named = (params.get("_meta") or {}).get(PROTOCOL_VERSION, NEWEST.value)
            headers["MCP-Protocol-Version"] = named
            method = message.get("method")
            if isinstance(method, str):
                headers["Mcp-Method"] = method
            for field in ("name", "uri"):
                if method in ("tools/call", "prompts/get", "resources/read") and field in params:
                    headers["Mcp-Name"] = str(params[field])
            return headers
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
        if self.revision >= Revision.V2025_06_18:
            # The header came with 2025-06-18; older clients in a session do not send it.
            headers["MCP-Protocol-Version"] = self.revision.value
        elif not self.use_session and self.revision is not HEADERLESS_HTTP:
            # Without a session the header is all that says which revision a POST is in;
            # a headerless one is 2025-03-26.
            headers["MCP-Protocol-Version"] = self.revision.value
        return headers

    def post(self, body: Any, headers: Mapping[str, str] | None = None) -> Deferred[Any]:
        first = body[0] if isinstance(body, list) else body
        return self.post_raw(
            json.dumps(body).encode("utf-8"), {**self.headers(first), **(headers or {})}
        )

    def post_raw(self, data: bytes, headers: Mapping[str, str]) -> Deferred[Any]:
        started: Deferred[Any] = self.stub.request("POST", URL, data=data, headers=dict(headers))
        self.stub.flush()
        return started

    def finish(self, started: Deferred[Any], where: str = "") -> tuple[Any, list[Any]]:
        """The response of a POST (or GET) that has ended, its frames validated."""
        self.stub.flush()
        response = result_of(started)
        body: bytes = result_of(response.content())
        if response.code == 200 and self.session_id is None and self.use_session:
            found = response.headers.getRawHeaders(b"mcp-session-id")
            if found:
                self.session_id = found[0].decode("ascii")
        return response, self.seen(self.decode(response, body), where)

    def read_raw(self, started: Deferred[Any]) -> list[Any]:
        """The frames of a response, not validated (for the caller to judge)."""
        self.stub.flush()
        response = result_of(started)
        return self.decode(response, result_of(response.content()))

    @staticmethod
    def decode(response: Any, body: bytes) -> list[Any]:
        if not body:
            return []
        kind = (response.headers.getRawHeaders(b"content-type") or [b""])[0]
        if kind.startswith(b"text/event-stream"):
            return [json.loads(event.data) for event in SSEDecoder().feed(body)]
        decoded = json.loads(body)
        return decoded if isinstance(decoded, list) else [decoded]

    def request(self, method: str, params: Mapping[str, Any] | None = None, **meta: Any) -> Any:
        request_id = self.next_id()
        self.methods[request_id] = method
        return {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": method,
            "params": self.params(params, **meta),
        }

    def start(
        self, method: str, params: Mapping[str, Any] | None = None, **meta: Any
    ) -> tuple[int, Deferred[Any]]:
        message = self.request(method, params, **meta)
        return message["id"], self.post(message)

    def ask(self, method: str, params: Mapping[str, Any] | None = None, **meta: Any) -> Any:
        request_id, started = self.start(method, params, **meta)
        self.finish(started)
        return self.answer_to(request_id)

    def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None or self.revision.is_modern:
            message["params"] = self.params(params)
        response, frames = self.finish(self.post(message))
        assert response.code == 202 and frames == [], (response.code, frames)

    def cancel(self, request_id: int) -> None:
        self.notify("notifications/cancelled", {"requestId": request_id, "reason": "sweep"})

    def open_stream(self) -> Deferred[Any]:
        """A legacy session's GET stream."""
        assert self.session_id is not None
        started: Deferred[Any] = self.stub.request(
            "GET",
            URL,
            headers={"Accept": "text/event-stream", "Mcp-Session-Id": self.session_id},
        )
        self.stub.flush()
        return started

    def end_session(self) -> None:
        assert self.session_id is not None
        started = self.stub.request("DELETE", URL, headers={"Mcp-Session-Id": self.session_id})
        self.finish(started)


# Driving


def drive_gateway(client: Driver) -> None:
    """Every method of the gateway surface, with its results and its errors."""
    modern = client.revision.is_modern
    client.handshake()
    client.ask("server/discover")
    for method, params in (("ping", None), ("logging/setLevel", {"level": "warning"})):
        answer = client.ask(method, params)
        assert ("error" in answer) is modern, answer
    first = client.ask("tools/list")["result"]
    client.ask("tools/list", {"cursor": first["nextCursor"]})
    for tool, arguments in (
        ("mcpx_call", {"server": "search", "tool": "web_search"}),
        ("mcpx_call", {"server": "nowhere", "tool": "x"}),
        ("mcpx_servers", {}),
        ("mcpx_tools", {"search": "file"}),
        ("mcpx_describe", {"server": "files", "tool": "read_file"}),
        ("mcpx_prompt", {"server": "files", "name": "review", "arguments": {"path": "a"}}),
        ("mcpx_read", {"uri": "mcpx://files/file%3A%2F%2F%2Fa%20b.txt"}),
    ):
        answer = client.ask("tools/call", {"name": tool, "arguments": arguments})
        assert "result" in answer, answer
    client.ask("prompts/list")
    client.ask("prompts/get", {"name": "files_review", "arguments": {"path": "a"}})
    resources = client.ask("resources/list")["result"]["resources"]
    client.ask("resources/templates/list")
    read = client.ask("resources/read", {"uri": resources[0]["uri"]})
    assert "result" in read, read
    client.ask(
        "completion/complete",
        {
            "ref": {"type": "ref/prompt", "name": "search_query"},
            "argument": {"name": "topic", "value": "py"},
        },
    )
    for method, params in (
        ("tools/call", {"name": "web_search"}),
        ("tools/list", {"cursor": "garbage"}),
        ("resources/read", {"uri": "file:///nowhere"}),
        ("prompts/get", {"name": "nowhere_x"}),
        ("nothing/here", {}),
    ):
        assert "error" in client.ask(method, params), method
    if modern:
        assert "error" in client.ask("initialize", initialize_params(NEWEST_LEGACY))
        assert "error" in client.ask("resources/subscribe", {"uri": resources[0]["uri"]})
        refused = client.ask("tools/list", None, **{PROTOCOL_VERSION: "2030-01-01"})
        assert refused.get("error", {}).get("code") == -32022, (client.revision, refused)


def upstream_of(connector: FakeConnector) -> FakeUpstream:
    return connector.started("demo")[-1]


def progress_token(held: FakeUpstream) -> Any:
    params = held.last("tools/call").params
    assert isinstance(params, dict)
    return (params.get("_meta") or {}).get("progressToken")


CALL = {"name": "mcpx_call", "arguments": {"server": "demo", "tool": "echo", "arguments": {}}}
#: Content that older revisions cannot carry as it is (audio came in 2025-03-26).
AUDIO_RESULT = {"content": [{"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}]}


def drive_stdio_pooled(client: StdioDriver, connector: FakeConnector, core: McpServer) -> None:
    """Progress, a cancellation, and (legacy) a subscription's update, on stdio."""
    client.handshake()
    connector.holding.add("tools/call")
    calling = client.send("tools/call", CALL, progressToken="p-1")
    held = upstream_of(connector)
    held.notify(
        "notifications/progress",
        {"progressToken": progress_token(held), "progress": 1, "total": 2, "message": "half"},
    )
    held.release("tools/call", AUDIO_RESULT)
    client.read()
    assert "result" in client.answer_to(calling)
    cancelled = client.send("tools/call", CALL)
    client.cancel(cancelled)
    assert len(held.cancelled) == 1, held.cancelled
    if not client.revision.is_modern:
        uri = uris.to_mcpx("demo", "demo://a")
        client.ask("resources/subscribe", {"uri": uri})
        assert core.subscriptions.resource_updated("demo", "demo://a") == 1
        client.read()
        client.ask("resources/unsubscribe", {"uri": uri})


def drive_http_pooled(
    client: HttpDriver, connector: FakeConnector, core: McpServer, clock: Clock
) -> None:
    """
    Progress on the POST's event stream, keep-alives, a cancellation, and (legacy) a
    subscription's update on the GET stream.
    """
    client.handshake()
    connector.holding.add("tools/call")
    request_id, started = client.start("tools/call", CALL, progressToken="p-1")
    held = upstream_of(connector)
    clock.advance(15.0)  # silence: the answer becomes an event stream with a comment
    held.notify(
        "notifications/progress",
        {"progressToken": progress_token(held), "progress": 1, "total": 2, "message": "half"},
    )
    held.release("tools/call", AUDIO_RESULT)
    _, frames = client.finish(started)
    assert [frame.get("method") for frame in frames] == ["notifications/progress", None], frames
    assert "result" in client.answer_to(request_id)
    cancelled_id, cancelled = client.start("tools/call", CALL)
    if client.revision.is_modern:
        cancelled.addErrback(lambda failure: failure.trap(ResponseNeverReceived))
        cancelled.cancel()  # the client closes the response: that is the cancellation
        client.stub.flush()
    else:
        client.cancel(cancelled_id)
        client.finish(cancelled)
    assert len(held.cancelled) == 1, held.cancelled
    if not client.revision.is_modern:
        stream = client.open_stream()
        uri = uris.to_mcpx("demo", "demo://a")
        client.ask("resources/subscribe", {"uri": uri})
        assert core.subscriptions.resource_updated("demo", "demo://a") == 1
        client.ask("resources/unsubscribe", {"uri": uri})
        client.end_session()
        _, pushed = client.finish(stream, " GET")
        assert [frame["method"] for frame in pushed] == ["notifications/resources/updated"]


def drive_http_extras(client: HttpDriver) -> None:
    """What only /mcp has: batches, refusals carrying the request's id."""
    if client.revision.is_modern:
        message = client.request("tools/list")
        response, _ = client.finish(client.post(message, {"Mcp-Method": "prompts/list"}))
        assert response.code == 400, response.code
        return
    if client.revision is Revision.V2025_03_26:
        batch = [client.request("tools/list"), client.request("ping")]
        _, frames = client.finish(client.post(batch))
        assert len(frames) == 2, frames
    message = client.request("ping")
    wrong = "2025-06-18" if client.revision is not Revision.V2025_06_18 else "2025-11-25"
    response, _ = client.finish(client.post(message, {"MCP-Protocol-Version": wrong}))
    assert response.code == 400, response.code
    message = client.request("ping")
    response, _ = client.finish(client.post(message, {"Mcp-Session-Id": "no-such-session"}))
    assert response.code == 404, response.code


def drive_stdio_extras(client: StdioDriver) -> None:
    """A 2025-03-26 batch on stdio."""
    if client.revision is Revision.V2025_03_26:
        batch = []
        for method in ("tools/list", "ping"):
            request_id = client.next_id()
            client.methods[request_id] = method
            batch.append({"jsonrpc": "2.0", "id": request_id, "method": method})
        client.write(batch)
        frames = client.read()
        assert len(frames) == 2, frames


class TransportSweepTests(SynchronousTestCase):
    def sweep_stdio(self, sweep: Sweep, revision: Revision) -> None:
        clock = Clock()
        _, core = gateway_daemon(clock)
        gateway = StdioDriver(sweep, revision, core, clock)
        drive_gateway(gateway)
        drive_stdio_extras(gateway)
        _, core, connector = pooled_daemon(clock)
        drive_stdio_pooled(StdioDriver(sweep, revision, core, clock), connector, core)

    def sweep_http(self, sweep: Sweep, revision: Revision) -> None:
        clock = Clock()
        daemon, _ = gateway_daemon(clock)
        gateway = HttpDriver(sweep, revision, daemon)
        drive_gateway(gateway)
        drive_http_extras(gateway)
        if not revision.is_modern:
            drive_gateway(HttpDriver(sweep, revision, daemon, session=False))
        daemon, core, connector = pooled_daemon(clock)
        drive_http_pooled(HttpDriver(sweep, revision, daemon), connector, core, clock)

    def test_every_frame_is_valid_on_every_revision(self) -> None:
        """
        Over stdio and over /mcp, on each legacy revision and on 2026-07-28, every frame
        mcpx sends (results, errors, notifications; JSON bodies, batch elements and
        event-stream payloads) is valid, strictly, in that revision's schema.
        """
        sweep = Sweep()
        for revision in Revision:
            self.sweep_stdio(sweep, revision)
            self.sweep_http(sweep, revision)
        self.assertEqual(sweep.problems, [])
        checked = sweep.definitions_checked()
        for definition in (
            "InitializeResult",
            "EmptyResult",
            "ListToolsResult",
            "CallToolResult",
            "GetPromptResult",
            "ReadResourceResult",
            "CompleteResult",
            "ProgressNotification",
            "ResourceUpdatedNotification",
            "JSONRPCError",
            "JSONRPCErrorResponse",
            "DiscoverResultResponse",
            "CallToolResultResponse",
        ):
            self.assertIn(definition, checked)
        for revision in Revision:
            seen = {definition for (rev, definition) in sweep.checked if rev is revision}
            self.assertIn("ListToolsResult", seen, revision)
            self.assertIn("ProgressNotification", seen, revision)
        # Only server/discover to a legacy client lacks a result definition to check.
        self.assertEqual({method for _, method in sweep.unshaped}, {"server/discover"})

    def test_unattributable_errors(self) -> None:
        """
        Input whose id cannot be read (a line or body that is not JSON; a batch where
        batches are not allowed) is answered with an error whose id is null, as JSON-RPC
        2.0 requires.  No MCP schema has a null id (2025-11-25 and 2026-07-28 leave the
        id out instead); apart from it, each such frame is valid on every revision.
        """
        unattributed: list[tuple[Revision, dict[str, Any]]] = []
        for revision in Revision:
            clock = Clock()
            daemon, core = gateway_daemon(clock)
            stdio = StdioDriver(Sweep(), revision, core, clock)
            stdio.handshake()
            stdio.protocol.dataReceived(b"not json\n")
            if revision is not Revision.V2025_03_26:
                stdio.protocol.dataReceived(b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]\n')
            http = HttpDriver(Sweep(), revision, daemon)
            http.handshake()
            headers = http.headers({"method": "ping", "params": {}})
            raw = http.read_raw(http.post_raw(b"not json", headers))
            for frame in [*stdio.read(), *raw]:
                unattributed.append((revision, frame))
        self.assertEqual(len(unattributed), 3 * len(Revision) - 1)
        sweep = Sweep()
        for revision, frame in unattributed:
            self.assertIsNone(frame["id"], frame)
            self.assertIn(frame["error"]["code"], (-32700, -32600), frame)
            sweep.frame({**frame, "id": 0}, revision, {}, "unattributed")
        self.assertEqual(sweep.problems, [])

    def test_a_bad_frame_is_caught(self) -> None:
        """
        The sweep is not blind: a CallToolResult carrying structuredContent is refused
        on 2025-03-26, an unknown field is refused on 2026-07-28, and a notification
        2024-11-05 lacks is flagged.
        """
        sweep = Sweep()
        methods = {1: "tools/call"}
        sweep.frame(
            {"jsonrpc": "2.0", "id": 1, "result": {"content": [], "structuredContent": {}}},
            Revision.V2025_03_26,
            methods,
            "injected",
        )
        self.assertEqual(len(sweep.problems), 1)
        self.assertIn("structuredContent", sweep.problems[0])
        sweep.frame(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "result": {"content": [], "resultType": "complete", "surprise": 1},
            },
            NEWEST,
            methods,
            "injected",
        )
        self.assertTrue(any("surprise" in line for line in sweep.problems[1:]), sweep.problems)
        before = len(sweep.problems)
        sweep.frame(
            {"jsonrpc": "2.0", "method": "notifications/elicitation/complete", "params": {}},
            Revision.V2024_11_05,
            {},
            "injected",
        )
        self.assertGreater(len(sweep.problems), before)

    def test_a_bad_frame_on_the_wire_fails_the_sweep(self) -> None:
        """
        A result spoiled before it reaches the transport (a field 2024-11-05 lacks added
        to every result) is reported by the sweep, on stdio and on /mcp.
        """
        for transport in ("stdio", "http"):
            sweep = Sweep()
            clock = Clock()
            daemon, core = gateway_daemon(clock)

            def spoiled(
                result: Mapping[str, Any], method: str, context: Any, spell: Any = core.spell
            ) -> Any:
                return {**spell(result, method, context), "title": "not in 2024-11-05"}

            self.patch(core, "spell", spoiled)
            client: Driver
            if transport == "stdio":
                client = StdioDriver(sweep, Revision.V2024_11_05, core, clock)
            else:
                client = HttpDriver(sweep, Revision.V2024_11_05, daemon)
            client.handshake()
            client.ask("tools/list")
            self.assertEqual(len(sweep.problems), 2, (transport, sweep.problems))
            self.assertTrue(all("title" in line for line in sweep.problems), sweep.problems)


# The upstream client


class RecordingChannel(MemoryChannel):
    """A memory channel that keeps every message mcpx's client writes to the server."""

    def __init__(self, server: FakeServer, *, notify_cancels: bool | None = None) -> None:
        super().__init__(server)
        self.written: list[tuple[Any, Revision | None]] = []
        #: The method of each request the server sent the client, by id.
        self.asked: dict[Any, str] = {}
        self._notify_cancels = notify_cancels

    def attach(self, peer: RpcPeer) -> None:
        channel = self

        class Inbound:
            """The client's peer, noting the server's requests on their way in."""

            def receive(self, data: bytes) -> None:
                message = json.loads(data)
                if isinstance(message, dict) and "method" in message and "id" in message:
                    channel.asked[message["id"]] = message["method"]
                peer.receive(data)

            def __getattr__(self, name: str) -> Any:
                return getattr(peer, name)

        self.peer = cast(RpcPeer, Inbound())

    @property
    def cancels_with_notification(self) -> bool:
        if self._notify_cancels is not None:
            return self._notify_cancels
        return not self.negotiated.modern

    def _record(self, data: bytes) -> None:
        self.written.append((json.loads(data), self.negotiated.revision))

    def send(self, data: bytes) -> None:
        self._record(data)
        super().send(data)

    def send_request(self, data: bytes, request: Request) -> None:
        self._record(data)
        super().send_request(data, request)


def handlers() -> UpstreamHandlers:
    async def roots(params: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"roots": [{"uri": "file:///work", "name": "work"}]}

    async def elicit(params: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"action": "accept", "content": {"name": "Ada"}}

    async def sample(params: Mapping[str, Any]) -> Mapping[str, Any]:
        return {
            "role": "assistant",
            "content": {"type": "text", "text": "hi"},
            "model": "fake",
        }

    return UpstreamHandlers(elicitation=elicit, sampling=sample, roots=roots)


def scripted_server(revision: Revision) -> FakeServer:
    """Answers every request the sweep makes; the first tools/list page has a cursor."""
    answers: dict[str, Any] = {
        "initialize": lambda p: initialize_result(
            revision.value, tools={}, resources={"subscribe": True}
        ),
        "server/discover": lambda p: discover_result(
            tools={"listChanged": True}, resources={"subscribe": True}
        ),
        "tools/list": lambda p: (
            {"tools": [{"name": "b", "inputSchema": {"type": "object"}}]}
            if p.get("cursor")
            else {"tools": [{"name": "a", "inputSchema": {"type": "object"}}], "nextCursor": "2"}
        ),
        "prompts/list": lambda p: {"prompts": []},
        "resources/list": lambda p: {"resources": []},
        "resources/templates/list": lambda p: {"resourceTemplates": []},
        "tools/call": lambda p: {"content": [{"type": "text", "text": "ok"}]},
        "prompts/get": lambda p: {"messages": []},
        "resources/read": lambda p: {"contents": []},
        "completion/complete": lambda p: {"completion": {"values": []}},
        "resources/subscribe": lambda p: {},
        "resources/unsubscribe": lambda p: {},
        "subscriptions/listen": lambda p: Deferred(),
    }
    return FakeServer(answers)


def drive_upstream(session: UpstreamSession, server: FakeServer) -> None:
    """Every request the client makes, a cancelled one, and its answers to questions."""

    def run(work: Any) -> Any:
        return result_of(Deferred.fromCoroutine(work))

    run(session.open())
    run(session.list_tools())
    run(session.list_prompts())
    run(session.list_resources())
    run(session.list_resource_templates())
    run(session.call_tool("a", {"x": 1}, meta={"progressToken": 5}))
    run(session.get_prompt("p", {"who": "Ada"}))
    run(session.read_resource("demo://a"))
    run(session.complete({"type": "ref/prompt", "name": "p"}, {"name": "who", "value": "A"}))
    run(session.subscribe("demo://a"))
    run(session.unsubscribe("demo://a"))
    if session.revision.is_modern:
        # A question as an input_required round: the call is sent again with the answer.
        rounds = iter(
            [
                {
                    "resultType": "input_required",
                    "inputRequests": {
                        "who": {
                            "method": "elicitation/create",
                            "params": {
                                "message": "name?",
                                "requestedSchema": {
                                    "type": "object",
                                    "properties": {"name": {"type": "string"}},
                                },
                            },
                        },
                        "where": {"method": "roots/list", "params": {}},
                    },
                    "requestState": "state-1",
                },
                {"content": [{"type": "text", "text": "Hello, Ada"}]},
            ]
        )
        server.answers["tools/call"] = lambda p: next(rounds)
        answered = run(session.call_tool("greet", {}))
        assert answered["content"][0]["text"] == "Hello, Ada", answered
        resumed = server.requests[-1].params
        assert isinstance(resumed, dict) and resumed["requestState"] == "state-1", resumed
    held: Deferred[Any] = Deferred()
    server.answers["tools/call"] = lambda p: held
    calling = Deferred.fromCoroutine(session.call_tool("a", {}))
    calling.addErrback(lambda failure: failure.trap(CancelledError))
    calling.cancel()
    if not session.revision.is_modern:
        for method, params in (
            ("ping", None),
            ("roots/list", {}),
            ("sampling/createMessage", {"messages": [], "maxTokens": 5}),
        ):
            result_of(server.ask(method, params))
        if session.revision >= Revision.V2025_06_18:
            result_of(
                server.ask(
                    "elicitation/create",
                    {"message": "name?", "requestedSchema": {"type": "object"}},
                )
            )


class UpstreamSweepTests(SynchronousTestCase):
    def check_written(self, channel: RecordingChannel, sweep: Sweep) -> None:
        """Each message validated against the revision the session had agreed when it
        was written; C{initialize}, before any, against the revision it offers."""
        for frame, revision in channel.written:
            sweep.frame(frame, revision or NEWEST_LEGACY, channel.asked, "upstream")

    def test_every_message_of_the_upstream_client_is_valid(self) -> None:
        """
        Against a server on each legacy revision and a 2026-07-28 one, every request,
        notification and answer mcpx's upstream client writes is valid, strictly, in
        the revision agreed on: initialize, the lists, calls, prompts, reads,
        completions, subscriptions (subscriptions/listen on 2026-07-28), a cancellation,
        and answers to ping, roots, sampling and elicitation.
        """
        sweep = Sweep()
        for revision in LEGACY_REVISIONS:
            server = scripted_server(revision)
            channel = RecordingChannel(server)
            session = LegacySession(name="up", channel=channel, clock=Clock(), handlers=handlers())
            drive_upstream(session, server)
            self.check_written(channel, sweep)
            self.assertEqual(channel.negotiated.revision, revision)
        for notify_cancels in (False, True):
            server = scripted_server(NEWEST)
            channel = RecordingChannel(server, notify_cancels=notify_cancels)
            modern = ModernSession(name="up", channel=channel, clock=Clock(), handlers=handlers())
            drive_upstream(modern, server)
            self.check_written(channel, sweep)
        self.assertEqual(sweep.problems, [])
        checked = sweep.definitions_checked()
        for definition in (
            "InitializeRequest",
            "InitializedNotification",
            "ListToolsRequest",
            "CallToolRequest",
            "GetPromptRequest",
            "ReadResourceRequest",
            "CompleteRequest",
            "SubscribeRequest",
            "UnsubscribeRequest",
            "CancelledNotification",
            "DiscoverRequest",
            "SubscriptionsListenRequest",
            "ListRootsResult",
            "CreateMessageResult",
            "ElicitResult",
            "EmptyResult",
        ):
            self.assertIn(definition, checked)

    def test_a_bad_request_is_caught(self) -> None:
        """A request carrying a field its revision lacks is reported."""
        sweep = Sweep()
        sweep.frame(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "a", "arguments": {}, "task": {"ttl": 5}},
            },
            Revision.V2025_06_18,
            {},
            "injected",
        )
        self.assertEqual(len(sweep.problems), 1, sweep.problems)
        self.assertIn("task", sweep.problems[0])
