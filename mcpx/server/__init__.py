# -*- test-case-name: tests.server -*-
"""
mcpx as an MCP server: the one implementation every transport (stdio through
C{mcpx serve}, Streamable HTTP at C{/mcp}) hands its requests to.

L{mcpx.server.dispatch.McpServer} answers requests for a L{mcpx.server.conn.Conn};
L{mcpx.server.surface} is what it offers (the gateway tools, namespaced prompts,
C{mcpx://} resources) and L{mcpx.ops.uris} the C{mcpx://} names.
"""
