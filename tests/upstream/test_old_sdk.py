"""
A server on the Python SDK up to 1.8 behind a real daemon: C{mcp-server-sqlite}
2025.4.25 on C{mcp} 1.6 (in C{.venv-sqlite}, which C{make test} installs), which exits
on C{server/discover} like on any method it does not know.  mcpx starts it again and
speaks to it in the legacy era, and remembers that.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from tests.cli.test_real_daemon import RealDaemonCase
from tests.support.peers import PeersMissing
from tests.support.processes import REPO

SQLITE = REPO / ".venv-sqlite" / "bin" / "mcp-server-sqlite"


def sqlite_server() -> str:
    if not SQLITE.exists():
        raise PeersMissing(f"{SQLITE} is missing: run `make test`, which creates .venv-sqlite")
    return str(SQLITE)


class OldSdkServerTests(RealDaemonCase):
    async def test_sqlite_on_mcp_1_6(self) -> None:
        """
        Its tools are listed and a call works (a table made, then listed); the era
        cache says legacy, so a daemon started again sends it no probe.
        """
        db = Path(tempfile.mkdtemp(prefix="mcpx-sqlite-")) / "test.db"
        await self.start_daemon({"sqlite": [sqlite_server(), "--db-path", str(db)]})
        # Named, the listing waits for the server to start (an all-server listing would
        # wait pool.listWait at most, and this one starts twice: probed, then legacy).
        tools = (await self.ok("tools", "sqlite", "--json")).json()["tools"]
        names = {t["name"] for t in tools if t["server"] == "sqlite"}
        self.assertLessEqual({"read_query", "create_table", "list_tables"}, names)
        await self.ok("call", "sqlite", "create_table", "query=CREATE TABLE notes (text TEXT)")
        listed = await self.ok("call", "sqlite", "list_tables")
        self.assertIn("notes", listed.out)

        eras = json.loads((Path(self.state_dir) / "upstream-eras.json").read_text())["eras"]
        self.assertEqual([entry["era"] for entry in eras.values()], ["legacy"])
        [status] = (await self.ok("servers", "--json")).json()["servers"]
        self.assertEqual(status["state"], "ready")
        self.assertEqual(status["instances"], 1)
