# -*- test-case-name: tests.spec.test_schemas -*-
"""
How fast the strict validator checks a typical C{CallToolResult}.

Run with C{python bench/bench_schemas.py}.  Prints the one-off cost of
compiling the validator and the steady rate of validations per second.
"""

from __future__ import annotations

import time
from typing import Any

from mcpx.spec.revision import Revision
from mcpx.spec.schemas import validator, violations

RESULT: dict[str, Any] = {
    "resultType": "complete",
    "content": [
        {"type": "text", "text": "It is 21 degrees and sunny in Lisbon."},
        {"type": "resource_link", "uri": "file:///weather/lisbon.json", "name": "lisbon"},
    ],
    "structuredContent": {"temperature": 21, "conditions": "sunny"},
    "isError": False,
    "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "weather", "version": "1.0"}},
}


def main(rounds: int = 20_000) -> None:
    started = time.perf_counter()
    validator(Revision.V2026_07_28, "CallToolResult")
    compiled = time.perf_counter() - started
    print(f"compile 2026-07-28 strict CallToolResult: {compiled * 1000:.1f} ms (once)")

    for source in (Revision.V2025_06_18, Revision.V2026_07_28):
        instance = dict(RESULT)
        if source < Revision.V2026_07_28:
            del instance["resultType"]
            instance["_meta"] = {}
        if violations(instance, source, "CallToolResult"):
            raise SystemExit(f"benchmark instance is invalid for {source}")
        started = time.perf_counter()
        for _ in range(rounds):
            violations(instance, source, "CallToolResult")
        elapsed = time.perf_counter() - started
        print(
            f"{source} strict CallToolResult: {rounds / elapsed:,.0f} validations/s"
            f" ({elapsed / rounds * 1e6:.1f} us each)"
        )


if __name__ == "__main__":
    main()
