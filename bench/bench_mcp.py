"""
What C{/mcp} (MCP over Streamable HTTP) costs, measured against calling the same upstream
directly.

One run, the bundled demo upstream (C{python -m mcpx.demo}, tool C{echo}), a real
C{mcpx daemon} on its unix socket, two phases:

  - I{shared}: nothing pinned; the bench client, the daemon and the upstreams share the
    machine's CPUs;
  - I{one core}: the daemon started under C{taskset -c 1}; the bench client (and the
    direct upstream it spawns) pinned to CPU 0, and the daemon's upstream moved to CPU 0
    once started, so the daemon has CPU 1 to itself.

In each phase:

  1. direct: mcpx's own upstream client (L{mcpx.upstream.connect.make_connector}) calls
     C{echo} on an upstream it spawned, N calls one after another, then N with C{-c} in
     flight; and C{tools/list} the same way, for scale;
  2. C{tools/call} of C{mcpx_call} (server C{demo}, tool C{echo}) POSTed to C{/mcp}, in
     both eras: I{legacy}, in a 2025-06-18 session (C{initialize}, then
     C{Mcp-Session-Id} and C{MCP-Protocol-Version} on every request); and I{modern},
     2026-07-28 requests, each with C{MCP-Protocol-Version}, C{Mcp-Method}, C{Mcp-Name}
     and the C{_meta} the revision requires;
  3. C{tools/list} over C{/mcp}, both eras;
  4. C{GET /health} (no MCP, no upstream): the daemon's HTTP floor.

Every request carries C{Accept: application/json, text/event-stream}, as MCP clients
send it.  The client is L{keepalive_http}: one persistent HTTP/1.1 connection per call in
flight, each request's bytes built once, each answer read only as far as its end.

Besides the latencies, each series shows the CPU time the daemon spent per request (from
C{/proc/<pid>/task/*/schedstat}) and how busy it and the bench client were: a daemon near
100% is the limit; a client near 100% means the figure is the client's.

    .venv/bin/python bench/bench_mcp.py [--calls N] [--concurrency C] [--phase shared|pinned]
    .venv/bin/python bench/bench_mcp.py --profile /tmp/mcp.prof [--profile-era modern|legacy]
        [--profile-method tools/call|tools/list]

The figures are printed; nothing is asserted.  With C{--profile} only the daemon under
cProfile is run, with one method (C{--profile-method}: C{tools/call} or C{tools/list})
over C{/mcp} in one era, and where its time went is printed per request, by area
(a built-in function's time counted in its caller's), by function, and by cumulative
time (cProfile slows it several times over: compare shares, not times).  A plain
C{POST /mcp} takes the lean path (L{mcpx.daemon.lean_path}), so twisted.web's share is
its request object and response writing, and Klein's is about nothing.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_call import (
    DEMO_ARGV,
    ECHO_ARGUMENTS,
    REPO,
    Daemon,
    Run,
    children_of,
    close_all,
    concurrent,
    machine,
    rss_mb,
    run_reactor,
    section,
    sequential,
)
from keepalive_http import KeepAliveClient, connect
from twisted.internet.defer import Deferred

LEGACY = "2025-06-18"
MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
#: The CPUs of the one-core phase: the daemon's, and everything else's.
DAEMON_CPU = 1
CLIENT_CPU = 0


# -- CPU accounting ------------------------------------------------------------------------------


def schedstat(pid: int) -> tuple[float, float]:
    """
    Of every thread of C{pid} so far, in seconds: the time on a CPU, and the time it was
    ready to run but waited for its CPU, which another process had (C{schedstat}'s first
    two fields, nanoseconds).
    """
    running = waiting = 0
    with suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with suppress(OSError, ValueError):
                fields = Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()
                running += int(fields[0])
                waiting += int(fields[1])
    return running / 1e9, waiting / 1e9


def cpu_seconds(pid: int) -> float:
    """The CPU time of every thread of C{pid} so far (C{schedstat}: nanoseconds on a CPU)."""
    return schedstat(pid)[0]


def user_system_ticks(pid: int) -> tuple[int, int]:
    """C{utime} and C{stime} of C{pid} in clock ticks (coarse: for the kernel's share)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0, 0
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]), int(fields[12])


def voluntary_switches(pid: int) -> int:
    """How many times the threads of C{pid} have gone to sleep so far (for want of work)."""
    total = 0
    with suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with suppress(OSError, ValueError):
                for line in Path(f"/proc/{pid}/task/{task}/status").read_text().splitlines():
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
    return total


@dataclass(frozen=True)
class Usage:
    """What a process spent over a series: seconds on its CPU, seconds waiting for it, sleeps."""

    cpu: float
    waited: float
    sleeps: int

    @classmethod
    def of(cls, pid: int) -> Usage:
        cpu, waited = schedstat(pid)
        return cls(cpu, waited, voluntary_switches(pid))

    def __sub__(self, before: Usage) -> Usage:
        return Usage(
            self.cpu - before.cpu, self.waited - before.waited, self.sleeps - before.sleeps
        )


class Series(Run):
    """A L{Run} with the CPU time the daemon and the bench client spent on it."""

    def __init__(
        self,
        run: Run,
        daemon: Usage | None,
        kernel_share: float | None,
        client: Usage,
    ) -> None:
        super().__init__(run.label, run.latencies, run.elapsed)
        self.daemon = daemon
        self.daemon_cpu = daemon.cpu if daemon is not None else None
        self.kernel_share = kernel_share
        self.client = client
        self.client_cpu = client.cpu

    @property
    def busy(self) -> float | None:
        """The daemon's CPU time as a share of the series' wall time (of one CPU)."""
        return None if self.daemon is None else self.daemon.cpu / self.elapsed

    @property
    def per_cpu(self) -> float | None:
        """The requests one daemon CPU would answer a second at this series' CPU per request."""
        if self.daemon is None or not self.daemon.cpu:
            return None
        return len(self.latencies) / self.daemon.cpu

    def row(self) -> str:
        if self.daemon is None or self.kernel_share is None:
            daemon = f"{'-':>8} {'-':>6} {'-':>6}"
            extra = f"{'-':>6} {'-':>6}"
        else:
            per_call = self.daemon.cpu / len(self.latencies) * 1e6
            daemon = f"{per_call:8.0f} {self.kernel_share:6.0%} {self.busy:6.0%}"
            extra = (
                f"{self.daemon.waited / self.elapsed:6.0%} "
                f"{self.daemon.sleeps / len(self.latencies):6.2f}"
            )
        client = f"{self.client.cpu / self.elapsed:6.0%} {self.client.waited / self.elapsed:6.0%}"
        return f"{super().row()} {daemon} {client} {extra}"


COLUMNS = (
    "  columns: latency; calls/s; the daemon's CPU time per request (us), the kernel's part "
    "of it, how busy the daemon and the bench client were (share of one CPU), how long the "
    "client and the daemon were ready to run but another process had their CPU (c wait, "
    "d wait: share of the series' time), and how often per request the daemon slept for "
    "want of a request (sleeps; near 0: the bench kept it fed)"
)


def series_table(rows: list[Series]) -> str:
    head = (
        f"  {'':<34} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'calls/s':>10} "
        f"{'d us/req':>8} {'kernel':>6} {'daemon':>6} {'client':>6} {'c wait':>6} "
        f"{'d wait':>6} {'sleeps':>6}"
    )
    return "\n".join([head, *(row.row() for row in rows)])


async def measured(daemon_pid: int | None, run: Callable[[], Awaitable[Run]]) -> Series:
    """Run a series and charge it the daemon's and this process's CPU time."""
    me = os.getpid()
    daemon_before = Usage.of(daemon_pid) if daemon_pid is not None else None
    ticks_before = user_system_ticks(daemon_pid) if daemon_pid is not None else (0, 0)
    client_before = Usage.of(me)
    result = await run()
    client = Usage.of(me) - client_before
    if daemon_pid is None or daemon_before is None:
        return Series(result, None, None, client)
    daemon = Usage.of(daemon_pid) - daemon_before
    user, system = (
        after - before
        for after, before in zip(user_system_ticks(daemon_pid), ticks_before, strict=True)
    )
    kernel_share = system / (user + system) if user + system else 0.0
    return Series(result, daemon, kernel_share, client)


# -- Requests ------------------------------------------------------------------------------------


def post(body: dict[str, Any], headers: dict[str, str]) -> bytes:
    """The bytes of one C{POST /mcp}, as an MCP client sends it."""
    data = json.dumps(body, separators=(",", ":")).encode()
    lines = [
        "POST /mcp HTTP/1.1",
        "Host: mcpx",
        f"Accept: {ACCEPT}",
        "Content-Type: application/json",
        f"Content-Length: {len(data)}",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + data


def get(target: str) -> bytes:
    return f"GET {target} HTTP/1.1\r\nHost: mcpx\r\nAccept: application/json\r\n\r\n".encode()


CALL_PARAMS: dict[str, Any] = {
    "name": "mcpx_call",
    "arguments": {"server": "demo", "tool": "echo", "arguments": ECHO_ARGUMENTS},
}
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "bench_mcp", "version": "0"},
}


def modern_request(method: str, request_id: int) -> bytes:
    params: dict[str, Any] = dict(CALL_PARAMS) if method == "tools/call" else {}
    params["_meta"] = MODERN_META
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if method == "tools/call":
        headers["Mcp-Name"] = CALL_PARAMS["name"]
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return post(body, headers)


def legacy_request(method: str, request_id: int, session: str) -> bytes:
    params = dict(CALL_PARAMS) if method == "tools/call" else {}
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return post(body, {"MCP-Protocol-Version": LEGACY, "Mcp-Session-Id": session})


class UnixHTTPConnection(http.client.HTTPConnection):
    """C{http.client} on a unix socket: for the few requests that need the headers back."""

    def __init__(self, path: str) -> None:
        super().__init__("mcpx", timeout=30)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def open_legacy_session(socket_path: str) -> str:
    """C{initialize} a 2025-06-18 session and send C{notifications/initialized}; its id."""
    connection = UnixHTTPConnection(socket_path)
    try:
        initialize = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY,
                "capabilities": {},
                "clientInfo": {"name": "bench_mcp", "version": "0"},
            },
        }
        headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
        connection.request("POST", "/mcp", json.dumps(initialize), headers)
        answer = connection.getresponse()
        body = json.loads(answer.read())
        session = answer.getheader("Mcp-Session-Id")
        if answer.status != 200 or session is None or body["result"]["protocolVersion"] != LEGACY:
            raise RuntimeError(f"initialize answered {answer.status}: {body}")
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


def check_once(label: str, answer: tuple[int, bytes], method: str) -> None:
    """Read one answer in full: the cheap per-call check below relies on its shape."""
    status, body = answer
    message = json.loads(body) if status == 200 else None
    if message is None or "result" not in message:
        raise RuntimeError(f"{label}: the daemon answered {status}: {body[:400]!r}")
    result = message["result"]
    if method == "tools/call" and (result.get("isError") or result["content"][0]["text"] != "x"):
        raise RuntimeError(f"{label}: the call failed: {result}")
    if method == "tools/list" and not any(t["name"] == "mcpx_call" for t in result["tools"]):
        raise RuntimeError(f"{label}: no mcpx_call in {result}")


def _ok(answer: tuple[int, bytes]) -> tuple[int, bytes]:
    status, body = answer
    if status != 200 or b'"result"' not in body:
        raise RuntimeError(f"the daemon answered {status}: {body[:400]!r}")
    return answer


def callers(
    clients: list[KeepAliveClient], requests: list[bytes]
) -> list[Callable[[], Awaitable[object]]]:
    def caller(client: KeepAliveClient, request: bytes) -> Callable[[], Awaitable[object]]:
        return lambda: client.send(request).addCallback(_ok)

    return [caller(c, r) for c, r in zip(clients, requests, strict=True)]


# -- The phases ----------------------------------------------------------------------------------


async def direct_series(
    reactor: Any,
    count: int,
    width: int,
    warm: int,
    *,
    legacy: bool = False,
    label: str = "direct",
    calls_one_by_one: bool = False,
) -> tuple[list[Series], str]:
    """
    The demo called by mcpx's own upstream client, with no gateway between: the series
    every gateway is compared with.

    @param legacy: open it in the legacy era, as the daemon opens the instance that serves a
        host's 2025-06-18 session (era mirroring), rather than in the era its probe finds.
    @param calls_one_by_one: only the C{tools/call} series one after another.
    """
    from mcpx.settings.servers import StdioServer
    from mcpx.spec.revision import Era
    from mcpx.upstream.connect import make_connector

    connector = make_connector(reactor, dict(os.environ), None)
    session = await connector.connect(
        "demo",
        StdioServer("demo", DEMO_ARGV[0], tuple(DEMO_ARGV[1:])),
        era=Era.LEGACY if legacy else None,
    )
    try:

        def call() -> Awaitable[object]:
            return Deferred.fromCoroutine(session.call_tool("echo", ECHO_ARGUMENTS))

        def list_tools() -> Awaitable[object]:
            return Deferred.fromCoroutine(session.list_tools())

        await sequential("warm-up", call, warm)
        if calls_one_by_one:
            name = f"{label} tools/call, sequential"
            alone = await measured(None, lambda: sequential(name, call, count))
            return [alone], f"revision {session.revision.value}"
        await sequential("warm-up", list_tools, min(warm, 200))
        runs = [
            await measured(
                None, lambda: sequential(f"{label} tools/call, sequential", call, count)
            ),
            await measured(
                None,
                lambda: concurrent(f"{label} tools/call, {width} in flight", [call] * width, count),
            ),
            await measured(
                None, lambda: sequential(f"{label} tools/list, sequential", list_tools, count)
            ),
            await measured(
                None,
                lambda: concurrent(
                    f"{label} tools/list, {width} in flight", [list_tools] * width, count
                ),
            ),
        ]
        speaks = f"revision {session.revision.value}"
    finally:
        await session.close()
    return runs, speaks


async def mcp_series(
    reactor: Any,
    daemon: Daemon,
    *,
    era: str,
    method: str,
    count: int,
    width: int,
    warm: int,
    session: str | None,
) -> list[Series]:
    """The sequential and concurrent series of one method in one era over C{/mcp}."""
    clients = [await connect(reactor, daemon.socket) for _ in range(width)]

    def request(request_id: int) -> bytes:
        if session is None:
            return modern_request(method, request_id)
        return legacy_request(method, request_id, session)

    # Within a legacy session no two requests in flight may share an id: one id per caller.
    requests = [request(1000 + i) for i in range(width)]
    calls = callers(clients, requests)
    label = f"{era} {method}"
    try:
        check_once(label, await clients[0].send(requests[0]), method)
        await sequential("warm-up", calls[0], warm)
        return [
            await measured(daemon.pid, lambda: sequential(f"{label}, sequential", calls[0], count)),
            await measured(
                daemon.pid, lambda: concurrent(f"{label}, {width} in flight", calls, count)
            ),
        ]
    finally:
        await close_all(reactor, clients)


async def health_series(
    reactor: Any, daemon: Daemon, count: int, width: int, warm: int
) -> list[Series]:
    """C{GET /health}: the daemon's HTTP stack with no MCP and no upstream behind it."""
    clients = [await connect(reactor, daemon.socket) for _ in range(width)]
    request = get("/health")

    def caller(client: KeepAliveClient) -> Callable[[], Awaitable[object]]:
        # /health is not JSON-RPC: only its status is checked.
        return lambda: client.send(request).addCallback(_status_ok)

    calls = [caller(client) for client in clients]
    try:
        await sequential("warm-up", calls[0], warm)
        return [
            await measured(
                daemon.pid, lambda: sequential("GET /health, sequential", calls[0], count)
            ),
            await measured(
                daemon.pid, lambda: concurrent(f"GET /health, {width} in flight", calls, count)
            ),
        ]
    finally:
        await close_all(reactor, clients)


def _status_ok(answer: tuple[int, bytes]) -> tuple[int, bytes]:
    if answer[0] != 200:
        raise RuntimeError(f"the daemon answered {answer[0]}: {answer[1][:300]!r}")
    return answer


def move_children(pid: int, cpu: int) -> list[int]:
    """Pin the processes C{pid} started (its upstreams) to C{cpu}."""
    moved = children_of(pid)
    for child in moved:
        with suppress(OSError):
            os.sched_setaffinity(child, {cpu})
    return moved


#: The priority (nice) the one-core phase asks for its daemon and its client.  Linux
#: schedules sessions against each other first (C{/proc/sys/kernel/sched_autogroup_enabled}),
#: and processes within a session only then: on a machine where other sessions keep both CPUs
#: busy, a nice value alone does not win the daemon its CPU, its session's does
#: (C{/proc/<pid>/autogroup}).  Lowering either needs the privilege to (root, or
#: C{CAP_SYS_NICE}); without it the phase runs as started and says so.
PRIORITY = -10
#: Set in the environment of the bench re-run in a session of its own.
OWN_SESSION = "MCPX_BENCH_OWN_SESSION"


def autogroup_nice(pid: int) -> int | None:
    """The nice value of C{pid}'s session (its autogroup), or None without autogroups."""
    try:
        said = Path(f"/proc/{pid}/autogroup").read_text()
    except OSError:
        return None
    return int(said.split()[-1])


def raise_priority(pid: int, nice: int = PRIORITY) -> str | None:
    """
    Set the nice value of process C{pid} and of its session to C{nice}: None if done,
    else why not.  Children started later inherit the process's.
    """
    try:
        os.setpriority(os.PRIO_PROCESS, pid, nice)
        if autogroup_nice(pid) is not None:
            Path(f"/proc/{pid}/autogroup").write_text(str(nice))
    except OSError as e:
        return e.strerror or str(e)
    return None


def in_own_session() -> bool:
    """Whether this process leads its own session, whose priority is its own to set."""
    return os.getsid(0) == os.getpid()


@contextmanager
def pinned_client(pin: bool, priority: bool) -> Iterator[str | None]:
    """
    This process (the bench client) on CPU 0 for the one-core phase, and, with C{priority},
    its session at L{PRIORITY}; yields why the priority was not raised, or None.
    """
    before = os.sched_getaffinity(0)
    nice_before = os.getpriority(os.PRIO_PROCESS, 0)
    group_before = autogroup_nice(0)
    refused: str | None = None
    if pin:
        os.sched_setaffinity(0, {CLIENT_CPU})
        if priority:
            refused = (
                raise_priority(os.getpid())
                if in_own_session()
                else "the bench does not lead a session of its own"
            )
    try:
        yield refused
    finally:
        os.sched_setaffinity(0, before)
        if pin and priority and refused is None:
            # Raising a nice value back is always allowed.
            with suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, 0, nice_before)
                if group_before is not None:
                    Path(f"/proc/{os.getpid()}/autogroup").write_text(str(group_before))


async def phase(
    reactor: Any, name: str, *, pin: bool, priority: bool, count: int, width: int, warm: int
) -> dict[str, Any]:
    with pinned_client(pin, priority) as refused_here:
        direct, speaks = await direct_series(reactor, count, width, warm)
        daemon = Daemon(
            {"demo": DEMO_ARGV},
            None,
            cpus=str(DAEMON_CPU) if pin else None,
            own_session=pin and priority,
        )
        try:
            refused = refused_here
            if pin and priority and refused is None:
                # Before the daemon starts its upstream, which inherits its nice value.
                refused = raise_priority(daemon.pid)
            scheduling = scheduling_said(pin, priority, refused)
            idle_rss = rss_mb(daemon.pid)
            # Starts the upstream, and moves it off the daemon's CPU.
            session = open_legacy_session(daemon.socket)
            warm_clients = [await connect(reactor, daemon.socket)]
            warm_call = callers(warm_clients, [modern_request("tools/call", 1)])[0]
            await sequential("warm-up", warm_call, warm)
            await close_all(reactor, warm_clients)
            moved = move_children(daemon.pid, CLIENT_CPU) if pin else []
            runs: dict[str, list[Series]] = {}
            for method in ("tools/call", "tools/list"):
                for era, era_session in (("legacy", session), ("modern", None)):
                    runs[f"{era} {method}"] = await mcp_series(
                        reactor,
                        daemon,
                        era=era,
                        method=method,
                        count=count,
                        width=width,
                        warm=warm,
                        session=era_session,
                    )
            runs["health"] = await health_series(reactor, daemon, count, width, warm)
            after_rss = rss_mb(daemon.pid)
            affinity = sorted(os.sched_getaffinity(daemon.pid))
            client_cpus = sorted(os.sched_getaffinity(0))
        finally:
            status, _children, survivors = daemon.stop()
            daemon.remove()
    return {
        "name": name,
        "width": width,
        "scheduling": scheduling,
        "direct": direct,
        "speaks": speaks,
        "runs": runs,
        "rss": (idle_rss, after_rss),
        "affinity": affinity,
        "client_cpus": client_cpus,
        "moved": moved,
        "stopped": (status, survivors),
    }


def scheduling_said(pin: bool, priority: bool, refused: str | None) -> str:
    """How the phase's processes were scheduled against the machine's other work."""
    if not pin:
        return "as started, sharing the CPUs with whatever else the machine runs"
    if not priority:
        return "as started (--no-priority): other sessions' work may take the daemon's CPU (d wait)"
    if refused is not None:
        return (
            f"as started: raising the priority was refused ({refused}), so other sessions' "
            "work may take the daemon's CPU (d wait)"
        )
    return (
        f"the daemon's session and the bench's each at nice {PRIORITY} (process and "
        "autogroup), ahead of the machine's other sessions"
    )


def added(direct: Run, through: Run) -> str:
    return (
        f"  {through.label}: +{through.p50 - direct.p50:.3f} ms at p50 over direct "
        f"(x{through.p50 / direct.p50:.2f}), throughput x{through.rate / direct.rate:.2f}"
    )


def report(found: dict[str, Any]) -> None:
    name = found["name"]
    width = found["width"]
    runs: dict[str, list[Series]] = found["runs"]
    direct: list[Series] = found["direct"]
    status, survivors = found["stopped"]
    with section(f"== {name} =="):
        print(
            f"  daemon CPUs {found['affinity']}; its upstream moved to CPU {CLIENT_CPU}: "
            f"{bool(found['moved'])}; bench client CPUs {found['client_cpus']}"
        )
        print(f"  scheduling: {found['scheduling']}")
        print(f"  direct client speaks {found['speaks']}")
        print(COLUMNS)
        print(
            series_table(
                [
                    direct[0],
                    *[runs[f"{era} tools/call"][0] for era in ("legacy", "modern")],
                    direct[1],
                    *[runs[f"{era} tools/call"][1] for era in ("legacy", "modern")],
                    direct[2],
                    *[runs[f"{era} tools/list"][0] for era in ("legacy", "modern")],
                    direct[3],
                    *[runs[f"{era} tools/list"][1] for era in ("legacy", "modern")],
                    *runs["health"],
                ]
            )
        )
        print("  tools/call over /mcp against the direct call:")
        for era in ("legacy", "modern"):
            print(added(direct[0], runs[f"{era} tools/call"][0]))
            print(added(direct[1], runs[f"{era} tools/call"][1]))
        print(
            "  what one daemon CPU would sustain at its measured cost per request, against "
            "the rate measured and how busy the daemon was:"
        )
        for key in (
            "legacy tools/call",
            "modern tools/call",
            "legacy tools/list",
            "modern tools/list",
        ):
            concurrent_run = runs[key][1]
            assert concurrent_run.per_cpu is not None and concurrent_run.busy is not None
            print(
                f"    {key:<20} {concurrent_run.per_cpu:8.0f} /s  ({width} in flight; "
                f"measured {concurrent_run.rate:.0f}/s, the daemon {concurrent_run.busy:.0%} busy)"
            )
        idle_rss, after_rss = found["rss"]
        print(
            f"  daemon RSS {idle_rss:.1f} MB idle, {after_rss:.1f} MB after the run; "
            f"SIGTERM: exit {status}, children left {len(survivors)}"
        )


# -- Profiling -----------------------------------------------------------------------------------

#: Functions that stand for a whole request or the whole process: not worth listing.
_TOO_WIDE = (
    "twisted/internet/base.py(run)",
    "twisted/internet/base.py(mainLoop)",
    "twisted/internet/epollreactor.py(doPoll)",
    "twisted/python/log.py(callWithLogger)",
    "twisted/python/log.py(callWithContext)",
    "twisted/python/context.py(callWithContext)",
    "twisted/python/context.py(callWithContext)",
    "twisted/internet/posixbase.py(_doReadOrWrite)",
    "twisted/internet/tcp.py(doRead)",
    "twisted/internet/abstract.py(doRead)",
)


def _startup(filename: str, function: str) -> bool:
    return (
        filename.startswith("<frozen")
        or function in ("<module>", "<built-in method builtins.exec>")
        or "importlib" in filename
        or function.startswith(
            (
                "<built-in method builtins.__build_class__",
                "<built-in method marshal",
                "<built-in method builtins.compile",
            )
        )
        or "cProfile" in filename
        or filename.endswith("runpy.py")
    )


#: Where a function's own time is counted, by the first fragment of its file's path that
#: matches; a built-in function's time is counted where its caller is.
AREAS = (
    ("twisted/logger/", "logging, and the reactor's per-event log context"),
    ("twisted/python/log.py", "logging, and the reactor's per-event log context"),
    ("twisted/python/context.py", "logging, and the reactor's per-event log context"),
    ("twisted/web/", "twisted.web: HTTP parsing, headers, response"),
    ("twisted/protocols/", "twisted.web: HTTP parsing, headers, response"),
    ("twisted/internet/defer.py", "Deferreds and coroutine plumbing"),
    ("twisted/", "reactor loop, transports, timers"),
    ("klein/", "Klein and werkzeug routing"),
    ("werkzeug/", "Klein and werkzeug routing"),
    ("mcpx/daemon/lean_path.py", "/mcp lean path (mcpx.daemon.lean_path)"),
    ("mcpx/daemon/gate.py", "gate, limits, site and metrics (mcpx.daemon)"),
    ("mcpx/daemon/", "gate, limits, site and metrics (mcpx.daemon)"),
    ("mcpx/server/http", "/mcp transport (mcpx.server.http, http_exchange)"),
    ("mcpx/server/", "MCP server: dispatch, surface, spelling"),
    ("mcpx/spec/", "MCP server: dispatch, surface, spelling"),
    ("mcpx/ops/", "ops and policy: call_upstream, GuardedPool"),
    ("mcpx/policy/", "ops and policy: call_upstream, GuardedPool"),
    ("mcpx/questions/", "questions: the caller a call carries"),
    ("mcpx/auth/", "gate, limits, site and metrics (mcpx.daemon)"),
    ("mcpx/pool/", "pool"),
    ("mcpx/upstream/", "upstream session, JSON-RPC wire"),
    ("mcpx/wire/", "upstream session, JSON-RPC wire"),
    ("attr/", "attrs-generated methods and attrs itself"),
    ("json/", "JSON encoding and parsing (stdlib)"),
)
SYSCALLS = "system calls (socket send/recv, pipe read/write)"
_SYSCALL_NAMES = (
    "<method 'send' of '_socket.socket' objects>",
    "<method 'recv' of '_socket.socket' objects>",
    "<built-in method posix.write>",
    "<built-in method posix.read>",
    "<method 'register' of 'select.epoll' objects>",
    "<method 'unregister' of 'select.epoll' objects>",
    "<method 'modify' of 'select.epoll' objects>",
)


def _area(short: str) -> str:
    if short.startswith("<attrs generated methods "):
        # The class's dotted path, e.g. mcpx.wire.messages.Request, as a file path.
        short = short.removeprefix("<attrs generated methods ").replace(".", "/")
    for fragment, area in AREAS:
        if fragment in short:
            return area
    return "other"


def _short(filename: str) -> str:
    return filename.rsplit("site-packages/", maxsplit=1)[-1].replace(str(REPO) + "/", "")


def profile_summary(path: str, requests: int) -> None:
    """
    Where the daemon spent its time, per C{/mcp} request: by area, by own time and by
    cumulative time.  Module imports and start-up are left out; coroutines are counted
    at every resumption, so a coroutine's cumulative figure is a share of the time rather
    than the cost of one call.
    """
    import pstats

    stats: Any = pstats.Stats(path)
    rows = []
    areas: dict[str, float] = {}
    idle = 0.0
    startup = 0.0
    for (filename, _line, function), (_, calls, own, total, callers) in stats.stats.items():
        short = _short(filename)
        if "poll" in function and "epoll" in function:
            idle += own
            continue
        if _startup(filename, function):
            startup += own
            continue
        rows.append((own, total, calls, f"{short}({function})"))
        if function in _SYSCALL_NAMES:
            areas[SYSCALLS] = areas.get(SYSCALLS, 0.0) + own
        elif filename == "~":
            for (caller_file, _, caller_function), caller_stats in callers.items():
                if _startup(caller_file, caller_function):
                    # A built-in the import machinery called (compile, marshal).
                    startup += caller_stats[2]
                    continue
                area = _area(_short(caller_file))
                areas[area] = areas.get(area, 0.0) + caller_stats[2]
        else:
            area = _area(short)
            areas[area] = areas.get(area, 0.0) + own
    busy = stats.total_tt - idle - startup
    per = 1e6 / requests
    print(
        f"  {requests} /mcp requests; busy {busy:.2f} s of {stats.total_tt:.2f} s "
        f"({idle:.2f} s waiting in epoll, {startup:.2f} s importing and starting up); "
        f"{busy * per:.0f} us per request under the profiler"
    )
    print("  by area (own time; us per request under the profiler, share of the busy time):")
    for area, own in sorted(areas.items(), key=lambda item: item[1], reverse=True):
        print(f"    {own * per:7.1f} us {own / busy:6.1%}  {area}")
    print("  by own time (us per request, calls per request):")
    for own, _total, calls, name in sorted(rows, reverse=True)[:12]:
        print(f"    {own * per:7.1f} us {calls / requests:6.1f}  {name}")
    # What spans the whole process or every event is left out: it says nothing per call.
    narrow = [r for r in rows if r[3] not in _TOO_WIDE and r[1] < 0.9 * busy]
    by_total = sorted(narrow, key=lambda r: r[1], reverse=True)
    print("  by cumulative time (us per request, share of the busy time, calls per request):")
    for _own, total, calls, name in by_total[:20]:
        print(f"    {total * per:7.1f} us {total / busy:6.1%} {calls / requests:6.1f}  {name}")
    print("  mcpx's own functions by cumulative time:")
    for _own, total, calls, name in [r for r in by_total if r[3].startswith("mcpx/")][:12]:
        print(f"    {total * per:7.1f} us {total / busy:6.1%} {calls / requests:6.1f}  {name}")


async def profile_run(
    reactor: Any, daemon: Daemon, *, era: str, method: str, count: int, width: int, warm: int
) -> int:
    session = open_legacy_session(daemon.socket) if era == "legacy" else None
    runs = await mcp_series(
        reactor,
        daemon,
        era=era,
        method=method,
        count=count,
        width=width,
        warm=warm,
        session=session,
    )
    for run in runs:
        print(run.row() if isinstance(run, Series) else run)
    # Sent: one checked call, the warm-up, both series; the initialize and its notification.
    return 1 + warm + 2 * count + (2 if session else 0)


# -- The run -------------------------------------------------------------------------------------


def rerun_in_own_session() -> int:
    """This bench again, leading a session of its own; its exit status."""
    environment = dict(os.environ, **{OWN_SESSION: "1"})
    command = [sys.executable, *sys.argv]
    return subprocess.run(command, env=environment, start_new_session=True, check=False).returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=2000, help="calls per series (2000)")
    parser.add_argument("--concurrency", type=int, default=16, help="calls in flight (16)")
    parser.add_argument("--warm", type=int, default=300, help="warm-up calls per series (300)")
    parser.add_argument(
        "--phase", choices=("shared", "pinned", "both"), default="both", help="(both)"
    )
    parser.add_argument("--profile", metavar="FILE", help="the daemon under cProfile")
    parser.add_argument("--profile-era", choices=("legacy", "modern"), default="modern")
    parser.add_argument(
        "--profile-method", choices=("tools/call", "tools/list"), default="tools/call"
    )
    parser.add_argument(
        "--pinned-concurrency",
        type=int,
        default=48,
        help="calls in flight in the one-core phase (48: enough that the daemon never waits "
        "for a request while others wait at its upstream)",
    )
    parser.add_argument(
        "--no-priority",
        dest="priority",
        action="store_false",
        help=f"run the one-core phase as started, not at nice {PRIORITY}",
    )
    options = parser.parse_args()
    count, width, warm = options.calls, options.concurrency, options.warm
    leads = in_own_session() or OWN_SESSION in os.environ
    if options.priority and options.phase != "shared" and not options.profile and not leads:
        # The one-core phase raises the priority of this process's session: lead one.
        try:
            os.setsid()
        except OSError:
            # A process group's leader (as a shell starts a command) cannot: run again.
            sys.exit(rerun_in_own_session())
    started = time.perf_counter()
    print(f"machine: {machine()}")
    print(
        f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '(unset)')}; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"calls per series: {count}; in flight: {width} (one core: "
        f"{options.pinned_concurrency}); warm-up {warm} per series; "
        f"tools/call = mcpx_call -> demo echo {ECHO_ARGUMENTS}"
    )
    print(
        "client: raw HTTP/1.1 keep-alive on the daemon's unix socket (bench/keepalive_http.py), "
        f"Accept: {ACCEPT}"
    )

    if options.profile:
        try:
            daemon = Daemon({"demo": DEMO_ARGV}, options.profile)
        except SystemExit as e:
            print(f"\nthe run failed: {e}")
            return

        async def profiled(reactor: Any) -> int:
            return await profile_run(
                reactor,
                daemon,
                era=options.profile_era,
                method=options.profile_method,
                count=count,
                width=width,
                warm=warm,
            )

        try:
            requests = run_reactor(profiled)
        except (Exception, SystemExit) as e:
            print(f"\nthe run failed: {e}")
            return
        finally:
            daemon.stop()
            daemon.remove()
        where = f"{options.profile_era} {options.profile_method}, {options.profile}"
        with section(f"where the daemon spent its time ({where}):"):
            profile_summary(options.profile, requests)
        print(f"\nwhole run: {time.perf_counter() - started:.1f} s")
        return

    cpus = os.cpu_count() or 1
    phases = []
    if options.phase in ("shared", "both"):
        phases.append(("shared: nothing pinned", False, width))
    if options.phase in ("pinned", "both"):
        if cpus < 2:
            print("one core phase skipped: it needs two CPUs")
        else:
            phases.append(
                (
                    f"one core: daemon alone on CPU {DAEMON_CPU} (taskset)",
                    True,
                    options.pinned_concurrency,
                )
            )

    async def measure(reactor: Any) -> list[dict[str, Any]]:
        return [
            await phase(
                reactor,
                name,
                pin=pin,
                priority=options.priority,
                count=count,
                width=phase_width,
                warm=warm,
            )
            for name, pin, phase_width in phases
        ]

    try:
        results = run_reactor(measure)
    except (Exception, SystemExit) as e:
        # A bench reports what went wrong rather than failing whatever ran it.
        print(f"\nthe run failed: {e}")
        return
    for found in results:
        report(found)
    print(f"\nwhole run: {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
