"""
An in-memory channel and a scriptable fake server, for testing sessions without
I/O.  The fake is deliberately dumb: each test says what it answers.  (Sessions are
proven against real servers written by others in the integration tests.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.python.failure import Failure

from mcpx.upstream.channel import ChannelClosed, Negotiated, SessionExpired, TransportRefused
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import Notification, Request, RequestId
from mcpx.wire.peer import RpcPeer

Answer = Callable[[Mapping[str, Any]], Any]


class FakeServer:
    """Answers requests from a table of method → function(params); records what it got."""

    def __init__(self, answers: Mapping[str, Answer] | None = None) -> None:
        self.answers: dict[str, Answer] = dict(answers or {})
        self.requests: list[Request] = []
        self.notifications: list[Notification] = []
        self.client_answers: list[Any] = []
        self.pending: dict[RequestId, Deferred[Any]] = {}
        self.peer = RpcPeer(self._send, on_request=self._request, on_notification=self._notify)
        self.channel: MemoryChannel | None = None

    def _send(self, data: bytes) -> None:
        assert self.channel is not None
        if self.channel.peer is not None:
            self.channel.peer.receive(data)

    def _request(self, request: Request) -> object:
        self.requests.append(request)
        answer = self.answers.get(request.method)
        if answer is None:
            raise RpcError.method_not_found(request.method)
        params = request.params if isinstance(request.params, Mapping) else {}
        return answer(params)

    def _notify(self, notification: Notification) -> None:
        self.notifications.append(notification)

    def methods(self) -> list[str]:
        return [r.method for r in self.requests]

    def ask(self, method: str, params: Mapping[str, Any] | None = None) -> Deferred[Any]:
        """Send the client a request (a legacy server's question)."""
        return self.peer.request(method, dict(params) if params is not None else None)

    def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        self.peer.notify(method, dict(params) if params is not None else None)


class MemoryChannel:
    """A L{mcpx.upstream.channel.Channel} wired straight to a L{FakeServer}."""

    def __init__(
        self,
        server: FakeServer,
        refuse_requests_with: int | None = None,
        label: str = "memory",
    ) -> None:
        self.server = server
        server.channel = self
        self.peer: RpcPeer | None = None
        self.negotiated = Negotiated()
        self.refuse_requests_with = refuse_requests_with
        self.label = label
        self.started = False
        self.closed = False
        self.initialized_calls = 0
        self.resets = 0
        self.abandoned: list[RequestId] = []
        #: Methods whose next request fails as if the HTTP session had expired (404).
        self.expire_next: set[str] = set()
        self.sent_negotiated: list[tuple[str, bool, Any]] = []
        self._lost: list[Deferred[Failure]] = []

    @property
    def cancels_with_notification(self) -> bool:
        return not self.negotiated.modern

    def attach(self, peer: RpcPeer) -> None:
        self.peer = peer

    def start(self) -> Deferred[None]:
        self.started = True
        return succeed(None)

    def send(self, data: bytes) -> None:
        if self.closed:
            raise ChannelClosed("closed")
        self.server.peer.receive(data)

    def send_request(self, data: bytes, request: Request) -> None:
        if self.closed:
            raise ChannelClosed("closed")
        revision = self.negotiated.revision
        self.sent_negotiated.append(
            (request.method, self.negotiated.modern, revision.value if revision else None)
        )
        if request.method in self.expire_next:
            self.expire_next.discard(request.method)
            assert self.peer is not None
            self.peer.fail_outgoing(request.id, SessionExpired("HTTP 404"))
            return
        if self.refuse_requests_with is not None:
            assert self.peer is not None
            self.peer.fail_outgoing(request.id, TransportRefused(self.refuse_requests_with))
            return
        self.server.peer.receive(data)

    def abandon(self, request_id: RequestId) -> None:
        self.abandoned.append(request_id)

    def initialized(self) -> None:
        self.initialized_calls += 1

    def reset_session(self) -> None:
        self.resets += 1

    def when_lost(self) -> Deferred[Failure]:
        d: Deferred[Failure] = Deferred()
        self._lost.append(d)
        return d

    def close(self) -> Deferred[None]:
        self.closed = True
        return succeed(None)

    def describe(self) -> str:
        return self.label


def params_of(request: Request) -> dict[str, Any]:
    """A recorded request's params as an object (the fake only ever gets objects)."""
    assert isinstance(request.params, dict)
    return request.params


def discover_result(**capabilities: Any) -> dict[str, Any]:
    return {
        "supportedVersions": ["2026-07-28"],
        "capabilities": capabilities,
        "instructions": "be nice",
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "public",
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "fake", "version": "1"}},
    }


def initialize_result(version: str = "2025-11-25", **capabilities: Any) -> dict[str, Any]:
    return {
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": {"name": "fake-legacy", "version": "1"},
    }
