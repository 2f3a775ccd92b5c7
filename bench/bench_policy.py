"""
The policy layer's cost per tool call, by validation mode, against calling the pool
directly (no policy).  In memory: an inner pool that answers at once, so what is
measured is the guard itself (lookup, input check, output check).

    .venv/bin/python bench/bench_policy.py [calls]

Target: under 0.1 ms per call in "enforce" mode on these tools.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from twisted.internet.defer import Deferred

from mcpx.policy.guard import GuardedPool
from tests.policy.fakes import InnerPool, configured

FLAT = {
    "name": "search",
    "inputSchema": {
        "type": "object",
        "properties": {"query": {"type": "string", "minLength": 1}, "limit": {"type": "integer"}},
        "required": ["query"],
        "additionalProperties": False,
    },
    "outputSchema": {
        "type": "object",
        "properties": {"hits": {"type": "array", "items": {"type": "string"}}},
        "required": ["hits"],
    },
}
NESTED = {
    "name": "create",
    "inputSchema": {
        "type": "object",
        "properties": {
            "item": {
                "type": "object",
                "properties": {
                    "title": {"type": "string"},
                    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 10},
                },
                "required": ["title"],
            },
            "mode": {"enum": ["draft", "final"]},
        },
        "required": ["item"],
    },
}
CALLS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "search": (
        {"query": "twisted", "limit": 5},
        {"content": [], "structuredContent": {"hits": ["a"]}},
    ),
    "create": ({"item": {"title": "t", "tags": ["x", "y"]}, "mode": "draft"}, {"content": []}),
}


def per_call(pool: Any, tool: str, count: int) -> float:
    arguments, _ = CALLS[tool]
    started = time.perf_counter()
    for _ in range(count):
        done = Deferred.fromCoroutine(pool.call_tool("bench", tool, arguments))
        assert done.called
    return (time.perf_counter() - started) / count * 1e6


def main(count: int) -> None:
    for tool in CALLS:
        rows = []
        for label, validate in (
            ("none (pool)", None),
            ("off", {"input": "off", "output": "off"}),
            ("warn", {"input": "warn", "output": "warn"}),
            ("enforce", {"input": "enforce", "output": "enforce"}),
        ):
            inner = InnerPool(
                configured(bench=({"validate": validate} if validate else {})), [FLAT, NESTED]
            )
            inner.answer = CALLS[tool][1]
            pool = inner if validate is None else GuardedPool(inner)
            per_call(pool, tool, 200)  # compile and warm up
            rows.append((label, per_call(pool, tool, count)))
        base = rows[0][1]
        for label, micros in rows:
            print(f"{tool:7} {label:12} {micros:7.2f} us/call  (+{micros - base:6.2f} us)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000)
