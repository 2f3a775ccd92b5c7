"""
Servers on the Python SDK up to 1.8 behind a real daemon: C{mcp-server-sqlite}
2025.4.25 on C{mcp} 1.6 (in C{.venv-sqlite}, which C{make test} installs), and the host
matrix's C{early} server on C{mcp} 1.8 (C{.venv-mcp18}), which exit on
C{server/discover} like on any request they do not know.  mcpx starts them again and
speaks to them in the legacy era, and remembers that.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.shared.exceptions import MCPError
from twisted.internet.defer import gatherResults
from twisted.trial.unittest import TestCase

from tests.cli.test_real_daemon import RealDaemonCase
from tests.questions.support import Daemon, in_thread
from tests.support.peers import PeersMissing
from tests.support.processes import REPO

SQLITE = REPO / ".venv-sqlite" / "bin" / "mcp-server-sqlite"


#: The daemons' pool.probeTimeout where the test is not about how long the probe waits:
#: these servers answer server/discover never (they crash on it and wait for their next
#: input line), so the probe ends on its timeout however long it is, and the way on from
#: there (initialize, the connection ended, started again in the legacy era) is the same.
PROBE_TIMEOUT = "1s"

EARLY_PYTHON = REPO / ".venv-mcp18" / "bin" / "python"
EARLY_SERVER = REPO / "tests" / "upstream" / "scripts" / "early_server.py"


def early_server() -> dict[str, Any]:
    if not EARLY_PYTHON.exists():
        raise PeersMissing(f"{EARLY_PYTHON} is missing: run `make test`, which creates it")
    return {"command": str(EARLY_PYTHON), "args": [str(EARLY_SERVER)]}


def sqlite_server() -> str:
    if not SQLITE.exists():
        raise PeersMissing(f"{SQLITE} is missing: run `make test`, which creates .venv-sqlite")
    return str(SQLITE)


class OldSdkServerTests(RealDaemonCase):
    async def test_sqlite_on_mcp_1_6(self) -> None:
        """
        Its tools are listed and a call works (a table made, then listed); the era
        cache says legacy, so a daemon started again sends it no probe.
        """
        db = Path(tempfile.mkdtemp(prefix="mcpx-sqlite-")) / "test.db"
        self.env["MCPX_POOL_PROBE_TIMEOUT"] = PROBE_TIMEOUT
        await self.start_daemon({"sqlite": [sqlite_server(), "--db-path", str(db)]})
        # Named, the listing waits for the server to start (an all-server listing would
        # wait pool.listWait at most, and this one starts twice: probed, then legacy).
        tools = (await self.ok("tools", "sqlite", "--json")).json()["tools"]
        names = {t["name"] for t in tools if t["server"] == "sqlite"}
        self.assertLessEqual({"read_query", "create_table", "list_tables"}, names)
        await self.ok("call", "sqlite", "create_table", "query=CREATE TABLE notes (text TEXT)")
        listed = await self.ok("call", "sqlite", "list_tables")
        self.assertIn("notes", listed.out)

        eras = json.loads((Path(self.state_dir) / "upstream-eras.json").read_text())["eras"]
        self.assertEqual([entry["era"] for entry in eras.values()], ["legacy"])
        [status] = (await self.ok("servers", "--json")).json()["servers"]
        self.assertEqual(status["state"], "ready")
        self.assertEqual(status["instances"], 1)


class FirstContactTests(TestCase):
    timeout = 120

    async def test_hosts_meeting_an_early_sdk_server_list_it(self) -> None:
        """
        Two hosts declaring different questions (so each has an instance of its own) meet
        the C{mcp} 1.8 server through C{/mcp} of a daemon that has never met it: their
        first listing has its tools, a call answers, and it is listed again after.  The
        server is sent C{server/discover} once, by one of the two starts: it crashes on
        it and hangs until its next input (the probe's whole timeout), is started again
        in the legacy era, and the other start waits for that rather than probe too;
        the listings wait for the probe beyond C{pool.listWait}.  (The probe timeout
        here is longer than the list wait, so that a listing that did not wait for the
        probe would miss the server every time.)
        """
        daemon = await Daemon(
            self,
            {"early": early_server()},
            passthrough=["early"],
            settings={"MCPX_POOL_PROBE_TIMEOUT": "10s", "MCPX_POOL_LIST_WAIT": "8s"},
        ).start()

        async def answer(context: Any, params: Any) -> Any:
            raise AssertionError("the early server asks nothing")

        def host(asking: bool) -> Any:
            async def conversation() -> Any:
                async with Client(
                    daemon.mcp_url,
                    mode="legacy",
                    cache=None,
                    elicitation_callback=answer if asking else None,
                ) as c:
                    first = [tool.name for tool in (await c.list_tools()).tools]
                    called = await c.call_tool("early_add", {"a": 2, "b": 3})
                    again = [tool.name for tool in (await c.list_tools()).tools]
                    return first, [getattr(x, "text", None) for x in called.content], again

            return in_thread(conversation)

        seen = await gatherResults([host(False), host(True)])
        for first, called, again in seen:
            self.assertLessEqual({"early_add", "early_fail"}, set(first))
            self.assertEqual(called, ["5"])
            self.assertLessEqual({"early_add", "early_fail"}, set(again))
        log = daemon.log()
        self.assertEqual(log.count("ended the connection on server/discover"), 1, log[-3000:])
        # The probed process, the one started again after it, the other host's instance.
        self.assertEqual(log.count("started upstream early"), 3, log[-3000:])


def early_processes(parent: int) -> list[int]:
    """The early servers C{parent} (a daemon) runs now."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            status = (entry / "status").read_text()
        except OSError:
            continue
        ppid = next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:")
        )
        if ppid == parent and str(EARLY_SERVER).encode() in argv:
            found.append(int(entry.name))
    return found


class ExitedServerTests(TestCase):
    timeout = 120

    async def test_an_early_sdk_server_that_exits_is_listed_and_started_again(self) -> None:
        """
        The C{mcp} 1.8 server passed through exits in the middle of a host's session
        (killed): the host's next listing still has its tools (what it listed last),
        and a call of one is answered once the server's back-off has passed, by a new
        process, in the same host session.
        """
        daemon = await Daemon(
            self,
            {"early": early_server()},
            passthrough=["early"],
            settings={"MCPX_POOL_PROBE_TIMEOUT": PROBE_TIMEOUT},
        ).start()
        assert daemon.child is not None and daemon.child.transport is not None
        parent = daemon.child.transport.pid

        async def conversation() -> Any:
            async with Client(daemon.mcp_url, mode="legacy", cache=None) as c:
                first = [tool.name for tool in (await c.list_tools()).tools]
                [running] = early_processes(parent)
                os.kill(running, signal.SIGKILL)
                with anyio.fail_after(30):
                    while running in early_processes(parent):
                        await anyio.sleep(0.1)
                after = [tool.name for tool in (await c.list_tools()).tools]
                with anyio.fail_after(30):
                    while True:
                        try:
                            called = await c.call_tool("early_add", {"a": 2, "b": 3})
                        except MCPError as e:
                            # Within its back-off the call is refused, naming when next.
                            self.assertIn("next start in", str(e))
                            await anyio.sleep(0.2)
                        else:
                            break
                return first, after, [getattr(x, "text", None) for x in called.content], running

        first, after, called, killed = await in_thread(conversation)
        self.assertLessEqual({"early_add", "early_fail"}, set(first))
        self.assertLessEqual({"early_add", "early_fail"}, set(after))
        self.assertEqual(called, ["5"])
        self.assertNotIn(killed, early_processes(parent))
        self.assertEqual(len(early_processes(parent)), 1)
