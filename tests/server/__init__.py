"""
Tests of mcpx as an MCP server, independent of any transport.

L{Harness} puts an L{McpServer} behind an in-memory pair of L{RpcPeer}s: a client peer,
and a server peer whose requests go to C{server.handle(conn, request)}.  Every frame the
server side writes is kept in L{Harness.sent}, for the schema sweep.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from mcpx.pool.interface import PoolInterface
from mcpx.server.conn import Conn
from mcpx.server.dispatch import McpServer
from mcpx.settings.resolve import Settings
from mcpx.settings.servers import ServersConfig, StdioServer
from mcpx.spec.revision import UNDECLARED, Revision
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import Notification, Request, parse
from mcpx.wire.peer import RpcPeer
from tests.daemon.fake_pool import FakePool, FakeServer, default_settings, ops_host

PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"

#: A tool result using everything a CallToolResult can hold.
RICH_RESULT: Mapping[str, Any] = {
    "content": [
        {"type": "text", "text": "hello"},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
        {"type": "resource_link", "uri": "file:///a b.txt", "name": "a b"},
        {
            "type": "resource",
            "resource": {"uri": "/abs/doc", "mimeType": "text/plain", "text": "doc"},
        },
    ],
    "structuredContent": {"answer": 42},
    "isError": True,
    "_meta": {"example.com/trace": "t-1"},
}


def gateway_servers() -> dict[str, FakeServer]:
    """
    Two upstreams: C{files} (prompts, resources, templates, no completions) and
    C{search} (a tool that answers L{RICH_RESULT}, completions).
    """
    return {
        "files": FakeServer(
            "files",
            tools=[
                {
                    "name": "read_file",
                    "title": "Read a file",
                    "description": "Read a text file",
                    "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
                }
            ],
            prompts=[
                {
                    "name": "review",
                    "title": "Review",
                    "description": "Review a file",
                    "arguments": [{"name": "path", "required": True}],
                }
            ],
            resources=[
                {"uri": "file:///a b.txt", "name": "a", "mimeType": "text/plain"},
                {"uri": "/abs/doc", "name": "doc", "title": "The doc"},
            ],
            templates=[{"uriTemplate": "file:///{+path}{?rev}", "name": "file"}],
            capabilities={"tools": {}, "prompts": {}, "resources": {"subscribe": True}},
            answers={
                "prompts/get": {
                    "description": "Review a file",
                    "messages": [
                        {"role": "user", "content": {"type": "text", "text": "review it"}},
                        {
                            "role": "user",
                            "content": {
                                "type": "resource",
                                "resource": {"uri": "file:///a b.txt", "text": "a"},
                            },
                        },
                    ],
                },
                "resources/read": {
                    "contents": [{"uri": "file:///a b.txt", "mimeType": "text/plain", "text": "a"}]
                },
                "resources/subscribe": {},
                "resources/unsubscribe": {},
            },
        ),
        "search": FakeServer(
            "search",
            tools=[
                {
                    "name": "web_search",
                    "description": "Search the web",
                    "inputSchema": {"type": "object"},
                }
            ],
            prompts=[{"name": "query", "arguments": [{"name": "topic"}]}],
            capabilities={"tools": {}, "prompts": {}, "completions": {}},
            answers={
                "tools/call": dict(RICH_RESULT),
                "completion/complete": {
                    "completion": {"values": ["python", "pytest"], "total": 2, "hasMore": False}
                },
            },
        ),
    }


def servers_config(*names: str) -> ServersConfig:
    return ServersConfig({name: StdioServer(name, "python3", ()) for name in names}, "test")


def result_of(deferred: Deferred[Any]) -> Any:
    """The result of a fired Deferred; its failure raised."""
    results: list[Any] = []
    deferred.addBoth(results.append)
    if not results:
        raise AssertionError(f"{deferred!r} has not fired")
    if isinstance(results[0], Failure):
        results[0].raiseException()
    return results[0]


class Harness:
    """
    A client talking to an L{McpServer} over an in-memory pair of peers.

    @ivar sent: every frame the server side wrote, decoded, in order.
    @ivar methods: the method of each request the client sent, by id.
    @ivar notifications: the notifications the client received.
    """

    def __init__(
        self,
        pool: PoolInterface | None = None,
        *,
        transport: str = "stdio",
        can_push: bool = True,
        clock: Clock | None = None,
        default_revision: Revision | None = None,
        page_size: int | None = None,
        settings: Settings | None = None,
    ) -> None:
        """
        @param page_size: set on the server once made, whatever the settings say.
        @param settings: the daemon's settings (else the defaults).
        """
        self.clock = clock if clock is not None else Clock()
        self.pool: Any = pool if pool is not None else FakePool(gateway_servers())
        names = [status.name for status in self.pool.status()]
        self.host = ops_host(
            clock=self.clock,
            pid=4242,
            pool=self.pool,
            settings=settings if settings is not None else default_settings(),
            servers=servers_config(*names),
        )
        self.server = McpServer(self.host, self.clock)
        if page_size is not None:
            self.server.page_size = page_size
        self.sent: list[dict[str, Any]] = []
        self.methods: dict[Any, str] = {}
        self.notifications: list[Notification] = []
        self.client = RpcPeer(
            self._to_server,
            on_request=self._client_request,
            on_notification=self.notifications.append,
            name="client",
        )
        self.server_peer = RpcPeer(
            self._to_client,
            on_request=self._serve,
            on_notification=self._notified,
            negative_ids=True,
            name="server",
        )
        self.conn: Conn = self.server.open(
            Conn(
                transport,
                "host-pid-1",
                push=self.server_peer.notify if can_push else None,
                default_revision=default_revision or UNDECLARED,
            )
        )

    def _to_server(self, data: bytes) -> None:
        message = parse(data)
        if isinstance(message, Request):
            self.methods[message.id] = message.method
        self.server_peer.receive(data)

    def _to_client(self, data: bytes) -> None:
        frame = parse(data).to_json()
        assert isinstance(frame, dict)
        self.sent.append(frame)
        self.client.receive(data)

    def _client_request(self, request: Request) -> Any:
        raise RpcError.method_not_found(request.method)

    def _serve(self, request: Request) -> Deferred[Any]:
        return Deferred.fromCoroutine(self.server.handle(self.conn, request))

    def _notified(self, notification: Notification) -> None:
        self.server.notification(self.conn, notification)

    # Asking

    def request(self, method: str, params: dict[str, Any] | None = None) -> Deferred[Any]:
        return self.client.request(method, params)

    def result(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """The result of a request that is answered at once."""
        return result_of(self.request(method, params))

    def error(self, method: str, params: dict[str, Any] | None = None) -> RpcError:
        """The error a request that fails at once is answered with."""
        try:
            self.result(method, params)
        except RpcError as e:
            return e
        raise AssertionError(f"{method} did not fail")


def modern_meta(capabilities: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        PROTOCOL_VERSION: "2026-07-28",
        CLIENT_CAPABILITIES: capabilities if capabilities is not None else {},
        "io.modelcontextprotocol/clientInfo": {"name": "test-client", "version": "1"},
    }
    meta.update(extra)
    return meta


class Session:
    """
    A client on one revision: a legacy one after C{initialize}, or a 2026-07-28 one
    that adds its C{_meta} to every request.
    """

    def __init__(self, revision: Revision, harness: Harness | None = None) -> None:
        self.revision = revision
        self.harness = harness if harness is not None else Harness()
        self.initialize_result: Any = None
        if not revision.is_modern:
            self.initialize_result = self.harness.result(
                "initialize",
                {
                    "protocolVersion": revision.value,
                    "capabilities": {},
                    "clientInfo": {"name": "test-client", "version": "1"},
                },
            )
            self.harness.client.notify("notifications/initialized")

    def params(self, params: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
        given = dict(params or {})
        if self.revision.is_modern:
            given["_meta"] = {**modern_meta(), **given.get("_meta", {}), **meta}
        elif meta:
            given["_meta"] = {**given.get("_meta", {}), **meta}
        return given

    def request(self, method: str, params: dict[str, Any] | None = None, **meta: Any) -> Any:
        return self.harness.request(method, self.params(params, **meta))

    def result(self, method: str, params: dict[str, Any] | None = None, **meta: Any) -> Any:
        return self.harness.result(method, self.params(params, **meta))

    def error(self, method: str, params: dict[str, Any] | None = None, **meta: Any) -> RpcError:
        return self.harness.error(method, self.params(params, **meta))

    def call(self, tool: str, arguments: dict[str, Any] | None = None, **meta: Any) -> Any:
        return self.result("tools/call", {"name": tool, "arguments": arguments or {}}, **meta)
