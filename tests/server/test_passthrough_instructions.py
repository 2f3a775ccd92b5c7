"""
A pass-through host is given the server's own instructions (issue 43, item 6), with
real peers: the Python SDK's FastMCP fixture (C{tests/fixtures/sdk_server.py}, whose
instructions are "A fixture server for mcpx's tests.") behind a real daemon, and the
Python SDK's client as the host on C{/mcp} and C{mcpx serve --passthrough}, legacy and
2026-07-28.
"""

from __future__ import annotations

from typing import Any

from mcp import Client
from twisted.trial.unittest import TestCase

from mcpx.server.dispatch import GATEWAY_TOOLS_INSTRUCTIONS
from tests.questions.support import Daemon, in_thread
from tests.support.peers import fixture_argv

FIXTURE_INSTRUCTIONS = "A fixture server for mcpx's tests."


class FixtureInstructionsTests(TestCase):
    timeout = 120

    async def test_each_path_and_era(self) -> None:
        """
        The fixture passed through (and the only server configured): its instructions
        verbatim, then what the gateway tools offered after its tools are for, and no
        word of the gateway's prompt names or mcpx:// URIs, which do not apply.
        """
        argv = fixture_argv("stdio", "both")
        daemon = await Daemon(
            self, {"fixture": {"command": argv[0], "args": argv[1:]}}, passthrough=["fixture"]
        ).start()
        serve = daemon.serve("fixture")
        for path, target in (("/mcp", daemon.mcp_url), ("serve", serve)):
            for mode in ("legacy", "auto"):

                async def conversation(target: Any = target, mode: str = mode) -> Any:
                    async with Client(target, mode=mode, cache=None) as client:
                        return client.instructions

                said = await in_thread(conversation)
                self.assertEqual(
                    said, f"{FIXTURE_INSTRUCTIONS}\n\n{GATEWAY_TOOLS_INSTRUCTIONS}", (path, mode)
                )
