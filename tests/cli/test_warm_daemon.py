# -*- test-case-name: tests.cli.test_warm_daemon -*-
"""A warm server is running under a real daemon before anything has called it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from twisted.internet.task import deferLater

from tests.cli.test_real_daemon import RealDaemonCase
from tests.support.processes import reactor


class WarmServerTests(RealDaemonCase):
    async def test_servers_shows_warm_server_running(self) -> None:
        """
        C{mcpx servers} shows the warm demo server ready with no call made (once its start,
        begun with the daemon, has finished), while a cold one waits for its first call.
        """
        config = Path(self.config_home) / "servers.json"
        demo = {"command": sys.executable, "args": ["-m", "mcpx.demo"]}
        servers = {"warm": {**demo, "warm": 1}, "cold": demo}
        config.write_text(json.dumps({"servers": servers}))
        self.env["MCPX_CONFIG"] = str(config)
        await self.start_daemon()
        states: dict[str, tuple[str, int]] = {}
        for _ in range(100):
            listed = (await self.ok("servers", "--json")).json()["servers"]
            states = {s["name"]: (s["state"], s["instances"]) for s in listed}
            if states["warm"][0] != "starting":
                break
            await deferLater(reactor, 0.1, lambda: None)
        self.assertEqual(states, {"warm": ("ready", 1), "cold": ("configured", 0)})
        rows = {
            line.split()[0]: line.split()[1]
            for line in (await self.ok("servers")).out.splitlines()[1:]
        }
        self.assertEqual(rows, {"warm": "ready", "cold": "configured"})
