"""
C{mcpx exec} and C{mcpx artifacts} against a real daemon with two real servers: the
program runs in the sandbox, its calls reach both servers through the pool.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.cli.test_real_daemon import RealDaemonCase

DEMO = [sys.executable, "-P", "-m", "mcpx.demo"]

TWENTY_CALLS = """\
import asyncio
rows = await asyncio.gather(*[(demo if i % 2 else other).add(a=i, b=1) for i in range(20)])
open("/out/sums.txt", "w").write(",".join(str(r["sum"]) for r in rows))
f"total={sum(r['sum'] for r in rows)}"
"""


class ExecCommandTests(RealDaemonCase):
    timeout = 120

    def program(self, text: str) -> str:
        path = Path(self.mktemp()).resolve()
        path.write_text(text)
        return str(path)

    async def test_twenty_parallel_calls_across_two_servers(self) -> None:
        """One program, twenty calls across two servers, one line back and one artifact."""
        daemon = await self.start_daemon({"demo": DEMO, "other": DEMO})
        try:
            done = await self.ok("exec", self.program(TWENTY_CALLS))
            self.assertEqual(done.out, "total=210\n")
            self.assertRegex(done.err, r"mcpx://artifacts/run-[0-9a-f]+/sums.txt  text/plain")
            listed = await self.ok("artifacts", "--json")
            [artifact] = listed.json()["artifacts"]
            self.assertTrue(artifact["uri"].endswith("/sums.txt"))
            self.assertTrue(artifact["description"].startswith("1,2,3"))
        finally:
            await self.stop_daemon(daemon)

    async def test_failure_says_what_it_printed(self) -> None:
        daemon = await self.start_daemon({"demo": DEMO})
        try:
            done = await self.mcpx("exec", self.program('print("so far")\n1/0'))
            self.assertEqual(done.code, 1, done)
            self.assertIn("ZeroDivisionError", done.err)
            self.assertIn("so far", done.err)
        finally:
            await self.stop_daemon(daemon)
