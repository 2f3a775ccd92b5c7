"""mcpx between hosts and upstreams written by others: TypeScript SDK peers and the Python SDK."""
