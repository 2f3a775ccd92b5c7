"""
What one C{mcpx_exec} costs and saves against twenty C{mcpx_call}s: time, and what a model reads.

One run, a real C{mcpx daemon} (temp state directory, unix socket only) with the bundled
demo configured as C{--servers} servers (C{demo}, C{other}, and C{s2}, C{s3}, ... that the
task does not need), MCP 2026-07-28 requests POSTed to C{/mcp} as a host sends them. The
task: C{add(a=i, b=1)} for i in 0..19, alternating between C{demo} and C{other}, and the
total. Done three ways, C{--repeat} times each, interleaved:

  1. I{20 round trips}: twenty C{tools/call} of C{mcpx_call}, one after another, as a
     model that makes one tool call a turn does (its own thinking between the calls is
     not counted);
  2. I{20 in flight}: the same twenty at once on twenty connections (a host that sends a
     model's parallel tool calls together);
  3. I{one mcpx_exec}: one C{tools/call} of C{mcpx_exec} with a program that makes the
     twenty calls with C{asyncio.gather} and returns one line.

For each: the wall time (median of the runs) and the bytes of the answers the host got,
which is the context a model would read. Then what the model must read to write the
program: the stubs of the two servers the task needs (C{await stubs(...)}, the text of
an C{mcpx_exec} answer), against C{mcpx_tools} of every server (names and
descriptions) and every tool's full definition (C{mcpx_describe}, input schema
included), which is what a client that lists every tool reads.

    .venv/bin/python bench/bench_exec.py [--repeat N] [--servers N]
    .venv/bin/python bench/bench_exec.py --quick     # a few seconds

The figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench_call import DEMO_ARGV, Daemon, close_all, machine, run_reactor, section
from bench_mcp import ACCEPT, MODERN, MODERN_META, post
from keepalive_http import KeepAliveClient, connect
from twisted.internet.defer import DeferredList

#: The calls of the task.
CALLS = 20

PROGRAM = (
    "import asyncio\n"
    "rows = await asyncio.gather(\n"
    f"    *[(demo if i % 2 else other).add(a=i, b=1) for i in range({CALLS})]\n"
    ")\n"
    "f\"total={sum(r['sum'] for r in rows)}\""
)
STUBS_PROGRAM = '(await stubs("demo")) + "\\n" + (await stubs("other"))'
EXPECTED_TOTAL = sum(i + 1 for i in range(CALLS))


def tools_call(name: str, arguments: dict[str, Any], request_id: int) -> bytes:
    """One 2026-07-28 C{tools/call} POST, as a host sends it."""
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": MODERN_META},
    }
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": name}
    return post(body, headers)


def call_request(i: int) -> bytes:
    server = "demo" if i % 2 else "other"
    arguments = {"server": server, "tool": "add", "arguments": {"a": i, "b": 1}}
    return tools_call("mcpx_call", arguments, i + 1)


def result_of(answer: tuple[int, bytes]) -> dict[str, Any]:
    status, body = answer
    if status != 200:
        raise RuntimeError(f"the daemon answered {status}: {body[:300]!r}")
    if body.startswith((b"event:", b"data:")):
        raise RuntimeError(f"expected a JSON answer, got a stream: {body[:200]!r}")
    message: dict[str, Any] = json.loads(body)
    result = message.get("result")
    if not isinstance(result, dict) or result.get("isError"):
        raise RuntimeError(f"the call failed: {body[:300]!r}")
    return result


def text_of(result: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in result.get("content", []) if b.get("type") == "text")


class Way:
    """One way of doing the task: its wall times and the bytes the host got, per run."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.times: list[float] = []
        self.bytes: list[int] = []
        self.answers: list[int] = []

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times) * 1000

    @property
    def received(self) -> int:
        return int(statistics.median(self.bytes))

    def row(self) -> str:
        return (
            f"  {self.label:<34} {self.median_ms:9.1f} {min(self.times) * 1000:9.1f} "
            f"{self.answers[0]:8d} {self.received:10d}"
        )


async def round_trips(client: KeepAliveClient, way: Way) -> None:
    begun = time.perf_counter()
    total = received = 0
    for i in range(CALLS):
        answer = await client.send(call_request(i))
        received += len(answer[1])
        total += result_of(answer)["structuredContent"]["sum"]
    way.times.append(time.perf_counter() - begun)
    if total != EXPECTED_TOTAL:
        raise RuntimeError(f"the round trips added up to {total}")
    way.bytes.append(received)
    way.answers.append(CALLS)


async def in_flight(clients: list[KeepAliveClient], way: Way) -> None:
    begun = time.perf_counter()
    answers = await DeferredList(
        [c.send(call_request(i)) for i, c in enumerate(clients)], fireOnOneErrback=True
    )
    way.times.append(time.perf_counter() - begun)
    pairs = [answer for _, answer in answers]
    total = sum(result_of(a)["structuredContent"]["sum"] for a in pairs)
    if total != EXPECTED_TOTAL:
        raise RuntimeError(f"the calls in flight added up to {total}")
    way.bytes.append(sum(len(a[1]) for a in pairs))
    way.answers.append(CALLS)


async def one_exec(client: KeepAliveClient, way: Way) -> None:
    begun = time.perf_counter()
    answer = await client.send(tools_call("mcpx_exec", {"program": PROGRAM}, 1))
    way.times.append(time.perf_counter() - begun)
    line = text_of(result_of(answer))
    if line != f"total={EXPECTED_TOTAL}":
        raise RuntimeError(f"mcpx_exec answered {line!r}")
    way.bytes.append(len(answer[1]))
    way.answers.append(1)


async def descriptions(client: KeepAliveClient, servers: list[str]) -> dict[str, int]:
    """The bytes a model reads to write the program, each way of learning the tools."""
    stubs = text_of(
        result_of(await client.send(tools_call("mcpx_exec", {"program": STUBS_PROGRAM}, 1)))
    )
    listed = await client.send(tools_call("mcpx_tools", {}, 2))
    tools = result_of(listed)["structuredContent"]["tools"]
    if {t["server"] for t in tools} != set(servers):
        raise RuntimeError(f"mcpx_tools listed {sorted({t['server'] for t in tools})}")
    full = 0
    for n, tool in enumerate(tools):
        described = await client.send(
            tools_call("mcpx_describe", {"server": tool["server"], "tool": tool["name"]}, n)
        )
        full += len(json.dumps(result_of(described)["structuredContent"]["tool"]))
    return {
        "stubs": len(stubs.encode()),
        "list": len(listed[1]),
        "full": full,
        "tools": len(tools),
        "needed": sum(1 for t in tools if t["server"] in ("demo", "other")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=15, help="runs of each way (15)")
    parser.add_argument("--servers", type=int, default=10, help="servers configured (10)")
    parser.add_argument("--quick", action="store_true", help="--repeat 3 --servers 4")
    options = parser.parse_args()
    repeat, count = (3, 4) if options.quick else (options.repeat, max(2, options.servers))
    servers = ["demo", "other", *(f"s{n}" for n in range(2, count))]

    started = time.perf_counter()
    print(f"machine: {machine()}")
    print(
        f"task: {CALLS} calls of add across demo and other; {len(servers)} servers configured "
        f"(the demo each); {repeat} runs of each way; MCP {MODERN} on /mcp, Accept: {ACCEPT}"
    )
    daemon = Daemon({name: DEMO_ARGV for name in servers}, None)
    ways = [Way("20 mcpx_call round trips"), Way("20 mcpx_call in flight"), Way("1 mcpx_exec")]

    async def measure(reactor: Any) -> dict[str, int]:
        clients = [await connect(reactor, daemon.socket) for _ in range(CALLS)]
        try:
            # Warm-up: every server started, the first worker spawned.
            for name in servers:
                arguments = {"server": name, "tool": "add", "arguments": {"a": 1, "b": 1}}
                result_of(await clients[0].send(tools_call("mcpx_call", arguments, 1)))
            await one_exec(clients[0], Way("warm-up"))
            runs: list[Callable[[], Awaitable[None]]] = [
                lambda: round_trips(clients[0], ways[0]),
                lambda: in_flight(clients, ways[1]),
                lambda: one_exec(clients[0], ways[2]),
            ]
            # Interleaved, so a burst of load on the machine hits each way alike.
            for _ in range(repeat):
                for run in runs:
                    await run()
            return await descriptions(clients[0], servers)
        finally:
            await close_all(reactor, clients)

    try:
        found = run_reactor(measure)
    finally:
        status, _, survivors = daemon.stop()
        daemon.remove()

    with section("the task, done three ways:"):
        print(f"  {'':<34} {'p50 ms':>9} {'min ms':>9} {'answers':>8} {'bytes back':>10}")
        for way in ways:
            print(way.row())
        trips, parallel, script = ways
        print(
            "  1 mcpx_exec against 20 round trips: "
            f"wall x{script.median_ms / trips.median_ms:.2f}, "
            f"bytes back x{script.received / trips.received:.3f} "
            f"({1 - script.received / trips.received:.1%} fewer)"
        )
        print(
            "  1 mcpx_exec against 20 in flight: "
            f"wall x{script.median_ms / parallel.median_ms:.2f}, "
            f"bytes back x{script.received / parallel.received:.3f}"
        )
    with section("what a model reads to write the program:"):
        rows = [
            (f"stubs of the 2 servers it needs ({found['needed']} tools)", found["stubs"]),
            (f"mcpx_tools of every server ({found['tools']} tools)", found["list"]),
            (f"every tool's full definition ({found['tools']} tools)", found["full"]),
        ]
        for label, size in rows:
            print(f"  {label:<46} {size:8d} bytes")
        print(
            f"  stubs against the listing: x{found['stubs'] / found['list']:.3f}; against the "
            f"full definitions: x{found['stubs'] / found['full']:.3f} "
            f"({1 - found['stubs'] / found['full']:.1%} fewer)"
        )
    print(f"\ndaemon stopped with SIGTERM: exit {status}, children left {len(survivors)}")
    print(f"whole run: {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
