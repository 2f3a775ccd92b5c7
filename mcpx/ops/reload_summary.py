# -*- test-case-name: tests.daemon.test_reloading -*-
"""
What a reload did, as one line of text: the daemon's log says it, and so does the CLI
after C{mcpx reload}, C{add}, C{remove} and C{import}. Standard library only, as
L{mcpx.ops.routes} is, since the CLI imports it without Twisted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def reload_summary(answer: Mapping[str, Any]) -> str:
    """What a reload did, as a line of text (C{POST /v1/reload}'s answer, summed up)."""
    parts = [
        f"{key} {', '.join(map(str, answer[key]))}"
        for key in ("added", "removed", "changed", "unchanged")
        if answer.get(key)
    ]
    misconfigured = answer.get("misconfigured") or {}
    if misconfigured:
        parts.append(f"misconfigured {', '.join(misconfigured)}")
    return "; ".join(parts) if parts else "no servers configured"
