"""Judging endpoints, and listening on them."""

from __future__ import annotations

import socket
from functools import partial
from pathlib import Path

from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import deferLater
from twisted.internet.testing import MemoryReactor
from twisted.trial.unittest import SynchronousTestCase, TestCase

from mcpx.daemon.listeners import UNIX_BACKLOG, ListenerService, exposure, unix_endpoint


class ExposureTests(SynchronousTestCase):
    def test_loopback_interfaces_are_private(self) -> None:
        """TCP on 127.0.0.1, ::1 or localhost does not warn."""
        for desc in (
            "tcp:8899:interface=127.0.0.1",
            r"tcp6:8899:interface=\:\:1",
            "tcp:8899:interface=localhost",
            "tcp:port=8899:interface=127.0.0.2",
        ):
            self.assertFalse(exposure(desc).beyond_loopback, desc)

    def test_unix_socket_is_private(self) -> None:
        """The unix socket is never beyond loopback."""
        self.assertFalse(exposure(unix_endpoint(Path("/tmp/x"))).beyond_loopback)

    def test_all_interfaces_and_public_addresses_warn(self) -> None:
        """No interface (every address), 0.0.0.0 or a routable address is beyond loopback."""
        for desc in (
            "tcp:8899",
            "tcp:8899:interface=0.0.0.0",
            r"tcp6:8899:interface=\:\:",
            "tcp:8899:interface=192.0.2.7",
            "systemd:domain=INET:index=0",
        ):
            self.assertTrue(exposure(desc).beyond_loopback, desc)

    def test_unix_endpoint_quotes_colons(self) -> None:
        """A state directory with a colon still makes a parseable endpoint, mode 0600."""
        desc = unix_endpoint(Path("/tmp/a:b"))
        self.assertEqual(desc, r"unix:/tmp/a\:b/mcpx.sock:mode=600:lockfile=1:backlog=1024")


class UnixBacklogTests(TestCase):
    async def test_a_burst_waits_for_the_daemon(self) -> None:
        """
        Twice Twisted's default backlog of hosts connecting to the daemon's unix socket while
        it accepts nothing (here: before its reactor runs again) are all queued, none
        refused, and each is accepted once it does.
        """
        from twisted.internet import reactor
        from twisted.internet.endpoints import serverFromString

        state = Path(self.mktemp())
        state.mkdir()
        accepted: list[Protocol] = []

        class Counted(Protocol):
            def connectionMade(self) -> None:
                accepted.append(self)

        port = await serverFromString(reactor, unix_endpoint(state)).listen(
            Factory.forProtocol(Counted)
        )
        self.addCleanup(port.stopListening)
        burst = 100
        self.assertGreater(UNIX_BACKLOG, burst)
        clients = []
        for _ in range(burst):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.addCleanup(client.close)
            client.setblocking(False)
            # No reactor turn in between: a backlog of 50 refuses the 51st (EAGAIN).
            client.connect(str(state / "mcpx.sock"))
            clients.append(client)
        for _ in range(1000):
            if len(accepted) == burst:
                break
            await deferLater(reactor, 0.01, lambda: None)
        self.assertEqual(len(accepted), burst)
        for protocol in accepted:
            assert protocol.transport is not None
            protocol.transport.loseConnection()


class ListenerServiceTests(SynchronousTestCase):
    def test_listens_and_reports_the_port(self) -> None:
        """Starting the service listens on the endpoint; when_listening gives the port."""
        reactor = MemoryReactor()
        service = ListenerService(
            reactor, "tcp:8899:interface=127.0.0.1", Factory.forProtocol(Protocol)
        )
        service.startService()
        port = self.successResultOf(service.when_listening())
        self.assertEqual(reactor.tcpServers[0][0], 8899)
        self.assertEqual(reactor.tcpServers[0][3], "127.0.0.1")
        self.assertIsNotNone(port)

    def test_bad_endpoint_fails_when_listening(self) -> None:
        """An endpoint string Twisted cannot parse is reported, not raised into startService."""
        service = ListenerService(MemoryReactor(), "nonsense:1", Factory.forProtocol(Protocol))
        service.startService()
        failure = self.failureResultOf(service.when_listening())
        self.assertIsNotNone(failure)
        self.flushLoggedErrors()

    def test_early_waiters_each_get_the_port(self) -> None:
        """Whoever asks before the service starts is told once it listens, each on its own."""
        service = ListenerService(
            MemoryReactor(), "tcp:8899:interface=127.0.0.1", Factory.forProtocol(Protocol)
        )
        first, second = service.when_listening(), service.when_listening()
        self.assertNoResult(first)
        service.startService()
        self.assertIs(self.successResultOf(first), self.successResultOf(second))

    def test_a_restart_listens_afresh(self) -> None:
        """After a stop, when_listening waits for the next start's port, not the old one."""
        service = ListenerService(
            MemoryReactor(), "tcp:8899:interface=127.0.0.1", Factory.forProtocol(Protocol)
        )
        service.startService()
        old = self.successResultOf(service.when_listening())
        service.stopService()
        waiting = service.when_listening()
        self.assertNoResult(waiting)
        service.startService()
        self.assertIsNot(self.successResultOf(waiting), old)


class DescriptorsFirstTests(TestCase):
    async def test_descriptors_until_the_protocol_has_its_first_line(self) -> None:
        """
        A listener with descriptors on (the MCP socket's) hands the descriptors a peer
        passes to its protocol while it wants them, and reads plainly after, as every
        other listener does from the start: what is passed then is closed, never the
        protocol's.  The bytes arrive alike either way.
        """
        import os

        from twisted.internet import reactor
        from twisted.internet.interfaces import IFileDescriptorReceiver
        from zope.interface import implementer

        got: dict[bool, tuple[list[int], bytearray]] = {}

        @implementer(IFileDescriptorReceiver)
        class Taker(Protocol):
            wants_descriptors = True

            def __init__(self, key: bool) -> None:
                self.descriptors, self.data = got.setdefault(key, ([], bytearray()))

            def fileDescriptorReceived(self, descriptor: int) -> None:
                self.descriptors.append(descriptor)

            def dataReceived(self, data: bytes) -> None:
                self.data.extend(data)
                if b"\n" in data:
                    self.wants_descriptors = False

        for descriptors in (True, False):
            state = Path(self.mktemp())
            state.mkdir()
            service = ListenerService(
                reactor,
                unix_endpoint(state),
                Factory.forProtocol(partial(Taker, descriptors)),
                descriptors=descriptors,
            )
            service.startService()
            await service.when_listening()
            self.addCleanup(service.stopService)
            read_end, write_end = os.pipe()
            self.addCleanup(os.close, read_end)
            self.addCleanup(os.close, write_end)
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.addCleanup(client.close)
            client.connect(str(state / "mcpx.sock"))
            socket.send_fds(client, [b"first\n"], [read_end])
            for _ in range(1000):
                if got.get(descriptors, ([], b""))[1] == b"first\n":
                    break
                await deferLater(reactor, 0.01, lambda: None)
            socket.send_fds(client, [b"second\n"], [write_end])
            for _ in range(1000):
                if got[descriptors][1].endswith(b"second\n"):
                    break
                await deferLater(reactor, 0.01, lambda: None)
            taken, data = got[descriptors]
            self.assertEqual(bytes(data), b"first\nsecond\n")
            self.assertEqual(len(taken), 1 if descriptors else 0)
            for fd in taken:
                self.assertEqual(os.fstat(fd).st_ino, os.fstat(read_end).st_ino)
                os.close(fd)
