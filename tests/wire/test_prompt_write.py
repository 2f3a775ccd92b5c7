"""
Tests for L{mcpx.wire.prompt_write}, on real sockets and pipes and the real reactor.
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any

from twisted.internet import reactor as _reactor
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorSocket
from twisted.internet.process import ProcessWriter
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import deferLater
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase

from mcpx.wire.prompt_write import write_now

reactor: Any = _reactor


class _Ends(Protocol):
    """A protocol that tells when its connection is lost."""

    def __init__(self) -> None:
        self.lost: Deferred[None] = Deferred()

    def connectionLost(self, reason: Failure | None = None) -> None:
        self.lost.callback(None)


class _Stdin:
    """What a L{ProcessWriter} tells its process."""

    def __init__(self) -> None:
        self.lost: Deferred[None] = Deferred()

    def childConnectionLost(self, name: int, reason: Failure) -> None:
        self.lost.callback(None)


class WriteNowTests(TestCase):
    """
    L{write_now} sends at once on a plain descriptor with nothing queued, and keeps
    the order of everything written otherwise.
    """

    def connection(self, sndbuf: int | None = None) -> tuple[Any, _Ends, socket.socket]:
        """A real connected unix socket in the reactor, its protocol and the peer."""
        ours, peer = socket.socketpair()
        if sndbuf is not None:
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, sndbuf)
        peer.setblocking(False)
        protocol = _Ends()
        adopting: IReactorSocket = reactor
        factory: Any = Factory.forProtocol(lambda: protocol)
        adopting.adoptStreamConnection(ours.fileno(), socket.AF_UNIX, factory)
        ours.close()
        transport = protocol.transport
        assert transport is not None

        def close() -> Deferred[None]:
            peer.close()
            if protocol.lost.called:
                return protocol.lost
            transport.loseConnection()
            return protocol.lost

        self.addCleanup(close)
        return transport, protocol, peer

    def watch_calls(self, transport: Any, name: str) -> list[None]:
        """Record each call of C{transport}'s method C{name} (C{startWriting}, ...)."""
        calls: list[None] = []
        original = getattr(transport, name)

        def recorded() -> None:
            calls.append(None)
            original()

        self.patch(transport, name, recorded)
        return calls

    def watch_start_writing(self, transport: Any) -> list[None]:
        """Record each C{startWriting} call of C{transport}."""
        return self.watch_calls(transport, "startWriting")

    async def received(self, peer: socket.socket, size: int) -> bytes:
        """Read from C{peer}, turning the reactor, until C{size} bytes came."""
        got = bytearray()
        for _ in range(1000):
            try:
                got += peer.recv(1 << 16)
            except BlockingIOError:
                await deferLater(reactor, 0.005, lambda: None)
            if len(got) >= size:
                break
        return bytes(got)

    def test_sent_before_the_reactor_turns(self) -> None:
        """
        With nothing queued, the bytes are on the peer's side when L{write_now}
        returns, and the descriptor was never watched for writing.
        """
        transport, _, peer = self.connection()
        starts = self.watch_start_writing(transport)
        write_now(transport, b'{"jsonrpc":"2.0"}\n')
        self.assertEqual(peer.recv(100), b'{"jsonrpc":"2.0"}\n')
        self.assertEqual(starts, [])
        self.assertFalse(transport.dataBuffer or transport._tempDataBuffer)

    async def test_after_what_is_queued(self) -> None:
        """With bytes queued, the new ones are queued behind them, not sent first."""
        transport, _, peer = self.connection()
        transport.write(b"first ")
        write_now(transport, b"second")
        with self.assertRaises(BlockingIOError):
            peer.recv(100)
        self.assertEqual(await self.received(peer, 12), b"first second")

    async def test_partial_write_keeps_the_order(self) -> None:
        """
        A message larger than the socket takes goes partly now and the rest through
        the transport's buffer; what follows goes after it.
        """
        transport, _, peer = self.connection(sndbuf=4096)
        big = bytes(range(256)) * 2048
        write_now(transport, big)
        self.assertTrue(transport._tempDataBuffer, "the rest should be queued")
        write_now(transport, b"after")
        got = await self.received(peer, len(big) + 5)
        self.assertEqual(got, big + b"after")

    def test_other_transports_get_write(self) -> None:
        """A transport that is not a plain descriptor just gets C{write}."""
        transport = StringTransport()
        write_now(transport, b"line\n")
        self.assertEqual(transport.value(), b"line\n")

    def test_tls_gets_write(self) -> None:
        """A connection TLS was started on is written through its C{write}."""
        transport, _, _ = self.connection()
        starts = self.watch_start_writing(transport)
        self.patch(transport, "TLS", True)
        written: list[bytes] = []
        self.patch(transport, "write", written.append)
        write_now(transport, b"secret")
        self.assertEqual(written, [b"secret"])
        self.assertEqual(starts, [])

    async def test_lost_connection(self) -> None:
        """
        On a connection whose peer is gone, the bytes go to C{write} and Twisted's own
        path tells the protocol the connection was lost.
        """
        transport, protocol, peer = self.connection()
        peer.close()
        write_now(transport, b"nobody reads this")
        await protocol.lost

    def stdin_pipe(self) -> tuple[ProcessWriter, _Stdin, int]:
        """A process's stdin writer on a real pipe, what it tells, and the pipe's read end."""
        read_end, write_end = os.pipe()
        stdin = _Stdin()
        writer = ProcessWriter(reactor, stdin, 0, write_end)
        self.read_ends = [read_end]

        def close() -> Deferred[None]:
            for end in self.read_ends:
                os.close(end)
            if not stdin.lost.called:
                writer.loseConnection()
            return stdin.lost

        self.addCleanup(close)
        return writer, stdin, read_end

    async def test_pipe(self) -> None:
        """
        A process's stdin pipe is written at once too, and read on the other end; it
        stays watched for its reader closing, without being asked to be again.
        """
        writer, stdin, read_end = self.stdin_pipe()
        self.assertIn(writer, reactor.getReaders())
        starts = self.watch_start_writing(writer)
        reading = self.watch_calls(writer, "startReading")
        write_now(writer, b"request\n")
        self.assertEqual(os.read(read_end, 100), b"request\n")
        self.assertEqual(starts, [])
        self.assertEqual(reading, [])
        self.assertIn(writer, reactor.getReaders())
        writer.loseConnection()
        await stdin.lost

    async def test_pipe_not_watched_is_watched_again(self) -> None:
        """
        A stdin pipe not watched for reading when written at once is watched again
        after the whole write, as Twisted's own write leaves it.
        """
        writer, _, read_end = self.stdin_pipe()
        writer.stopReading()
        write_now(writer, b"request\n")
        self.assertEqual(os.read(read_end, 100), b"request\n")
        self.assertIn(writer, reactor.getReaders())

    async def test_child_closing_stdin_noticed(self) -> None:
        """A child that closes its stdin after a message written at once is noticed."""
        writer, stdin, read_end = self.stdin_pipe()
        write_now(writer, b"request\n")
        self.assertEqual(os.read(read_end, 100), b"request\n")
        self.read_ends.remove(read_end)
        os.close(read_end)
        await stdin.lost

    async def test_pipe_full_keeps_the_order(self) -> None:
        """
        More than a pipe's buffer takes: what the pipe took goes now, the rest waits
        for it to drain, and the reader gets every byte in order.
        """
        writer, _, read_end = self.stdin_pipe()
        data = bytes(range(256)) * 8192
        write_now(writer, data)
        self.assertTrue(writer.dataBuffer or writer._tempDataBuffer)
        os.set_blocking(read_end, False)
        got = bytearray()
        for _ in range(3000):
            with contextlib.suppress(BlockingIOError):
                got += os.read(read_end, 1 << 16)
            if len(got) >= len(data):
                break
            await deferLater(reactor, 0.001, lambda: None)
        self.assertEqual(bytes(got), data)

    async def test_pipe_closed_by_child(self) -> None:
        """
        A stdin pipe whose child already closed its end: the write fails, and Twisted's
        own path tells the process its stdin is gone.
        """
        writer, stdin, read_end = self.stdin_pipe()
        self.read_ends.remove(read_end)
        os.close(read_end)
        write_now(writer, b"request\n")
        await stdin.lost
