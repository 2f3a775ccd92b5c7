# -*- test-case-name: tests.server -*-
"""
mcpx as an MCP server: the one implementation every transport (stdio through
C{mcpx serve}, Streamable HTTP at C{/mcp}) hands its requests to.

L{McpServer} answers requests for a L{Conn}; L{mcpx.server.surface} is what it
offers (the gateway tools, namespaced prompts, C{mcpx://} resources) and
L{mcpx.ops.uris} the C{mcpx://} names.
"""

from __future__ import annotations

from mcpx.server.conn import Conn, Context
from mcpx.server.dispatch import McpServer

__all__ = ["Conn", "Context", "McpServer"]
