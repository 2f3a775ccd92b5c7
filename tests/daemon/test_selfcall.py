"""
A real daemon and a hostile stdio upstream (C{tests/fixtures/selfcaller.py}) that
turns on it: the upstream's own process, a grandchild it left after C{setsid}
without its run mark, and a socket a child of it connected before exiting, are
refused on every door (the unix socket, loopback TCP without a token, C{mcpx serve}'s
socket), while the user's own commands still work; it cannot read the daemon's
environment from C{/proc}; and a helper the upstream left in a session of its own
ends with the upstream (a restart, a clean stop, C{kill -9} of the daemon followed by
the next start).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
from pathlib import Path

from twisted.internet.task import deferLater

from tests.cli.test_real_daemon import RealDaemonCase, parent_of
from tests.daemon.test_hygiene import gone_within
from tests.support.processes import (
    REPO,
    ChildProcess,
    free_tcp_port,
    kill_on_cleanup,
    reactor,
    spawn,
)

SELFCALLER = str(REPO / "tests" / "fixtures" / "selfcaller.py")
RAW_HTTP = str(REPO / "tests" / "support" / "raw_http.py")

#: How long a process that should end gets: a bound on a wait, never an assertion on time.
ENDS_WITHIN = 15.0


class SelfCallCase(RealDaemonCase):
    async def start_hostile(self) -> ChildProcess:
        """Start the daemon with the hostile server, on its unix socket and loopback TCP."""
        self.port = free_tcp_port()
        argv = [sys.executable, SELFCALLER, self.state_dir, str(self.port)]
        return await self.start_daemon(
            {"hostile": argv}, listen=f"tcp:{self.port}:interface=127.0.0.1"
        )

    async def call(self, tool: str) -> object:
        done = await self.ok("call", "hostile", tool)
        return json.loads(done.out)

    def kill_later(self, pid: int) -> None:
        def kill() -> None:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

        self.addCleanup(kill)

    async def assertEnds(self, pid: int, when: str) -> None:
        self.assertEqual(
            await gone_within([pid], ENDS_WITHIN), [], f"the upstream's helper outlived {when}"
        )


class UpstreamDoorTests(SelfCallCase):
    async def test_upstream_processes_refused_on_every_door(self) -> None:
        """
        The upstream's own process gets 403 on the unix socket and on loopback TCP
        without a token, and an error on C{mcpx serve}'s socket; a grandchild it left
        after C{setsid}, without its run mark, gets 403 on both too.  The user's
        commands, and a loopback request from the user's own process, still get in.
        """
        await self.start_hostile()
        found = await self.call("probe")
        assert isinstance(found, dict)
        self.kill_later(found["grandchild_pid"])
        self.assertEqual(found["unix"], 403, found)
        self.assertEqual(found["tcp"], 403, found)
        answer = json.loads(found["mcp_socket"])
        self.assertIn("upstream servers", answer["error"]["message"])
        self.assertNotIn("result", answer)
        self.assertEqual(found["grandchild"], {"unix": 403, "tcp": 403}, found)
        self.assertIn("upstream_process", self.daemon_text())

        # The user, from processes the daemon did not start, still gets in.
        await self.ok("servers")
        done = await self.ok("elicit", "--json")
        self.assertIsInstance(done.json(), (dict, list))
        request = {
            "port": self.port,
            "method": "GET",
            "path": "/v1/questions",
            "headers": {"Host": f"127.0.0.1:{self.port}"},
        }
        probe = self.run_python(RAW_HTTP, json.dumps([request]))
        self.assertEqual(await probe.ended(timeout=30), 0, probe.text())
        [answered] = json.loads(probe.text(1))
        self.assertEqual(answered["status"], 200, answered)

    async def test_socket_connected_by_a_child_that_ended_refused(self) -> None:
        """
        The upstream connects to the unix socket and to C{mcpx serve}'s from a child
        that then exits, and asks on the socket itself: the pid the system names for
        the connection is gone before the daemon sees it (the daemon is held stopped
        meanwhile), and the connection is refused on both all the same.
        """
        await self.start_hostile()
        found = await self.call("handoff")
        assert isinstance(found, dict)
        self.assertEqual(found["daemon"], self.daemon_pid, found)
        self.assertEqual(found["unix"], 403, found)
        self.assertIn("upstream servers", found["mcp_socket"], found)
        answer = json.loads(found["mcp_socket"])
        self.assertNotIn("result", answer)
        # The user still gets in.
        await self.ok("servers")

    def daemon_text(self) -> str:
        assert self.daemon is not None
        return self.daemon.text(2)

    def run_python(self, *args: str) -> ChildProcess:
        # -I: tests/support holds an http.py of its own.
        child = spawn([sys.executable, "-I", *args], env=self.env, cwd="/")
        self.addCleanup(kill_on_cleanup, child)
        return child


#: Root without a single capability (and none regained on exec): as root, the suite's
#: daemon and its upstreams would be let into each other's /proc by CAP_SYS_PTRACE; run
#: under this they are what they are as any other user, the same user and no more.
WITHOUT_CAPABILITIES = (
    shutil.which("setpriv") or "/usr/bin/setpriv",
    "--securebits",
    "+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked",
    "--bounding-set",
    "-all",
    "--inh-caps",
    "-all",
)

#: A secret in the daemon's environment, as a server's ${VAR} or PGPASSWORD would be.
SECRET = "mcpx-selfcall-secret-4f1c"


class EnvironmentTests(SelfCallCase):
    daemon_prefix = WITHOUT_CAPABILITIES if os.getuid() == 0 else ()

    async def test_upstream_cannot_read_the_daemons_environment(self) -> None:
        """
        An upstream of the daemon's own user cannot read the daemon's environment from
        C{/proc/<daemon>/environ}: the daemon made itself non-dumpable, and the secret
        it holds stays its own.  (Run as root, the daemon and the upstream are run
        without any capability, so the upstream reads as a same-user process would.)
        """
        self.env["SELFCALL_SECRET"] = SECRET
        await self.start_hostile()
        found = await self.call("environ")
        assert isinstance(found, dict)
        self.assertEqual(found["pid"], self.daemon_pid, found)
        self.assertNotIn(SECRET, found["read"])
        self.assertIn("Permission", found["error"] or "", found)
        # The daemon itself still works, and its upstreams' /proc stays its to read.
        await self.ok("call", "hostile", "leave")


class LeftHelperTests(SelfCallCase):
    async def leave(self) -> int:
        """Have the upstream leave a helper in a session of its own; its pid."""
        pid = await self.call("leave")
        assert isinstance(pid, int)
        self.kill_later(pid)
        self.assertIsNotNone(parent_of(pid), "the helper did not start")
        return pid

    async def test_helper_ends_with_a_restart(self) -> None:
        """C{mcpx restart} of the server ends the helper it left."""
        await self.start_hostile()
        helper = await self.leave()
        await self.ok("restart", "hostile")
        await self.assertEnds(helper, "the restart of its server")
        # Ended, it is the daemon's zombie until the daemon waits for it.
        for _ in range(int(ENDS_WITHIN / 0.1)):
            if not Path(f"/proc/{helper}").exists():
                break
            await deferLater(reactor, 0.1, lambda: None)
        self.assertFalse(Path(f"/proc/{helper}").exists(), "the daemon never waited for it")
        await self.ok("call", "hostile", "probe")

    async def test_helper_ends_with_a_clean_stop(self) -> None:
        """A clean stop of the daemon ends the helper an upstream left."""
        daemon = await self.start_hostile()
        helper = await self.leave()
        await self.stop_daemon(daemon)
        await self.assertEnds(helper, "a clean stop of the daemon")

    async def test_helper_ends_at_the_next_start_after_kill(self) -> None:
        """
        After C{kill -9} of the daemon the helper is left running (nothing can signal
        it then), and the next daemon on the same state directory ends it.
        """
        await self.start_hostile()
        helper = await self.leave()
        assert self.daemon is not None
        os.kill(self.daemon_pid, signal.SIGKILL)
        await self.daemon.ended(timeout=10)
        self.assertEqual(await gone_within([helper], 0.2), [helper])
        await self.start_hostile()
        await self.assertEnds(helper, "the next start of the daemon")
        assert self.daemon is not None
        self.assertIn("left behind", self.daemon.text(2))
        await self.ok("servers")
