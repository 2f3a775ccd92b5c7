"""
Real HTTP servers on 127.0.0.1 for the HTTP channel tests.

A L{FakeHTTPServer} records every request it gets (method, path, headers, body) as a
L{Seen} and answers it with whatever its C{handler} returns; tests replace the handler
to script the server.  Streaming answers are written by hand: L{open_sse} starts an
event stream and leaves the request open, L{send_event} writes to it, L{end} finishes it
and L{drop} cuts the connection without finishing it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from attrs import define, field
from twisted.internet.defer import Deferred, DeferredList, TimeoutError
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from mcpx.wire.sse import encode_event

#: What a handler returns: a whole body, or C{NOT_DONE_YET} for a request it keeps open.
Reply = bytes | int
Handler = Callable[["Seen"], Reply]


@define(eq=False)
class Seen:
    """
    One request the fake server received.

    @ivar headers: the last value of each header, by lower-case name.
    @ivar dropped: fires if the client closed the connection before the answer ended.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    request: Request
    dropped: Deferred[None] = field(factory=Deferred)

    def json(self) -> Any:
        return json.loads(self.body)

    def _message(self) -> dict[str, Any]:
        try:
            body = self.json()
        except ValueError:
            return {}
        return body if isinstance(body, dict) else {}

    @property
    def message_id(self) -> Any:
        """The JSON-RPC id of the message POSTed, if it has one."""
        return self._message().get("id")

    @property
    def rpc_method(self) -> str | None:
        """The JSON-RPC method of the message POSTed, if it has one."""
        return self._message().get("method")


def reply_json(seen: Seen, body: Any, status: int = 200, **headers: str) -> bytes:
    """Answer with a JSON body."""
    request = seen.request
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"application/json")
    for name, value in headers.items():
        request.setHeader(name.replace("_", "-"), value)
    return json.dumps(body).encode()


def reply_status(seen: Seen, status: int, body: bytes = b"", content_type: str = "") -> bytes:
    """Answer with a bare status (and an optional body)."""
    seen.request.setResponseCode(status)
    if content_type:
        seen.request.setHeader(b"content-type", content_type.encode())
    return body


def result(seen: Seen, value: Any, **headers: str) -> bytes:
    """Answer the JSON-RPC request POSTed with C{value} as its result, as JSON."""
    answer = {"jsonrpc": "2.0", "id": seen.message_id, "result": value}
    return reply_json(seen, answer, 200, **headers)


def open_sse(seen: Seen, status: int = 200, **headers: str) -> int:
    """Start an event stream; the request stays open until L{end} or L{drop}."""
    request = seen.request
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"text/event-stream")
    for name, value in headers.items():
        request.setHeader(name.replace("_", "-"), value)
    # Sends the status and headers now, before any event.
    request.write(b"")
    return NOT_DONE_YET


def send_event(seen: Seen, data: Any = None, raw: bytes | None = None, **fields: Any) -> None:
    """Write one event: JSON C{data}, or C{raw} bytes as they are."""
    if raw is None:
        raw = encode_event(json.dumps(data), **fields)
    seen.request.write(raw)


def rpc_result(request_id: Any, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def notification(method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def hold(seen: Seen) -> int:
    """Answer nothing yet, not even the status, until L{release}."""
    return NOT_DONE_YET


def release(seen: Seen, status: int) -> None:
    """Answer a held request with a bare status."""
    seen.request.setResponseCode(status)
    seen.request.finish()


def end(seen: Seen) -> None:
    """Finish an open answer normally."""
    if not seen.request.finished and not seen.request._disconnected:
        seen.request.finish()


def drop(seen: Seen) -> None:
    """Cut the connection under an open answer without finishing it."""
    transport: Any = seen.request.channel.transport
    if transport is not None:
        transport.abortConnection()


def legacy_server(seen: Seen) -> Reply:
    """
    The default script: a small legacy server that gives session C{sess-1} in answer
    to C{initialize}, echoes the method of any other request as its result, accepts
    notifications and responses with 202, and has no GET stream.
    """
    if seen.method == "GET":
        return reply_status(seen, 405)
    if seen.method == "DELETE":
        return reply_status(seen, 200)
    body = seen.json()
    if "method" not in body or "id" not in body:
        return reply_status(seen, 202)
    if body["method"] == "initialize":
        return result(
            seen,
            {
                "protocolVersion": body["params"]["protocolVersion"],
                "capabilities": {},
                "serverInfo": {"name": "fake", "version": "1"},
            },
            mcp_session_id="sess-1",
        )
    return result(seen, {"echo": body["method"]})


class _Resource(Resource):
    isLeaf = True

    def __init__(self, server: FakeHTTPServer) -> None:
        super().__init__()
        self._server = server

    def render(self, request: Request) -> Reply:
        assert request.method is not None and request.uri is not None
        assert request.content is not None
        headers = {
            name.decode().lower(): values[-1].decode("utf-8", "replace")
            for name, values in request.requestHeaders.getAllRawHeaders()
        }
        seen = Seen(
            method=request.method.decode(),
            path=request.uri.decode(),
            headers=headers,
            body=request.content.read(),
            request=request,
        )

        def finished(outcome: object) -> None:
            if isinstance(outcome, Failure):
                seen.dropped.callback(None)

        request.notifyFinish().addBoth(finished)
        self._server._record(seen)
        reply = self._server.handler(seen)
        if reply == NOT_DONE_YET:
            self._server.open.append(seen)
        return reply


class _TrackingSite(Site):
    """A site that knows its open connections, so a test can wait until all are closed."""

    def __init__(self, resource: Resource, server: FakeHTTPServer) -> None:
        super().__init__(resource)
        self._server = server

    def buildProtocol(self, addr: Any) -> Any:
        protocol: Protocol = super().buildProtocol(addr)
        closed: Deferred[None] = Deferred()
        self._server.connections[protocol] = closed
        self._server.connection_count += 1
        lost = protocol.connectionLost

        def connection_lost(reason: Failure) -> None:
            lost(reason)
            del self._server.connections[protocol]
            closed.callback(None)

        protocol.connectionLost = connection_lost  # type: ignore[method-assign, assignment]
        return protocol


class FakeHTTPServer:
    """
    A scripted HTTP server on a free loopback port.

    @ivar seen: every request received, in order.
    @ivar open: the requests answered with C{NOT_DONE_YET}.
    @ivar connections: each open connection, with a Deferred fired when it closes.
    @ivar connection_count: how many connections were ever made.
    """

    def __init__(self, reactor: Any, handler: Handler = legacy_server) -> None:
        self._reactor = reactor
        self.handler = handler
        self.seen: list[Seen] = []
        self.open: list[Seen] = []
        self.connections: dict[Protocol, Deferred[None]] = {}
        self.connection_count = 0
        self._waiters: list[tuple[Callable[[Seen], bool], Deferred[Seen]]] = []
        self._port: IListeningPort | None = None
        self._paused = 0
        self._scheme = "http"

    def start(self, tls: Any = None) -> None:
        """Listen; over TLS with C{tls}, an OpenSSL context factory (C{CertificateOptions})."""
        site = _TrackingSite(_Resource(self), self)
        site.displayTracebacks = False
        self._scheme = "http"
        if tls is not None:
            self._scheme = "https"
            self._port = self._reactor.listenSSL(0, site, tls, interface="127.0.0.1")
            return
        self._port = self._reactor.listenTCP(0, site, interface="127.0.0.1")

    async def pause(self) -> int:
        """Stop accepting connections (connections made stay); returns the port."""
        assert self._port is not None
        port: int = self._port.getHost().port  # type: ignore[attr-defined]
        stopped = self._port.stopListening()
        if stopped is not None:
            await stopped
        self._paused = port
        return port

    def unpause(self) -> None:
        """Accept connections again, on the same port."""
        site = _TrackingSite(_Resource(self), self)
        site.displayTracebacks = False
        self._port = self._reactor.listenTCP(self._paused, site, interface="127.0.0.1")

    @property
    def base(self) -> str:
        assert self._port is not None
        address: Any = self._port.getHost()
        return f"{self._scheme}://127.0.0.1:{address.port}"

    @property
    def url(self) -> str:
        """The MCP endpoint."""
        return self.base + "/mcp"

    def _record(self, seen: Seen) -> None:
        self.seen.append(seen)
        waiting = []
        for test, waiter in self._waiters:
            if test(seen):
                waiter.callback(seen)
            else:
                waiting.append((test, waiter))
        self._waiters = waiting

    def wait_for(
        self,
        method: str | None = None,
        rpc_method: str | None = None,
        since: int = 0,
        where: Callable[[Seen], bool] | None = None,
    ) -> Deferred[Seen]:
        """
        The first request (from index C{since}) with this HTTP method and JSON-RPC
        method, now or when it arrives.
        """

        def test(seen: Seen) -> bool:
            if method is not None and seen.method != method:
                return False
            if rpc_method is not None and (seen.method != "POST" or seen.rpc_method != rpc_method):
                return False
            return where is None or where(seen)

        for seen in self.seen[since:]:
            if test(seen):
                done: Deferred[Seen] = Deferred()
                done.callback(seen)
                return done
        waiter: Deferred[Seen] = Deferred()
        self._waiters.append((test, waiter))
        return waiter

    def requests(self, method: str | None = None, rpc_method: str | None = None) -> list[Seen]:
        return [
            s
            for s in self.seen
            if (method is None or s.method == method)
            and (rpc_method is None or (s.method == "POST" and s.rpc_method == rpc_method))
        ]

    async def stop(self, grace: float = 2.0) -> None:
        """
        Stop listening, end open answers, and wait until the client has closed every
        connection; fail if it leaves one open longer than C{grace} seconds.
        """
        for seen in self.open:
            end(seen)
        if self._port is not None:
            stopped = self._port.stopListening()
            if stopped is not None:
                await stopped
        if not self.connections:
            return
        waiting = DeferredList(list(self.connections.values()), consumeErrors=True)
        # A gate of its own: timing out a DeferredList would cancel what it waits on.
        gate: Deferred[None] = Deferred()
        waiting.addCallback(lambda _: None if gate.called else gate.callback(None))
        gate.addTimeout(grace, self._reactor)
        try:
            await gate
        except TimeoutError:
            left = list(self.connections)
            for protocol in left:
                transport: Any = protocol.transport
                transport.abortConnection()
            await DeferredList(list(self.connections.values()), consumeErrors=True)
            raise AssertionError(f"the client left {len(left)} connection(s) open") from None


def headers_of(seen: Seen, *names: str) -> Mapping[str, str | None]:
    """The named headers of a request (C{None} where absent), for assertions."""
    return {name: seen.headers.get(name.lower()) for name in names}
