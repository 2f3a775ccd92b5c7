# mypy: ignore-errors
# (It runs under mcp 1.8, not the test venv's mcp 2.x.)
"""
An MCP server on an early Python SDK (C{mcp} 1.8, run by C{.venv-mcp18}'s interpreter),
for the cross-implementation matrix (tests/upstream/test_host_matrix.py): a tool that
adds, one that fails, a prompt and a resource, over stdio. SDKs of this age exit on a
method they do not know, as mcpx's era probe found.
"""

from mcp.server.fastmcp import FastMCP

server = FastMCP("early")


@server.tool()
def early_add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


@server.tool()
def early_fail() -> str:
    """Always fails."""
    raise ValueError("early_fail failed on purpose")


@server.prompt()
def early_greeting(name: str) -> str:
    """Greet someone."""
    return f"Hello, {name}!"


@server.resource("early://note")
def early_note() -> str:
    """A short note."""
    return "a note from an early server"


if __name__ == "__main__":
    server.run()
