"""
Which processes are an upstream's (L{mcpx.upstream.lineage}, L{ProcessGroups}), with
real processes: a stand-in upstream that forks a helper into a session of its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

from twisted.trial.unittest import SynchronousTestCase

from mcpx.upstream.groups import RUN_VARIABLE, ProcessGroups
from mcpx.upstream.lineage import (
    boot_ticks,
    descendants,
    holds_socket,
    mark,
    parent,
    run_of,
    stat_fields,
    vanished,
)

#: A stand-in upstream: forks a helper that calls setsid and sleeps, prints its pid.
FORKER = """
import os, sys, time
helper = os.fork()
if helper == 0:
    os.setsid()
    time.sleep(600)
    os._exit(0)
print(helper, flush=True)
time.sleep(600)
"""


class LineageTests(SynchronousTestCase):
    def start(self, env: dict[str, str] | None = None) -> tuple[int, int]:
        """Start the stand-in upstream; its pid and its helper's."""
        process = subprocess.Popen([sys.executable, "-c", FORKER], stdout=subprocess.PIPE, env=env)
        assert process.stdout is not None
        helper = int(process.stdout.readline())

        def end() -> None:
            for pid in (helper, process.pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            process.wait()
            process.stdout.close()  # type: ignore[union-attr]

        self.addCleanup(end)
        # The helper's setsid may not have run yet: wait for it, bounded.
        for _ in range(500):
            if os.getsid(helper) == helper:
                break
            time.sleep(0.01)
        return process.pid, helper

    def test_helper_in_its_own_session_is_the_upstreams(self) -> None:
        """
        A helper that left the upstream's session still descends from it: it is among
        the upstream's processes and outside its group, and nothing else is.
        """
        groups = ProcessGroups(None)
        leader, helper = self.start()
        self.assertEqual(descendants([leader]), {leader, helper})
        groups.record("forker", leader, groups.new_mark())
        self.assertTrue(groups.owns_pid(helper))
        self.assertTrue(groups.owns_pid(leader))
        self.assertFalse(groups.owns_pid(os.getpid()))
        self.assertEqual(groups.outsiders(leader), [helper])
        groups.forget(leader)
        self.assertFalse(groups.owns_pid(helper))
        self.assertEqual(groups.outsiders(leader), [])

    def test_signal_reaches_the_helper(self) -> None:
        """Signalling an upstream's group reaches the helper outside it."""
        groups = ProcessGroups(None)
        leader, helper = self.start()
        groups.record("forker", leader, groups.new_mark())
        self.assertTrue(groups.signal(leader, signal.SIGKILL, leader=True))
        for _ in range(500):
            if parent(helper) is None:
                break
            time.sleep(0.01)
        self.assertIsNone(parent(helper), "the helper outlived its upstream's signal")

    def test_run_mark(self) -> None:
        """
        A process carrying this run's mark is the upstreams' whatever its parent; one
        carrying another run's is not.
        """
        groups = ProcessGroups(None)
        upstream = groups.new_mark()
        self.assertEqual(run_of(upstream), groups.run)
        _leader, helper = self.start({**os.environ, RUN_VARIABLE: upstream})
        self.assertEqual(mark(helper), upstream)
        self.assertTrue(groups.owns_pid(helper))
        other = ProcessGroups(None)
        other.run = "1.2"
        self.assertFalse(other.owns_pid(helper))

    def test_holds_socket(self) -> None:
        """A process's descriptors name the sockets it holds, by inode."""
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        self.addCleanup(theirs.close)
        inode = os.fstat(ours.fileno()).st_ino
        self.assertTrue(holds_socket(os.getpid(), inode))
        leader, _helper = self.start()
        self.assertFalse(holds_socket(leader, inode))


class VanishedTests(SynchronousTestCase):
    def sleeper(self) -> subprocess.Popen[bytes]:
        process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])

        def end() -> None:
            with contextlib.suppress(OSError):
                process.kill()
            process.wait()

        self.addCleanup(end)
        return process

    def test_live_process_is_there(self) -> None:
        """A live process started before the connection is still its maker."""
        process = self.sleeper()
        since = boot_ticks()
        self.assertIsNotNone(since)
        self.assertFalse(vanished(process.pid, since))
        self.assertFalse(vanished(os.getpid(), since))
        self.assertFalse(vanished(process.pid))

    def test_process_started_later_cannot_have_connected(self) -> None:
        """A pid that names a process started after the connection was accepted: reused."""
        since = boot_ticks()
        assert since is not None
        # Some ticks pass, so the process below starts well after `since`.
        time.sleep(0.2)
        process = self.sleeper()
        self.assertTrue(vanished(process.pid, since))

    def test_ended_process_vanished(self) -> None:
        """A process that ended is gone, a zombie until waited for and after."""
        process = self.sleeper()
        since = boot_ticks()
        process.kill()
        for _ in range(500):
            fields = stat_fields(process.pid)
            if fields is not None and fields[0] == "Z":
                break
            time.sleep(0.01)
        self.assertTrue(vanished(process.pid, since))
        process.wait()
        self.assertTrue(vanished(process.pid, since))

    def test_owns_peer(self) -> None:
        """
        A connection's maker that is gone counts as an upstream's; a live process no
        upstream started, and the daemon itself, do not.
        """
        groups = ProcessGroups(None)
        process = self.sleeper()
        since = boot_ticks()
        self.assertFalse(groups.owns_peer(process.pid, since))
        self.assertFalse(groups.owns_peer(os.getpid(), since))
        process.kill()
        process.wait()
        self.assertTrue(groups.owns_peer(process.pid, since))


class DumpableTests(SynchronousTestCase):
    def test_become_undumpable(self) -> None:
        """A process that calls become_undumpable is no longer dumpable (Linux)."""
        code = (
            "from mcpx.upstream.lineage import become_undumpable, is_dumpable\n"
            "print(is_dumpable(), become_undumpable(), is_dumpable())"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        self.assertEqual(done.stdout.split(), ["True", "True", "False"])
