"""
C{tools/list} over many upstreams with many tools each, and whether it grows linearly.

A real C{mcpx daemon} (temp state directory, unix socket only) with K stdio servers
(C{bench/many_tools_server.py}, 100 tools each by default), for each K of C{--servers}
(25, 50, 100), two ways:

  - B{pass-through}: every server in C{mcp.passthrough}, so a 2026-07-28 C{tools/list} on
    C{/mcp} answers with all K x 100 tools (every page followed, when the answer is
    paginated);
  - B{gateway discovery}: no server passed through; C{tools/list} lists mcpx's own gateway
    tools, and a host discovers the servers' tools with one C{tools/call} of C{mcpx_tools}
    (no arguments: every server's tools), which is timed too.

For each: the first list (which starts every server), then C{--lists} more one after
another.  A listing's time is the gateway's: from each page's request written to its answer's
last byte read, every page together (C{p50 ms}, C{p90 ms}).  The bench client's own time
decoding the answers' JSON (C{json ms}), which it spends between pages while the daemon
waits for the next request, is not part of it: any host pays it for the same bytes, fetched
from the servers directly too, and a Python client pays about four times what C{JSON.parse}
or msgspec would.  C{wall ms} is the median of the two together, as the client lived it.
The daemon's CPU time per list is shown too.  Then the time per tool at each K, which is
flat when the list is linear in the number of tools.

    .venv/bin/python bench/bench_catalogue.py                     # about 1 minute
    .venv/bin/python bench/bench_catalogue.py --servers 10,100 --lists 20

Target (issue 18): C{tools/list} over 100 x 100 at most 20 ms, linear in the tools.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench_call import PYTHON, Daemon, machine, percentile, run_reactor
from bench_mcp import MODERN, MODERN_META, cpu_seconds, post
from keepalive_http import KeepAliveClient, connect

SERVER = str(Path(__file__).resolve().parent / "many_tools_server.py")
TARGET_MS = 20.0


def request(request_id: int, method: str, params: dict[str, Any]) -> bytes:
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if method == "tools/call":
        headers["Mcp-Name"] = params["name"]
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        "params": {**params, "_meta": MODERN_META},
    }
    return post(body, headers)


#: The bench client's own time decoding answers (C{json.loads}), added up: a host pays it
#: whatever the gateway does, so it is shown apart from the rest of each listing.
decoding = [0.0]


def decoded(body: bytes) -> Any:
    begun = time.perf_counter()
    try:
        return json.loads(body)
    finally:
        decoding[0] += time.perf_counter() - begun


async def full_list(client: KeepAliveClient) -> tuple[int, int, int]:
    """Every page of C{tools/list}: (tools, pages, bytes)."""
    cursor: str | None = None
    tools = pages = size = 0
    while True:
        params = {"cursor": cursor} if cursor else {}
        status, body = await client.send(request(pages + 1, "tools/list", params))
        message = decoded(body)
        if status != 200 or "result" not in message:
            raise RuntimeError(f"tools/list answered {status}: {body[:300]!r}")
        tools += len(message["result"]["tools"])
        pages += 1
        size += len(body)
        cursor = message["result"].get("nextCursor")
        if not cursor:
            return tools, pages, size


async def discovery(client: KeepAliveClient) -> tuple[int, int, int]:
    """One C{mcpx_tools} call listing every server's tools: (tools, 1, bytes)."""
    params = {"name": "mcpx_tools", "arguments": {}}
    status, body = await client.send(request(1, "tools/call", params))
    message = decoded(body)
    if status != 200 or "result" not in message or message["result"].get("isError"):
        raise RuntimeError(f"mcpx_tools answered {status}: {body[:300]!r}")
    listed = message["result"].get("structuredContent")
    if listed is None:
        listed = json.loads(message["result"]["content"][0]["text"])
    tools = listed.get("tools", listed) if isinstance(listed, dict) else listed
    return len(tools), 1, len(body)


class Figure:
    def __init__(
        self,
        label: str,
        first: float,
        times: list[float],
        cpu: float,
        shape: tuple[int, int, int],
        *,
        walls: list[float],
        decode: float,
    ) -> None:
        """
        @param times: each timed listing's time, the client's decoding left out.
        @param walls: each timed listing's time with it.
        @param decode: the client's decoding time, every timed listing together.
        """
        self.label, self.first, self.cpu, self.decode = label, first, cpu, decode
        self.times = sorted(times)
        self.walls = sorted(walls)
        self.tools, self.pages, self.size = shape

    @property
    def p50(self) -> float:
        return statistics.median(self.times) * 1000

    def row(self) -> str:
        per = self.cpu / len(self.times) * 1000
        return (
            f"  {self.label:<34} {self.tools:6d} {self.pages:5d} {self.size / 1024:8.0f} "
            f"{self.first * 1000:8.1f} {self.p50:8.2f} {percentile(self.times, 0.9) * 1000:8.2f} "
            f"{per:8.2f} {self.decode / len(self.times) * 1000:8.2f} {self.p50 / self.pages:8.2f}"
            f" {statistics.median(self.walls) * 1000:8.2f}"
        )


async def measure(reactor: Any, daemon: Daemon, label: str, lists: int, how: Any) -> Figure:
    client = await connect(reactor, daemon.socket)
    try:
        begun = time.perf_counter()
        shape = await how(client)
        first = time.perf_counter() - begun
        await how(client)  # one uncounted: the first answers may fill caches
        cpu_before = cpu_seconds(daemon.pid)
        decode = 0.0
        times, walls = [], []
        for _ in range(lists):
            decoding[0] = 0.0
            begun = time.perf_counter()
            shape = await how(client)
            wall = time.perf_counter() - begun
            walls.append(wall)
            times.append(wall - decoding[0])
            decode += decoding[0]
        cpu = cpu_seconds(daemon.pid) - cpu_before
    finally:
        assert client.transport is not None
        client.transport.loseConnection()
    return Figure(label, first, times, cpu, shape, walls=walls, decode=decode)


def verdict(value_ms: float, target_ms: float) -> str:
    if value_ms <= target_ms:
        return f"target <= {target_ms:.0f} ms: met"
    return f"target <= {target_ms:.0f} ms: missed by {value_ms - target_ms:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--servers", default="25,50,100", help="server counts (25,50,100)")
    parser.add_argument("--tools", type=int, default=100, help="tools per server (100)")
    parser.add_argument("--lists", type=int, default=30, help="timed lists per way (30)")
    options = parser.parse_args()
    counts = [int(c) for c in options.servers.split(",")]
    started = time.perf_counter()
    print(f"machine: {machine()}")
    print("load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(
        f"servers: {counts} x {options.tools} tools (bench/many_tools_server.py); "
        f"{options.lists} timed lists per way, one after another, 2026-07-28 requests on /mcp"
    )
    plan = [(count, passthrough) for passthrough in (True, False) for count in counts]

    async def everything(reactor: Any) -> list[Figure]:
        found: list[Figure] = []
        for count, passthrough in plan:
            found += await one(reactor, count, options.tools, passthrough, options.lists)
        return found

    figures = run_reactor(everything)
    print(
        f"\n  {'':<34} {'tools':>6} {'pages':>5} {'KB':>8} {'first ms':>8} {'p50 ms':>8} "
        f"{'p90 ms':>8} {'cpu ms':>8} {'json ms':>8} {'ms/page':>8} {'wall ms':>8}"
    )
    for figure in figures:
        print(figure.row())
    print("\n  linear in the tools? time per tool (p50 / tools), per K:")
    for prefix in ("pass-through", "gateway"):
        for kind in ("tools/list", "mcpx_tools"):
            rows = [f for f in figures if f.label.startswith(prefix) and f.label.endswith(kind)]
            if not rows or rows[0].tools < 1:
                continue
            per = [f.p50 * 1000 / max(f.tools, 1) for f in rows]
            shown = ", ".join(
                f"{f.label.split()[1]}: {p:.2f} us" for f, p in zip(rows, per, strict=True)
            )
            spread = max(per) / min(per) if min(per) > 0 else float("inf")
            print(f"    {prefix} {kind}: {shown} (largest/smallest x{spread:.2f})")
    for figure in figures:
        if figure.label.split()[1] == f"{max(counts)}x{options.tools}":
            print(
                f"  {figure.label}: p50 {figure.p50:.2f} ms (with the client's decoding "
                f"{statistics.median(figure.walls) * 1000:.2f} ms wall), "
                f"{verdict(figure.p50, TARGET_MS)}"
            )
    print("load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"\nwhole run: {time.perf_counter() - started:.1f} s")


async def one(reactor: Any, count: int, tools: int, passthrough: bool, lists: int) -> list[Figure]:
    # Distinct tool names (s7_tool_3), so that pass-through servers do not clash.
    servers = {f"s{i}": [PYTHON, SERVER, str(tools), f"s{i}_"] for i in range(count)}
    env = {"MCPX_MCP_PASSTHROUGH": ",".join(servers)} if passthrough else {}
    daemon = Daemon(servers, None, env=env)
    try:
        if passthrough:
            return [
                await measure(
                    reactor, daemon, f"pass-through {count}x{tools} tools/list", lists, full_list
                )
            ]
        # mcpx_tools first: it starts the servers, as pass-through's first list does.
        found = await measure(
            reactor, daemon, f"gateway {count}x{tools} mcpx_tools", lists, discovery
        )
        listed = await measure(
            reactor, daemon, f"gateway {count}x{tools} tools/list", lists, full_list
        )
        return [listed, found]
    finally:
        daemon.stop()
        daemon.remove()


if __name__ == "__main__":
    main()
