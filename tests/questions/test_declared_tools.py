"""
A pass-through host is offered the tools server-everything would offer it directly
(issue 43, item 8): the server registers its elicitation, sampling and roots tools only
for a client that declared those capabilities, and mcpx declares upstream no more than
the host declared, so a host that declared none does not see them, and one that
declared them all does.
"""

from __future__ import annotations

import sys
from typing import Any

import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.context import ClientRequestContext
from twisted.trial.unittest import TestCase

from tests.questions.support import Daemon, everything_server, in_thread


async def _elicit(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult:
    return types.ElicitResult(action="decline")


async def _sample(context: ClientRequestContext, params: Any) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="no"), model="none"
    )


async def _roots(context: ClientRequestContext) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[])


#: What each kind of host declares, as the SDK's callbacks.
HOSTS: dict[str, dict[str, Any]] = {
    "declaring nothing": {},
    "declaring every question": {
        "elicitation_callback": _elicit,
        "sampling_callback": _sample,
        "list_roots_callback": _roots,
    },
    "declaring elicitation only": {"elicitation_callback": _elicit},
}


async def tool_names(target: Any, mode: str, callbacks: dict[str, Any]) -> set[str]:
    """The tools a host with C{callbacks} is offered by C{target}, in C{mode}."""

    async def talk() -> set[str]:
        async with Client(target, mode=mode, cache=None, **callbacks) as client:
            listed = await client.list_tools()
        return {tool.name for tool in listed.tools}

    names: set[str] = await in_thread(talk)
    return names


class DeclaredToolsTests(TestCase):
    timeout = 180

    async def test_same_tools_as_directly(self) -> None:
        """
        For each kind of host, legacy and 2026-07-28, tools/list through /mcp
        pass-through offers the server's tools exactly as server-everything offers them
        to that host directly (the gateway's own tools aside).
        """
        everything = everything_server()
        daemon = await Daemon(self, {"everything": everything}, passthrough=["everything"]).start()
        direct_target = StdioServerParameters(
            command=everything["command"], args=everything["args"], cwd=sys.prefix
        )
        seen: dict[str, set[str]] = {}
        for host, callbacks in HOSTS.items():
            direct = await tool_names(direct_target, "legacy", callbacks)
            seen[host] = direct
            for mode in ("legacy", "auto"):
                through = await tool_names(daemon.mcp_url, mode, callbacks)
                ours = {name for name in through if not name.startswith("mcpx_")}
                self.assertEqual(ours, direct, (host, mode))
        # The server does hide tools from a host that declared nothing: the comparison
        # above is between different lists.
        self.assertIn("trigger-elicitation-request", seen["declaring every question"])
        self.assertNotIn("trigger-elicitation-request", seen["declaring nothing"])
        self.assertIn("trigger-elicitation-request", seen["declaring elicitation only"])
        self.assertNotIn("trigger-sampling-request", seen["declaring elicitation only"])
