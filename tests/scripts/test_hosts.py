"""
Real hosts (the C{mcp} SDK client, legacy and 2026-07-28, on C{/mcp}) call C{mcpx_exec}
on a real daemon with real servers.
"""

from __future__ import annotations

import functools
from typing import Any

from mcp import Client
from twisted.trial.unittest import TestCase

from tests.questions.support import MODERN, Daemon, demo_server, in_thread
from tests.questions.test_end_to_end import Answerer, texts, wire

TWENTY_CALLS = (
    "import asyncio\n"
    "rows = await asyncio.gather(*[(demo if i % 2 else other).add(a=i, b=1) "
    "for i in range(20)])\n"
    "f\"total={sum(r['sum'] for r in rows)}\""
)


class HostTests(TestCase):
    timeout = 120

    async def test_twenty_calls_one_line_legacy_and_modern(self) -> None:
        daemon = await Daemon(self, {"demo": demo_server(), "other": demo_server()}).start()

        async def conversation(mode: str) -> dict[str, Any]:
            async with Client(daemon.mcp_url, mode=mode, cache=None) as client:
                return wire(await client.call_tool("mcpx_exec", {"program": TWENTY_CALLS}))

        for mode in ("legacy", MODERN):
            result = await in_thread(functools.partial(conversation, mode))
            self.assertFalse(result.get("isError", False), result)
            self.assertEqual(texts(result), "total=210", mode)

    async def test_question_reaches_the_host_that_called_mcpx_exec(self) -> None:
        """A tool the program calls asks a question; the host that called mcpx_exec answers."""
        daemon = await Daemon(self, {"demo": demo_server()}).start()
        answerer = Answerer(["Ada"])

        async def conversation() -> dict[str, Any]:
            async with Client(
                daemon.mcp_url, mode="legacy", elicitation_callback=answerer.elicit, cache=None
            ) as client:
                program = 'r = await demo.ask(question="Who are you?")\nr'
                return wire(await client.call_tool("mcpx_exec", {"program": program}))

        result = await in_thread(conversation)
        self.assertFalse(result.get("isError", False), result)
        self.assertIn("Ada", texts(result))
        self.assertEqual(
            [asked["message"] for asked in answerer.asked], ["demo (via mcpx) asks: Who are you?"]
        )
