"""
Misbehaving upstreams, as real processes, behind the pool as the daemon runs it (each in a
process group of its own): the caller gets a clear error, a call to another server still
works, and no process (found by the daemon's run id in each process's environment) and
no file descriptor is left once the server is stopped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from twisted.internet.task import deferLater
from twisted.internet.utils import getProcessValue
from twisted.trial.unittest import TestCase

from mcpx.pool import AnswerTooLarge, Backoff, CallTimedOut, Pool, ServerUnavailable
from mcpx.settings.servers import StdioServer
from mcpx.upstream.connect import make_connector
from mcpx.upstream.groups import RUN_VARIABLE, ProcessGroups
from tests.pool.fakes import servers
from tests.support.peers import MisbehavingMode, misbehaving_argv
from tests.support.processes import reactor


def server(name: str, mode: MisbehavingMode) -> StdioServer:
    argv = misbehaving_argv(mode)
    return StdioServer(name=name, command=argv[0], args=tuple(argv[1:]))


WELL = server("well", "well")


def processes_of(run: str) -> list[int]:
    """The live processes carrying C{MCPX_DAEMON_RUN=run}: the upstreams of one pool."""
    marker = f"{RUN_VARIABLE}={run}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] != "Z" and marker in environ.split(b"\0"):
            found.append(int(entry))
    return found


def session_of(pid: int) -> list[int]:
    """The live processes in the session C{pid} leads."""
    found = []
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError, ValueError):
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            if fields[0] != "Z" and int(fields[3]) == pid:
                found.append(int(entry))
    return found


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class FaultCase(TestCase):
    timeout = 30

    async def setUp(self) -> None:  # type: ignore[override]
        self.state = Path(tempfile.mkdtemp(prefix="mcpx-faults-"))
        self.addCleanup(shutil.rmtree, self.state, True)
        self.groups = ProcessGroups(self.state / "upstreams")
        self.addCleanup(self.kill_leftovers)
        # What the reactor sets up for its first child (its SIGCHLD pipe) stays.
        await getProcessValue("/bin/true", reactor=reactor)
        self.fds = open_fds()

    def kill_leftovers(self) -> None:
        for pid in processes_of(self.groups.run):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def make_pool(self, *configured: StdioServer, **options: Any) -> Pool:
        connector = make_connector(
            reactor,
            os.environ,
            None,
            grace=options.pop("grace", 0.5),
            max_message_size=options.pop("max_message_size", 64 * 1024 * 1024),
            groups=self.groups,
        )
        options.setdefault("call_timeout", 10.0)
        options.setdefault("idle_timeout", 60.0)
        options.setdefault("backoff", Backoff(first=0.05))
        pool = Pool(
            servers=servers(*configured, WELL), connector=connector, clock=reactor, **options
        )
        pool.startService()
        self.pool = pool
        return pool

    async def assert_healthy(self) -> None:
        """A call to another server works."""
        result = await self.pool.call_tool("well", "echo", {"text": "still here"})
        self.assertEqual(result["content"][0]["text"], "still here")

    async def stop_and_check(self) -> None:
        """Stop the pool: nothing it started is left, no descriptor is left open."""
        started = time.monotonic()
        await self.pool.stopService()
        self.assertEqual(processes_of(self.groups.run), [], "processes left behind")
        self.assertLess(time.monotonic() - started, 5)
        self.assertEqual(list((self.state / "upstreams").glob("*.json")), [], "records left")
        # The reactor closes a child's pipes a moment after reaping it.
        for _ in range(20):
            if open_fds() <= self.fds:
                break
            await deferLater(reactor, 0.05, lambda: None)
        self.assertLessEqual(open_fds(), self.fds, "descriptors left open")

    async def leader(self, name: str) -> int:
        pid = getattr((await self.pool.session(name)).channel, "pid", None)
        assert isinstance(pid, int)
        return pid


class FaultTests(FaultCase):
    async def test_crash_mid_call(self) -> None:
        """A server that dies mid-call fails that call at once, naming it and its status."""
        self.make_pool(server("crashy", "crash-mid-call"))
        with self.assertRaises(ServerUnavailable) as caught:
            await self.pool.call_tool("crashy", "echo", {"text": "x"})
        self.assertIn('upstream "crashy" exited with status 3', str(caught.exception))
        await self.assert_healthy()
        await self.stop_and_check()

    async def test_crash_mid_call_with_grandchild(self) -> None:
        """
        A server that forked and then died mid-call fails that call quickly (its
        grandchild, which holds the pipes, is ended), and the grandchild is gone.
        """
        self.make_pool(server("crashy", "fork-then-crash"))
        await self.pool.tools("crashy")
        started = time.monotonic()
        with self.assertRaises(ServerUnavailable) as caught:
            await self.pool.call_tool("crashy", "echo", {"text": "x"})
        self.assertLess(time.monotonic() - started, 2)
        self.assertIn("exited with status 3", str(caught.exception))
        await self.assert_healthy()
        await self.stop_and_check()

    async def test_hang(self) -> None:
        """A server that never answers fails the call at its timeout, naming the bound."""
        self.make_pool(server("hung", "hang"))
        with self.assertRaises(CallTimedOut) as caught:
            await self.pool.call_tool("hung", "echo", {"text": "x"}, timeout=0.3)
        self.assertIn("did not answer 'echo' within 0.3s", str(caught.exception))
        await self.assert_healthy()
        await self.stop_and_check()

    async def test_garbage_on_stdout(self) -> None:
        """Lines that are not JSON-RPC are skipped: the answer after them gets through."""
        self.make_pool(server("noisy", "garbage"))
        result = await self.pool.call_tool("noisy", "echo", {"text": "through"})
        self.assertEqual(result["content"][0]["text"], "through")
        await self.assert_healthy()
        await self.stop_and_check()

    async def test_fifty_megabyte_answer(self) -> None:
        """A 50 MB answer (one line) gets through on the default limit, promptly."""
        self.make_pool(server("big", "big-answer"))
        await self.pool.tools("big")
        started = time.monotonic()
        result = await self.pool.call_tool("big", "echo", {"text": "x"})
        self.assertEqual(len(result["content"][0]["text"]), 50 * 1000 * 1000)
        self.assertLess(time.monotonic() - started, 8)
        await self.assert_healthy()
        await self.stop_and_check()

    async def test_answer_over_the_limit(self) -> None:
        """
        Over the limit, the call fails at once (not at its timeout) with an error naming
        the limit and the setting, and the same server answers the next request.
        """
        self.make_pool(server("big", "big-answer"), max_message_size=8 * 1024 * 1024)
        await self.pool.tools("big")
        pid = await self.leader("big")
        started = time.monotonic()
        with self.assertRaises(AnswerTooLarge) as caught:
            await self.pool.call_tool("big", "echo", {"text": "x"}, timeout=8)
        self.assertLess(time.monotonic() - started, 4)
        message = str(caught.exception)
        self.assertIn("longer than 8388608 bytes (8 MiB)", message)
        self.assertIn("transport.maxMessageSize", message)
        await self.pool.tools("big")
        self.assertEqual(await self.leader("big"), pid, "the server kept serving")
        await self.assert_healthy()
        await self.stop_and_check()

    async def test_notification_flood(self) -> None:
        """Twenty thousand notifications before an answer do not lose the answer."""
        self.make_pool(server("loud", "flood"))
        result = await self.pool.call_tool("loud", "echo", {"text": "heard"})
        self.assertEqual(result["content"][0]["text"], "heard")
        await self.assert_healthy()
        await self.stop_and_check()

    async def test_exit_at_start(self) -> None:
        """A server that exits before the handshake is unavailable, with its status."""
        self.make_pool(server("quitter", "exit-at-start"))
        with self.assertRaises(ServerUnavailable) as caught:
            await self.pool.call_tool("quitter", "echo", {"text": "x"})
        self.assertIn("exited with status 1", str(caught.exception))
        await self.assert_healthy()
        await self.stop_and_check()

    async def test_ignores_sigterm(self) -> None:
        """A server that ignores SIGTERM and stdin's end is killed after the grace periods."""
        self.make_pool(server("stubborn", "ignore-term"), grace=0.3)
        result = await self.pool.call_tool("stubborn", "echo", {"text": "x"})
        self.assertEqual(result["content"][0]["text"], "x")
        await self.assert_healthy()
        await self.stop_and_check()

    async def test_grandchild_reaped_on_restart(self) -> None:
        """A server's grandchild (C{sleep 600}) is ended when the server is restarted."""
        self.make_pool(server("forker", "fork-grandchild"))
        pid = await self.leader("forker")
        await self.wait_for_grandchild(pid)
        await self.pool.restart("forker")
        self.assertEqual(session_of(pid), [], "the grandchild outlived the restart")
        await self.assert_healthy()
        await self.stop_and_check()

    async def test_grandchild_reaped_on_shutdown(self) -> None:
        """A server's grandchild is ended when the pool (the daemon) stops."""
        self.make_pool(server("forker", "fork-grandchild"))
        pid = await self.leader("forker")
        await self.wait_for_grandchild(pid)
        await self.stop_and_check()
        self.assertEqual(session_of(pid), [])

    async def wait_for_grandchild(self, pid: int) -> None:
        for _ in range(100):
            if len(session_of(pid)) == 2:
                return
            await deferLater(reactor, 0.02, lambda: None)
        self.fail(f"no grandchild appeared in the session of {pid}")


class StrayTests(FaultCase):
    def test_strays_of_a_dead_daemon_reaped(self) -> None:
        """
        The next daemon kills what a dead daemon's recorded group left (verified by the
        run id in its environment), and leaves alone a process of that session number
        that does not carry it.
        """
        records = self.state / "upstreams"
        dead_run = "999999999.1"
        env = dict(os.environ, **{RUN_VARIABLE: dead_run})
        stray = self.spawn_session(env)
        stranger = self.spawn_session(dict(os.environ))
        records.mkdir()
        for pid in (stray, stranger):
            (records / f"{pid}.json").write_text(
                f'{{"server": "forker", "pid": {pid}, "run": "{dead_run}"}}'
            )
        self.assertEqual(ProcessGroups(records).reap_strays(), 1)
        self.assertEqual(self.reap(stray), -signal.SIGKILL)
        self.assertIsNone(self.reap(stranger, wait=False), "a stranger was killed")
        self.assertEqual(list(records.iterdir()), [])

    def test_records_of_a_live_daemon_left_alone(self) -> None:
        """Another daemon still running keeps its upstreams and their records."""
        records = self.state / "upstreams"
        live = ProcessGroups(records)
        pid = self.spawn_session(dict(os.environ, **live.marker))
        live.record("forker", pid)
        self.assertEqual(ProcessGroups(records).reap_strays(), 0)
        self.assertIsNone(self.reap(pid, wait=False))
        self.assertEqual(len(list(records.iterdir())), 1)

    def spawn_session(self, env: dict[str, str]) -> int:
        import subprocess

        child = subprocess.Popen(["sleep", "600"], env=env, start_new_session=True)
        self.addCleanup(self.kill, child.pid)
        return child.pid

    def kill(self, pid: int) -> None:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)

    def reap(self, pid: int, wait: bool = True) -> int | None:
        """The child's end (as -signal), or C{None} if it is still running."""
        for _ in range(100 if wait else 1):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            if wait:
                time.sleep(0.02)
        return None
