# -*- test-case-name: tests.server.test_mcp_socket -*-
"""
MCP over a byte stream: the daemon's side of C{mcpx serve}.

An MCP host starts its servers as processes and talks to them over stdin and stdout.
C{mcpx serve} is such a process, but a thin one: it copies bytes between its pipes and a
unix socket of the daemon, C{<state>/mcpx-mcp.sock}, and the daemon runs the one MCP
server implementation (L{mcpx.server.dispatch.McpServer}) for the stream.

The stream
==========

  - The first line is the bridge's hello, a JSON object C{{"mcpx": "serve", "pid": ...,
    "cwd": ..., "version": ...}}: C{pid} is the host process (the bridge's parent), and
    the connection's identity is C{stdio:<pid>}.  A first line that is not a hello is read
    as the first MCP message of an anonymous connection (C{stdio:socket-<n>}), so a client
    speaking straight to the socket is still served.  A hello may carry
    C{"passthrough": [names]} (C{mcpx serve --passthrough}): the servers offered under
    their own names on this connection instead of the daemon's C{mcp.passthrough}.
  - A bridge whose stdin and stdout are pipes or sockets hands them over instead of
    copying them: its hello says C{"mcpx": "serve-pipes"} and carries the two descriptors
    (C{SCM_RIGHTS}).  The daemon answers L{PIPES_TAKEN} and from then on reads and writes
    the host's pipes itself (L{HostPipes}), so no process stands between the host and
    the daemon; the socket only tells the bridge how the session ended (L{PIPES_ENDED}
    when the host's input ended, else nothing) when the daemon closes it.  A daemon that
    cannot take them closes the connection, and one older than this answers the line as
    a bad message: either way the bridge connects again with the plain hello and copies.
  - Then newline-delimited JSON-RPC both ways through an L{RpcPeer}.  mcpx's own request
    ids are negative.  Requests run concurrently; C{notifications/cancelled} cancels the
    request it names, and the cancellation reaches the upstream call.  Batches are read
    only on a connection that agreed on 2025-03-26.
  - The bridge half-closes the socket when the host closes stdin (or the daemon reads the
    end of the host's stdin itself).  Requests still running then get
    C{transport.stdioDrain} seconds to answer; after that (or as soon as none is left) the
    daemon closes the connection, which ends the bridge.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Final, Protocol, cast

from twisted.internet.defer import Deferred, fail
from twisted.internet.endpoints import quoteStringArgument
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import (
    IAddress,
    IConsumer,
    IDelayedCall,
    IFileDescriptorReceiver,
    IHalfCloseableProtocol,
    IPushProducer,
    IReactorFDSet,
    IReactorTime,
    ITransport,
)
from twisted.internet.process import ProcessReader, ProcessWriter
from twisted.internet.protocol import Factory, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from mcpx.call import Call
from mcpx.ops.shutdown import Shutdown, shutting_down_error
from mcpx.server.conn import STDIO, Conn, Reply
from mcpx.server.flow import Flow
from mcpx.spec.matrix import batch_allowed
from mcpx.wire.errors import RpcError
from mcpx.wire.framing import DEFAULT_MAX_MESSAGE_SIZE, NDJSONProtocol
from mcpx.wire.handed import handable
from mcpx.wire.messages import ErrorResponse, Notification, Request, RequestId, encode
from mcpx.wire.peer import ConnectionClosed, RpcPeer
from mcpx.wire.prompt_write import write_now

#: The socket C{mcpx serve} connects to, in the state directory.
#: C{mcpx.cli.serve.MCP_SOCKET_NAME} says the same without importing Twisted.
SOCKET_NAME: Final = "mcpx-mcp.sock"

#: The key and value that mark the bridge's first line.
HELLO_KEY: Final = "mcpx"
HELLO_VALUE: Final = "serve"
#: The value that marks a hello handing the host's stdin and stdout over with it: not
#: L{HELLO_VALUE}, so that a daemon older than the handing reads it as a bad message and
#: answers it, rather than waiting for lines the bridge will never copy.
#: C{mcpx.cli.serve} says the same without importing Twisted; a test keeps them equal.
HELLO_HANDING: Final = "serve-pipes"
#: The daemon's answer to a handing hello once it holds the host's pipes.
PIPES_TAKEN: Final = b'{"mcpx":"pipes"}\n'
#: The daemon's last line to a bridge whose pipes it held: the host's input ended and
#: the session was closed after it (the bridge exits 0; without it, 1).
PIPES_ENDED: Final = b'{"mcpx":"ended"}\n'
#: How many descriptors a hello hands over: the host's stdin and stdout.
HANDED_DESCRIPTORS: Final = 2


class McpCore(Protocol):
    """
    What a transport needs of the MCP server (L{mcpx.server.dispatch.McpServer}).
    """

    def open(self, conn: Conn) -> Conn: ...

    def handle(
        self, conn: Conn, request: Request, reply: Reply | None = None
    ) -> Coroutine[Any, Any, Any]: ...

    def notification(self, conn: Conn, notification: Notification) -> None: ...

    def close(self, conn: Conn) -> None: ...


def stdio_endpoint(state_dir: Path) -> str:
    """The endpoint string of the MCP socket in C{state_dir}: owner-only, with a lock."""
    path = quoteStringArgument(str(state_dir / SOCKET_NAME))
    return f"unix:{path}:mode=600:lockfile=1"


def hello_passthrough(hello: dict[str, Any] | None) -> tuple[str, ...] | None:
    """
    The servers a hello asks to have passed through, or C{None} when it says nothing
    of them (the daemon's C{mcp.passthrough} applies).  An empty list is kept: that
    connection passes nothing through.
    """
    names = hello.get("passthrough") if hello is not None else None
    if type(names) is not list:
        return None
    return tuple(name for name in names if type(name) is str and name)


def read_hello(line: bytes) -> dict[str, Any] | None:
    """The bridge's hello if C{line} is one, else C{None}."""
    # A hello is short; anything long is a message, and not worth decoding twice.
    if len(line) > 4096 or b'"' + HELLO_KEY.encode() + b'"' not in line:
        return None
    try:
        hello = json.loads(line)
    except ValueError:
        return None
    if type(hello) is not dict or hello.get(HELLO_KEY) not in (HELLO_VALUE, HELLO_HANDING):
        return None
    return hello


class HostPipes:
    """
    The host's stdin and stdout, handed over by C{mcpx serve}: the transport of its
    L{StdioConnection} from then on.  Read and written by the reactor as a child's pipes
    are (C{ProcessReader}, C{ProcessWriter}); the descriptors are closed when both ends
    are done.

    @ivar disconnecting: L{loseConnection} was called.
    @ivar disconnected: both descriptors are closed.
    """

    def __init__(
        self, reactor: IReactorFDSet, connection: StdioConnection, stdin: int, stdout: int
    ) -> None:
        self._connection = connection
        self._descriptors = (stdin, stdout)
        self._ends = 2
        self._written_out = False
        self.disconnecting = False
        self.disconnected = False
        self.writer = ProcessWriter(reactor, self, "write", stdout)  # type: ignore[no-untyped-call]
        self.reader = ProcessReader(reactor, self, "read", stdin)  # type: ignore[no-untyped-call]

    def write(self, data: bytes) -> None:
        write_now(self.writer, data)

    def loseConnection(self) -> None:
        """Stop reading; close once what is queued for the host is written."""
        if self.disconnecting:
            return
        self.disconnecting = True
        if self.reader.connected:
            self.reader.loseConnection()  # type: ignore[no-untyped-call]
        self.writer.loseConnection()  # type: ignore[no-untyped-call]

    def registerProducer(self, producer: IPushProducer, streaming: bool) -> None:
        self.writer.registerProducer(producer, streaming)

    # From the reader and the writer, as a process's pipes tell their process.

    def childDataReceived(self, name: str, data: bytes) -> None:
        self._connection.dataReceived(data)

    def childConnectionLost(self, name: str, reason: Failure) -> None:
        self._ends -= 1
        if name == "write":
            # Closed as asked once all was written, or the host closed its stdout.
            self._written_out = self.disconnecting and reason.check(ConnectionDone) is not None
            if not self.disconnecting:
                self._connection.writeConnectionLost()
        elif not self.disconnecting:
            self._connection.input_ended()
        if self._ends == 0:
            self.disconnected = True
            for fd in self._descriptors:
                os.close(fd)
            self._connection.pipes_closed(self._written_out)


@implementer(IHalfCloseableProtocol, IFileDescriptorReceiver)
class StdioConnection(NDJSONProtocol):
    """
    One C{mcpx serve} (or any newline-delimited MCP client) on the MCP socket.

    @ivar conn: the connection's L{Conn}, from the first line on.
    @ivar peer: the connection's L{RpcPeer}, from the first line on.
    @ivar hello: the bridge's hello, or C{None} for an anonymous client.
    @ivar pipes_reactor: the reactor that reads and writes the host's pipes when a bridge
        hands them over, or C{None} to refuse them (the bridge then copies).
    """

    log = Logger()

    def __init__(
        self,
        core: McpCore,
        clock: IReactorTime,
        *,
        number: int,
        drain: float,
        max_length: int = DEFAULT_MAX_MESSAGE_SIZE,
        shutdown: Shutdown | None = None,
    ) -> None:
        super().__init__(max_length)
        self._shutdown = shutdown
        self._core = core
        self._clock = clock
        self._number = number
        self._drain = drain
        self.conn: Conn | None = None
        self.peer: RpcPeer | None = None
        self.hello: dict[str, Any] | None = None
        self._draining = False
        self._drain_timer: IDelayedCall | None = None
        self._lost = False
        self._who = "MCP client"
        self.flow = Flow()
        #: Whether a connection must be refused, asked once as it is made
        #: (L{StdioFactory}'s C{refuse}); a refused one is answered and closed.
        self.refuse: Callable[[ITransport], str | None] | None = None
        self._refused = False
        self.pipes_reactor: IReactorFDSet | None = None
        #: Until the first line is read: a hello may hand descriptors over with it.  The
        #: socket reads plainly after (L{mcpx.daemon.listeners.ListenerService}).
        self.wants_descriptors = True
        #: The descriptors the hello came with, until it is read.
        self._handed: list[int] = []
        #: The socket to the bridge once the host's pipes are the transport.
        self._bridge: ITransport | None = None

    # Setting up

    def connectionMade(self) -> None:
        transport = self.transport
        why = None if self.refuse is None or transport is None else self.refuse(transport)
        if why is not None:
            assert transport is not None
            self._refused = True
            self.send_message(encode(ErrorResponse(None, RpcError.invalid_request(why))))
            transport.loseConnection()
            return
        # Twisted pauses the flow while the client does not read what it was sent.
        if IConsumer.providedBy(self.transport):
            cast(IConsumer, self.transport).registerProducer(self.flow, True)

    def _start(self, hello: dict[str, Any] | None) -> RpcPeer:
        self.hello = hello
        pid = hello.get("pid") if hello is not None else None
        identity = f"stdio:{pid}" if type(pid) is int else f"stdio:socket-{self._number}"
        self.conn = self._core.open(
            Conn(
                STDIO,
                identity,
                push=self._push,
                ask=self._ask,
                passthrough=hello_passthrough(hello),
                flow_for=lambda token: self.flow,
                calling=self._calling,
            )
        )
        self.peer = RpcPeer(
            self._send,
            on_request=self._request,
            on_notification=self._notification,
            negative_ids=True,
            clock=self._clock,
            name=identity,
        )
        # Said the same way when it goes: a host that said hello is a host throughout.
        self._who = "anonymous MCP client" if hello is None else "MCP host"
        if hello is None:
            self.log.info("anonymous MCP client {identity} connected", identity=identity)
        else:
            self.log.info(
                "MCP host {identity} connected through mcpx serve {version} (cwd {cwd})"
                "{handed}{passthrough}",
                identity=identity,
                handed="" if self._bridge is None else ", its stdin and stdout handed over",
                version=hello.get("version"),
                cwd=hello.get("cwd"),
                passthrough=(
                    ""
                    if self.conn.passthrough is None
                    else f", passing through {', '.join(self.conn.passthrough)}"
                ),
            )
        return self.peer

    def fileDescriptorReceived(self, descriptor: int) -> None:
        # Kept for the hello they came with; any beyond the two it hands over, or sent
        # later, are closed at once.
        if self.peer is None and len(self._handed) < HANDED_DESCRIPTORS:
            self._handed.append(descriptor)
        else:
            os.close(descriptor)

    def _take_pipes(self, hello: dict[str, Any]) -> None:
        """
        The hello handed the host's stdin and stdout over: read and write them from now
        on, or close the connection when they cannot be (the bridge then connects again
        and copies).
        """
        handed, self._handed = self._handed, []
        bridge = self.transport
        if (
            self.pipes_reactor is None
            or bridge is None
            or len(handed) != HANDED_DESCRIPTORS
            or not all(handable(fd) for fd in handed)
        ):
            for fd in handed:
                os.close(fd)
            self.log.warn(
                "mcpx serve's hello handed over {count} descriptors that cannot be used as "
                "a host's stdin and stdout; closed, the bridge copies instead",
                count=len(handed),
            )
            self._refused = True
            if bridge is not None:
                bridge.loseConnection()
            return
        if IConsumer.providedBy(bridge):
            cast(IConsumer, bridge).unregisterProducer()
        pipes = HostPipes(self.pipes_reactor, self, handed[0], handed[1])
        self._bridge = bridge
        self.transport = cast(ITransport, pipes)
        pipes.registerProducer(self.flow, True)
        bridge.write(PIPES_TAKEN)
        self._start(hello)

    # Bytes in

    def message_received(self, line: bytes) -> None:
        if self._refused:
            return
        peer = self.peer
        if peer is None:
            self.wants_descriptors = False
            hello = read_hello(line)
            if hello is not None and hello[HELLO_KEY] == HELLO_HANDING:
                self._take_pipes(hello)
                return
            for fd in self._handed:
                os.close(fd)
            self._handed = []
            peer = self._start(hello)
            if hello is not None:
                return
        conn = self.conn
        assert conn is not None
        # Batches belong to 2025-03-26 alone, which only initialize can agree on.
        peer.allow_batches = conn.revision is not None and batch_allowed(conn.revision)
        peer.receive(line)

    def message_too_large(self, limit: int) -> None:
        if self._refused:
            return
        self.wants_descriptors = False
        peer = self.peer if self.peer is not None else self._start(None)
        peer.reject_oversized(limit)

    def _request(self, request: Request) -> Deferred[Any] | Coroutine[Any, Any, Any]:
        assert self.conn is not None
        if self._shutdown is not None and self._shutdown.begun:
            # The gate's 503 for HTTP; here the request itself is refused.
            return fail(shutting_down_error())
        # The peer runs the coroutine in a Deferred of its own: no second one wrapped
        # around it per request (the drain hears of answers as they are sent, L{_send}).
        return self._core.handle(self.conn, request)

    def _notification(self, notification: Notification) -> None:
        assert self.conn is not None
        self._core.notification(self.conn, notification)

    # mcpx to the client

    def _send(self, payload: bytes) -> None:
        """
        What the peer writes: a message and its newline; once the client closed its
        input, the connection closes after the last running request's answer.
        """
        try:
            self.send_message(payload)
        finally:
            # Even when the write failed: the request is over all the same.
            if self._draining:
                self._answered()

    def _push(self, method: str, params: dict[str, Any] | None) -> None:
        if self.peer is not None:
            self.peer.notify(method, params)

    def _calling(self, request_id: RequestId, call: Call) -> None:
        if self.peer is not None:
            self.peer.calling(request_id, call)

    def _ask(self, method: str, params: dict[str, Any]) -> Deferred[Any]:
        assert self.peer is not None
        if self._draining:
            # The client closed its side: nothing it could answer would arrive.
            return fail(ConnectionClosed(self.peer.name, EOFError("the client closed its input")))
        return self.peer.request(method, params)

    # Ending

    def _answered(self) -> None:
        """
        A message went out while draining.  The peer forgets a request before it
        writes its answer, and nothing is read any more that could cancel one (which
        answers nothing): the last answer is the last message the count falls to 0 at.
        """
        if not self._lost and (self.peer is None or self.peer.in_flight_incoming == 0):
            self._close()

    def readConnectionLost(self) -> None:
        """
        The bridge half-closed the socket: the host closed stdin.  Once the host's pipes
        were handed over, the end of the socket is the bridge going away (the host
        stopped it): nothing is left to answer.
        """
        if self._bridge is not None:
            self._close()
            return
        self.input_ended()

    def input_ended(self) -> None:
        """The host closed stdin: let what is running answer, for a while."""
        self._draining = True
        running = 0 if self.peer is None else self.peer.in_flight_incoming
        if running == 0:
            self._close()
            return
        self.log.info(
            "{identity} closed its input with {running} requests running; they have "
            "{drain}s to answer",
            identity=self._name(),
            running=running,
            drain=self._drain,
        )
        self._drain_timer = self._clock.callLater(self._drain, self._drain_expired)

    def _drain_expired(self) -> None:
        self._drain_timer = None
        self.log.info(
            "{identity}: {running} requests still running after {drain}s; cancelled",
            identity=self._name(),
            running=0 if self.peer is None else self.peer.in_flight_incoming,
            drain=self._drain,
        )
        self._close()

    def writeConnectionLost(self) -> None:
        # Nobody can read an answer any more.
        self._close()

    def pipes_closed(self, written_out: bool) -> None:
        """
        The host's pipes are closed: the bridge is told whether the session ended as the
        host asked (its input ended, and all that was queued for it was written), and
        its socket closed, which ends it.
        """
        bridge = self._bridge
        if bridge is None or self._lost:
            return
        if self._draining and written_out:
            bridge.write(PIPES_ENDED)
        bridge.loseConnection()

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.loseConnection()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._lost = True
        for fd in self._handed:
            os.close(fd)
        self._handed = []
        if self._bridge is not None:
            # The bridge went away while the daemon held the host's pipes: they go too.
            self._close()
        self.flow.stopProducing()
        if self._drain_timer is not None and self._drain_timer.active():
            self._drain_timer.cancel()
        self._drain_timer = None
        if self.peer is not None:
            # Cancels every request still running, all the way upstream.
            self.peer.close(reason)
        if self.conn is not None:
            self._core.close(self.conn)
            self.log.info("{who} {identity} disconnected", who=self._who, identity=self._name())

    def _name(self) -> str:
        return self.conn.identity if self.conn is not None else f"socket-{self._number}"


class StdioFactory(Factory):
    """
    Builds a L{StdioConnection} for each connection to the MCP socket.

    @ivar connections: how many connections were made, for anonymous identities.
    """

    noisy = False

    def __init__(
        self,
        core: McpCore,
        clock: IReactorTime,
        *,
        drain: float = 5.0,
        max_length: int = DEFAULT_MAX_MESSAGE_SIZE,
        shutdown: Shutdown | None = None,
        refuse: Callable[[ITransport], str | None] | None = None,
        pipes_reactor: IReactorFDSet | None = None,
    ) -> None:
        """
        @param shutdown: the daemon's stop: once begun, new requests are refused, and
            it closes the connections when every caller has been answered.
        @param refuse: why a new connection is refused (its transport), or C{None}
            to serve it: the daemon refuses its own upstream processes
            (L{mcpx.daemon.gate.upstream_door}).
        @param pipes_reactor: the reactor that reads and writes a host's pipes handed
            over by C{mcpx serve}; C{None} refuses them (each bridge then copies).
        """
        self._refuse = refuse
        self._pipes_reactor = pipes_reactor
        self._core = core
        self._clock = clock
        self._drain = drain
        self._max_length = max_length
        self._shutdown = shutdown
        self.connections = 0

    def buildProtocol(self, addr: IAddress | None) -> StdioConnection:
        self.connections += 1
        protocol = StdioConnection(
            self._core,
            self._clock,
            number=self.connections,
            drain=self._drain,
            max_length=self._max_length,
            shutdown=self._shutdown,
        )
        protocol.factory = self
        protocol.refuse = self._refuse
        protocol.pipes_reactor = self._pipes_reactor
        if self._shutdown is not None:
            self._shutdown.track(protocol)
        return protocol
