"""
The six real servers of the matrix (L{tests.support.real_servers}), timed directly with the
MCP SDK and through mcpx, side by side in one run.

  1. cold call: direct, the SDK spawns the server, initializes, calls its reference tool
     and exits; through mcpx, C{mcpx call} on a running daemon that has not started the
     server yet (so the daemon spawns it);
  2. warm call: direct, a call on the SDK's open session; through mcpx, C{mcpx call} as a
     process, and C{POST /v1/call}, on the warm daemon (medians of C{--runs});
  3. C{tools/list} of all six: direct, six open SDK sessions listed at once; through mcpx,
     one C{tools/list} on an open C{/mcp} session passing the six through (medians).

    .venv/bin/python bench/bench_real_servers.py [--runs N]

Needs what C{make test} installs (the npm peers, the test venv, C{.venv-calculator}).
The figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from tests.support.real_servers import (
    NAMES,
    Data,
    in_worker,
    make_data,
    server_configs,
    start_daemon,
)

#: The call timed for each server: its tool and arguments.
REFERENCE: dict[str, Callable[[Data], tuple[str, dict[str, Any]]]] = {
    "filesystem": lambda d: ("read_text_file", {"path": str(d.tree / "notes.txt")}),
    "memory": lambda d: ("read_graph", {}),
    "thinking": lambda d: (
        "sequentialthinking",
        {"thought": "t", "thoughtNumber": 1, "totalThoughts": 1, "nextThoughtNeeded": False},
    ),
    "time": lambda d: (
        "convert_time",
        {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
    ),
    "git": lambda d: ("git_status", {"repo_path": str(d.repository)}),
    "calculator": lambda d: ("calculate", {"expression": "2*3+1"}),
}


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


async def timed(work: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await work()
    return time.perf_counter() - started


def params(config: dict[str, Any]) -> StdioServerParameters:
    return StdioServerParameters(
        command=config["command"],
        args=list(config["args"]),
        env={**os.environ, **config.get("env", {})},
    )


def direct(data: Data, runs: int) -> dict[str, Any]:
    configs = server_configs(data)

    async def measure() -> dict[str, Any]:
        cold: dict[str, float] = {}
        warm: dict[str, float] = {}
        for server in NAMES:
            tool, arguments = REFERENCE[server](data)
            started = time.perf_counter()
            async with Client(params(configs[server]), mode="legacy") as client:
                await client.call_tool(tool, arguments)
                cold[server] = time.perf_counter() - started
                samples = []
                for _ in range(runs):
                    before = time.perf_counter()
                    await client.call_tool(tool, arguments)
                    samples.append(time.perf_counter() - before)
                warm[server] = statistics.median(samples)
        # tools/list of all six at once, on six open sessions.
        lists: list[float] = []
        async with _Sessions(configs) as clients:
            for _ in range(runs):
                started = time.perf_counter()
                async with anyio.create_task_group() as group:
                    for client in clients:
                        group.start_soon(client.list_tools)
                lists.append(time.perf_counter() - started)
        return {"cold": cold, "warm": warm, "list": statistics.median(lists)}

    return in_worker(measure, timeout=600)


class _Sessions:
    """Six open SDK sessions, one to each server."""

    def __init__(self, configs: dict[str, dict[str, Any]]) -> None:
        self.configs = configs
        self.clients = [Client(params(configs[server]), mode="legacy") for server in NAMES]

    async def __aenter__(self) -> list[Client]:
        for client in self.clients:
            await client.__aenter__()
        return self.clients

    async def __aexit__(self, *exc: object) -> None:
        for client in reversed(self.clients):
            await client.__aexit__(None, None, None)


def through_mcpx(data: Data, runs: int) -> dict[str, Any]:
    daemon = start_daemon(data, passthrough=NAMES)
    try:
        cold: dict[str, float] = {}
        warm_cli: dict[str, float] = {}
        warm_v1: dict[str, float] = {}
        for server in NAMES:
            tool, arguments = REFERENCE[server](data)
            argument = json.dumps(arguments)
            started = time.perf_counter()
            done = daemon.cli("call", server, tool, argument)
            cold[server] = time.perf_counter() - started
            if done.returncode != 0:
                raise SystemExit(f"mcpx call {server} {tool} failed: {done.stderr}")
            samples = []
            for _ in range(runs):
                started = time.perf_counter()
                daemon.cli("call", server, tool, argument)
                samples.append(time.perf_counter() - started)
            warm_cli[server] = statistics.median(samples)
            samples = []
            for _ in range(runs):
                started = time.perf_counter()
                daemon.post("/v1/call", {"server": server, "tool": tool, "arguments": arguments})
                samples.append(time.perf_counter() - started)
            warm_v1[server] = statistics.median(samples)

        async def listing() -> float:
            async with Client(daemon.mcp_url, mode="auto") as client:
                await client.list_tools()
                return statistics.median([await timed(client.list_tools) for _ in range(runs)])

        listed = in_worker(listing)
        return {"cold": cold, "cli": warm_cli, "v1": warm_v1, "list": listed}
    finally:
        daemon.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="samples per warm figure")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mcpx-bench-real-") as root:
        data = make_data(Path(root))
        sdk = direct(data, options.runs)
        mcpx = through_mcpx(data, options.runs)
    print(
        f"# {platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} cores"
    )
    print(
        f"{'server':<12} {'cold direct':>12} {'cold mcpx call':>15} "
        f"{'warm direct':>12} {'warm mcpx call':>15} {'warm /v1/call':>14}"
    )
    for server in NAMES:
        print(
            f"{server:<12} {ms(sdk['cold'][server]):>12} {ms(mcpx['cold'][server]):>15} "
            f"{ms(sdk['warm'][server]):>12} {ms(mcpx['cli'][server]):>15} "
            f"{ms(mcpx['v1'][server]):>14}"
        )
    print(
        f"tools/list of all six: direct (six sessions at once) {ms(sdk['list'])}, "
        f"/mcp pass-through {ms(mcpx['list'])}"
    )


if __name__ == "__main__":
    main()
