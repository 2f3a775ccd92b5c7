"""What each MCP revision defines, as data: revisions, the matrix, the conflict policy, schemas."""
