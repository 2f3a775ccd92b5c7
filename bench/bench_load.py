"""
The daemon under load and over time: many clients at once, many idle sessions, and its
memory over many requests.

Three parts, each on a real C{mcpx daemon} of its own (temp state directory, unix socket
only, the bundled demo as its one server), 2026-07-28 C{tools/call}s of C{mcpx_call} ->
demo C{echo} POSTed to C{/mcp} through L{keepalive_http} (one persistent connection per
client):

  1. B{sessions}: C{--sessions} (1,000) 2025-06-18 sessions opened (C{initialize} and
     C{notifications/initialized}, 50 sessions per C{Mcpx-Client}, since one client keeps
     at most 64) and left idle; the daemon's RSS before and after, over the number
     opened, and the count C{/metrics} reports.  Target: at most 20 KB each.
  2. B{clients}: C{--clients} (64) clients, each with one call in flight and the next sent
     as soon as the answer is in, for C{--seconds} (30): calls/s, latency percentiles, the
     errors (an answer other than 200 with a C{result}, or a connection lost), the daemon's
     share of a CPU and its RSS before and after.  Target: p99 at most 20 ms, no errors.
  3. B{flat}: C{--requests} (100,000) calls, 16 in flight, after 2,000 uncounted; the
     daemon's RSS every tenth of the way.  Target: flat, taken as growing at most 1 MB
     from the first tenth to the end (the first tenth fills what a warm daemon holds).

    .venv/bin/python bench/bench_load.py                       # about 2-3 minutes
    .venv/bin/python bench/bench_load.py --seconds 10 --requests 20000   # make bench --quick
    .venv/bin/python bench/bench_load.py --only sessions

Latency figures are wall times and move with the machine's load (printed before and after);
RSS figures do not.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from bench_call import (
    DEMO_ARGV,
    ECHO_ARGUMENTS,
    Daemon,
    machine,
    percentile,
    rss_mb,
    run_reactor,
)
from bench_mcp import ACCEPT, LEGACY, UnixHTTPConnection, cpu_seconds, modern_request
from keepalive_http import HTTPFailed, KeepAliveClient, connect
from twisted.internet.error import ConnectError

P99_TARGET_MS = 20.0
SESSION_TARGET_KB = 20.0
FLAT_TARGET_MB = 1.0
#: Sessions per Mcpx-Client header: under the daemon's 64 per client.
SESSIONS_PER_CLIENT = 50


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def verdict(measured: float, target: float, unit: str) -> str:
    if measured <= target:
        return f"target <= {target:g} {unit}: met"
    return f"target <= {target:g} {unit}: missed by {measured - target:.1f} {unit}"


def answered(answer: tuple[int, bytes]) -> bool:
    status, body = answer
    return status == 200 and b'"result"' in body and b'"isError":true' not in body


def checked_call(answer: tuple[int, bytes]) -> None:
    """The first answer, read in full: the cheap check of the others relies on its shape."""
    status, body = answer
    message = json.loads(body) if status == 200 else {}
    result = message.get("result") or {}
    if result.get("isError") or result.get("content", [{}])[0].get("text") != "x":
        raise RuntimeError(f"the call failed: {status} {body[:300]!r}")


# -- 1. Many clients at once ---------------------------------------------------------------------


async def clients_part(reactor: Any, count: int, seconds: float) -> None:
    daemon = Daemon({"demo": DEMO_ARGV}, None)
    try:
        request = modern_request("tools/call", 1)
        first = await connect(reactor, daemon.socket)
        checked_call(await first.send(request))
        for _ in range(200):  # starts the demo and warms the daemon; not counted
            await first.send(request)
        first.transport.loseConnection()  # type: ignore[union-attr]
        rss_before = rss_mb(daemon.pid)
        latencies: list[float] = []
        errors: dict[str, int] = {}
        clock = time.perf_counter

        async def client(connection: KeepAliveClient | None) -> None:
            while clock() < deadline:
                try:
                    if connection is None:
                        connection = await connect(reactor, daemon.socket)
                    begun = clock()
                    answer = await connection.send(request)
                    latencies.append(clock() - begun)
                    if not answered(answer):
                        errors[f"status {answer[0]}"] = errors.get(f"status {answer[0]}", 0) + 1
                except (HTTPFailed, ConnectError) as e:
                    errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                    connection = None
            if connection is not None and connection.transport is not None:
                connection.transport.loseConnection()

        # Connected one after another first: a burst of connects beyond the listening
        # socket's backlog is refused, which is the kernel's doing, not the daemon's.
        connections = [await connect(reactor, daemon.socket) for _ in range(count)]
        cpu_before = cpu_seconds(daemon.pid)
        own_before = cpu_seconds(os.getpid())
        load_before = load()
        started = clock()
        deadline = started + seconds
        await gather([client(c) for c in connections])
        elapsed = clock() - started
        cpu = cpu_seconds(daemon.pid) - cpu_before
        own = cpu_seconds(os.getpid()) - own_before
        rss_after = rss_mb(daemon.pid)
    finally:
        daemon.stop()
        daemon.remove()
    latencies.sort()
    p99 = percentile(latencies, 0.99) * 1000
    print(f"\n2. {count} clients, one call in flight each, for {seconds:g} s (load {load_before})")
    print(
        f"  {len(latencies)} calls, {len(latencies) / elapsed:.0f} calls/s; latency ms: "
        f"p50 {percentile(latencies, 0.5) * 1000:.2f}, "
        f"p90 {percentile(latencies, 0.9) * 1000:.2f}, p99 {p99:.2f}, "
        f"max {latencies[-1] * 1000:.2f}"
    )
    print(
        f"  daemon: {cpu / elapsed:.0%} of one CPU, {cpu / len(latencies) * 1e6:.0f} us per call; "
        f"the bench client {own / elapsed:.0%} of one CPU"
    )
    print(f"  daemon RSS {rss_before:.1f} MB before, {rss_after:.1f} MB after")
    print(f"  errors: {sum(errors.values())}" + (f" ({errors})" if errors else ""))
    print(
        f"  p99 {p99:.2f} ms, {verdict(p99, P99_TARGET_MS, 'ms')}; errors: target 0: "
        + ("met" if not errors else f"missed by {sum(errors.values())}")
    )
    print(f"  load average after: {load()}")


async def gather(coroutines: list[Any]) -> None:
    from twisted.internet.defer import Deferred, gatherResults

    await gatherResults([Deferred.fromCoroutine(c) for c in coroutines], consumeErrors=True)


# -- 2. Many idle sessions -----------------------------------------------------------------------


def open_session(socket_path: str, client: str) -> str:
    """A 2025-06-18 session of C{client} (its C{Mcpx-Client}), initialized; its id."""
    connection = UnixHTTPConnection(socket_path)
    try:
        headers = {"Accept": ACCEPT, "Content-Type": "application/json", "Mcpx-Client": client}
        initialize = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY,
                "capabilities": {},
                "clientInfo": {"name": "bench_load", "version": "0"},
            },
        }
        connection.request("POST", "/mcp", json.dumps(initialize), headers)
        answer = connection.getresponse()
        answer.read()
        session = answer.getheader("Mcp-Session-Id")
        if answer.status != 200 or session is None:
            raise RuntimeError(f"initialize answered {answer.status}")
        headers.update({"Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY})
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        connection.request("POST", "/mcp", json.dumps(initialized), headers)
        answer = connection.getresponse()
        answer.read()
        if answer.status != 202:
            raise RuntimeError(f"notifications/initialized answered {answer.status}")
        return session
    finally:
        connection.close()


def sessions_held(socket_path: str) -> int:
    connection = UnixHTTPConnection(socket_path)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    for line in text.splitlines():
        if line.startswith("mcpx_mcp_http_sessions "):
            return int(float(line.split()[1]))
    return -1


def sessions_part(count: int) -> None:
    daemon = Daemon({"demo": DEMO_ARGV}, None)
    try:
        for i in range(20):  # what the first few sessions allocate once; not counted
            open_session(daemon.socket, f"warm-{i}")
        time.sleep(0.2)
        before = rss_mb(daemon.pid)
        started = time.perf_counter()
        for i in range(count):
            open_session(daemon.socket, f"bench-{i // SESSIONS_PER_CLIENT}")
        opening = time.perf_counter() - started
        time.sleep(0.5)
        after = rss_mb(daemon.pid)
        held = sessions_held(daemon.socket)
    finally:
        daemon.stop()
        daemon.remove()
    each_kb = (after - before) * 1024 / count
    print(f"\n1. {count} idle 2025-06-18 sessions ({SESSIONS_PER_CLIENT} per Mcpx-Client)")
    print(f"  opened in {opening:.1f} s; the daemon holds {held} sessions (/metrics)")
    print(f"  daemon RSS {before:.1f} MB before, {after:.1f} MB after: {each_kb:.1f} KB each")
    print(f"  {each_kb:.1f} KB per session, {verdict(each_kb, SESSION_TARGET_KB, 'KB')}")


# -- 3. Memory over many requests ----------------------------------------------------------------


async def flat_part(reactor: Any, total: int, width: int) -> None:
    daemon = Daemon({"demo": DEMO_ARGV}, None)
    samples: list[tuple[int, float]] = []
    try:
        request = modern_request("tools/call", 1)
        clients = [await connect(reactor, daemon.socket) for _ in range(width)]
        checked_call(await clients[0].send(request))
        failed = 0

        async def run(client: KeepAliveClient, n: int) -> None:
            nonlocal failed
            for _ in range(n):
                if not answered(await client.send(request)):
                    failed += 1

        await gather([run(c, 2000 // width) for c in clients])
        samples.append((0, rss_mb(daemon.pid)))
        step = max(total // 10, width)
        done = 0
        started = time.perf_counter()
        while done < total:
            await gather([run(c, step // width) for c in clients])
            done += step // width * width
            samples.append((done, rss_mb(daemon.pid)))
        elapsed = time.perf_counter() - started
        fds = len(os.listdir(f"/proc/{daemon.pid}/fd"))
        for client in clients:
            client.transport.loseConnection()  # type: ignore[union-attr]
    finally:
        daemon.stop()
        daemon.remove()
    print(f"\n3. {done} calls, {width} in flight, after 2,000 uncounted ({elapsed:.0f} s)")
    print("  daemon RSS, MB, after each tenth: " + ", ".join(f"{rss:.1f}" for _, rss in samples))
    growth = samples[-1][1] - samples[1][1]
    print(
        f"  from {samples[1][0]} to {samples[-1][0]} calls: {growth:+.2f} MB "
        f"(from the start {samples[-1][1] - samples[0][1]:+.2f} MB); {fds} open fds at the end"
    )
    print(f"  failed answers: {failed}")
    print(f"  growth {growth:+.2f} MB, {verdict(growth, FLAT_TARGET_MB, 'MB')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=16, help="in flight for part 3")
    parser.add_argument("--only", help="clients, sessions or flat (comma-separated)")
    options = parser.parse_args()
    parts = set(options.only.split(",")) if options.only else {"clients", "sessions", "flat"}
    started = time.perf_counter()
    print(f"machine: {machine()}")
    print(
        f"load average {load()}; tools/call = mcpx_call -> demo echo {ECHO_ARGUMENTS}, 2026-07-28"
    )
    if "sessions" in parts:
        sessions_part(options.sessions)

    async def measure(reactor: Any) -> None:
        if "clients" in parts:
            await clients_part(reactor, options.clients, options.seconds)
        if "flat" in parts:
            await flat_part(reactor, options.requests, options.concurrency)

    if parts & {"clients", "flat"}:
        run_reactor(measure)
    print(f"\nload average {load()}; whole run: {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
