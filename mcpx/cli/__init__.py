"""The mcpx command line."""
