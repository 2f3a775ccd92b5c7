"""
A pool for testing the API without upstream servers: scripted catalogues and answers,
calls the test can hold and finish, and every request recorded.

It has the methods of L{mcpx.pool.Pool} that the operations use, raises the pool's own
errors, and reports the pool's own L{ServerStatus} and L{ReloadReport}.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from attrs import define, field
from treq.testing import StubTreq
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from mcpx.call import Call
from mcpx.daemon.http import DaemonHTTP
from mcpx.ops.host import OpHost
from mcpx.ops.reloading import Reloads
from mcpx.pool.errors import ServerUnavailable, UnknownServer
from mcpx.pool.status import ReloadReport, ServerState, ServerStatus
from mcpx.settings.config import ConfigFile
from mcpx.settings.resolve import Settings, resolve
from mcpx.settings.servers import ServersConfig, StdioServer
from mcpx.spec.revision import Revision
from mcpx.upstream.records import ServerDeclaration


def ops_host(clock: Any, pid: int = 4242, **parts: Any) -> OpHost:
    """An ops host made of C{parts} (L{OpHost}'s fields), the default settings unless given."""
    parts.setdefault("settings", default_settings())
    return OpHost(clock=clock, pid=pid, **parts)


def daemon_http(
    clock: Any, pid: int = 4242, *, mcp: Any = None, metrics: Any = None, **parts: Any
) -> DaemonHTTP:
    """The daemon's HTTP app over an L{ops_host} of C{parts}."""
    return DaemonHTTP(ops_host(clock, pid, **parts), mcp, metrics=metrics)


def swap_part(host: OpHost, **changes: Any) -> None:
    """Give C{host} other parts: C{changes}, by field."""
    for name, part in changes.items():
        setattr(host, name, part)


def text_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


@define
class FakeServer:
    """
    One scripted server.

    @ivar capabilities: what it declares (C{completions} decides where completion goes).
    @ivar answers: the result (or exception) of a request, by method.
    @ivar failure: raised by everything that reaches the server, when set.
    """

    name: str
    tools: list[dict[str, Any]] = field(factory=list)
    prompts: list[dict[str, Any]] = field(factory=list)
    resources: list[dict[str, Any]] = field(factory=list)
    templates: list[dict[str, Any]] = field(factory=list)
    capabilities: dict[str, Any] = field(factory=lambda: {"tools": {}})
    answers: dict[str, Any] = field(factory=dict)
    failure: Exception | None = None
    state: ServerState = ServerState.READY
    #: Given, its listings wait for it (a server hung at start-up); C{cached} says whether
    #: an instance of it still has its catalogue cached meanwhile.
    hung: Deferred[None] | None = None
    cached: bool = True


@define
class FakeSession:
    declaration: ServerDeclaration | None


@define
class HeldCall:
    """A tool call the test holds: it answers when the test fires C{result}."""

    server: str
    tool: str
    arguments: Mapping[str, Any]
    client: str
    timeout: float | None
    on_progress: Callable[[dict[str, Any]], None] | None
    result: Deferred[dict[str, Any]]


@define
class FakePool:
    """
    Scripted servers by name.

    @ivar hold: when true, tool calls wait in L{held} until the test fires them.
    @ivar calls: every tool call, as C{(server, tool, arguments, client, timeout)}.
    @ivar requests: every request, as C{(server, method, params, client)}.
    @ivar listed: every catalogue asked for, as C{(kind, server, client)}.
    """

    servers: dict[str, FakeServer]
    hold: bool = False
    held: list[HeldCall] = field(factory=list)
    calls: list[tuple[str, str, Mapping[str, Any], str, float | None]] = field(factory=list)
    requests: list[tuple[str, str, Mapping[str, Any], str]] = field(factory=list)
    #: The caller each call and request was made for, in order.
    callers: list[Call | None] = field(factory=list)
    restarted: list[str] = field(factory=list)
    reloaded: list[ServersConfig] = field(factory=list)
    retuned: list[Settings] = field(factory=list)
    sessions: list[tuple[str, str]] = field(factory=list)
    listed: list[tuple[str, str, str]] = field(factory=list)

    def _server(self, name: str) -> FakeServer:
        server = self.servers.get(name)
        if server is None:
            raise UnknownServer(name, self.servers)
        if server.failure is not None:
            raise server.failure
        return server

    async def session(self, server: str, client: str = "") -> FakeSession:
        found = self._server(server)
        self.sessions.append((server, client))
        return FakeSession(
            ServerDeclaration(Revision.V2025_06_18, found.capabilities, {"name": server})
        )

    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        client: str = "",
        timeout: float | None = None,
        meta: Mapping[str, Any] | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        call: Call | None = None,
    ) -> dict[str, Any]:
        found = self._server(server)
        self.callers.append(call)
        arguments = dict(arguments or {})
        self.calls.append((server, tool, arguments, client, timeout))
        if self.hold:
            held = HeldCall(server, tool, arguments, client, timeout, on_progress, Deferred())
            self.held.append(held)
            return await held.result
        answer = found.answers.get("tools/call")
        if isinstance(answer, Exception):
            raise answer
        if answer is not None:
            return dict(answer)
        return text_result(f"{tool}:{sorted(arguments.items())}")

    async def request(
        self,
        server: str,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        client: str = "",
        timeout: float | None = None,
        call: Call | None = None,
    ) -> dict[str, Any]:
        found = self._server(server)
        self.callers.append(call)
        self.requests.append((server, method, dict(params or {}), client))
        answer = found.answers.get(method)
        if isinstance(answer, Exception):
            raise answer
        if answer is None:
            raise AssertionError(f"the test scripted no answer to {method} on {server}")
        return dict(answer)

    async def tools(self, server: str, *, client: str = "") -> list[dict[str, Any]]:
        self.listed.append(("tools", server, client))
        await self._unhung(server)
        return list(self._server(server).tools)

    async def prompts(self, server: str, *, client: str = "") -> list[dict[str, Any]]:
        self.listed.append(("prompts", server, client))
        await self._unhung(server)
        return list(self._server(server).prompts)

    async def resources(self, server: str, *, client: str = "") -> list[dict[str, Any]]:
        self.listed.append(("resources", server, client))
        await self._unhung(server)
        return list(self._server(server).resources)

    async def templates(self, server: str, *, client: str = "") -> list[dict[str, Any]]:
        self.listed.append(("templates", server, client))
        await self._unhung(server)
        return list(self._server(server).templates)

    async def _unhung(self, server: str) -> None:
        found = self.servers.get(server)
        if found is not None and found.hung is not None:
            waiting: Deferred[None] = Deferred()

            def unhung(result: object) -> object:
                waiting.callback(None)
                return result

            found.hung.addBoth(unhung)
            await waiting

    def cached_catalogue(
        self, server: str, kind: str, *, client: str = ""
    ) -> list[dict[str, Any]] | None:
        """A server that answers has its lists cached; one that fails or is unknown not."""
        found = self.servers.get(server)
        if found is None or found.failure is not None or not found.cached:
            return None
        self.listed.append((kind, server, client))
        items: list[dict[str, Any]] = getattr(found, kind)
        return list(items)

    def status(self) -> list[ServerStatus]:
        return [
            ServerStatus(
                name=name,
                state=server.state,
                transport="stdio",
                scope="shared",
                instances=1 if server.state is ServerState.READY else 0,
                era="legacy" if server.state is ServerState.READY else None,
                revision="2025-06-18" if server.state is ServerState.READY else None,
                last_error=str(server.failure) if server.failure is not None else None,
                retry_in=getattr(server.failure, "retry_in", None),
            )
            for name, server in self.servers.items()
        ]

    async def restart(self, server: str, *, principal: str | None = None) -> None:
        if server not in self.servers:
            raise UnknownServer(server, self.servers)
        self.restarted.append(server)
        self.servers[server].failure = None
        self.servers[server].state = ServerState.CONFIGURED

    def retune(self, settings: Settings) -> None:
        self.retuned.append(settings)

    def probe_wait(self, server: str) -> float:
        return 0.0

    def running_declaration(self, server: str, client: str = "") -> ServerDeclaration | None:
        return None

    def notify(self, server: str, client: str, method: str) -> int:
        return 0

    async def reload(self, servers: ServersConfig) -> ReloadReport:
        self.reloaded.append(servers)
        old = set(self.servers)
        report = ReloadReport(
            removed=tuple(name for name in self.servers if name not in servers),
            added=tuple(name for name in servers if name not in old),
            unchanged=tuple(name for name in servers if name in old),
        )
        self.servers = {
            name: self.servers.get(name) or FakeServer(name, state=ServerState.CONFIGURED)
            for name in servers
        }
        return report


def unavailable(name: str, retry_in: float | None = 4.0) -> ServerUnavailable:
    return ServerUnavailable(name, "it exited with status 1 while starting", retry_in)


def default_servers() -> dict[str, FakeServer]:
    """
    Two servers: C{files}, which declares no completions, and C{search}, which does.
    """
    return {
        "files": FakeServer(
            "files",
            tools=[
                {
                    "name": "read_file",
                    "title": "Read a file",
                    "description": "Read a text file from the disk",
                    "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
                },
                {
                    "name": "write_file",
                    "description": "Write a text file",
                    "inputSchema": {"type": "object"},
                },
            ],
            prompts=[{"name": "review", "arguments": [{"name": "path"}, {"name": "style"}]}],
            templates=[{"uriTemplate": "file:///{+path}{?rev}", "name": "file"}],
            capabilities={"tools": {}, "prompts": {}, "resources": {}},
            answers={
                "prompts/get": {
                    "description": "Review a file",
                    "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                },
                "resources/read": {
                    "contents": [{"uri": "file:///a.txt", "mimeType": "text/plain", "text": "a"}]
                },
            },
        ),
        "search": FakeServer(
            "search",
            tools=[
                {
                    "name": "web_search",
                    "description": "Search the web for pages",
                    "annotations": {"title": "Web search"},
                    "inputSchema": {"type": "object"},
                }
            ],
            capabilities={"tools": {}, "completions": {}},
            answers={
                "completion/complete": {
                    "completion": {"values": ["python", "pytest"], "total": 2, "hasMore": False}
                }
            },
        ),
    }


def servers_config(*names: str) -> ServersConfig:
    return ServersConfig(
        {name: StdioServer(name, "python3", ("-m", name)) for name in names},
        "/home/u/.config/mcpx/config.json",
        "/home/u/.config/mcpx/config.json",
    )


def default_settings(**flags: str) -> Settings:
    return resolve(config=None, environ={}, flags=flags)


@define
class Answer:
    """An HTTP answer, read in full."""

    code: int
    headers: Any
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        values = self.headers.getRawHeaders(name.encode("ascii"))
        return None if not values else str(values[0], "utf-8")


def result_of(deferred: Deferred[Any]) -> Any:
    """The result of a Deferred that has fired; fails loudly if it has not."""
    results: list[Any] = []
    deferred.addBoth(results.append)
    if not results:
        raise AssertionError(f"{deferred!r} has not fired")
    if isinstance(results[0], Failure):
        results[0].raiseException()
    return results[0]


class Harness:
    """
    The daemon's HTTP app over a L{FakePool}, driven in memory through C{StubTreq}.

    @ivar read: what C{POST /v1/reload} reads as the new configuration.
    """

    def __init__(
        self,
        pool: FakePool | None = None,
        *,
        settings: Settings | None = None,
        with_pool: bool = True,
    ) -> None:
        self.clock = Clock()
        self.clock.advance(1000)
        self.pool = pool if pool is not None else FakePool(default_servers())
        self.read: ServersConfig = servers_config("files", "search")
        #: The settings the file read by a reload gives, by dotted name.
        self.file_settings: dict[str, object] = {}
        self.http = daemon_http(
            self.clock,
            4242,
            pool=self.pool if with_pool else None,
            settings=settings if settings is not None else default_settings(),
            servers=servers_config(*self.pool.servers),
            state_dir="/run/mcpx",
            reloads=Reloads(self.clock, read=self.read_config),
        )
        # StubTreq grows its request methods at run time, so mypy cannot see them.
        self.stub: Any = StubTreq(self.http.resource())

    def read_config(self) -> ConfigFile:
        """What C{POST /v1/reload} reads: L{read} and L{file_settings} as one file."""
        return ConfigFile("config.json", "config.json", dict(self.file_settings), self.read)

    def start(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Deferred[Any]:
        """Send a request; the Deferred fires with the response once it has been answered."""
        data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
        sent = {"content-type": "application/json", **(headers or {})}
        started: Deferred[Any] = self.stub.request(
            method, "http://mcpx" + path, data=data, headers=sent
        )
        return started

    def finish(self, started: Deferred[Any]) -> Answer:
        """Let the app answer, and read the answer in full."""
        self.stub.flush()
        response = result_of(started)
        body = result_of(response.content())
        return Answer(response.code, response.headers, body)

    def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        return self.finish(self.start(method, path, body, raw=raw, headers=headers))

    def get(self, path: str, headers: Mapping[str, str] | None = None) -> Answer:
        return self.send("GET", path, headers=headers)

    def post(self, path: str, body: Any = None, headers: Mapping[str, str] | None = None) -> Answer:
        return self.send("POST", path, body, headers=headers)
