# -*- test-case-name: tests.spec.test_downgrade -*-
"""
What spelling a result down costs per answer.

Run with C{python bench/bench_downgrade.py}.  Prints microseconds per call of
L{downgrade} on a typical tool result for 2025-06-18 and 2024-11-05, on the
2026-07-28 fast path, and of L{envelope}; beside them, in the same run, the two
references it has to beat: a shallow C{dict()} copy (the least any copy costs)
and C{copy.deepcopy} (what a careless copy would cost).
"""

from __future__ import annotations

import copy
import timeit
from collections.abc import Callable
from typing import Any

from mcpx.spec.downgrade import SERVER_INFO_KEY, downgrade, envelope
from mcpx.spec.revision import Revision

SERVER_INFO: dict[str, Any] = {"name": "mcpx", "version": "1.0.0"}

#: A tool result as upstreams send them: some text, a link, structured content.
RESULT: dict[str, Any] = {
    "content": [
        {"type": "text", "text": '{"temperature": 21, "conditions": "sunny"}'},
        {
            "type": "resource_link",
            "uri": "mcpx://weather/file%3A%2F%2F%2Flisbon.json",
            "name": "lisbon",
            "mimeType": "application/json",
        },
    ],
    "structuredContent": {"temperature": 21, "conditions": "sunny"},
    "isError": False,
    "resultType": "complete",
    "_meta": {SERVER_INFO_KEY: SERVER_INFO, "dev.mcpx/upstream": "weather"},
}

TOOLS: dict[str, Any] = {
    "tools": [
        {
            "name": f"tool{n}",
            "description": "does a thing",
            "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}},
        }
        for n in range(20)
    ]
}


def per_call(action: Callable[[], object], number: int = 50_000) -> float:
    """Microseconds per call, the best of five runs."""
    return min(timeit.repeat(action, number=number, repeat=5)) / number * 1e6


def main() -> None:
    rows = [
        ("dict(result), reference", lambda: dict(RESULT)),
        ("copy.deepcopy(result), reference", lambda: copy.deepcopy(RESULT)),
        (
            "downgrade tools/call 2026-07-28 (fast path)",
            lambda: downgrade(RESULT, "tools/call", Revision.V2026_07_28),
        ),
        (
            "downgrade tools/call 2025-06-18",
            lambda: downgrade(RESULT, "tools/call", Revision.V2025_06_18),
        ),
        (
            "downgrade tools/call 2024-11-05",
            lambda: downgrade(RESULT, "tools/call", Revision.V2024_11_05),
        ),
        (
            "downgrade tools/list (20 tools) 2026-07-28",
            lambda: downgrade(TOOLS, "tools/list", Revision.V2026_07_28),
        ),
        (
            "envelope tools/list 2026-07-28",
            lambda: envelope(
                TOOLS, "tools/list", server_info=SERVER_INFO, list_max_age=60.0, read_max_age=0.0
            ),
        ),
    ]
    for label, action in rows:
        print(f"{label:<45} {per_call(action):7.2f} us/call")


if __name__ == "__main__":
    main()
