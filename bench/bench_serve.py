"""
What C{mcpx serve} adds to a tool call, against speaking to the same stdio upstream directly.

One client, two ways to the bundled demo (C{python -m mcpx.demo}, tool C{echo}), both over a
child process's stdin and stdout, one JSON-RPC message a line:

  1. direct: the client spawns the demo itself;
  2. C{mcpx serve --passthrough demo}: the client spawns the bridge a host would start,
     which hands its stdin and stdout (pipes) to a running daemon over its MCP socket, and
     the daemon reads and writes them itself; the daemon passes the call through to the
     demo it keeps warm;
  3. the same daemon's MCP socket straight from the client (the bridge's plain hello, then
     the same lines), which tells the bridge's share (now the daemon's pipes against its
     socket, the bridge process being out of the way) apart from the daemon's.

Both ways the client initializes (revision 2025-11-25), then sends C{tools/call echo}
N times one after another and N times with C{--concurrency} in flight (ids tell the
answers apart), after a warm-up.  The request lines are built once; the client parses each
answer line alike for both ways, so the difference is what the bridge and the daemon add.

    .venv/bin/python bench/bench_serve.py [--calls N] [--concurrency C] [--warm W] [--profile F]

The figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from bench_call import MCPX, Daemon, Run, compare, concurrent, run_reactor, sequential, table
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import UNIXClientEndpoint, connectProtocol
from twisted.internet.protocol import ProcessProtocol, Protocol

from mcpx.cli.serve import MCP_SOCKET_NAME, hello_line

PYTHON = sys.executable
DEMO_ARGV = [PYTHON, "-m", "mcpx.demo"]
REVISION = "2025-11-25"
#: The target for C{mcpx serve}: added p50 over the direct call, in ms.
TARGET_ADDED_MS = 0.2


class LineClient(ProcessProtocol):
    """
    A JSON-RPC client on a child's stdin and stdout: one request a line, answers matched
    to their requests by id.
    """

    def __init__(self) -> None:
        self.buffer = b""
        self.waiting: dict[int, Deferred[dict[str, Any]]] = {}
        self.next_id = 0
        self.ended: Deferred[None] = Deferred()
        #: The end of what the child wrote on stderr: printed only if the run fails.
        self.stderr_tail = b""

    def outReceived(self, data: bytes) -> None:
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            message = json.loads(line)
            waiter = self.waiting.pop(message.get("id"), None) if "id" in message else None
            if waiter is not None:
                waiter.callback(message)

    def errReceived(self, data: bytes) -> None:
        self.stderr_tail = (self.stderr_tail + data)[-4000:]

    def processEnded(self, reason: Any) -> None:
        for waiter in self.waiting.values():
            tail = self.stderr_tail.decode("utf-8", "replace")
            waiter.errback(RuntimeError(f"the process ended before answering; stderr:\n{tail}"))
        self.waiting.clear()
        self.ended.callback(None)

    def request(self, line_before_id: bytes, line_after_id: bytes) -> Deferred[dict[str, Any]]:
        """Send a request whose line is the two parts around its id."""
        assert self.transport is not None
        self.next_id += 1
        answer: Deferred[dict[str, Any]] = Deferred()
        self.waiting[self.next_id] = answer
        self.transport.write(line_before_id + str(self.next_id).encode() + line_after_id)
        return answer

    def notify(self, message: dict[str, Any]) -> None:
        assert self.transport is not None
        self.transport.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")


def split_request(method: str, params: dict[str, Any]) -> tuple[bytes, bytes]:
    """A request's line, cut where its id goes."""
    tail = json.dumps({"method": method, "params": params}, separators=(",", ":"))
    return b'{"jsonrpc":"2.0","id":', b"," + tail[1:].encode() + b"\n"


def checked(answer: dict[str, Any]) -> dict[str, Any]:
    result = answer.get("result")
    if type(result) is not dict or result.get("isError"):
        raise RuntimeError(f"the call failed: {answer!r}")
    return answer


class SocketLines(Protocol):
    """A L{LineClient} on a unix socket instead of a child's stdio."""

    def __init__(self, lines: LineClient) -> None:
        self.lines = lines

    def connectionMade(self) -> None:
        # The line client only writes to its transport and closes it: a socket will do.
        self.lines.transport = self.transport  # type: ignore[assignment]

    def dataReceived(self, data: bytes) -> None:
        self.lines.outReceived(data)

    def connectionLost(self, reason: Any = None) -> None:
        self.lines.processEnded(reason)


async def spawned(reactor: Any, argv: list[str], env: dict[str, str]) -> LineClient:
    """A client on a child process's stdin and stdout."""
    client = LineClient()
    reactor.spawnProcess(client, argv[0], argv, env=env)
    return client


async def on_socket(reactor: Any, path: str) -> LineClient:
    """
    A client on the daemon's MCP socket itself, saying the hello the bridge says: the
    daemon's share of what C{mcpx serve} adds, without the bridge's process.
    """
    client = LineClient()
    await connectProtocol(UNIXClientEndpoint(reactor, path), SocketLines(client))
    assert client.transport is not None
    client.transport.write(hello_line(["demo"]))
    return client


async def initialized(client: LineClient) -> LineClient:
    before, after = split_request(
        "initialize",
        {
            "protocolVersion": REVISION,
            "capabilities": {},
            "clientInfo": {"name": "bench_serve", "version": "1"},
        },
    )
    answer = await client.request(before, after)
    if "result" not in answer:
        raise RuntimeError(f"initialize failed: {answer!r}")
    client.notify({"method": "notifications/initialized"})
    return client


async def runs_for(
    label: str, opening: Awaitable[LineClient], options: argparse.Namespace
) -> tuple[list[Run], float]:
    """The two series through one way; and its wall time to the first answer."""
    begun = time.perf_counter()
    client = await initialized(await opening)
    first = time.perf_counter() - begun
    before, after = split_request("tools/call", {"name": "echo", "arguments": {"text": "x"}})

    def call() -> Awaitable[object]:
        return client.request(before, after).addCallback(checked)

    count, width = options.calls, options.concurrency
    try:
        await sequential("warm-up", call, options.warm)
        found = [
            await sequential(f"{label}, sequential", call, count),
            await concurrent(f"{label}, {width} in flight", [call] * width, count),
        ]
    finally:
        transport: Any = client.transport
        # The host's end of input: the bridge half-closes, and so does the socket client.
        if hasattr(transport, "closeStdin"):
            transport.closeStdin()
        else:
            transport.loseWriteConnection()
        await client.ended
    return found, first


async def measure(reactor: Any, options: argparse.Namespace) -> None:
    env = dict(os.environ)
    direct, _ = await runs_for("direct demo", spawned(reactor, DEMO_ARGV, env), options)
    daemon = Daemon({"demo": DEMO_ARGV}, options.profile)
    try:
        bridge = [MCPX, "serve", "--passthrough", "demo"]
        served, first = await runs_for("mcpx serve", spawned(reactor, bridge, daemon.env), options)
        socket_path = str(daemon.state / MCP_SOCKET_NAME)
        unbridged, _ = await runs_for(
            "daemon's MCP socket", on_socket(reactor, socket_path), options
        )
    finally:
        status, _, survivors = daemon.stop()
        daemon.remove()
    print(table([*direct, *served, *unbridged]))
    for plain, bridged in zip(direct, served, strict=True):
        print(compare(plain, bridged))
    for plain, bridged in zip(direct, unbridged, strict=True):
        print(compare(plain, bridged))
    bridge_share = served[0].p50 - unbridged[0].p50
    print(
        f"  of which the bridge process (mcpx serve against the socket itself, sequential): "
        f"+{bridge_share:.3f} ms at p50"
    )
    added = served[0].p50 - direct[0].p50
    verdict = "met" if added <= TARGET_ADDED_MS else f"missed by {added - TARGET_ADDED_MS:.3f} ms"
    print(
        f"  mcpx serve adds {added:.3f} ms at p50 (sequential), target <= "
        f"{TARGET_ADDED_MS} ms: {verdict}"
    )
    print(f"  mcpx serve: first answer (bridge start, hello, initialize) {first * 1000:.1f} ms")
    print(f"  daemon stopped with SIGTERM: exit status {status}, children left {len(survivors)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=2000, help="calls per series (2000)")
    parser.add_argument("--concurrency", type=int, default=16, help="calls in flight (16)")
    parser.add_argument("--warm", type=int, default=300, help="warm-up calls per way (300)")
    parser.add_argument(
        "--profile",
        metavar="FILE",
        default=None,
        help="run the daemon under cProfile and write its profile (of the whole run) to FILE",
    )
    options = parser.parse_args()
    if options.profile:
        # The daemon runs in its state directory, which goes at the end: the path is made whole.
        options.profile = os.path.abspath(options.profile)
    print(
        f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"calls per series: {options.calls}; in flight: {options.concurrency}; warm-up "
        f"{options.warm}; upstream: python -m mcpx.demo, tools/call echo {{'text': 'x'}}, "
        f"revision {REVISION}"
    )
    print(f"bridge: {Path(MCPX).name} serve --passthrough demo, to a daemon on its unix socket")
    began = time.perf_counter()
    run_reactor(lambda reactor: measure(reactor, options))
    print(f"\nwhole run: {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
