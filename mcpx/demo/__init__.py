# -*- test-case-name: tests.demo.test_demo -*-
"""
A small MCP server that ships with mcpx, so that a fresh configuration has something to
talk to: C{python -m mcpx.demo} serves it on stdio.

It speaks every revision mcpx does (the legacy ones after C{initialize}, 2026-07-28 per
request) and offers four tools (C{echo}, C{add}, C{now}, C{fail}), one prompt (C{greet})
and one resource (C{demo://readme}).  It is built on mcpx's own JSON-RPC layer, not an SDK.
"""

from __future__ import annotations

from mcpx.demo.server import SERVER_NAME, SUPPORTED_VERSIONS, DemoServer
from mcpx.demo.session import DemoSession
from mcpx.demo.stdio import DemoProtocol, run

__all__ = [
    "SERVER_NAME",
    "SUPPORTED_VERSIONS",
    "DemoProtocol",
    "DemoServer",
    "DemoSession",
    "run",
]
