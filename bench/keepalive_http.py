"""
A minimal HTTP/1.1 keep-alive client on a unix socket, for the benchmarks.

It measures the daemon, not a client library: one persistent connection per caller in
flight, each request written as prepared bytes, and each answer parsed only as far as
needed to find where it ends (C{Content-Length} or chunked encoding).  One request at a
time per connection (no pipelining), as an HTTP client normally behaves.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, UNIXClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure


class HTTPFailed(Exception):
    """The connection closed, or the answer could not be read."""


def prepare(method: str, target: str, body: bytes | None = None) -> bytes:
    """The bytes of one request, built once and sent as often as needed."""
    lines = [f"{method} {target} HTTP/1.1", "Host: mcpx", "Accept: application/json"]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + (body or b"")


class KeepAliveClient(Protocol):
    """One persistent connection; L{send} writes a request and fires with (status, body)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._waiting: Deferred[tuple[int, bytes]] | None = None
        self._status = 0
        self._length: int | None = None
        self._chunked = False
        self._head_done = False
        self._body = bytearray()

    def send(self, request: bytes) -> Deferred[tuple[int, bytes]]:
        if self._waiting is not None:
            raise RuntimeError("one request at a time on a keep-alive connection")
        waiting: Deferred[tuple[int, bytes]] = Deferred()
        self._waiting = waiting
        assert self.transport is not None
        self.transport.write(request)
        return waiting

    def dataReceived(self, data: bytes) -> None:
        self._buffer += data
        try:
            self._parse()
        except HTTPFailed as e:
            self._fail(e)

    def _parse(self) -> None:
        if not self._head_done:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
            del self._buffer[: end + 4]
            self._status = int(head[0].split(" ", 2)[1])
            self._length = None
            self._chunked = False
            for line in head[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    self._length = int(value)
                elif name == "transfer-encoding" and "chunked" in value.lower():
                    self._chunked = True
            if self._length is None and not self._chunked:
                raise HTTPFailed("an answer without a length cannot end on a kept connection")
            self._head_done = True
        if self._chunked:
            self._parse_chunks()
        else:
            assert self._length is not None
            if len(self._buffer) >= self._length:
                body = bytes(self._buffer[: self._length])
                del self._buffer[: self._length]
                self._done(body)

    def _parse_chunks(self) -> None:
        while True:
            end = self._buffer.find(b"\r\n")
            if end < 0:
                return
            size = int(bytes(self._buffer[:end]).split(b";")[0], 16)
            if size == 0:
                # The last chunk: no trailers are expected, so an empty line ends it.
                if len(self._buffer) < end + 4:
                    return
                del self._buffer[: end + 4]
                body = bytes(self._body)
                self._body.clear()
                self._done(body)
                return
            if len(self._buffer) < end + 2 + size + 2:
                return
            self._body += self._buffer[end + 2 : end + 2 + size]
            del self._buffer[: end + 2 + size + 2]

    def _done(self, body: bytes) -> None:
        self._head_done = False
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.callback((self._status, body))

    def _fail(self, error: Exception) -> None:
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.errback(error)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._fail(HTTPFailed(f"the connection closed: {reason.getErrorMessage()}"))


async def connect(reactor: Any, socket_path: str) -> KeepAliveClient:
    """A new keep-alive connection to the unix socket C{socket_path}."""
    endpoint = UNIXClientEndpoint(reactor, socket_path)
    client: KeepAliveClient = await connectProtocol(endpoint, KeepAliveClient())
    return client


async def connect_tcp(reactor: Any, host: str, port: int) -> KeepAliveClient:
    """A new keep-alive connection to C{host}:C{port}, with C{TCP_NODELAY} as HTTP clients set."""
    endpoint = TCP4ClientEndpoint(reactor, host, port)
    client: KeepAliveClient = await connectProtocol(endpoint, KeepAliveClient())
    assert client.transport is not None
    client.transport.setTcpNoDelay(True)  # type: ignore[attr-defined]
    return client
