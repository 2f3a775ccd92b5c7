"""
What the daemon adds to a tool call, measured against calling the same upstream directly.

One run, one stdio upstream (the bundled demo, C{python -m mcpx.demo}, tool C{echo}; with
C{--sdk} also the mcp SDK fixture C{tests/fixtures/sdk_server.py}):

  1. direct: mcpx's own upstream client (L{mcpx.upstream.connect.make_connector}) calls
     the upstream it spawned, N calls one after another, then N with C{--concurrency} in
     flight;
  2. daemon: the same calls as C{POST /v1/call} on a running daemon's unix socket, from a
     raw keep-alive HTTP/1.1 client (L{keepalive_http}: one persistent connection per
     caller in flight, requests prepared once), after a warm-up;
  3. the daemon's HTTP floor: C{GET /health} through the same client, which touches no
     upstream;
  4. C{mcpx call demo echo text=x} as a process on the warm daemon, against spawning the
     demo cold for each call (spawn, initialize, call, exit);
  5. the daemon's RSS and open descriptors: idle (no upstream started), after the warm-up,
     after the calls; and, once it is stopped, whether any child of it survived.

    .venv/bin/python bench/bench_call.py [--calls N] [--concurrency C] [--cli-runs K] [--sdk]
    .venv/bin/python bench/bench_call.py --profile /tmp/daemon.prof   # daemon under cProfile

The figures are printed; nothing is asserted.  With C{--profile} the daemon runs under
cProfile (which slows it down several times over, so the latencies of that run are not the
daemon's) and the functions it spent most time in are printed after it stops.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from keepalive_http import KeepAliveClient, connect, prepare
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.task import deferLater

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
MCPX = str(Path(PYTHON).parent / "mcpx")
DEMO_ARGV = [PYTHON, "-m", "mcpx.demo"]
SDK_ARGV = [PYTHON, str(REPO / "tests" / "fixtures" / "sdk_server.py"), "--transport", "stdio"]
ECHO_ARGUMENTS = {"text": "x"}
#: Issue 18's targets for C{mcpx call} on a warm daemon: wall time, and the ratio to
#: spawning the upstream per call.
CLI_TARGET_MS = 20.0
CLI_TARGET_RATIO = 12.0


# -- Figures ---------------------------------------------------------------------------------


def percentile(sorted_values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of already sorted values."""
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


class Run:
    """The latencies of one series of calls, and how long the series took."""

    def __init__(self, label: str, latencies: list[float], elapsed: float) -> None:
        self.label = label
        self.latencies = sorted(latencies)
        self.elapsed = elapsed

    @property
    def p50(self) -> float:
        return percentile(self.latencies, 0.50) * 1000

    @property
    def p90(self) -> float:
        return percentile(self.latencies, 0.90) * 1000

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 0.99) * 1000

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.elapsed

    def row(self) -> str:
        return (
            f"  {self.label:<34} {self.p50:8.3f} {self.p90:8.3f} {self.p99:8.3f} {self.rate:10.0f}"
        )


def table(runs: list[Run]) -> str:
    head = f"  {'':<34} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'calls/s':>10}"
    return "\n".join([head, *(run.row() for run in runs)])


def compare(direct: Run, daemon: Run) -> str:
    return (
        f"  {daemon.label}: +{daemon.p50 - direct.p50:.3f} ms at p50 "
        f"(x{daemon.p50 / direct.p50:.2f} the direct p50), "
        f"throughput x{daemon.rate / direct.rate:.2f} the direct calls/s"
    )


async def sequential(label: str, call: Callable[[], Awaitable[object]], count: int) -> Run:
    latencies: list[float] = []
    clock = time.perf_counter
    start = clock()
    for _ in range(count):
        begun = clock()
        await call()
        latencies.append(clock() - begun)
    return Run(label, latencies, clock() - start)


async def concurrent(label: str, calls: list[Callable[[], Awaitable[object]]], count: int) -> Run:
    """C{count} calls spread over C{len(calls)} callers, each keeping one call in flight."""
    latencies: list[float] = []
    clock = time.perf_counter
    share, extra = divmod(count, len(calls))

    async def caller(call: Callable[[], Awaitable[object]], n: int) -> None:
        for _ in range(n):
            begun = clock()
            await call()
            latencies.append(clock() - begun)

    start = clock()
    await gatherResults(
        [
            Deferred.fromCoroutine(caller(call, share + (1 if i < extra else 0)))
            for i, call in enumerate(calls)
        ]
    )
    return Run(label, latencies, clock() - start)


# -- The daemon process ------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, str]:
    fields = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def rss_mb(pid: int) -> float:
    return int(proc_status(pid)["VmRSS"].split()[0]) / 1024


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def children_of(pid: int) -> list[int]:
    """The processes whose parent is C{pid}, from C{/proc/*/stat}."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            # The command name is in parentheses and may hold spaces: split after it.
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            if ppid == pid:
                found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


class Daemon:
    """
    A real C{mcpx daemon} on the unix socket only, in a state directory of its own; with
    C{cpus}, started under C{taskset -c cpus}.
    """

    def __init__(
        self,
        servers: dict[str, list[str]],
        profile: str | None,
        *,
        cpus: str | None = None,
        listen: str = "",
        env: dict[str, str] | None = None,
        own_session: bool = False,
    ) -> None:
        """
        @param listen: C{--daemon-listen} (none: the unix socket only).
        @param env: more environment for the daemon (C{MCPX_*} settings).
        @param own_session: start the daemon in a session of its own (its upstreams with it),
            so that the kernel schedules it as an autogroup of its own (see
            C{bench_mcp.raise_priority}).
        """
        self.state = Path(tempfile.mkdtemp(prefix="mcpx-bench-"))
        self.socket = str(self.state / "mcpx.sock")
        config = self.state / "config.json"
        config.write_text(
            json.dumps(
                {"servers": {n: {"command": a[0], "args": a[1:]} for n, a in servers.items()}}
            )
        )
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_")}
        self.env.update(MCPX_STATE_DIR=str(self.state), MCPX_CONFIG=str(config))
        self.env.update(env or {})
        prefix = [PYTHON, "-m", "cProfile", "-o", profile] if profile else [PYTHON]
        if cpus is not None:
            # taskset execs the daemon, so its pid is the daemon's; upstreams inherit the mask.
            prefix = ["taskset", "-c", cpus, *prefix]
        self.log = open(self.state / "daemon.log", "wb")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [*prefix, "-m", "mcpx", "daemon", "--daemon-listen", listen],
            env=self.env,
            # Not the bench's directory: python -m would import mcpx from there, whichever
            # checkout the interpreter belongs to.
            cwd=self.state,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
            # A session of its own is an autogroup of its own, whose priority can be set.
            start_new_session=own_session,
        )
        self.pid = self.process.pid
        self._wait_for_health()

    def _wait_for_health(self) -> None:
        from mcpx.cli.client import DaemonClient, DaemonNotRunning

        client = DaemonClient(Path(self.socket))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(DaemonNotRunning, OSError):
                client.health()
                # Let the daemon close that connection before its descriptors are counted.
                time.sleep(0.2)
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise SystemExit(f"the daemon did not start; its log:\n{self.log_text()}")

    def log_text(self) -> str:
        return (self.state / "daemon.log").read_text("utf-8", "replace")[-3000:]

    def memory(self) -> tuple[float, int]:
        return rss_mb(self.pid), open_fds(self.pid)

    def stop(self) -> tuple[int | None, list[int], list[int]]:
        """SIGTERM, wait; the exit status, its children before, and those still alive."""
        children = children_of(self.pid)
        self.process.send_signal(signal.SIGTERM)
        try:
            status: int | None = self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            status = None
        deadline = time.monotonic() + 5
        while any(alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        survivors = [c for c in children if alive(c)]
        for child in survivors:
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGKILL)
        self.log.close()
        return status, children, survivors

    def remove(self) -> None:
        shutil.rmtree(self.state, ignore_errors=True)


# -- The calls ---------------------------------------------------------------------------------


async def direct_runs(
    reactor: Any, name: str, argv: list[str], count: int, width: int
) -> tuple[list[Run], str]:
    from mcpx.settings.servers import StdioServer
    from mcpx.upstream.connect import make_connector

    connector = make_connector(reactor, dict(os.environ), None)
    session = await connector.connect(name, StdioServer(name, argv[0], tuple(argv[1:])))
    try:

        def call() -> Awaitable[object]:
            return Deferred.fromCoroutine(session.call_tool("echo", ECHO_ARGUMENTS))

        await sequential("warm-up", call, min(count, 500))
        runs = [
            await sequential(f"direct {name}, sequential", call, count),
            await concurrent(f"direct {name}, {width} in flight", [call] * width, count),
        ]
        speaks = f"{session.era.value} era, revision {session.revision.value}"
    finally:
        await session.close()
    return runs, speaks


def _checked(answer: tuple[int, bytes]) -> tuple[int, bytes]:
    status, body = answer
    if status != 200:
        raise RuntimeError(f"the daemon answered {status}: {body[:300]!r}")
    return answer


async def close_all(reactor: Any, clients: list[KeepAliveClient]) -> None:
    """Close the connections and wait until the daemon has seen them go."""
    for client in clients:
        if client.transport is not None:
            client.transport.loseConnection()
    await deferLater(reactor, 0.2, lambda: None)


async def daemon_runs(
    reactor: Any,
    daemon: Daemon,
    name: str,
    count: int,
    width: int,
    *,
    memory: dict[str, tuple[float, int]],
) -> tuple[list[Run], str]:
    clients: list[KeepAliveClient] = [await connect(reactor, daemon.socket) for _ in range(width)]
    body = json.dumps({"server": name, "tool": "echo", "arguments": ECHO_ARGUMENTS}).encode()
    request = prepare("POST", "/v1/call", body)

    def caller(client: KeepAliveClient) -> Callable[[], Awaitable[object]]:
        return lambda: client.send(request).addCallback(_checked)

    try:
        first = caller(clients[0])
        await sequential("warm-up", first, min(count, 500))
        memory[f"after the warm-up ({name})"] = daemon.memory()
        runs = [
            await sequential(f"daemon {name}, sequential", first, count),
            await concurrent(
                f"daemon {name}, {width} in flight", [caller(c) for c in clients], count
            ),
        ]
        _, answer = _checked(await clients[0].send(prepare("GET", "/v1/servers")))
        servers = {s["name"]: s for s in json.loads(answer)["servers"]}
        speaks = f"{servers[name]['era']} era, revision {servers[name]['revision']}"
    finally:
        await close_all(reactor, clients)
    memory[f"after {2 * count} more calls ({name})"] = daemon.memory()
    return runs, speaks


async def health_runs(reactor: Any, daemon: Daemon, count: int, width: int) -> list[Run]:
    clients = [await connect(reactor, daemon.socket) for _ in range(width)]
    request = prepare("GET", "/health")

    def caller(client: KeepAliveClient) -> Callable[[], Awaitable[object]]:
        return lambda: client.send(request).addCallback(_checked)

    try:
        await sequential("warm-up", caller(clients[0]), 200)
        return [
            await sequential("daemon GET /health, sequential", caller(clients[0]), count),
            await concurrent(
                f"daemon GET /health, {width} in flight", [caller(c) for c in clients], count
            ),
        ]
    finally:
        await close_all(reactor, clients)


# -- The command line against spawning per call -------------------------------------------------


#: The CPU time (user and system) of each C{mcpx call} process, in seconds.
CLI_CPU: list[float] = []


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cli_call(env: dict[str, str]) -> float:
    begun = time.perf_counter()
    cpu = children_cpu()
    done = subprocess.run(
        [MCPX, "call", "demo", "echo", "text=x"], env=env, capture_output=True, check=False
    )
    elapsed = time.perf_counter() - begun
    CLI_CPU.append(children_cpu() - cpu)
    if done.returncode != 0 or done.stdout != b"x\n":
        raise RuntimeError(f"mcpx call failed: {done}")
    return elapsed


def cold_call(argv: list[str], env: dict[str, str]) -> float:
    """Spawn the upstream, initialize, call echo once, close its stdin and wait for its exit."""
    begun = time.perf_counter()
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert process.stdin is not None and process.stdout is not None

    def send(message: dict[str, Any]) -> None:
        assert process.stdin is not None
        process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        process.stdin.flush()

    def answer(wanted: int) -> dict[str, Any]:
        assert process.stdout is not None
        while True:
            message: dict[str, Any] = json.loads(process.stdout.readline())
            if message.get("id") == wanted:
                return message

    send(
        {
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        }
    )
    answer(1)
    send({"method": "notifications/initialized"})
    send({"id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": ECHO_ARGUMENTS}})
    result = answer(2)
    process.stdin.close()
    process.wait(timeout=10)
    process.stdout.close()
    elapsed = time.perf_counter() - begun
    if result.get("result", {}).get("content", [{}])[0].get("text") != "x":
        raise RuntimeError(f"the cold call answered {result}")
    return elapsed


def python_run(code: str, env: dict[str, str]) -> float:
    """The wall time of C{python -c code}."""
    begun = time.perf_counter()
    subprocess.run([PYTHON, "-c", code], check=True, env=env)
    return time.perf_counter() - begun


def shell_section(daemon: Daemon, runs: int) -> None:
    # Bytecode written by the first, uncounted run of each and read by the others, as an
    # installed mcpx (compiled at install) reads it: with PYTHONDONTWRITEBYTECODE=1 and no
    # __pycache__ in the checkout, every mcpx call would compile its modules again.
    cache = tempfile.mkdtemp(prefix="mcpx-bench-pyc-")
    env = {k: v for k, v in daemon.env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = cache
    timings: dict[str, list[float]] = {}
    rows: dict[str, Callable[[], float]] = {
        "mcpx call demo echo text=x (warm daemon)": lambda: cli_call(env),
        "spawn demo, initialize, call, exit": lambda: cold_call(DEMO_ARGV, env),
        "python -c pass (interpreter start alone)": lambda: python_run("pass", env),
        "python -c 'import mcpx.cli.main'": lambda: python_run("import mcpx.cli.main", env),
    }
    try:
        for run in rows.values():
            run()
        # Interleaved, so a burst of load on the machine hits each kind alike.
        for _ in range(runs):
            for label, run in rows.items():
                timings.setdefault(label, []).append(run())
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print("  (bytecode cached: written by a first, uncounted run of each, then read)")
    medians = {label: statistics.median(times) * 1000 for label, times in timings.items()}
    for label, median in medians.items():
        print(f"  {label:<42} {median:8.1f} ms")
    cli_ms, cold_ms = list(medians.values())[:2]
    ratio = cold_ms / cli_ms
    cpu_ms = statistics.median(CLI_CPU[-runs:]) * 1000
    print(f"  mcpx call CPU time (user + system, its process only): {cpu_ms:.1f} ms")
    print(f"  spawning per call / mcpx call: x{ratio:.2f}")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    wall = "met" if cli_ms <= CLI_TARGET_MS else f"missed by {cli_ms - CLI_TARGET_MS:.1f} ms"
    times = "met" if ratio >= CLI_TARGET_RATIO else f"missed by x{CLI_TARGET_RATIO - ratio:.2f}"
    print(f"  mcpx call {cli_ms:.1f} ms, target <= {CLI_TARGET_MS:.0f} ms: {wall} (load {load})")
    print(f"  x{ratio:.2f} over spawning per call, target >= x{CLI_TARGET_RATIO:.0f}: {times}")


#: Where a request's time goes in the daemon, by the function that accounts for it.
PROFILE_SPOTS = {
    "twisted/web/http.py(log)": "twisted.web access log line (HTTPFactory.log)",
    "twisted/web/http.py(_parseContentType)": "twisted.web POST Content-Type parse (email pkg)",
    "mcpx/daemon/ops.py(check)": "input schema check (Op.check, jsonschema)",
    "mcpx/pool/pool.py(call_tool)": "pool.call_tool, upstream session included",
    "werkzeug/routing/map.py(match)": "werkzeug route match",
    "klein/_resource.py(extractURLparts)": "klein URL parts",
    "mcpx/daemon/api.py(json_body)": "encoding the answer (json_body)",
}


def profile_summary(path: str) -> None:
    """
    The functions the daemon spent most of its own time in, and the known hot spots as a
    share of its busy time (everything but waiting in epoll).  Coroutines are counted at
    each resumption, so the spots are shown as totals rather than per call.
    """
    import pstats

    stats: Any = pstats.Stats(path)
    rows = []
    spots: dict[str, float] = {}
    idle = 0.0
    for (filename, _line, function), (_, calls, own, total, _) in stats.stats.items():
        short = filename.split("site-packages/")[-1].replace(str(REPO) + "/", "")
        if "poll" in function and "epoll" in function:
            idle += own
            continue
        rows.append((own, calls, f"{short}({function})"))
        spots[f"{short}({function})"] = total
    busy = stats.total_tt - idle
    rows.sort(reverse=True)
    print(f"  busy {busy:.2f} s of {stats.total_tt:.2f} s (the rest waiting in epoll)")
    print("  by own time:")
    for own, calls, name in rows[:10]:
        print(f"    {own:7.3f} s {calls:8d} calls  {name}")
    print("  the known spots (cumulative, share of the busy time):")
    for key, label in PROFILE_SPOTS.items():
        if key in spots:
            print(f"    {spots[key]:7.3f} s {spots[key] / busy:6.1%}  {label}")


# -- The run -----------------------------------------------------------------------------------


def machine() -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return (
        f"{os.cpu_count()} CPUs ({model}), Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}"
    )


def run_reactor(work: Callable[[Any], Awaitable[Any]]) -> Any:
    """Run C{work(reactor)} to its end on the global reactor, which runs only once."""
    from twisted.internet import reactor as global_reactor

    reactor: Any = global_reactor
    outcome: list[Any] = []

    def finish(result: object) -> None:
        outcome.append(result)
        reactor.stop()

    def begin() -> None:
        Deferred.fromCoroutine(work(reactor)).addBoth(finish)  # type: ignore[arg-type]

    reactor.callWhenRunning(begin)
    reactor.run()
    result = outcome[0] if outcome else RuntimeError("the reactor stopped early")
    if isinstance(result, BaseException):
        raise result
    failure_value = getattr(result, "value", None)
    if isinstance(failure_value, BaseException):
        raise failure_value
    return result


@contextlib.contextmanager
def section(title: str) -> Iterator[None]:
    print(f"\n{title}", flush=True)
    yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=2000, help="calls per series (2000)")
    parser.add_argument("--concurrency", type=int, default=16, help="calls in flight (16)")
    parser.add_argument("--cli-runs", type=int, default=15, help="mcpx call / cold runs (15)")
    parser.add_argument("--sdk", action="store_true", help="also the mcp SDK fixture server")
    parser.add_argument("--profile", metavar="FILE", help="run the daemon under cProfile")
    options = parser.parse_args()
    count, width = options.calls, options.concurrency

    upstreams = {"demo": DEMO_ARGV}
    if options.sdk:
        upstreams["sdk"] = SDK_ARGV
    started = time.perf_counter()
    print(f"machine: {machine()}")
    print(f"calls per series: {count}; in flight: {width}; tool: echo {ECHO_ARGUMENTS}")
    print("daemon client: raw HTTP/1.1 keep-alive on the unix socket (bench/keepalive_http.py)")

    daemon = Daemon(upstreams, options.profile)
    memory = {"idle (no upstream started)": daemon.memory()}

    async def measure(reactor: Any) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for name, argv in upstreams.items():
            direct, direct_speaks = await direct_runs(reactor, name, argv, count, width)
            through, daemon_speaks = await daemon_runs(
                reactor, daemon, name, count, width, memory=memory
            )
            found[name] = (direct, through, direct_speaks, daemon_speaks)
        found["health"] = await health_runs(reactor, daemon, count, width)
        return found

    try:
        found = run_reactor(measure)
        for name in upstreams:
            direct, through, direct_speaks, daemon_speaks = found[name]
            with section(f"{name} ({' '.join(upstreams[name][1:])}):"):
                print(f"  direct speaks {direct_speaks}; through the daemon {daemon_speaks}")
                print(table([direct[0], through[0], direct[1], through[1]]))
                print(compare(direct[0], through[0]))
                print(compare(direct[1], through[1]))
        with section("the daemon's HTTP floor (no upstream involved):"):
            print(table(found["health"]))

        with section(f"one call from the shell, median of {options.cli_runs} (wall time):"):
            shell_section(daemon, options.cli_runs)
        memory["after the CLI calls"] = daemon.memory()
    finally:
        status, children, survivors = daemon.stop()
        daemon.remove()

    with section("the daemon process:"):
        for when, (rss, fds) in memory.items():
            print(f"  {when:<32} RSS {rss:6.1f} MB, {fds:3d} open fds")
        print(
            f"  stopped with SIGTERM: exit status {status}; children before {len(children)}, "
            f"still alive after {len(survivors)}"
        )
    if options.profile:
        with section(f"where the daemon spent its time ({options.profile}):"):
            profile_summary(options.profile)
    print(f"\nwhole run: {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
