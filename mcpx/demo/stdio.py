# -*- test-case-name: tests.demo.test_demo -*-
"""
The demo on a byte stream (newline-delimited JSON-RPC), and L{run}, which puts it on
the process's own stdin and stdout.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IHalfCloseableProtocol, IReactorFDSet, IReactorTime
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from mcpx.demo.server import ASK_TIMEOUT, SERVER_NAME, DemoServer
from mcpx.demo.session import DemoSession
from mcpx.once import Once
from mcpx.spec.matrix import (
    batch_allowed,
)
from mcpx.spec.revision import (
    Revision,
)
from mcpx.wire.framing import DEFAULT_MAX_MESSAGE_SIZE, NDJSONProtocol
from mcpx.wire.peer import RpcPeer

log = Logger()


@implementer(IHalfCloseableProtocol)
class DemoProtocol(NDJSONProtocol):
    """
    The demo on a byte stream: newline-delimited JSON-RPC in and out.

    When the client closes its side (stdin reaches end of file), everything already
    answered is flushed and the connection closes; L{when_closed} waiters then fire.

    @ivar session: the connection's L{DemoSession}, from C{connectionMade} on.
    @ivar peer: the connection's L{RpcPeer}, from C{connectionMade} on.
    """

    def __init__(self, server: DemoServer, max_length: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        super().__init__(max_length)
        self._server = server
        self._closed: Once[None] = Once()
        self.session: DemoSession | None = None
        self.peer: RpcPeer | None = None

    def connectionMade(self) -> None:
        self.session = DemoSession(
            self._server,
            on_negotiated=self._negotiated,
            notify=self._notify,
            request=self._request,
        )
        self.peer = RpcPeer(
            self.send_message,
            on_request=self.session.answer,
            on_notification=self.session.notice,
            negative_ids=True,
            clock=self._server.clock,
            name="client",
        )

    def _notify(self, method: str, params: dict[str, Any]) -> None:
        assert self.peer is not None
        self.peer.notify(method, params)

    def _request(self, method: str, params: dict[str, Any]) -> Deferred[Any]:
        assert self.peer is not None
        return self.peer.request(method, params, timeout=ASK_TIMEOUT)

    def _negotiated(self, revision: Revision) -> None:
        assert self.peer is not None
        self.peer.allow_batches = batch_allowed(revision)

    def message_received(self, line: bytes) -> None:
        assert self.peer is not None
        self.peer.receive(line)

    def message_too_large(self, limit: int) -> None:
        assert self.peer is not None
        self.peer.reject_oversized(limit)

    def readConnectionLost(self) -> None:
        # The client will send nothing more; what was answered still goes out first.
        assert self.transport is not None
        self.transport.loseConnection()

    def writeConnectionLost(self) -> None:
        # Nobody can read an answer any more, so the connection is over.  StandardIO,
        # its writer gone, would only stop reading, and a stdin paused while answers
        # backed up never reports its end: the process would wait forever.
        assert self.transport is not None
        self.transport.loseConnection()
        self.connectionLost(Failure(ConnectionDone("stdout closed")))

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._closed.done:
            return
        if self.peer is not None:
            self.peer.close(reason)
        self._closed.fire(None)

    def when_closed(self) -> Deferred[None]:
        """A new Deferred that fires once the connection has closed."""
        return self._closed.wait()


class IReactorStdio(IReactorFDSet, IReactorTime):
    """What the demo on stdio needs of its reactor: to watch descriptors, and to wait."""


def run(reactor: IReactorStdio) -> Deferred[None]:
    """
    Serve the demo on this process's stdin and stdout until stdin closes.

    For C{twisted.internet.task.react}.  Only protocol bytes go to stdout; the caller
    decides where logs go.

    @param reactor: the running reactor (file descriptors and time).
    """
    # Only this entry point puts the demo on the process's own stdin and stdout.
    from twisted.internet.stdio import StandardIO

    server = DemoServer(reactor)
    protocol = DemoProtocol(server)
    # StandardIO's constructor has no return annotation, which strict mode calls untyped.
    StandardIO(protocol, reactor=reactor)  # type: ignore[no-untyped-call]
    log.info("{name} {version} serving MCP on stdio", name=SERVER_NAME, version=server.version)
    return protocol.when_closed()
