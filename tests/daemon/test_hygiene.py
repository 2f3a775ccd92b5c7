"""
What a real C{mcpx daemon} leaves behind when it is killed, and where its upstreams run:
C{kill -9} of the daemon takes its upstreams with it, what they forked is ended by the
next daemon, and the demo works whatever directory the daemon was started from.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from pathlib import Path

from twisted.internet.task import deferLater

from tests.cli.test_real_daemon import RealDaemonCase, children_of, parent_of
from tests.support.peers import misbehaving_argv
from tests.support.processes import VENV_BIN, reactor, spawn


def session_of(pid: int) -> list[int]:
    """The live processes in the session C{pid} leads."""
    found = []
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError, ValueError):
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            if fields[0] != "Z" and int(fields[3]) == pid:
                found.append(int(entry))
    return found


async def gone_within(pids: list[int], seconds: float) -> list[int]:
    """The processes of C{pids} still alive after up to C{seconds}."""
    alive = pids
    for _ in range(int(seconds / 0.05)):
        alive = [pid for pid in pids if parent_of(pid) is not None]
        if not alive:
            break
        await deferLater(reactor, 0.05, lambda: None)
    return alive


class KilledDaemonTests(RealDaemonCase):
    async def test_upstreams_die_with_the_daemon(self) -> None:
        """After C{kill -9} of the daemon, the demo it started is gone within two seconds."""
        await self.start_daemon()
        await self.ok("call", "demo", "echo", "text=hi")
        upstreams = children_of(self.daemon_pid)
        self.assertEqual(len(upstreams), 1, upstreams)
        os.kill(self.daemon_pid, signal.SIGKILL)
        # Seen ended before the cleanup, which would otherwise ask it to stop cleanly.
        await self.daemon_ended()
        survivors = await gone_within(upstreams, 2.0)
        for pid in survivors:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        self.assertEqual(survivors, [], "the demo outlived its daemon")

    async def test_next_daemon_ends_the_strays(self) -> None:
        """
        What an upstream forked survives a C{kill -9} of the daemon (nothing can signal
        it then), and the next daemon on the same state directory ends it as it starts.
        """
        await self.start_daemon({"forker": misbehaving_argv("fork-grandchild")})
        await self.ok("call", "forker", "echo", "text=hi")
        [leader] = children_of(self.daemon_pid)
        grandchildren = [pid for pid in session_of(leader) if pid != leader]
        self.assertEqual(len(grandchildren), 1, grandchildren)
        self.addCleanup(self.kill_all, grandchildren)
        os.kill(self.daemon_pid, signal.SIGKILL)
        await self.daemon_ended()
        self.assertEqual(await gone_within([leader], 2.0), [])
        self.assertEqual(await gone_within(grandchildren, 0.3), grandchildren)
        await self.start_daemon({"forker": misbehaving_argv("fork-grandchild")})
        self.assertEqual(await gone_within(grandchildren, 2.0), [], "the stray was not ended")
        self.assertIn("left behind", self.daemon_text())

    async def daemon_ended(self) -> None:
        assert self.daemon is not None
        await self.daemon.ended(timeout=5)

    def daemon_text(self) -> str:
        assert self.daemon is not None
        return self.daemon.text(2)

    def kill_all(self, pids: list[int]) -> None:
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


class DirectoryTests(RealDaemonCase):
    async def test_demo_from_a_folder_holding_mcpx(self) -> None:
        """
        The daemon started (with the C{mcpx} command) from a folder that holds another
        folder named C{mcpx} still runs the demo: upstreams start in the home directory
        and the demo does not take modules from its directory.
        """
        folder = Path(tempfile.mkdtemp(prefix="mcpx-cwd-"))
        (folder / "mcpx" / "spec").mkdir(parents=True)
        (folder / "mcpx" / "__init__.py").write_text("")
        (folder / "mcpx" / "spec" / "__init__.py").write_text("")
        home = Path(tempfile.mkdtemp(prefix="mcpx-home-"))
        # The home directory too: the demo must not import from its own directory.
        (home / "mcpx").symlink_to(folder / "mcpx")
        self.env["HOME"] = str(home)
        daemon = spawn(
            [str(VENV_BIN / "mcpx"), "daemon", "--daemon-listen", ""], env=self.env, cwd=str(folder)
        )
        self.addCleanup(self.stop_daemon, daemon)
        await daemon.wait_for(rb"listening on unix socket", fd=2, timeout=30)
        self.daemon = daemon
        done = await self.ok("call", "demo", "echo", "text=from anywhere")
        self.assertEqual(done.out, "from anywhere\n")
        [demo] = children_of(self.daemon_pid)
        self.assertEqual(os.readlink(f"/proc/{demo}/cwd"), str(home))
