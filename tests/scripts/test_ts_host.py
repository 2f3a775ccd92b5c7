"""
The TypeScript client SDK v2 (C{tests/peers/client2-host.mjs}) as a real host calls
C{mcpx_exec} with a program making twenty calls across two servers in parallel, and
gets one line back, and reads a 5 MB file a program wrote back through its
C{resource_link}: as a 2025-11-25 host over C{/mcp} and a 2026-07-28 host over
C{mcpx serve}.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from tests.questions.support import Daemon, demo_server
from tests.scripts.test_big_artifacts import FIVE_MB, WRITE_FIVE_MB
from tests.scripts.test_hosts import TWENTY_CALLS
from tests.support.peers import NODE_MODULES, node22
from tests.support.processes import reactor

PEERS = NODE_MODULES.parent
TS_HOST = PEERS / "client2-host.mjs"


class TypeScriptHostTests(TestCase):
    timeout = 120

    async def host(
        self, daemon: Daemon, era: str, where: list[str], program: str = TWENTY_CALLS
    ) -> dict[str, Any]:
        out, err, code = await getProcessOutputAndValue(
            node22(),
            [str(TS_HOST), "--era", era, *where, "--steps", json.dumps({"exec": program})],
            env=daemon.env,
            path=str(PEERS),
            reactor=reactor,
        )
        lines = out.decode().strip().splitlines()
        self.assertTrue(lines, f"the TS host printed nothing (exit {code}): {err!r}")
        seen: dict[str, Any] = json.loads(lines[-1])
        return seen

    async def test_twenty_calls_one_line_over_mcp_and_serve(self) -> None:
        daemon = await Daemon(self, {"demo": demo_server(), "other": demo_server()}).start()
        serve = [sys.executable, "-m", "mcpx", "serve"]
        for era, where in (
            ("2025-11-25", ["--url", daemon.mcp_url]),
            ("2026-07-28", ["--command", serve[0], "--args", json.dumps(serve[1:])]),
        ):
            seen = await self.host(daemon, era, where)
            self.assertIsNone(seen.get("error"), seen)
            self.assertIn("mcpx_exec", seen["steps"]["tools"]["names"], era)
            self.assertEqual(
                seen["steps"]["exec"],
                {"ok": True, "text": "total=210", "isError": False, "links": []},
                era,
            )

    async def test_five_mb_artifact_read_back_through_its_resource_link(self) -> None:
        daemon = await Daemon(self, {"demo": demo_server()}).start()
        serve = [sys.executable, "-m", "mcpx", "serve"]
        for era, where in (
            ("2025-11-25", ["--url", daemon.mcp_url]),
            ("2026-07-28", ["--command", serve[0], "--args", json.dumps(serve[1:])]),
        ):
            seen = await self.host(daemon, era, where, WRITE_FIVE_MB)
            self.assertIsNone(seen.get("error"), seen)
            step = seen["steps"]["exec"]
            self.assertEqual((step["ok"], step["text"]), (True, "written"), step)
            [link] = step["links"]
            self.assertTrue(link["uri"].endswith("/big.txt"), link)
            self.assertEqual((link["size"], link["read"]), (5_000_000, 5_000_000), era)
            self.assertEqual(link["head"], FIVE_MB[:20], era)
