"""JSON-RPC 2.0 as MCP uses it: messages, error codes, framing, and the bidirectional peer."""
