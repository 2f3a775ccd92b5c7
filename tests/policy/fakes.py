"""An inner pool for the policy's tests: scripted tools, every call recorded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcpx.pool.status import ReloadReport
from mcpx.settings.server_policy import parse_policy
from mcpx.settings.servers import ServersConfig, StdioServer


def configured(**entries: Mapping[str, object]) -> ServersConfig:
    """Servers named by keyword, each with the policy keys its entry gives."""
    return ServersConfig(
        {name: StdioServer(name, "python3") for name in entries},
        "test",
        policies={
            name: parse_policy(entry, {}, where=f"server {name!r}")
            for name, entry in entries.items()
        },
    )


NOTE_TOOLS: list[dict[str, Any]] = [
    {
        "name": "add_note",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string", "minLength": 1}},
            "required": ["text"],
            "additionalProperties": False,
        },
        "outputSchema": {
            "type": "object",
            "properties": {"id": {"type": "integer"}},
            "required": ["id"],
        },
    },
    {
        "name": "delete_note",
        "inputSchema": {"type": "object", "properties": {"id": {"type": "integer"}}},
        "annotations": {"destructiveHint": True},
    },
    {"name": "drop_all", "inputSchema": {"type": "object"}},
    {
        "name": "wipe",
        "inputSchema": {"type": "object"},
        "annotations": {"destructiveHint": True, "readOnlyHint": True},
    },
]


class InnerPool:
    """
    One server, C{notes}, whose tools are L{NOTE_TOOLS}; answers C{answer}.

    @ivar calls: every call that reached it, as C{(tool, arguments)}.
    """

    def __init__(self, servers: ServersConfig, tools: list[dict[str, Any]] | None = None) -> None:
        self.servers = servers
        self.catalogue = list(NOTE_TOOLS if tools is None else tools)
        self.calls: list[tuple[str, Mapping[str, Any]]] = []
        self.answer: dict[str, Any] = {"content": [], "structuredContent": {"id": 1}}
        self.lists = 0
        #: Whether its tool list counts as cached (L{cached_catalogue} hands it out).
        self.cached = False

    async def tools(self, server: str, *, client: str = "") -> list[dict[str, Any]]:
        self.lists += 1
        return list(self.catalogue)

    def cached_catalogue(
        self, server: str, kind: str, *, client: str = ""
    ) -> list[dict[str, Any]] | None:
        # Unless told otherwise, nothing is cached: every list is fetched (and counted in
        # L{lists}).
        return self.catalogue if self.cached and kind == "tools" else None

    async def call_tool(
        self, server: str, tool: str, arguments: Mapping[str, Any] | None = None, **_: Any
    ) -> dict[str, Any]:
        self.calls.append((tool, dict(arguments or {})))
        return dict(self.answer)

    async def reload(self, servers: ServersConfig) -> ReloadReport:
        old = self.servers
        self.servers = servers
        return ReloadReport(unchanged=tuple(name for name in servers if name in old))

    def scope_key(self, server: str, client: str) -> str:
        return ""

    def probe_wait(self, server: str) -> float:
        return 0.0
