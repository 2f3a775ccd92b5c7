"""
mcpx as an MCP client: channels to upstream servers (stdio, Streamable HTTP, the
2024-11-05 HTTP+SSE transport), the legacy and modern sessions behind one interface,
and the era probe with its cache.
"""
