"""
The pool with real child processes on the real reactor: warm reuse, idle reaping,
crash replacement, and many start/reap cycles that must leave no process and no file
descriptor behind.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.task import LoopingCall, deferLater
from twisted.trial.unittest import TestCase

from mcpx.pool import Backoff, Pool, ServerUnavailable
from mcpx.settings.servers import Scope, Secret, StdioServer
from mcpx.upstream.connect import make_connector
from mcpx.upstream.session import UpstreamSession
from tests.pool.fakes import servers
from tests.support.peers import misbehaving_argv
from tests.support.processes import reactor

DEMO = StdioServer(name="demo", command=sys.executable, args=("-m", "mcpx.demo"))
CRASHY = StdioServer(
    name="crashy",
    command=sys.executable,
    args=tuple(misbehaving_argv("crash-mid-call")[1:]),
)

#: The token the server below is configured with, which it prints as it dies.
TOKEN = "tok-4f1c2a9b0d3e5f67"

#: A server that says why on stderr, naming its token, and exits 3 before the handshake.
SAYS_WHY = StdioServer(
    name="saywhy",
    command=sys.executable,
    args=(
        "-c",
        "import os, sys; print('starting', file=sys.stderr); "
        "print('oops: token ' + os.environ['API_TOKEN'] + ' refused', file=sys.stderr); "
        "sys.exit(3)",
    ),
    env={"API_TOKEN": Secret(TOKEN)},
)

#: A small, fast stdio server for the leak test: a Python script on the standard library
#: that answers the handshake and tools/list (only its tools/call hangs, which the test
#: never makes), so that hundreds of starts fit in seconds.
QUICK = StdioServer(
    name="quick",
    command=sys.executable,
    args=tuple(misbehaving_argv("hang")[1:]),
    scope=Scope.CLIENT,
)

#: Start/reap cycles in the leak test, and how many of them run side by side.
CYCLES = 200
LANES = 4


def pid_of(session: UpstreamSession) -> int:
    pid = getattr(session.channel, "pid", None)
    assert isinstance(pid, int), f"no pid for {session.channel.describe()}"
    return pid


def is_our_child(pid: int) -> bool:
    """Whether C{pid} is still a child of this process (running, or a zombie not reaped)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return True


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


class EventWaiter:
    """A publish callable that lets a test wait for an event."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None, dict[str, Any]]] = []
        self._waiting: list[tuple[str, Mapping[str, Any], Deferred[dict[str, Any]]]] = []

    def __call__(self, kind: str, server: str | None = None, **data: Any) -> None:
        self.seen.append((kind, server, data))
        still = []
        for wanted, match, waiter in self._waiting:
            if wanted == kind and all(data.get(k) == v for k, v in match.items()):
                waiter.callback(data)
            else:
                still.append((wanted, match, waiter))
        self._waiting = still

    def next(self, kind: str, timeout: float = 20.0, **match: Any) -> Deferred[dict[str, Any]]:
        waiter: Deferred[dict[str, Any]] = Deferred()
        self._waiting.append((kind, match, waiter))
        return waiter.addTimeout(timeout, reactor)


class RealProcessTests(TestCase):
    timeout = 120

    def make_pool(self, *configured: StdioServer, **options: Any) -> Pool:
        options.setdefault("call_timeout", 30.0)
        options.setdefault("idle_timeout", 60.0)
        self.events = EventWaiter()
        pool = Pool(
            servers=servers(*configured),
            connector=make_connector(reactor, os.environ, None, grace=2.0),
            clock=reactor,
            publish=self.events,
            **options,
        )
        pool.startService()
        self.addCleanup(pool.stopService)
        return pool

    async def test_warm_reuse(self) -> None:
        """Two calls to the demo run in one process, which stays running between them."""
        pool = self.make_pool(DEMO)
        first = await pool.call_tool("demo", "echo", {"text": "one"})
        pid = pid_of(await pool.session("demo"))
        second = await pool.call_tool("demo", "echo", {"text": "two"})
        self.assertEqual(first["content"][0]["text"], "one")
        self.assertEqual(second["content"][0]["text"], "two")
        self.assertEqual(pid_of(await pool.session("demo")), pid)
        self.assertTrue(is_our_child(pid))
        self.assertEqual([k for k, _, _ in self.events.seen].count("server.starting"), 1)

    async def test_idle_reap_kills_process(self) -> None:
        """An instance left unused past idle_timeout is stopped and its process reaped."""
        pool = self.make_pool(DEMO, idle_timeout=0.3)
        await pool.call_tool("demo", "echo", {"text": "x"})
        pid = pid_of(await pool.session("demo"))
        await self.events.next("server.reaped")
        self.assertFalse(is_our_child(pid))
        self.assertFalse(os.path.exists(f"/proc/{pid}"))
        self.assertEqual(pool.status()[0].instances, 0)

    async def test_crash_replaced(self) -> None:
        """A server that dies mid-call fails that call clearly; the next use gets a new one."""
        pool = self.make_pool(CRASHY, backoff=Backoff(first=0.1))
        pid = pid_of(await pool.session("crashy"))
        try:
            await pool.call_tool("crashy", "echo", {"text": "x"})
        except ServerUnavailable as e:
            error = e
        else:
            self.fail("the call to a crashing server succeeded")
        self.assertIn('upstream "crashy" exited with status 3', str(error))
        self.assertIn("the call was cut short", str(error))
        assert error.retry_in is not None
        self.assertTrue(0 < error.retry_in <= 0.1, error.retry_in)
        self.assertFalse(is_our_child(pid))
        await deferLater(reactor, 0.15, lambda: None)
        tools = await pool.tools("crashy")
        self.assertEqual([tool["name"] for tool in tools], ["echo"])
        self.assertNotEqual(pid_of(await pool.session("crashy")), pid)

    async def test_failed_start_says_what_stderr_said(self) -> None:
        """
        A server that prints C{oops} on stderr and exits 3 is reported with what it
        said, its token masked: in the error a caller gets, the server's last error
        and the C{server.failed} event.
        """
        pool = self.make_pool(SAYS_WHY, backoff=Backoff(first=5.0))
        failed = self.events.next("server.failed")
        try:
            await pool.tools("saywhy")
        except ServerUnavailable as e:
            error = str(e)
        else:
            self.fail("a server that exits at once started")
        said = "its stderr ended with: starting | oops: token *** refused"
        event = await failed
        [status] = pool.status()
        for text in (error, event["error"], status.last_error or ""):
            self.assertIn('upstream "saywhy" exited with status 3', text)
            self.assertIn(said, text)
            self.assertNotIn(TOKEN, text)

    async def cycles(self, server: StdioServer, count: int, lanes: int) -> None:
        """
        Start and reap C{server} C{count} times, C{lanes} at a time (one caller each, on a
        client-scoped server), and check that no process or descriptor is left.
        """
        pool = self.make_pool(server, idle_timeout=0.05)
        pids: list[int] = []

        async def cycle(client: str) -> None:
            tools = await pool.tools(server.name, client=client)
            self.assertIn("echo", [tool["name"] for tool in tools])
            pids.append(pid_of(await pool.session(server.name, client)))
            await self.events.next("server.reaped", instance=client)

        # One cycle first: whatever the reactor sets up for its first child stays.
        await cycle("warm-up")
        before = open_fds()

        async def lane(number: int) -> None:
            for turn in range(count // lanes):
                await cycle(f"lane{number}-{turn}")

        await gatherResults(
            [Deferred.fromCoroutine(lane(n)) for n in range(lanes)], consumeErrors=True
        )
        after = open_fds()
        self.assertEqual(len(set(pids)), count + 1)
        self.assertEqual([pid for pid in pids if is_our_child(pid)], [])
        self.assertEqual(after - before, set(), "descriptors left open")
        self.assertEqual(pool.status()[0].instances, 0)

    async def test_start_reap_cycles_leave_nothing(self) -> None:
        """
        Hundreds of start/reap cycles of a stdio upstream leave no child process and no
        open file descriptor behind.
        """
        await self.cycles(QUICK, CYCLES, LANES)

    async def test_demo_cycles_leave_nothing(self) -> None:
        """
        Start/reap cycles of the demo, which speaks 2026-07-28 (so the modern session is
        set up and torn down each time), leave nothing behind either.
        """
        demo = StdioServer(
            name="demo", command=sys.executable, args=("-m", "mcpx.demo"), scope=Scope.CLIENT
        )
        await self.cycles(demo, 20, 4)


def live_children(marker: str) -> set[int]:
    """This process's running children (zombies not counted) whose command line has C{marker}."""
    found = set()
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == me and state != "Z" and marker in cmdline:
            found.add(int(entry))
    return found


class ClientInstanceCapTests(TestCase):
    timeout = 120

    async def test_thirty_callers_never_exceed_the_cap(self) -> None:
        """
        A client-scoped server called by 30 identities, three at a time, never has more
        live processes than pool.maxClientInstances: each newcomer replaces the least
        recently used idle instance, whose process is gone before the new one starts.
        """
        cap = 4
        pool = Pool(
            servers=servers(QUICK),
            connector=make_connector(reactor, os.environ, None, grace=2.0),
            clock=reactor,
            call_timeout=30.0,
            idle_timeout=600.0,
            max_client_instances=cap,
        )
        pool.startService()
        self.addCleanup(pool.stopService)
        marker = "misbehaving.py"
        most = 0
        pids: set[int] = set()

        def sample() -> None:
            nonlocal most
            most = max(most, len(live_children(marker)))

        sampler = LoopingCall(sample)
        sampler.clock = reactor
        sampler.start(0.005)

        def stop_sampling() -> None:
            if sampler.running:
                sampler.stop()

        self.addCleanup(stop_sampling)

        async def lane(number: int) -> None:
            for turn in range(10):
                client = f"caller-{number}-{turn}"
                tools = await pool.tools("quick", client=client)
                self.assertIn("echo", [tool["name"] for tool in tools])
                pids.add(pid_of(await pool.session("quick", client)))
                sample()

        await gatherResults([Deferred.fromCoroutine(lane(n)) for n in range(3)], consumeErrors=True)
        sampler.stop()
        self.assertEqual(len(pids), 30)
        self.assertLessEqual(most, cap)
        self.assertEqual(most, cap)
        self.assertEqual(pool.status()[0].instances, cap)
        self.assertLessEqual(len(live_children(marker)), cap)
