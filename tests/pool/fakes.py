"""
A connector for testing the pool without processes: each start opens a real
L{LegacySession} over an in-memory channel to a scripted upstream, which the test can
hold, answer, make talk, or crash.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from mcpx.settings.servers import Server, ServersConfig, StdioServer
from mcpx.spec.revision import Era
from mcpx.upstream.channel import ChannelClosed, Negotiated
from mcpx.upstream.handlers import UpstreamHandlers
from mcpx.upstream.legacy_session import LegacySession
from mcpx.upstream.modern_session import ModernSession
from mcpx.upstream.session import UpstreamSession
from mcpx.wire.messages import Notification, Request, RequestId
from mcpx.wire.peer import RpcPeer

Answer = Callable[["FakeUpstream", Mapping[str, Any]], Any]

CAPABILITIES: Mapping[str, Any] = {
    "tools": {"listChanged": True},
    "prompts": {"listChanged": True},
    "resources": {"subscribe": True, "listChanged": True},
    "logging": {},
}


def text_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


def _echo(upstream: FakeUpstream, params: Mapping[str, Any]) -> Any:
    arguments = params.get("arguments") or {}
    return text_result(f"{upstream.serial}:{arguments.get('text', '')}")


def default_answers() -> dict[str, Answer]:
    return {
        "tools/list": lambda u, p: {"tools": [{"name": "echo", "inputSchema": {}}]},
        "prompts/list": lambda u, p: {"prompts": [{"name": "greet"}]},
        "resources/list": lambda u, p: {"resources": [{"uri": "demo://a", "name": "a"}]},
        "resources/templates/list": lambda u, p: {"resourceTemplates": []},
        "resources/subscribe": lambda u, p: {},
        "resources/unsubscribe": lambda u, p: {},
        "tools/call": _echo,
    }


class FakeUpstream:
    """
    One started instance of a scripted server.

    @ivar serial: which start of the connector made it (1, 2, ...), in every echo.
    @ivar held: Deferreds of requests whose method the test holds, in arrival order.
    """

    def __init__(
        self,
        serial: int,
        answers: Mapping[str, Answer],
        capabilities: Mapping[str, Any],
        holding: set[str],
    ) -> None:
        self.serial = serial
        self.answers = answers
        self.capabilities = capabilities
        self.holding = holding
        self.requests: list[Request] = []
        self.held: dict[str, list[Deferred[Any]]] = {}
        #: Ids of held requests the pool cancelled (with C{notifications/cancelled}).
        self.cancelled: list[RequestId] = []
        #: The notifications the pool sent it.
        self.notifications: list[Notification] = []
        #: The instructions its initialize result carries, if any.
        self.instructions: str | None = None
        self.peer = RpcPeer(
            self._send, on_request=self._request, on_notification=self.notifications.append
        )
        self.channel: FakeChannel | None = None

    def _send(self, data: bytes) -> None:
        channel = self.channel
        if channel is not None and channel.peer is not None and channel.lost is None:
            channel.peer.receive(data)

    def _request(self, request: Request) -> object:
        self.requests.append(request)
        params = request.params if isinstance(request.params, Mapping) else {}
        if request.method == "server/discover":
            return {
                "supportedVersions": ["2026-07-28"],
                "capabilities": dict(self.capabilities),
                "resultType": "complete",
                "_meta": {
                    "io.modelcontextprotocol/serverInfo": {
                        "name": "fake",
                        "version": str(self.serial),
                    }
                },
            }
        if request.method == "initialize":
            initialized: dict[str, Any] = {
                "protocolVersion": "2025-11-25",
                "capabilities": dict(self.capabilities),
                "serverInfo": {"name": "fake", "version": str(self.serial)},
            }
            if self.instructions is not None:
                initialized["instructions"] = self.instructions
            return initialized
        if request.method in self.holding:
            waiting: Deferred[Any] = Deferred(lambda _: self.cancelled.append(request.id))
            self.held.setdefault(request.method, []).append(waiting)
            return waiting
        answer = self.answers.get(request.method)
        if answer is None:
            from mcpx.wire.errors import RpcError

            raise RpcError.method_not_found(request.method)
        return answer(self, params)

    def methods(self) -> list[str]:
        return [r.method for r in self.requests]

    def last(self, method: str) -> Request:
        return [r for r in self.requests if r.method == method][-1]

    def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Send the pool a notification."""
        self.peer.notify(method, dict(params) if params is not None else None)

    def release(self, method: str, result: Any) -> None:
        """Answer the oldest held request of C{method} still waiting (not cancelled)."""
        waiting = [d for d in self.held[method] if not d.called]
        self.held[method].remove(waiting[0])
        waiting[0].callback(result)

    def crash(self, status: int = 3) -> None:
        assert self.channel is not None
        self.channel.lose(f'upstream "{self.channel.name}" exited with status {status}')


class FakeChannel:
    """An in-memory L{mcpx.upstream.channel.Channel} to a L{FakeUpstream}."""

    cancels_with_notification = True

    def __init__(self, name: str, upstream: FakeUpstream) -> None:
        self.name = name
        self.upstream = upstream
        upstream.channel = self
        self.negotiated = Negotiated()
        self.peer: RpcPeer | None = None
        self.lost: Failure | None = None
        self.closes = 0
        #: When set, L{close} waits for it (a process slow to be reaped).
        self.closing: Deferred[None] | None = None
        self._waiters: list[Deferred[Failure]] = []

    def attach(self, peer: RpcPeer) -> None:
        self.peer = peer

    def start(self) -> Deferred[None]:
        return succeed(None)

    def send(self, data: bytes) -> None:
        if self.lost is None:
            self.upstream.peer.receive(data)

    def send_request(self, data: bytes, request: Request) -> None:
        if self.lost is not None:
            assert self.peer is not None
            self.peer.fail_outgoing(request.id, ChannelClosed(str(self.lost.value)))
            return
        self.upstream.peer.receive(data)

    def abandon(self, request_id: RequestId) -> None:
        pass

    def initialized(self) -> None:
        pass

    def reset_session(self) -> None:
        pass

    def when_lost(self) -> Deferred[Failure]:
        if self.lost is not None:
            return fail(self.lost)
        waiter: Deferred[Failure] = Deferred()
        self._waiters.append(waiter)
        return waiter

    def lose(self, why: str) -> None:
        """The other end went away: as a stdio channel does when its process ends."""
        if self.lost is not None:
            return
        reason = ChannelClosed(why)
        self.lost = Failure(reason)
        if self.peer is not None:
            self.peer.close(reason)
        self.upstream.peer.close(reason)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.errback(self.lost)

    def close(self) -> Deferred[None]:
        self.closes += 1
        self.lose(f'upstream "{self.name}" exited with status 0 after being asked to close')
        if self.closing is not None:
            waiting: Deferred[None] = Deferred()
            self.closing.addBoth(lambda _: waiting.callback(None))
            return waiting
        return succeed(None)

    def describe(self) -> str:
        return f"fake {self.name}"


class FakeConnector:
    """
    Opens sessions to L{FakeUpstream}s, counting each start.

    @ivar gate: when set, every start waits for it to fire.
    @ivar failures: errors the next starts fail with, one each, before any handshake.
    @ivar holding: methods whose requests the upstreams hold until the test answers.
    """

    #: No start waits for an era probe: every fake's era is known.
    probe_timeout = 0.0

    def __init__(self, clock: IReactorTime) -> None:
        self.clock = clock
        self.answers: dict[str, Answer] = default_answers()
        self.capabilities: dict[str, Any] = dict(CAPABILITIES)
        self.holding: set[str] = set()
        self.gate: Deferred[None] | None = None
        self.failures: list[Exception] = []
        self.connects: list[tuple[str, Server, UpstreamHandlers]] = []
        self.upstreams: list[FakeUpstream] = []
        #: Whose credentials each connect was for (C{None}: the server's own).
        self.principals: list[str | None] = []
        #: The era each connect asked for (C{None}: the server's own, as found).
        self.eras: list[Era | None] = []
        #: The servers found modern (their own instances open L{ModernSession}s), and
        #: of those the ones that refuse a legacy-era session (era mirroring).
        self.modern: set[str] = set()
        self.modern_only: set[str] = set()
        self._serials = itertools.count(1)

    def era_known(self, server: Server) -> bool:
        return True

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
        self.principals.append(principal)
        self.eras.append(era)
        if self.gate is not None:
            await self.gate
        if self.failures:
            raise self.failures.pop(0)
        upstream = FakeUpstream(next(self._serials), self.answers, self.capabilities, self.holding)
        self.upstreams.append(upstream)
        channel = FakeChannel(name, upstream)
        session: UpstreamSession
        if name in self.modern and (era is None or name in self.modern_only):
            session = ModernSession(name=name, channel=channel, clock=self.clock, handlers=handlers)
        else:
            session = LegacySession(name=name, channel=channel, clock=self.clock, handlers=handlers)
        await channel.start()
        await session.open()
        return session

    def started(self, name: str) -> list[FakeUpstream]:
        """The upstreams started for server C{name}, oldest first."""
        return [u for u in self.upstreams if u.channel is not None and u.channel.name == name]


def stdio(name: str, *args: str, scope: str = "shared") -> StdioServer:
    from mcpx.settings.servers import Scope

    return StdioServer(name=name, command="fake-server", args=args, scope=Scope(scope))


def servers(*configured: StdioServer) -> ServersConfig:
    return ServersConfig({s.name: s for s in configured}, origin="test")


class Events:
    """A publish callable that keeps every event."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None, dict[str, Any]]] = []

    def __call__(self, kind: str, server: str | None = None, **data: Any) -> None:
        self.seen.append((kind, server, data))

    def kinds(self, server: str | None = None) -> list[str]:
        return [kind for kind, s, _ in self.seen if server is None or s == server]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [data for k, _, data in self.seen if k == kind]
