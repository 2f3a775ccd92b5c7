"""
Long calls against a real daemon and a real upstream (the SDK fixture server): a call
that keeps reporting progress outlives its timeout, one that goes quiet does not.
"""

from __future__ import annotations

import json

from tests.cli.test_real_daemon import RealDaemonCase
from tests.support.peers import fixture_argv


class ProgressKeepsCallsAliveTests(RealDaemonCase):
    timeout = 90

    async def test_reporting_call_outlives_its_timeout(self) -> None:
        """
        C{mcpx call --timeout 1s} of a tool that sleeps 3s reporting progress every
        half second succeeds; the same tool reporting once, after 2s, times out.
        """
        await self.start_daemon({"sdk": fixture_argv("stdio", "legacy")})
        await self.ok("call", "sdk", "echo", "text=warm")  # started: no cold start below
        done = await self.ok(
            "call", "sdk", "slow", "seconds=3", "steps=6", "--timeout", "1s", "--json"
        )
        self.assertIn("slept 3", json.dumps(done.json()))
        quiet = await self.mcpx(
            "call", "sdk", "slow", "seconds=2", "steps=1", "--timeout", "1s", "--json"
        )
        self.assertNotEqual(quiet.code, 0, quiet)
        self.assertIn("call_timeout", quiet.out + quiet.err)
