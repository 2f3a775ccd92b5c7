"""
A pass-through server that cannot start does not hold up its neighbours on C{/mcp}
(issue 43, item 9): a request waits only on the servers it involves.

The broken server here never answers anything (a process that does not read its
stdin), with C{pool.probeTimeout} and C{pool.startTimeout} at an hour, so any request
that waited on its start would wait an hour: the host's conversation with the healthy
server (C{initialize}, C{tools/list}, a C{tools/call}, a C{prompts/get}) must end all
the same, and say which server it could not list.
"""

from __future__ import annotations

import sys
from typing import Any

import mcp_types as types
from mcp import Client
from twisted.trial.unittest import TestCase

from tests.questions.support import Daemon, demo_server, in_thread

#: A stdio server that never reads or answers anything.
MUTE: dict[str, Any] = {
    "command": sys.executable,
    "args": ["-c", "import time; time.sleep(3600)"],
}

#: Starting the mute server would take an hour. The first listing waits for it
#: pool.listWait twice (its era is not known yet), then names it and answers without it;
#: 3 s rather than 5 s, still ample for the demo server to start and list.
FOREVER = {
    "MCPX_POOL_PROBE_TIMEOUT": "1h",
    "MCPX_POOL_START_TIMEOUT": "1h",
    "MCPX_POOL_LIST_WAIT": "3s",
}


class NeighbourTests(TestCase):
    timeout = 120

    async def conversation(self, daemon: Daemon, mode: str) -> tuple[list[str], str, str]:
        """A host's session with the healthy demo, on C{/mcp}, in C{mode}."""

        async def talk() -> tuple[list[str], str, str]:
            async with Client(daemon.mcp_url, mode=mode, cache=None) as client:
                tools = await client.list_tools()
                called = await client.call_tool("echo", {"text": "still here"})
                prompt = await client.get_prompt("greet", {"name": "Ada"})
            echoed = "".join(getattr(block, "text", "") for block in called.content)
            said = "".join(
                getattr(message.content, "text", "")
                for message in prompt.messages
                if isinstance(message.content, types.TextContent)
            )
            return [tool.name for tool in tools.tools], echoed, said

        result: tuple[list[str], str, str] = await in_thread(talk)
        return result

    async def test_mute_neighbour_first(self) -> None:
        """
        The mute server named first, the demo second: a legacy and a 2026-07-28 host
        each list the demo's tools and call its tool and prompt, while the mute server
        is still starting; it is named in a warning, not waited for.
        """
        daemon = await Daemon(
            self,
            {"mute": MUTE, "demo": demo_server()},
            passthrough=["mute", "demo"],
            settings=FOREVER,
        ).start()
        for mode in ("legacy", "auto"):
            names, echoed, said = await self.conversation(daemon, mode)
            self.assertIn("echo", names, mode)
            self.assertIn("still here", echoed, mode)
            self.assertIn("Ada", said, mode)
        self.assertIn("the tools of server 'mute' were left out", daemon.log())
