"""
The operations: everything the daemon can be asked to do, declared once.

Both transports run them: C{/v1} (L{mcpx.daemon.api}) and the MCP gateway's own tools
(L{mcpx.server.surface}).  The package holds the contract (L{mcpx.ops.op},
L{mcpx.ops.host}, L{mcpx.ops.errors}), the handlers by domain, the table
(L{mcpx.ops.table}), the OpenAPI document, the event bus, reloads and the stop.

This file imports nothing: the CLI reads L{mcpx.ops.routes} without Twisted.
"""
