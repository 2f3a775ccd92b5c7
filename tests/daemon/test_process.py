"""
The daemon as a user starts it: C{mcpx daemon} and C{twistd -n mcpx}, as real processes.

These spawn the daemon and reach it over a real TCP port and its unix socket.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import sys
import tempfile
from pathlib import Path

from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from tests.support.daemons import daemon_environ
from tests.support.http import TestClient
from tests.support.processes import (
    VENV_BIN,
    ChildProcess,
    free_tcp_port,
    kill_on_cleanup,
    reactor,
    spawn,
)


def _kill_quietly(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


class DaemonProcessTests(TestCase):
    timeout = 60

    def setUp(self) -> None:
        # Short paths: a unix socket path must fit in 108 bytes.
        self.state_dir = tempfile.mkdtemp(prefix="mcpx-state-")
        self.config_home = tempfile.mkdtemp(prefix="mcpx-cfg-")
        self.socket = str(Path(self.state_dir) / "mcpx.sock")
        self.port = free_tcp_port()

    def start(self, argv: list[str], cwd: str | None = None) -> ChildProcess:
        child = spawn(argv, env=daemon_environ(self.state_dir, self.config_home), cwd=cwd)
        self.addCleanup(kill_on_cleanup, child)
        return child

    async def check_health(self, child: ChildProcess) -> None:
        tcp = TestClient(reactor)
        unix = TestClient(reactor, unix_socket=self.socket)
        try:
            code, body = await tcp.get_json(f"http://127.0.0.1:{self.port}/health")
            self.assertEqual((code, body["status"]), (200, "ok"))
            pid = child.transport.pid if child.transport else None
            self.assertEqual(body["pid"], pid)
            code, body = await unix.get_json("http://mcpx/health")
            self.assertEqual((code, body["pid"]), (200, pid))
        finally:
            await tcp.close()
            await unix.close()
        mode = stat.S_IMODE(os.stat(self.socket).st_mode)
        self.assertEqual(mode, 0o600, "the unix socket must be private to its owner")
        self.assertEqual(stat.S_IMODE(os.stat(self.state_dir).st_mode), 0o700)

    async def test_mcpx_daemon_serves_health_on_tcp_and_unix_socket(self) -> None:
        """`mcpx daemon` answers /health on both listeners and stops cleanly on SIGTERM."""
        child = self.start(
            [
                sys.executable,
                "-m",
                "mcpx",
                "daemon",
                "--daemon-listen",
                f"tcp:{self.port}:interface=127.0.0.1",
            ]
        )
        banner = await child.wait_for(rb"listening on http://127\.0\.0\.1:\d+")
        self.assertIn(str(self.port).encode(), banner)
        await self.check_health(child)
        self.assertEqual(child.text(1), "", "the daemon must write nothing on stdout")
        child.signal("TERM")
        self.assertEqual(await child.ended(), 0)
        self.assertFalse(os.path.exists(self.socket), "the socket is removed at shutdown")

    async def test_twistd_runs_the_same_daemon(self) -> None:
        """`twistd -n mcpx` builds the same service tree: /health on TCP and the socket."""
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
            cwd=self.state_dir,
        )
        await child.wait_for(rb"mcpx daemon listening on", fd=1)
        await self.check_health(child)
        child.signal("TERM")
        # twistd re-raises the signal it stopped on, so its status is "killed by TERM".
        self.assertIn(await child.ended(), (0, -15))
        self.assertFalse(os.path.exists(self.socket), "the socket is removed at shutdown")

    async def test_twistd_port_in_use_exits_1(self) -> None:
        """
        `twistd -n mcpx` with its port taken exits 1 with one line naming the endpoint,
        and never says it is listening.
        """
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", self.port))
            taken.listen()
            child = self.start(
                [
                    str(VENV_BIN / "twistd"),
                    "-n",
                    "mcpx",
                    "--daemon-listen",
                    f"tcp:{self.port}:interface=127.0.0.1",
                ],
                cwd=self.state_dir,
            )
            self.assertEqual(await child.ended(), 1)
        err = child.text(2)
        self.assertIn(f"mcpx: cannot listen on tcp:{self.port}:interface=127.0.0.1", err)
        self.assertNotIn("mcpx daemon listening", child.text())
        self.assertNotIn("Traceback", err)
        self.assertEqual(err.count("cannot listen"), 2, "once in the log, once as the verdict")

    async def test_twistd_daemonized_reports_its_own_pid(self) -> None:
        """
        `twistd mcpx` (daemonized) keeps its pidfile and log in the state directory, not the
        working directory, and /health reports the pid in that file: the process after the fork.
        """
        work = tempfile.mkdtemp(prefix="mcpx-cwd-")
        child = self.start(
            [
                str(VENV_BIN / "twistd"),
                "mcpx",
                "--daemon-listen",
                f"tcp:{self.port}:interface=127.0.0.1",
            ],
            cwd=work,
        )
        self.assertEqual(await child.ended(), 0, child.text())
        pidfile = Path(self.state_dir) / "twistd.pid"
        tcp = TestClient(reactor)
        try:
            for _ in range(100):
                if pidfile.exists() and pidfile.read_text():
                    break
                await deferLater(reactor, 0.05)
            pid = int(pidfile.read_text())
            self.addCleanup(_kill_quietly, pid)
            code, body = await tcp.get_json(f"http://127.0.0.1:{self.port}/health")
        finally:
            await tcp.close()
        self.assertEqual((code, body["pid"]), (200, pid))
        self.assertNotEqual(pid, child.transport.pid if child.transport else None)
        self.assertEqual(os.listdir(work), [], "nothing is written into the working directory")
        log_lines = (Path(self.state_dir) / "twistd.log").read_text().splitlines()
        self.assertTrue(log_lines and all(line.startswith('{"time": ') for line in log_lines))
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if not pidfile.exists():
                break
            await deferLater(reactor, 0.05)
        self.assertFalse(pidfile.exists(), "twistd removes its pidfile when it stops")

    async def test_twistd_bad_setting_is_one_line(self) -> None:
        """A bad setting under twistd is one line and status 2, without twistd's usage text."""
        env = daemon_environ(self.state_dir, self.config_home)
        env["MCPX_MCP_SPEC"] = "1999-01-01"
        child = spawn([str(VENV_BIN / "twistd"), "-n", "mcpx"], env=env, cwd=self.state_dir)
        self.addCleanup(kill_on_cleanup, child)
        self.assertEqual(await child.ended(), 2)
        lines = child.text().strip().splitlines()
        self.assertEqual(len(lines), 1, child.text())
        self.assertIn("MCPX_MCP_SPEC=1999-01-01", lines[0])

    async def test_port_in_use_is_a_clear_error(self) -> None:
        """A taken port makes `mcpx daemon` exit 1 naming the endpoint and what to do."""
        first = self.start(
            [sys.executable, "-m", "mcpx", "daemon", "--daemon-listen", f"tcp:{self.port}"]
        )
        await first.wait_for(rb"listening on http")
        other_state = tempfile.mkdtemp(prefix="mcpx-state-")
        second = spawn(
            [sys.executable, "-m", "mcpx", "daemon", "--daemon-listen", f"tcp:{self.port}"],
            env=daemon_environ(other_state, self.config_home),
        )
        self.addCleanup(kill_on_cleanup, second)
        self.assertEqual(await second.ended(), 1)
        self.assertIn(f"cannot listen on tcp:{self.port}", second.text(2))
        self.assertIn("the address is in use", second.text(2))
        self.assertIn("daemon.listen", second.text(2))
        for said in ("mcpx daemon listening", "daemon is running", "  listening on"):
            self.assertNotIn(said, second.text(2), "never said before it is known")
        # Nothing else goes wrong on the way out: the question store, still opening when
        # the daemon gave up, is closed once open rather than failing half-way.
        for said in ("Traceback", "AttributeError", "critical", "could not be opened"):
            self.assertNotIn(said, second.text(2))
        first.signal("TERM")
        await first.ended()

    async def test_second_daemon_on_the_state_directory(self) -> None:
        """A second daemon on a state directory whose daemon runs says so in one line, with
        the socket path as text (no bytes repr) and what to do."""
        first = self.start(
            [sys.executable, "-m", "mcpx", "daemon", "--daemon-listen", f"tcp:{self.port}"]
        )
        await first.wait_for(rb"listening on http")
        second = spawn(
            [sys.executable, "-m", "mcpx", "daemon", "--daemon-listen", ""],
            env=daemon_environ(self.state_dir, self.config_home),
        )
        self.addCleanup(kill_on_cleanup, second)
        self.assertEqual(await second.ended(), 1)
        said = [line for line in second.text(2).splitlines() if line.startswith("mcpx:")]
        self.assertEqual(len(said), 1, second.text(2))
        self.assertIn("another mcpx daemon is already running with this state directory", said[0])
        self.assertIn(str(Path(self.state_dir) / "mcpx.sock"), said[0])
        self.assertIn("`mcpx stop`", said[0])
        self.assertNotIn("b'", said[0])
        first.signal("TERM")
        await first.ended()

    async def test_invalid_port_is_refused_before_starting(self) -> None:
        """A port out of range is a bad setting: one line naming it, status 2, and nothing
        about another daemon."""
        child = spawn(
            [sys.executable, "-m", "mcpx", "daemon", "--daemon-listen", "tcp:99999"],
            env=daemon_environ(self.state_dir, self.config_home),
        )
        self.addCleanup(kill_on_cleanup, child)
        self.assertEqual(await child.ended(), 2)
        lines = child.text(2).strip().splitlines()
        self.assertEqual(len(lines), 1, child.text(2))
        self.assertIn("tcp:99999", lines[0])
        self.assertIn("0 to 65535", lines[0])
        self.assertNotIn("Another mcpx daemon", child.text(2))

    async def test_bad_setting_is_refused_before_starting(self) -> None:
        """An unknown revision in MCPX_MCP_SPEC stops `mcpx daemon` with the valid list."""
        env = daemon_environ(self.state_dir, self.config_home)
        env["MCPX_MCP_SPEC"] = "1999-01-01"
        child = spawn([sys.executable, "-m", "mcpx", "daemon"], env=env)
        self.addCleanup(kill_on_cleanup, child)
        self.assertEqual(await child.ended(), 2)
        err = child.text(2)
        for rev in ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"):
            self.assertIn(rev, err)
        self.assertFalse(os.path.exists(self.socket))

    async def test_restart_after_a_crash_reuses_the_socket(self) -> None:
        """A daemon killed with SIGKILL leaves its socket behind; the next start takes it over."""
        argv = [sys.executable, "-m", "mcpx", "daemon", "--daemon-listen", ""]
        first = self.start(argv)
        await first.wait_for(rb"listening on unix socket")
        first.signal("KILL")
        await first.ended()
        self.assertTrue(os.path.exists(self.socket), "SIGKILL leaves the socket file")
        second = self.start(argv)
        await second.wait_for(rb"listening on unix socket")
        unix = TestClient(reactor, unix_socket=self.socket)
        try:
            code, body = await unix.get_json("http://mcpx/health")
        finally:
            await unix.close()
        self.assertEqual(
            (code, body["pid"]), (200, second.transport.pid if second.transport else 0)
        )
        second.signal("TERM")
        self.assertEqual(await second.ended(), 0)
