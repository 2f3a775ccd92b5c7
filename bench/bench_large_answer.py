"""
The daemon's CPU time for a pass-through C{tools/call} with a large answer.

A real daemon passes the bundled demo through (C{MCPX_MCP_PASSTHROUGH=demo}); one client
on loopback TCP calls C{echo} with a long non-ASCII text, in a 2025-06-18 session and as
2026-07-28 requests, and the daemon's own CPU time per call is printed (the demo's is not
counted).  The answer is as large as the request, so both are in the figure.

    .venv/bin/python bench/bench_large_answer.py [REPEATS [CALLS]]

C{REPEATS} of C{"Grüße, 世界, ça va? "} (5000: 125 KB), C{CALLS} one after another (150),
after 50 to warm up.  To compare two trees, run it with each tree's interpreter back to
back, several times.  The figures are printed; nothing is asserted.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from bench_call import DEMO_ARGV, Daemon, close_all, run_reactor, sequential
from bench_gateways import (
    HOST,
    LEGACY,
    MODERN,
    MODERN_META,
    _caller,
    free_port,
    open_session,
    post,
)
from bench_mcp import measured
from keepalive_http import connect_tcp


def main() -> None:
    text = "Grüße, 世界, ça va? " * (int(sys.argv[1]) if len(sys.argv) > 1 else 5000)
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 150
    port = free_port()
    daemon = Daemon(
        {"demo": DEMO_ARGV},
        None,
        listen=f"tcp:{port}:interface={HOST}",
        env={"MCPX_MCP_PASSTHROUGH": "demo"},
    )

    def request(session: str | None) -> bytes:
        params: dict[str, Any] = {"name": "echo", "arguments": {"text": text}}
        if session is not None:
            headers = {"MCP-Protocol-Version": LEGACY, "Mcp-Session-Id": session}
        else:
            params["_meta"] = MODERN_META
            headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call"}
            headers["Mcp-Name"] = "echo"
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
        return post(port, body, headers)

    async def measure(reactor: Any) -> list[Any]:
        session = open_session(port, time.monotonic() + 60)
        for label, way in (("legacy", session), ("modern", None)):
            client = await connect_tcp(reactor, HOST, port)
            call = _caller(reactor, client, request(way))
            await sequential("warm-up", call, 50)
            run = await measured(daemon.pid, lambda: sequential(label, call, calls))  # noqa: B023
            cpu = (run.daemon_cpu or 0.0) / calls * 1e6
            print(
                f"{label}: {cpu:.0f} us daemon CPU per call, p50 {run.p50:.3f} ms "
                f"({len(text.encode())} B text)"
            )
            await close_all(reactor, [client])
        return []

    try:
        run_reactor(measure)
    finally:
        daemon.stop()
        daemon.remove()


if __name__ == "__main__":
    main()
