"""Judging endpoints, and listening on them."""

from __future__ import annotations

from pathlib import Path

from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactor
from twisted.trial.unittest import SynchronousTestCase

from mcpx.daemon.listeners import ListenerService, exposure, unix_endpoint


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
        self.assertEqual(desc, r"unix:/tmp/a\:b/mcpx.sock:mode=600:lockfile=1")


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
