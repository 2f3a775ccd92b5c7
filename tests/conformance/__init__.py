"""
mcpx's upstream client against the official MCP conformance suite's client leg.
"""
