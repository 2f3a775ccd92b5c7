"""
Reloads of a real daemon: a missing or invalid file never replaces the running
configuration, and the operator is told why where they look (log, C{mcpx status}).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mcpx.settings.config import DEFAULT_CONFIG_ORIGIN
from tests.cli.test_real_daemon import RealDaemonCase

DEMO = [sys.executable, "-m", "mcpx.demo"]


class ReloadLifecycleTests(RealDaemonCase):
    def config_path(self) -> Path:
        return Path(self.env["MCPX_CONFIG"])

    async def test_missing_file_keeps_configuration(self) -> None:
        """
        The config file moved away: mcpx call still reaches the servers it configured
        after SIGHUP, whose log line says the file is missing; the demo never appears.
        """
        await self.start_daemon({"alpha": DEMO, "beta": DEMO})
        path = self.config_path()
        path.rename(path.with_suffix(".moved"))
        assert self.daemon is not None
        self.daemon.signal("HUP")
        await self.daemon.wait_for(rb"no such file", fd=2, timeout=10)
        servers = json.loads((await self.ok("servers", "--json")).out)
        names = sorted(entry["name"] for entry in servers["servers"])
        self.assertEqual(names, ["alpha", "beta"])
        self.assertNotIn(DEFAULT_CONFIG_ORIGIN, self.daemon.text(2))
        called = await self.ok("call", "beta", "echo", "text=still here")
        self.assertIn("still here", called.out)

    async def test_invalid_file_reason_logged_and_in_status(self) -> None:
        """SIGHUP with a half-written file logs the line and column; mcpx status shows it."""
        await self.start_daemon({"alpha": DEMO})
        self.config_path().write_text('{"servers": {"alpha": {"command": "x\n')
        assert self.daemon is not None
        self.daemon.signal("HUP")
        await self.daemon.wait_for(rb"line 1 column", fd=2, timeout=10)
        status = await self.ok("status")
        self.assertIn("last reload refused", status.err)
        self.assertIn("line 1 column", status.err)


class StopAndReloadCommandTests(RealDaemonCase):
    def config_path(self) -> Path:
        return Path(self.env["MCPX_CONFIG"])

    async def test_reload_command_adds_a_server(self) -> None:
        """
        After the file gains a server, `mcpx reload` says it was added and it can be
        called at once, without restarting the daemon.
        """
        await self.start_daemon({"alpha": DEMO})
        path = self.config_path()
        config = json.loads(path.read_text())
        config["servers"]["beta"] = {"command": DEMO[0], "args": DEMO[1:]}
        path.write_text(json.dumps(config))
        done = await self.ok("reload")
        self.assertIn("added beta", done.out)
        self.assertIn("unchanged alpha", done.out)
        called = await self.ok("call", "beta", "echo", "text=fresh")
        self.assertIn("fresh", called.out)

    async def test_reload_command_refused_for_a_broken_file(self) -> None:
        """`mcpx reload` of a half-written file fails with the line and column, status 2."""
        await self.start_daemon({"alpha": DEMO})
        self.config_path().write_text('{"servers": {')
        done = await self.mcpx("reload")
        self.assertEqual(done.code, 2, done)
        self.assertIn("line 1 column", done.err)

    async def test_stop_command_stops_the_daemon(self) -> None:
        """
        `mcpx stop` ends the daemon (status 0, socket gone) and names its pid; a second
        `mcpx stop` finds nothing to stop and still succeeds.
        """
        daemon = await self.start_daemon({"alpha": DEMO})
        pid = self.daemon_pid
        done = await self.ok("stop")
        self.assertEqual(done.out.strip(), f"stopped the mcpx daemon (pid {pid})")
        self.assertEqual(await daemon.ended(), 0)
        self.assertFalse((Path(self.state_dir) / "mcpx.sock").exists())
        again = await self.ok("stop")
        self.assertEqual(again.out.strip(), "no mcpx daemon is running")
