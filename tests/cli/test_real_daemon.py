# -*- test-case-name: tests.cli.test_real_daemon -*-
"""
The commands as a user runs them, against a real daemon with real upstream servers.

Each test starts C{python -m mcpx daemon --daemon-listen ""} (the unix socket only) in a
temporary state directory, runs C{python -m mcpx ...} against it, and stops it with
C{SIGTERM} when it ends, checking that no process the daemon started outlives it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from tests.support.peers import everything_stdio_argv
from tests.support.processes import REPO, ChildProcess, kill_on_cleanup, reactor, spawn

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def parent_of(pid: int) -> int | None:
    """The parent of process C{pid} from C{/proc/<pid>/stat}, or C{None} if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: the fields follow the last ")".
    state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
    return None if state == "Z" else int(ppid)


def children_of(pid: int) -> list[int]:
    """The live processes whose parent is C{pid}."""
    return [
        int(entry)
        for entry in os.listdir("/proc")
        if entry.isdigit() and parent_of(int(entry)) == pid
    ]


def command_line(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return ""


class Done:
    """A finished command: its exit status and what it wrote."""

    def __init__(self, code: int, child: ChildProcess) -> None:
        self.code = code
        self.out = child.text(1)
        self.err = child.text(2)

    def __repr__(self) -> str:
        return f"<exit {self.code}; stdout {self.out!r}; stderr {self.err!r}>"

    def json(self) -> Any:
        return json.loads(self.out)


class RealDaemonCase(TestCase):
    """Starts a real daemon for the test and runs commands against it."""

    timeout = 60
    #: What the daemon's command is run under (a program and its arguments), if anything.
    daemon_prefix: tuple[str, ...] = ()

    def setUp(self) -> None:
        # Short paths: a unix socket path must fit in 108 bytes.
        self.state_dir = tempfile.mkdtemp(prefix="mcpx-real-")
        self.addCleanup(shutil.rmtree, self.state_dir, True)
        # An empty config home: without MCPX_CONFIG the built-in configuration applies.
        self.config_home = tempfile.mkdtemp(prefix="mcpx-cfg-")
        self.addCleanup(shutil.rmtree, self.config_home, True)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_")}
        self.env.update(MCPX_STATE_DIR=self.state_dir, XDG_CONFIG_HOME=self.config_home)
        self.daemon: ChildProcess | None = None

    async def start_daemon(
        self, servers: dict[str, list[str]] | None = None, listen: str = ""
    ) -> ChildProcess:
        """
        Start the daemon, on a config file naming C{servers} or on the built-in
        configuration, listening on C{listen} besides its unix socket; return once it
        listens.
        """
        if servers is not None:
            config = Path(self.config_home) / "servers.json"
            entries = {name: {"command": a[0], "args": a[1:]} for name, a in servers.items()}
            config.write_text(json.dumps({"servers": entries}))
            self.env["MCPX_CONFIG"] = str(config)
        daemon = spawn(
            [
                *self.daemon_prefix,
                sys.executable,
                "-m",
                "mcpx",
                "daemon",
                "--daemon-listen",
                listen,
            ],
            env=self.env,
            cwd=str(REPO),
        )
        self.addCleanup(kill_on_cleanup, daemon)
        self.addCleanup(self.stop_daemon, daemon)
        await daemon.wait_for(rb"listening on unix socket", fd=2, timeout=30)
        self.daemon = daemon
        return daemon

    @property
    def daemon_pid(self) -> int:
        assert self.daemon is not None and self.daemon.transport is not None
        pid: int = self.daemon.transport.pid
        return pid

    async def stop_daemon(self, daemon: ChildProcess) -> None:
        """SIGTERM; the daemon exits 0 and every process it started is gone."""
        if daemon.exit_code is not None or daemon.transport is None:
            return
        children = children_of(daemon.transport.pid)
        daemon.signal("TERM")
        code = await daemon.ended(timeout=20)
        self.assertEqual(code, 0, daemon.text())
        for _ in range(100):
            survivors = [c for c in children if parent_of(c) is not None]
            if not survivors:
                break
            await deferLater(reactor, 0.05, lambda: None)
        for pid in survivors:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        self.assertEqual(
            survivors,
            [],
            f"processes the daemon started outlived it: {[command_line(p) for p in survivors]}",
        )

    def run_mcpx(self, *args: str, stdin: bytes = b"") -> ChildProcess:
        """Start C{mcpx args}, with C{stdin} as all of its standard input."""
        child = spawn([sys.executable, "-m", "mcpx", *args], env=self.env, cwd=str(REPO))
        self.addCleanup(kill_on_cleanup, child)
        assert child.transport is not None
        if stdin:
            child.transport.write(stdin)
        child.transport.closeStdin()
        return child

    async def mcpx(self, *args: str, stdin: bytes = b"") -> Done:
        """Run C{mcpx args} to its end."""
        child = self.run_mcpx(*args, stdin=stdin)
        code = await child.ended(timeout=30)
        return Done(code, child)

    async def ok(self, *args: str) -> Done:
        """Run C{mcpx args}, which must succeed."""
        done = await self.mcpx(*args)
        self.assertEqual(done.code, 0, (args, done))
        return done


class DefaultConfigTests(RealDaemonCase):
    """The built-in configuration: the demo server, started by the daemon on first use."""

    async def test_servers_tools_describe(self) -> None:
        """C{servers}, C{tools} (with C{--search}), C{describe} and C{status} show what the
        daemon knows; their C{--json} is the API's answer, and an unknown tool exits 3."""
        await self.start_daemon()
        done = await self.ok("servers")
        header, demo = done.out.splitlines()
        self.assertEqual(header.split()[:3], ["SERVER", "STATE", "TRANSPORT"])
        self.assertEqual(demo.split()[:3], ["demo", "configured", "stdio"])

        done = await self.ok("tools")
        rows = [line.split()[:2] for line in done.out.splitlines()[1:]]
        for tool in ("echo", "add", "fail", "countdown"):
            self.assertIn(["demo", tool], rows)
        [status] = (await self.ok("servers", "--json")).json()["servers"]
        self.assertEqual(
            (status["name"], status["state"], status["instances"]), ("demo", "ready", 1)
        )
        self.assertIsNotNone(status["revision"])

        done = await self.ok("tools", "--search", "sum")
        self.assertEqual(
            [line.split()[:2] for line in done.out.splitlines()[1:]], [["demo", "add"]]
        )
        tools = (await self.ok("tools", "--json")).json()["tools"]
        self.assertIn(
            {"server": "demo", "name": "add"},
            [{"server": t["server"], "name": t["name"]} for t in tools],
        )

        done = await self.ok("describe", "demo", "add")
        self.assertIn("a (number, required)", done.out)
        self.assertIn("Call it: mcpx call demo add a=… b=…", done.out)
        answer = (await self.ok("describe", "demo", "add", "--json")).json()
        self.assertEqual(answer["tool"]["inputSchema"]["required"], ["a", "b"])

        done = await self.mcpx("describe", "demo", "nope")
        self.assertEqual(done.code, 3, done)
        self.assertIn("nope", done.err)

        answer = (await self.ok("status", "--json")).json()
        self.assertEqual(answer["pid"], self.daemon_pid)

    async def test_calls(self) -> None:
        """C{call} prints structured content as JSON, reports a tool error on stderr with
        exit status 1, an unknown server with 3 and unreadable arguments with 2."""
        await self.start_daemon()
        done = await self.ok("call", "demo", "add", "a=2", "b=3")
        self.assertEqual(done.json(), {"sum": 5})
        done = await self.ok("call", "demo", "add", "a=2", "b=3", "--json")
        self.assertEqual(done.json()["structuredContent"], {"sum": 5})
        done = await self.ok("call", "demo", "echo", "text=hello world")
        self.assertEqual(done.out, "hello world\n")

        done = await self.mcpx("call", "demo", "fail")
        self.assertEqual(done.code, 1, done)
        self.assertEqual(done.out, "")
        self.assertIn("The fail tool always fails", done.err)

        done = await self.mcpx("call", "nowhere", "echo")
        self.assertEqual(done.code, 3, done)
        self.assertIn("no server named 'nowhere'", done.err)
        done = await self.mcpx("call", "demo", "add", "oops")
        self.assertEqual(done.code, 2, done)

        # The server refuses the tool; its catalogue then says the name is unknown.
        done = await self.mcpx("call", "demo", "nope")
        self.assertEqual(done.code, 3, done)
        self.assertIn("no tool on server 'demo' named 'nope'", done.err)

    async def test_progress(self) -> None:
        """C{call --progress} draws the upstream's progress on stderr and prints the result
        alone on stdout."""
        await self.start_daemon()
        done = await self.ok("call", "demo", "countdown", "steps=2", "interval=0.05", "--progress")
        self.assertEqual(done.out, "Lift-off after 2 step(s), 0.05s apart.\n")
        self.assertIn(" 50% 1/2", done.err)
        self.assertIn("100% 2/2", done.err)
        self.assertTrue(done.err.endswith("\n"), done)

    async def test_restart_and_events(self) -> None:
        """C{events --kind server} prints the server events a C{restart} and the next call
        cause, as lines or as JSON, and nothing of other kinds; it stops on Ctrl-C."""
        await self.start_daemon()
        lines = self.run_mcpx("events", "--kind", "server")
        as_json = self.run_mcpx("events", "--kind", "server", "--json")
        # Nothing says when a stream is subscribed: restart a running server until both
        # streams have seen it.
        for _ in range(20):
            await self.ok("call", "demo", "echo", "text=warm")
            done = await self.ok("restart", "demo")
            self.assertEqual(done.out, "restarted demo: configured\n")
            await deferLater(reactor, 0.25, lambda: None)
            if all("server.restarted" in child.text(1) for child in (lines, as_json)):
                break
        await self.ok("call", "demo", "echo", "text=again")
        for child in (lines, as_json):
            await child.wait_for(rb"server\.started", fd=1, timeout=10)
            child.signal("INT")
            self.assertEqual(await child.ended(timeout=10), 0, child.text())

        printed = lines.text(1).splitlines()
        self.assertTrue(all(line.split()[1].startswith("server.") for line in printed), printed)
        self.assertTrue(any(re.search(r" server\.restarted demo\b", line) for line in printed))
        self.assertTrue(any("server.exited demo" in line for line in printed), printed)
        started = [line for line in printed if " server.started demo" in line]
        self.assertIn("era=", started[-1])

        events = [json.loads(line) for line in as_json.text(1).splitlines()]
        kinds = [event["kind"] for event in events]
        self.assertIn("server.restarted", kinds)
        self.assertEqual(kinds[-1], "server.started")
        self.assertTrue(all(event["server"] == "demo" for event in events), events)


class EverythingTests(RealDaemonCase):
    """C{@modelcontextprotocol/server-everything} over stdio, configured in a config file."""

    async def test_everything(self) -> None:
        """Its tools are listed and called: text, a sum, and an image saved as a PNG file;
        the node process it runs in stops with the daemon."""
        await self.start_daemon({"everything": everything_stdio_argv()})
        done = await self.ok("tools", "everything")
        names = [line.split()[1] for line in done.out.splitlines()[1:]]
        for tool in ("echo", "get-sum", "get-tiny-image"):
            self.assertIn(tool, names)

        done = await self.ok("call", "everything", "echo", "message=hi")
        self.assertEqual(done.out, "Echo: hi\n")
        done = await self.ok("call", "everything", "get-sum", "a=1", "b=2")
        self.assertIn("3", done.out)
        self.assertEqual(done.out.strip(), "The sum of 1 and 2 is 3.")

        done = await self.ok("call", "everything", "get-tiny-image")
        [saved] = re.findall(r"\[image image/png, \d+ bytes, saved to (\S+)\]", done.out)
        image = Path(saved)
        self.addCleanup(shutil.rmtree, image.parent, True)
        self.assertEqual(image.suffix, ".png")
        self.assertEqual(image.read_bytes()[:8], PNG_SIGNATURE)

        servers = [command_line(pid) for pid in children_of(self.daemon_pid)]
        self.assertTrue(any("server-everything" in line for line in servers), servers)


class UnreachableServerTests(RealDaemonCase):
    """A configured server that cannot start, beside one that works."""

    async def test_tools_says_what_is_missing(self) -> None:
        """C{mcpx tools} lists the servers it could reach and says on stderr which one it
        could not, and why; C{servers} shows it failed and a call to it exits 4."""
        await self.start_daemon(
            {"demo": [sys.executable, "-m", "mcpx.demo"], "broken": ["/bin/false"]}
        )
        done = await self.ok("tools")
        self.assertIn("demo    echo", done.out)
        self.assertNotIn("broken", done.out)
        self.assertIn("mcpx: the tools of broken are missing: server 'broken'", done.err)
        answer = (await self.ok("tools", "--json")).json()
        self.assertEqual([entry["server"] for entry in answer["errors"]], ["broken"])

        done = await self.ok("servers")
        [broken] = [line for line in done.out.splitlines() if line.startswith("broken ")]
        self.assertEqual(broken.split()[:2], ["broken", "failed"])
        done = await self.mcpx("call", "broken", "anything")
        self.assertEqual(done.code, 4, done)
        self.assertIn("server 'broken' is unavailable", done.err)

    async def test_crash_says_why_and_what_to_run(self) -> None:
        """
        A server that prints C{oops} on stderr and exits 3: C{mcpx call} says so, with
        C{oops}, a rounded retry delay and the command to run rather than a route, while
        C{--json} keeps the route; C{mcpx servers} and C{/v1/servers} show C{oops} too.
        """
        crashy = [sys.executable, "-c", "import sys; print('oops', file=sys.stderr); sys.exit(3)"]
        await self.start_daemon({"crashy": crashy})
        done = await self.mcpx("call", "crashy", "anything")
        self.assertEqual(done.code, 4, done)
        self.assertIn("exited with status 3; its stderr ended with: oops", done.err)
        self.assertIn("`mcpx events --server crashy` shows why", done.err)
        self.assertNotIn("GET /v1/", done.err)
        self.assertNotRegex(done.err, r"retry in \d+\.\d{2,}s")

        as_json = await self.mcpx("call", "crashy", "anything", "--json")
        self.assertIn("GET /v1/events?server=crashy", as_json.json()["error"]["message"])

        self.assertIn("crashy: could not start:", (await self.ok("servers")).out)
        self.assertIn("its stderr ended with: oops", (await self.ok("servers")).out)
        [status] = (await self.ok("servers", "--json")).json()["servers"]
        self.assertIn("its stderr ended with: oops", status["last_error"])
