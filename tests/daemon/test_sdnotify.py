"""
The daemon under systemd: notifications through C{NOTIFY_SOCKET} and sockets passed
with C{LISTEN_FDS}, in memory and with the real daemon as a child process.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.protocol import DatagramProtocol
from twisted.internet.task import Clock, deferLater
from twisted.trial.unittest import SynchronousTestCase, TestCase

from mcpx.daemon.activation import activated_endpoints, listen_with_activation
from mcpx.daemon.config import daemon_config
from mcpx.daemon.sdnotify import (
    SYSTEMD_VARIABLES,
    Notifier,
    forget_systemd_variables,
    notifier_from,
    socket_address,
    watchdog_interval,
)
from mcpx.settings.load import load_settings
from tests.support.daemons import daemon_environ
from tests.support.http import TestClient
from tests.support.processes import (
    VENV_BIN,
    ChildProcess,
    free_tcp_port,
    kill_on_cleanup,
    reactor,
)


class Receiver:
    """A bound datagram socket standing in for systemd's notification socket."""

    def __init__(self, test: SynchronousTestCase, address: str | bytes) -> None:
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind(address)
        self.socket.setblocking(False)
        test.addCleanup(self.socket.close)

    def messages(self) -> list[list[str]]:
        found: list[list[str]] = []
        while True:
            try:
                data = self.socket.recv(4096)
            except BlockingIOError:
                return found
            found.append(data.decode().split("\n"))


class NotifierTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.path = os.path.join(tempfile.mkdtemp(prefix="mcpx-sd-"), "notify")
        self.receiver = Receiver(self, self.path)

    def test_ready_says_status_and_main_pid(self) -> None:
        notifier = Notifier(self.path)
        self.addCleanup(notifier.close)
        notifier.ready("serving on tcp:8899")
        self.assertEqual(
            self.receiver.messages(),
            [["READY=1", "STATUS=serving on tcp:8899", f"MAINPID={os.getpid()}"]],
        )

    def test_reloading_carries_the_monotonic_time(self) -> None:
        notifier = Notifier(self.path)
        self.addCleanup(notifier.close)
        notifier.reloading()
        [message] = self.receiver.messages()
        self.assertEqual(message[0], "RELOADING=1")
        self.assertTrue(any(line.startswith("MONOTONIC_USEC=") for line in message))

    def test_watchdog_pings_every_interval_until_stopping(self) -> None:
        clock = Clock()
        notifier = Notifier(self.path, watchdog_every=5.0)
        self.addCleanup(notifier.close)
        notifier.start_watchdog(clock)
        clock.advance(5)
        clock.advance(5)
        self.assertEqual(self.receiver.messages(), [["WATCHDOG=1"]] * 3)
        notifier.stopping()
        clock.advance(20)
        [stopping] = self.receiver.messages()
        self.assertEqual(stopping[0], "STOPPING=1")

    def test_no_watchdog_without_an_interval(self) -> None:
        clock = Clock()
        notifier = Notifier(self.path)
        self.addCleanup(notifier.close)
        notifier.start_watchdog(clock)
        clock.advance(100)
        self.assertEqual(self.receiver.messages(), [])
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_an_absent_listener_is_no_error(self) -> None:
        """A notification socket nobody reads any more costs a warning, not the daemon."""
        notifier = Notifier(self.path + "-gone")
        self.addCleanup(notifier.close)
        notifier.ready("serving")
        notifier.stopping()

    def test_abstract_namespace_address(self) -> None:
        name = f"@mcpx-test-{os.getpid()}-{id(self)}"
        self.assertEqual(socket_address(name), b"\0" + name[1:].encode())
        receiver = Receiver(self, socket_address(name))
        notifier = notifier_from({"NOTIFY_SOCKET": name}, os.getpid())
        assert notifier is not None
        self.addCleanup(notifier.close)
        notifier.stopping()
        self.assertEqual(receiver.messages()[0][0], "STOPPING=1")


class EnvironmentTests(SynchronousTestCase):
    def test_watchdog_interval_is_half_of_watchdog_usec(self) -> None:
        self.assertEqual(watchdog_interval({"WATCHDOG_USEC": "3000000"}, 7), 1.5)
        self.assertEqual(
            watchdog_interval({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": "7"}, 7), 1.5
        )

    def test_watchdog_for_another_process_is_not_ours(self) -> None:
        self.assertIsNone(watchdog_interval({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": "8"}, 7))
        self.assertIsNone(watchdog_interval({"WATCHDOG_USEC": "soon"}, 7))
        self.assertIsNone(watchdog_interval({}, 7))

    def test_no_notifier_without_a_socket(self) -> None:
        self.assertIsNone(notifier_from({}, 7))
        self.assertIsNone(notifier_from({"NOTIFY_SOCKET": "relative/path"}, 7))

    def test_children_do_not_inherit_the_variables(self) -> None:
        environ = {name: "1" for name in SYSTEMD_VARIABLES} | {"HOME": "/home/u"}
        forget_systemd_variables(environ)
        self.assertEqual(environ, {"HOME": "/home/u"})

    def test_passed_sockets_replace_daemon_listen(self) -> None:
        passed = ("systemd:domain=INET:index=0",)
        self.assertEqual(listen_with_activation(("tcp:8899",), passed), passed)
        self.assertEqual(listen_with_activation(("tcp:8899",), ()), ("tcp:8899",))
        named = ("tcp:8899", "systemd:domain=INET6:index=0")
        self.assertEqual(listen_with_activation(named, passed), named)

    def test_activated_endpoints_name_the_socket_family(self) -> None:
        with socket.socket() as tcp, socket.socket(socket.AF_INET6) as tcp6:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                descriptors = [tcp.fileno(), udp.fileno(), tcp6.fileno()]
                self.assertEqual(
                    activated_endpoints(descriptors),
                    ("systemd:domain=INET:index=0", "systemd:domain=INET6:index=2"),
                )
            # The probe leaves the descriptor open.
            self.assertEqual(tcp.family, socket.AF_INET)
            os.fstat(tcp.fileno())


class DaemonConfigTests(SynchronousTestCase):
    def test_upstreams_do_not_inherit_what_systemd_gave_the_daemon(self) -> None:
        """The environment stdio upstreams get has none of the systemd variables."""
        home = tempfile.mkdtemp(prefix="mcpx-cfg-")
        environ = {
            "MCPX_STATE_DIR": home,
            "XDG_CONFIG_HOME": home,
            "NOTIFY_SOCKET": os.path.join(home, "notify"),
            "WATCHDOG_USEC": "1000000",
            "PATH": "/usr/bin",
        }
        settings, servers = load_settings(environ, {})
        config = daemon_config(settings, servers, environ)
        self.assertFalse(set(SYSTEMD_VARIABLES) & set(config.environ))
        self.assertEqual(config.environ["PATH"], "/usr/bin")
        assert config.notifier is not None
        self.addCleanup(config.notifier.close)
        self.assertEqual(config.notifier.watchdog_every, 0.5)


class Notifications(DatagramProtocol):
    """The test's end of C{NOTIFY_SOCKET}: every datagram, and a way to wait for one."""

    def __init__(self) -> None:
        self.received: list[list[str]] = []
        self._waiting: list[tuple[str, Deferred[list[str]]]] = []

    def datagramReceived(self, datagram: bytes, addr: Any) -> None:
        message = datagram.decode().split("\n")
        self.received.append(message)
        for entry in list(self._waiting):
            if entry[0] in message:
                self._waiting.remove(entry)
                entry[1].callback(message)

    def wait_for(self, line: str, timeout: float = 30, after: int = 0) -> Deferred[list[str]]:
        """The first message from the C{after}th on that has C{line}, once it arrives."""
        for message in self.received[after:]:
            if line in message:
                done: Deferred[list[str]] = Deferred()
                done.callback(message)
                return done
        waiter: Deferred[list[str]] = Deferred()
        self._waiting.append((line, waiter))
        return waiter.addTimeout(timeout, reactor)


class DaemonUnderSystemdTests(TestCase):
    """The real daemon, started the way systemd starts a C{Type=notify} service."""

    timeout = 60

    def setUp(self) -> None:
        self.state_dir = tempfile.mkdtemp(prefix="mcpx-state-")
        self.config_home = tempfile.mkdtemp(prefix="mcpx-cfg-")
        # Beside the state directory, as systemd's is outside the service's own files.
        self.notify_path = str(Path(tempfile.mkdtemp(prefix="mcpx-sd-")) / "notify")
        self.notifications = Notifications()
        port = reactor.listenUNIXDatagram(self.notify_path, self.notifications)
        self.addCleanup(port.stopListening)
        self.port = free_tcp_port()

    def start(
        self, argv: list[str], extra: dict[str, str], child_fds: dict[int, Any] | None = None
    ) -> ChildProcess:
        env = daemon_environ(self.state_dir, self.config_home)
        env |= {"NOTIFY_SOCKET": self.notify_path, **extra}
        child = ChildProcess(reactor)
        fds: dict[int, Any] = {0: "w", 1: "r", 2: "r", **(child_fds or {})}
        reactor.spawnProcess(child, argv[0], argv, env=env, path=self.state_dir, childFDs=fds)
        self.addCleanup(kill_on_cleanup, child)
        return child

    async def health(self, port: int) -> Any:
        client = TestClient(reactor)
        try:
            code, body = await client.get_json(f"http://127.0.0.1:{port}/health")
        finally:
            await client.close()
        self.assertEqual(code, 200)
        return body

    async def test_mcpx_daemon_says_ready_pings_the_watchdog_and_says_stopping(self) -> None:
        """
        READY=1 comes with the daemon's own pid once it serves, WATCHDOG=1 keeps coming
        every half of WATCHDOG_USEC, and SIGTERM brings STOPPING=1.
        """
        child = self.start(
            [
                sys.executable,
                "-m",
                "mcpx",
                "daemon",
                "--daemon-listen",
                f"tcp:{self.port}:interface=127.0.0.1",
            ],
            {"WATCHDOG_USEC": "200000"},
        )
        ready = await self.notifications.wait_for("READY=1")
        pid = child.transport.pid if child.transport else None
        self.assertIn(f"MAINPID={pid}", ready)
        self.assertIn(f"STATUS=serving on 127.0.0.1:{self.port}", ready)
        self.assertEqual((await self.health(self.port))["pid"], pid)
        # Pings keep coming after READY, one after another (each wait is for a new one).
        for _ in range(3):
            ping = await self.notifications.wait_for(
                "WATCHDOG=1", after=len(self.notifications.received)
            )
            self.assertEqual(ping, ["WATCHDOG=1"])
        heard = len(self.notifications.received)
        child.signal("HUP")
        reloading = await self.notifications.wait_for("RELOADING=1", after=heard)
        self.assertEqual(reloading[0], "RELOADING=1")
        await self.notifications.wait_for("READY=1", after=heard)
        child.signal("TERM")
        stopping = await self.notifications.wait_for("STOPPING=1")
        self.assertEqual(stopping[0], "STOPPING=1")
        self.assertEqual(await child.ended(), 0)

    async def test_no_watchdog_for_another_pid(self) -> None:
        """WATCHDOG_PID naming another process: no pings from this one."""
        child = self.start(
            [
                sys.executable,
                "-m",
                "mcpx",
                "daemon",
                "--daemon-listen",
                f"tcp:{self.port}:interface=127.0.0.1",
            ],
            {"WATCHDOG_USEC": "100000", "WATCHDOG_PID": "1"},
        )
        await self.notifications.wait_for("READY=1")
        await pause(0.4)
        self.assertNotIn(["WATCHDOG=1"], self.notifications.received)
        child.signal("TERM")
        await child.ended()

    async def test_twistd_says_ready_with_its_pid(self) -> None:
        """C{twistd -n mcpx} tells systemd the same, from the process that serves."""
        child = self.start(
            [
                str(VENV_BIN / "twistd"),
                "-n",
                "--pidfile=",
                "--logfile=-",
                "mcpx",
                "--daemon-listen",
                f"tcp:{self.port}:interface=127.0.0.1",
            ],
            {},
        )
        ready = await self.notifications.wait_for("READY=1")
        pid = child.transport.pid if child.transport else None
        self.assertIn(f"MAINPID={pid}", ready)
        self.assertEqual((await self.health(self.port))["pid"], pid)
        child.signal("TERM")
        await self.notifications.wait_for("STOPPING=1")
        self.assertIn(await child.ended(), (0, -15))

    async def test_socket_activation_serves_on_the_passed_socket(self) -> None:
        """
        A listening socket passed as descriptor 3 with LISTEN_FDS=1 (and LISTEN_PID the
        daemon's own pid) is where /health answers; daemon.listen's port is not bound.
        """
        passed = socket.socket()
        self.addCleanup(passed.close)
        passed.bind(("127.0.0.1", 0))
        passed.listen(16)
        passed_port = passed.getsockname()[1]
        configured = free_tcp_port()
        # systemd sets LISTEN_PID to the pid it execs: a shell that execs keeps its pid.
        command = (
            f"LISTEN_PID=$$ exec {sys.executable} -m mcpx daemon "
            f"--daemon-listen tcp:{configured}:interface=127.0.0.1"
        )
        child = self.start(
            ["/bin/sh", "-c", command],
            {"LISTEN_FDS": "1", "LISTEN_FDNAMES": "mcpx"},
            child_fds={3: passed.fileno()},
        )
        await self.notifications.wait_for("READY=1")
        # The daemon holds it now; the test's copy must not take connections too.
        passed.close()
        body = await self.health(passed_port)
        self.assertEqual(body["pid"], child.transport.pid if child.transport else None)
        with socket.socket() as probe:
            self.assertNotEqual(probe.connect_ex(("127.0.0.1", configured)), 0)
        child.signal("TERM")
        self.assertEqual(await child.ended(), 0)


def pause(seconds: float) -> Deferred[None]:
    return deferLater(reactor, seconds, lambda: None)
