"""
What a 2025-11-25 task costs over a plain call, in mcpx's MCP server alone.

In memory, no transport and no upstream process: a 2025-11-25 client on an in-memory pair
of JSON-RPC peers (the test suite's L{tests.server.Harness}) calls C{mcpx_call} over a
scripted pool that answers at once, three ways, N times each:

  1. plain: C{tools/call};
  2. task: C{tools/call} with C{"task": {}}, then C{tasks/result} (the whole life of a
     task: made, run, finished, collected, status notification sent);
  3. poll: C{tasks/get} of one finished task (what each poll of a waiting client costs).

    .venv/bin/python bench/bench_tasks.py [--calls N]

The figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcpx.spec.revision import Revision
from tests.server import Harness, Session, result_of

CALL: dict[str, Any] = {
    "name": "mcpx_call",
    "arguments": {"server": "search", "tool": "web_search", "arguments": {"q": "x"}},
}


def per_call(label: str, calls: int, run: Any) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        run()
    spent = (time.perf_counter() - started) / calls * 1e6
    print(f"  {label:<38} {spent:8.1f} µs")
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    calls = parser.parse_args().calls
    session = Session(Revision.V2025_11_25, Harness())
    harness = session.harness
    # Keep the store from filling: every task here is collected at once, so forget it.
    harness.host.tasks.limit = calls * 4
    harness.host.tasks.per_client = calls * 4

    def plain() -> None:
        result_of(harness.request("tools/call", CALL))

    def task() -> None:
        created = result_of(harness.request("tools/call", {**CALL, "task": {}}))
        result_of(harness.request("tasks/result", {"taskId": created["task"]["taskId"]}))

    finished = result_of(harness.request("tools/call", {**CALL, "task": {}}))["task"]["taskId"]

    def poll() -> None:
        result_of(harness.request("tasks/get", {"taskId": finished}))

    for run in (plain, task, poll):  # warm-up
        for _ in range(200):
            run()
    print(f"mcpx MCP server, in memory, 2025-11-25 client, {calls} each:")
    base = per_call("tools/call (plain)", calls, plain)
    whole = per_call("tools/call with task + tasks/result", calls, task)
    per_call("tasks/get (one poll)", calls, poll)
    print(f"  a task costs {whole - base:.1f} µs over a plain call ({whole / base:.2f}x)")


if __name__ == "__main__":
    main()
