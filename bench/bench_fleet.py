"""
What the fleet costs and gives: the shared PostgreSQL store against the default SQLite
one, per call, per task and per question; and three daemons against one behind the same
HAProxy.

One run starts the fleet of the integration suite (L{tests.fleet.fleet}: a throw-away
PostgreSQL cluster, three C{mcpx daemon}s on it, HAProxy running C{deploy/haproxy.cfg},
the Python SDK fixture as every daemon's upstream, OAuth tokens from a stand-in issuer)
and one more daemon set up the same way but with the default store (SQLite in its state
directory). Then:

  1. B{store}: on the SQLite daemon and on a fleet daemon, directly (no balancer), one
     after another on a kept connection: C{POST /v1/call} of C{echo} (no record); a task
     round (C{/v1/call} with C{"task": true}, then C{GET /v1/tasks/ID} until it is done);
     a question round (a C{/v1/call} of C{ask_name} on one connection, its question found
     in C{/v1/questions} and answered on another, the call's answer read); and on the
     fleet, the question answered through another daemon. Milliseconds per round, and
     for PostgreSQL the write transactions per round (transaction ids taken, less the
     heartbeats);
  2. B{throughput}: 2026-07-28 C{tools/call echo} requests to C{/mcp} through HAProxy from
     several client processes for a few seconds, with all three daemons in the backend
     and with two of them disabled (the stats socket's C{disable server}); requests per
     second, and the CPU seconds each process spent.

    .venv/bin/python bench/bench_fleet.py [--rounds N] [--seconds S] [--clients C]

The figures are printed; nothing is asserted. On a 2-CPU machine three daemons share the
two CPUs with HAProxy, PostgreSQL and the clients: the throughput ratio says what a
second and third process buys there, not what three machines would.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg

from mcpx.store.heartbeat import EVERY
from tests.fleet.fleet import UPSTREAM, Fleet, FleetDaemon, wait_until
from tests.support.postgres import PASSWORD

MODERN = "2026-07-28"


class Connection:
    """A kept HTTP/1.1 connection to one daemon, as one principal."""

    def __init__(self, port: int, token: str) -> None:
        self._http = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def request(
        self, method: str, path: str, body: Any = None, token: str | None = None
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = self._headers
        if token is not None:
            headers = {**headers, "Authorization": f"Bearer {token}"}
        self._http.request(method, path, body=data, headers=headers)
        response = self._http.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else None

    def close(self) -> None:
        self._http.close()


def timed(label: str, rounds: int, run: Callable[[], None]) -> float:
    for _ in range(max(3, rounds // 10)):
        run()
    started = time.perf_counter()
    for _ in range(rounds):
        run()
    spent = (time.perf_counter() - started) / rounds * 1000
    print(f"    {label:<44} {spent:8.2f} ms")
    return spent


def write_transactions(url: str) -> int:
    """The next transaction id: how many transactions that wrote have begun so far."""
    with psycopg.connect(url, password=PASSWORD) as db:
        row = db.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text").fetchone()
    assert row is not None
    return int(row[0])


class StoreRounds:
    """The three rounds of part 1 against one daemon (and its neighbour, for questions)."""

    def __init__(self, fleet: Fleet, daemon: FleetDaemon, answerer: FleetDaemon) -> None:
        token = fleet.token("alice")
        self.calls = Connection(daemon.port, token)
        self.other = Connection(daemon.port, token)
        self.answers = Connection(answerer.port, token)
        self.polls = 0
        # A caller holds at most tasks.maxPerClient (200) tasks until they expire: the task
        # rounds change principal every 100 tasks.
        self._fleet = fleet
        self._tasks = 0

    def close(self) -> None:
        for connection in (self.calls, self.other, self.answers):
            connection.close()

    def plain(self) -> None:
        status, _ = self.calls.request(
            "POST", "/v1/call", {"server": UPSTREAM, "tool": "echo", "arguments": {"text": "x"}}
        )
        assert status == 200, status

    def task(self) -> None:
        body = {"server": UPSTREAM, "tool": "echo", "arguments": {"text": "x"}, "task": True}
        token = self._fleet.token(f"tasks-{self._tasks // 100}")
        self._tasks += 1
        status, started = self.calls.request("POST", "/v1/call", body, token)
        assert status == 202, (status, started)
        path = f"/v1/tasks/{started['task']['id']}"
        while True:
            self.polls += 1
            status, shown = self.other.request("GET", path, token=token)
            assert status == 200, (status, shown)
            if shown["status"] not in ("working", "input_required"):
                assert shown["status"] == "completed", shown
                return
            time.sleep(0.001)

    def question(self, through: Connection | None = None) -> None:
        answering = through or self.other
        done: list[tuple[int, Any]] = []
        body = {"server": UPSTREAM, "tool": "ask_name", "arguments": {}}
        caller = threading.Thread(
            target=lambda: done.append(self.calls.request("POST", "/v1/call", body))
        )
        caller.start()
        while True:
            status, listed = answering.request("GET", "/v1/questions")
            pending = [q for q in listed["questions"] if q["state"] == "pending"]
            if pending:
                break
            time.sleep(0.001)
        reply = {"action": "accept", "content": {"name": "Ada"}}
        status, _ = answering.request("POST", f"/v1/questions/{pending[0]['id']}/answer", reply)
        assert status == 200, status
        caller.join(60)
        assert done and done[0][0] == 200, done

    def elsewhere(self) -> None:
        self.question(self.answers)


def part_store(fleet: Fleet, lone: FleetDaemon, rounds: int) -> None:
    first, second, _ = fleet.daemons
    url = fleet.postgres.url(fleet.daemons[0].env["MCPX_STORE_URL"].rsplit("/", 1)[1])
    print(f"1. store: {rounds} rounds each, one after another, straight to the daemon")
    results: dict[str, dict[str, float]] = {}
    for label, daemon in (("SQLite (default)", lone), ("PostgreSQL (fleet)", first)):
        print(f"  {label}:")
        rounds_of = StoreRounds(fleet, daemon, second)
        kinds: list[tuple[str, Callable[[], None]]] = [
            ("/v1/call echo", rounds_of.plain),
            ("task round (call, polls until done)", rounds_of.task),
            ("question round (asked, answered here)", rounds_of.question),
        ]
        if daemon is first:
            kinds.append(("question answered through another daemon", rounds_of.elsewhere))
        results[label] = {}
        for name, run in kinds:
            before = write_transactions(url) if daemon is first else 0
            began = time.monotonic()
            polls = rounds_of.polls
            results[label][name] = timed(name, rounds, run)
            if rounds_of.polls != polls:
                print(f"    {'':<44} ({(rounds_of.polls - polls) / rounds:.1f} polls per task)")
            if daemon is first:
                # Less the heartbeats: one write per daemon every 5 seconds.
                beats = len(fleet.daemons) * (time.monotonic() - began) / EVERY
                written = write_transactions(url) - before - 1 - beats
                per = max(0.0, written / (rounds + max(3, rounds // 10)))
                print(f"    {'':<44} {per:.1f} write transactions per round")
        rounds_of.close()
    sqlite, postgres = results["SQLite (default)"], results["PostgreSQL (fleet)"]
    for name in sqlite:
        print(
            f"  PostgreSQL - SQLite, {name}: {postgres[name] - sqlite[name]:+.2f} ms"
            f" ({postgres[name] / sqlite[name]:.2f}x)"
        )


def modern_request() -> tuple[bytes, dict[str, str]]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "echo",
            "arguments": {"text": "x"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "echo",
    }
    return json.dumps(body).encode(), headers


def client(port: int, tokens: list[str], seconds: float, start: float) -> int:
    """
    One client process: a kept connection per token (each its own principal, under the
    balancer's per-credential rate limit), calling until C{start + seconds}.
    """
    body, base = modern_request()
    counts = [0] * len(tokens)

    def loop(index: int) -> None:
        headers = {**base, "Authorization": f"Bearer {tokens[index]}"}
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while time.time() < start:
            time.sleep(0.001)
        while time.time() < start + seconds:
            connection.request("POST", "/mcp", body=body, headers=headers)
            response = connection.getresponse()
            answer = response.read()
            assert response.status == 200 and b'"result"' in answer, (response.status, answer)
            counts[index] += 1
        connection.close()

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(len(tokens))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(counts)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(fleet: Fleet, seconds: float, clients: int, threads: int) -> float:
    pids = {d.name: d.process.pid for d in fleet.daemons if d.process is not None}
    assert fleet.haproxy is not None
    pids["haproxy"] = fleet.haproxy.pid
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    with multiprocessing.get_context("spawn").Pool(clients) as pool:
        # Every client process started (its imports done) before the clock starts.
        pool.map(time.sleep, [0.1] * clients)
        start = time.time() + 0.5
        counts = pool.starmap(
            client,
            [
                (
                    fleet.balancer_port,
                    [fleet.token(f"bench-{c}-{t}") for t in range(threads)],
                    seconds,
                    start,
                )
                for c in range(clients)
            ],
        )
    spent = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    rate = sum(counts) / seconds
    used = ", ".join(f"{name} {value:.1f}" for name, value in spent.items())
    print(f"    {sum(counts)} requests in {seconds:.0f} s: {rate:.0f} requests/s; CPU s: {used}")
    return rate


def part_throughput(fleet: Fleet, seconds: float, clients: int, threads: int) -> None:
    print(
        f"2. throughput through HAProxy: 2026-07-28 tools/call echo, {clients} client processes"
        f" x {threads} kept connections, {seconds:.0f} s each"
    )
    # Warm every daemon's upstream first.
    throughput_quiet = max(1.0, seconds / 5)
    with open(os.devnull, "w") as null:
        saved, sys.stdout = sys.stdout, null
        try:
            throughput(fleet, throughput_quiet, clients, threads)
        finally:
            sys.stdout = saved
    print("  three daemons:")
    three = throughput(fleet, seconds, clients, threads)
    for name in ("mcpx2", "mcpx3"):
        fleet.stats_command(f"disable server mcpx/{name}")
    wait_until(
        lambda: all(s == "MAINT" for n, s in fleet.server_states().items() if n != "mcpx1"),
        "mcpx2 and mcpx3 are out of the backend",
    )
    print("  one daemon (mcpx2 and mcpx3 disabled):")
    one = throughput(fleet, seconds, clients, threads)
    for name in ("mcpx2", "mcpx3"):
        fleet.stats_command(f"enable server mcpx/{name}")
    print(f"  three daemons / one: {three / one:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=200, help="rounds of each kind, part 1")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each series, part 2")
    parser.add_argument("--clients", type=int, default=2, help="client processes, part 2")
    parser.add_argument("--threads", type=int, default=8, help="connections per client process")
    options = parser.parse_args()
    started = time.perf_counter()
    fleet = Fleet.start()
    try:
        lone = fleet.lone_daemon("sqlite")
        lone.start()
        lone.wait_started()
        print(
            f"fleet: PostgreSQL {fleet.postgres.bin.parent.name}, 3 daemons, HAProxy; "
            f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}"
        )
        part_store(fleet, lone, options.rounds)
        part_throughput(fleet, options.seconds, options.clients, options.threads)
    finally:
        fleet.stop()
    print(f"(whole run {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
