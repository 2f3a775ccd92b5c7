"""
Tests for the C{mcpx} commands that ask a daemon, run as real processes.

Each test starts C{python -m mcpx ...} with C{MCPX_STATE_DIR} pointing at a temporary
directory whose C{mcpx.sock} is served, in this process, by L{FakeDaemon} (or by nothing,
or by a real daemon the command starts with C{--start}).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase
from twisted.web.server import Site

from mcpx.cli.client import CLIENT_HEADER, DEFAULT_CLIENT, SOCKET_NAME
from mcpx.daemon.listeners import SOCKET_NAME as DAEMON_SOCKET_NAME
from mcpx.ops.host import DEFAULT_CLIENT as HOST_DEFAULT_CLIENT
from mcpx.wire.http_common import CLIENT_HEADER as HTTP_CLIENT_HEADER
from tests.cli.fake_daemon import PNG, WAV, FakeDaemon
from tests.support.processes import REPO, ChildProcess, kill_on_cleanup, reactor, spawn


def cli_environ(state_dir: str, config_home: str | None = None) -> dict[str, str]:
    """The environment of a command: this one without MCPX_ variables, plus the state dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_")}
    env["MCPX_STATE_DIR"] = state_dir
    if config_home is not None:
        env["XDG_CONFIG_HOME"] = config_home
    return env


class CommandRunner(TestCase):
    """Runs C{mcpx} as a child process against a state directory of the test's own."""

    timeout = 60

    def setUp(self) -> None:
        # Short paths: a unix socket path must fit in 108 bytes.
        self.state_dir = tempfile.mkdtemp(prefix="mcpx-cli-")
        self.addCleanup(shutil.rmtree, self.state_dir, True)
        self.socket = str(Path(self.state_dir) / SOCKET_NAME)
        self.env = cli_environ(self.state_dir)

    async def mcpx(self, *args: str, stdin: bytes = b"", argv: list[str] | None = None) -> Done:
        """Run C{mcpx args} to the end."""
        command = argv if argv is not None else [sys.executable, "-m", "mcpx", *args]
        child = spawn(command, env=self.env, cwd=str(REPO))
        self.addCleanup(kill_on_cleanup, child)
        assert child.transport is not None
        if stdin:
            child.transport.write(stdin)
        child.transport.closeStdin()
        code = await child.ended(timeout=30)
        return Done(code, child)


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


class FakeDaemonTests(CommandRunner):
    """The commands against the fake API on the state directory's socket."""

    def setUp(self) -> None:
        super().setUp()
        self.fake = FakeDaemon()
        port = reactor.listenUNIX(self.socket, Site(self.fake.resource()))
        self.addCleanup(port.stopListening)

    async def test_servers_table(self) -> None:
        """C{mcpx servers} prints a table of the servers, their state and last error, and
        says who it is with the C{Mcpx-Client} header."""
        done = await self.mcpx("servers")
        self.assertEqual(done.code, 0, done)
        header, demo, broken = done.out.splitlines()
        self.assertEqual(header.split()[:3], ["SERVER", "STATE", "TRANSPORT"])
        self.assertEqual(demo.split()[:4], ["demo", "ready", "stdio", "2025-11-25"])
        self.assertIn("exited with status 1", broken)
        self.assertEqual(self.fake.requests[-1][:3], ("GET", "/v1/servers", "cli"))

    async def test_json_is_the_api_answer(self) -> None:
        """C{--json} prints the API's answer unchanged, for every kind of command."""
        done = await self.mcpx("servers", "--json")
        self.assertEqual(done.code, 0, done)
        self.assertEqual(done.json()["servers"][0]["name"], "demo")
        done = await self.mcpx("describe", "demo", "add", "--json")
        self.assertEqual(done.json()["tool"]["outputSchema"]["properties"]["sum"]["type"], "number")
        done = await self.mcpx("call", "demo", "args", "n=3", "--json")
        self.assertEqual(done.json()["structuredContent"], {"n": 3})

    async def test_tools(self) -> None:
        """C{mcpx tools} lists every server's tools with the first line of each description;
        a server and C{--search} narrow the list through the API's query."""
        done = await self.mcpx("tools")
        self.assertEqual(done.code, 0, done)
        lines = done.out.splitlines()
        self.assertEqual(
            [line.split()[:2] for line in lines[1:]], [["demo", "echo"], ["demo", "add"]]
        )
        self.assertIn("Adds two numbers.", done.out)
        self.assertNotIn("Second line", done.out)
        done = await self.mcpx("tools", "demo", "--search", "ADD")
        self.assertEqual(len(done.out.splitlines()), 2, done)
        self.assertEqual(self.fake.requests[-1][1], "/v1/tools?server=demo&search=ADD")

    async def test_describe(self) -> None:
        """C{mcpx describe} shows the tool's arguments, which are required, and how to call
        it."""
        done = await self.mcpx("describe", "demo", "echo")
        self.assertEqual(done.code, 0, done)
        self.assertIn("demo echo — Echo", done.out)
        self.assertIn("text (string, required): The text.", done.out)
        self.assertIn("mcpx call demo echo text=…", done.out)

    async def test_unknown_tool(self) -> None:
        """An unknown server or tool prints the API's message and exits 3."""
        done = await self.mcpx("describe", "demo", "nope")
        self.assertEqual(done.code, 3, done)
        self.assertIn("demo has no tool 'nope'", done.err)
        done = await self.mcpx("call", "nowhere", "echo")
        self.assertEqual(done.code, 3, done)
        self.assertIn("no server named 'nowhere'", done.err)

    async def test_upstream_failures(self) -> None:
        """An upstream JSON-RPC error (502) or a timeout (504) exits 4, printing the API's
        message and the upstream's error; input the daemon refuses (400) exits 2."""
        done = await self.mcpx("call", "demo", "broken")
        self.assertEqual(done.code, 4, done)
        self.assertIn("demo answered tools/call with an error", done.err)
        self.assertIn("upstream error -32603: Internal error", done.err)
        done = await self.mcpx("call", "demo", "slow", "--timeout", "1s")
        self.assertEqual(done.code, 4, done)
        self.assertEqual(self.fake.last_body("/v1/call")["timeout"], 1.0)
        done = await self.mcpx("call", "demo", "bad", "a=x")
        self.assertEqual(done.code, 2, done)
        self.assertIn("argument 'a' must be a number", done.err)

    async def test_api_error_as_json(self) -> None:
        """With C{--json}, an API error is printed as its JSON on stdout too."""
        done = await self.mcpx("call", "demo", "broken", "--json")
        self.assertEqual(done.code, 4, done)
        self.assertEqual(done.json()["error"]["rpc"]["code"], -32603)

    async def test_text_result(self) -> None:
        """A text result is printed as text."""
        done = await self.mcpx("call", "demo", "echo", "text=hello world")
        self.assertEqual((done.code, done.out), (0, "hello world\n"), done)

    async def test_key_value_arguments(self) -> None:
        """C{key=value} values are JSON when they parse and strings otherwise; structured
        content is printed as JSON, without the text block that repeats it."""
        done = await self.mcpx(
            "call", "demo", "args", "n=3", "s=hello", "on=true", 'q="3"', "l=[1,2]", "e="
        )
        self.assertEqual(done.code, 0, done)
        expected = {"n": 3, "s": "hello", "on": True, "q": "3", "l": [1, 2], "e": ""}
        self.assertEqual(self.fake.last_body("/v1/call")["arguments"], expected)
        self.assertEqual(json.loads(done.out), expected)

    async def test_json_object_arguments(self) -> None:
        """One JSON object argument, or C{-} reading it from stdin, is sent as the
        arguments."""
        done = await self.mcpx("call", "demo", "args", '{"a": {"b": [1]}}')
        self.assertEqual(done.code, 0, done)
        self.assertEqual(self.fake.last_body("/v1/call")["arguments"], {"a": {"b": [1]}})
        done = await self.mcpx("call", "demo", "args", "-", stdin=b'{"x": null}')
        self.assertEqual(done.code, 0, done)
        self.assertEqual(self.fake.last_body("/v1/call")["arguments"], {"x": None})

    async def test_usage_errors(self) -> None:
        """Arguments that cannot be read exit 2 with a message, without calling anything."""
        for words in (["oops"], ["{not json"], ["a=1", "a=2"], ["-"]):
            done = await self.mcpx("call", "demo", "args", *words)
            self.assertEqual(done.code, 2, (words, done))
        self.assertIn("key=value", (await self.mcpx("call", "demo", "args", "oops")).err)
        self.assertEqual([r for r in self.fake.requests if r[1] == "/v1/call"], [])

    async def test_is_error_exits_1(self) -> None:
        """A result with C{isError} prints its text on stderr and exits 1."""
        done = await self.mcpx("call", "demo", "fail")
        self.assertEqual(done.code, 1, done)
        self.assertIn("it went wrong", done.err)
        self.assertEqual(done.out, "")

    async def test_media_saved_to_files(self) -> None:
        """Images and audio are saved to files in a temporary directory; the printed paths
        exist and hold exactly the bytes sent, and the image decodes as a PNG."""
        done = await self.mcpx("call", "demo", "media")
        self.assertEqual(done.code, 0, done)
        self.assertIn("a red picture and a sound", done.out)
        paths = re.findall(r"saved to (\S+)\]", done.out)
        self.assertEqual(len(paths), 2, done)
        image, audio = (Path(p) for p in paths)
        self.addCleanup(shutil.rmtree, image.parent, True)
        self.assertEqual(image.suffix, ".png")
        self.assertEqual(image.read_bytes(), PNG)
        data = image.read_bytes()
        self.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n")
        self.assertEqual(data[12:16], b"IHDR")
        self.assertEqual(struct.unpack(">II", data[16:24]), (2, 1))
        self.assertIn(f"image image/png, {len(PNG)} bytes", done.out)
        self.assertEqual((audio.suffix, audio.read_bytes()), (".wav", WAV))

    async def test_resources_summarised(self) -> None:
        """Resource links and embedded resources are summarised on one line each."""
        done = await self.mcpx("call", "demo", "links")
        self.assertEqual(done.code, 0, done)
        link, embedded = done.out.splitlines()
        self.assertIn("resource link: file:///project/README.md (text/markdown)", link)
        self.assertIn("The project's readme.", link)
        self.assertIn("embedded resource: demo://readme (text/markdown, 8 characters)", embedded)

    async def test_no_progress_without_terminal(self) -> None:
        """With stderr not a terminal and no C{--progress}, progress is not asked for and
        nothing is drawn."""
        done = await self.mcpx("call", "demo", "countdown", "steps=3")
        self.assertEqual(done.code, 0, done)
        self.assertNotIn("progress", self.fake.last_body("/v1/call"))
        self.assertEqual((done.out, done.err), ("counted down 3 steps\n", ""))

    async def test_progress_flag(self) -> None:
        """C{--progress} asks for progress and draws a bar on stderr, never on stdout."""
        done = await self.mcpx("call", "demo", "countdown", "steps=4", "--progress")
        self.assertEqual(done.code, 0, done)
        self.assertIs(self.fake.last_body("/v1/call")["progress"], True)
        self.assertEqual(done.out, "counted down 4 steps\n")
        self.assertIn("100% 4/4", done.err)
        self.assertIn(" 25% 1/4", done.err)
        self.assertTrue(done.err.endswith("\n"))

    async def test_progress_on_a_terminal(self) -> None:
        """When stderr is a terminal, progress is asked for and drawn without the flag."""
        # mcpx.cli.quick.run, which ends in SystemExit (main would end the process at once).
        script = (
            "import os, sys\n"
            "from mcpx.cli.quick import run\n"
            "real = os.dup(2)\n"
            "master, slave = os.openpty()\n"
            "os.dup2(slave, 2)\n"
            "sys.argv = ['mcpx', 'call', 'demo', 'countdown', 'steps=2']\n"
            "try:\n"
            "    run()\n"
            "except SystemExit as e:\n"
            "    code = e.code\n"
            "sys.stderr.flush()\n"
            "os.set_blocking(master, False)\n"
            "os.write(real, os.read(master, 65536))\n"
            "sys.exit(code)\n"
        )
        done = await self.mcpx(argv=[sys.executable, "-c", script])
        self.assertEqual(done.code, 0, done)
        self.assertIs(self.fake.last_body("/v1/call")["progress"], True)
        self.assertEqual(done.out, "counted down 2 steps\n")
        self.assertIn("100% 2/2", done.err)

    async def test_error_inside_progress_stream(self) -> None:
        """An error line after progress lines is reported like any API error."""
        done = await self.mcpx("call", "demo", "stream_error", "--progress")
        self.assertEqual(done.code, 3, done)
        self.assertIn("no tool stream_error", done.err)

    async def test_restart(self) -> None:
        """C{mcpx restart} posts to the server's restart route and reports its state."""
        done = await self.mcpx("restart", "demo")
        self.assertEqual(done.code, 0, done)
        self.assertEqual(done.out, "restarted demo: ready (2025-11-25)\n")
        self.assertEqual(self.fake.requests[-1][:2], ("POST", "/v1/servers/demo/restart"))

    async def test_events(self) -> None:
        """C{mcpx events} prints one line per event, passes its filters on, and reports the
        end of the stream as a failure (the daemon went away)."""
        done = await self.mcpx("events")
        self.assertEqual(done.code, 1, done)
        started, log = done.out.splitlines()
        self.assertRegex(started, r"^\d\d:\d\d:\d\d\.250 server\.started demo era=legacy")
        self.assertIn("revision=2025-11-25", started)
        self.assertIn('server.log demo level=info data="hello from demo"', log)
        self.assertIn("closed the event stream", done.err)
        done = await self.mcpx("events", "--server", "demo", "--kind", "server.log", "--json")
        self.assertEqual(self.fake.requests[-1][1], "/v1/events?server=demo&kind=server.log")
        [event] = [json.loads(line) for line in done.out.splitlines()]
        self.assertEqual((event["kind"], event["data"]), ("server.log", "hello from demo"))

    async def test_status(self) -> None:
        """C{mcpx status} reports the daemon's version and pid from C{/health}."""
        done = await self.mcpx("status")
        self.assertEqual(done.code, 0, done)
        self.assertIn("mcpx 0-fake daemon is running: pid 4242", done.out)


class NoDaemonTests(CommandRunner):
    """The commands when nothing serves the socket."""

    async def test_no_socket(self) -> None:
        """Without a socket, every command says no daemon runs and how to start one, and
        exits 1."""
        for args in (["servers"], ["tools"], ["call", "demo", "echo", "text=x"], ["events"]):
            done = await self.mcpx(*args)
            self.assertEqual(done.code, 1, (args, done))
            self.assertIn("no daemon is running", done.err)
            self.assertIn(self.socket, done.err)
            for hint in ("mcpx daemon", "make run", "--start"):
                self.assertIn(hint, done.err)
            self.assertEqual(done.out, "")

    async def test_stale_socket(self) -> None:
        """A socket file nobody listens on (a daemon that died) counts as no daemon."""
        import socket

        stale = socket.socket(socket.AF_UNIX)
        stale.bind(self.socket)
        stale.close()
        done = await self.mcpx("servers")
        self.assertEqual(done.code, 1, done)
        self.assertIn("nothing listens on the socket", done.err)

    def test_socket_name(self) -> None:
        """The command looks for the socket under the name the daemon gives it."""
        self.assertEqual(SOCKET_NAME, DAEMON_SOCKET_NAME)

    def test_client_header(self) -> None:
        """The command names the caller in the header the daemon reads, and as it assumes."""
        self.assertEqual((CLIENT_HEADER, DEFAULT_CLIENT), (HTTP_CLIENT_HEADER, HOST_DEFAULT_CLIENT))


class StartTests(CommandRunner):
    """C{--start} with a real daemon (C{python -m mcpx daemon}, unix socket only)."""

    def setUp(self) -> None:
        super().setUp()
        config_home = tempfile.mkdtemp(prefix="mcpx-cfg-")
        self.addCleanup(shutil.rmtree, config_home, True)
        self.config_home = Path(config_home)
        self.env = cli_environ(self.state_dir, config_home)
        self.env["MCPX_DAEMON_LISTEN"] = ""

    def break_config(self) -> None:
        """A config file the daemon refuses (an unknown field), and a log from an earlier
        daemon of this state directory that stopped cleanly."""
        (self.config_home / "mcpx").mkdir()
        (self.config_home / "mcpx" / "config.json").write_text(
            '{"servers": {"x": {"command": "true", "bogus": 1}}}'
        )
        earlier = "".join(
            f'{{"level": "info", "message": "earlier daemon stopping {n}"}}\n' for n in range(12)
        )
        (Path(self.state_dir) / "daemon.log").write_text(earlier)

    async def test_broken_config_is_said_once_and_first(self) -> None:
        """C{--start} with a configuration the daemon refuses says why, once, and first:
        nothing an earlier daemon logged comes before or after it."""
        self.break_config()
        done = await self.mcpx("servers", "--start")
        self.assertEqual(done.code, 1, done)
        lines = done.err.strip().splitlines()
        self.assertTrue(lines[0].startswith("mcpx: could not start a daemon"), done.err)
        self.assertIn("'bogus'", lines[1])
        self.assertEqual(done.err.count("'bogus'"), 1, done.err)
        self.assertNotIn("earlier daemon", done.err)

    async def test_serve_says_a_broken_config_once(self) -> None:
        """C{mcpx serve}, which starts a daemon itself, says the same once too."""
        self.break_config()
        await self.mcpx("servers", "--start")
        done = await self.mcpx("serve", stdin=b"")
        self.assertEqual(done.code, 1, done)
        self.assertEqual(done.err.count("'bogus'"), 1, done.err)
        self.assertNotIn("earlier daemon", done.err)

    async def test_daemon_log_is_the_owners(self) -> None:
        """The log C{--start} writes is mode 0600, as running.md says."""
        self.break_config()
        await self.mcpx("servers", "--start")
        mode = (Path(self.state_dir) / "daemon.log").stat().st_mode & 0o777
        self.assertEqual(oct(mode), oct(0o600))

    async def stop(self, pid: int) -> None:
        """TERM the daemon and wait for it to go; KILL it if it will not."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        for _ in range(200):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            await deferLater(reactor, 0.05, lambda: None)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    async def start(self, *args: str) -> tuple[Done, int]:
        """Run C{mcpx args --start}; the daemon it started is stopped at cleanup."""
        done = await self.mcpx(*args, "--start")
        found = re.search(r"started a daemon in the background \(pid (\d+)\)", done.err)
        if found is None:
            self.fail(f"no daemon was started: {done}")
        pid = int(found.group(1))
        self.addCleanup(self.stop, pid)
        return done, pid

    async def test_start_then_status(self) -> None:
        """C{--start} starts a detached daemon that answers, logs to the state directory and
        keeps running for the next command; a second C{--start} starts nothing."""
        done, pid = await self.start("status", "--json")
        self.assertEqual(done.code, 0, done)
        self.assertEqual(done.json()["pid"], pid)
        self.assertTrue((Path(self.state_dir) / "daemon.log").exists())
        # Its own session: not in this test's process group, so terminal signals miss it.
        self.assertEqual(os.getsid(pid), pid)
        again = await self.mcpx("status", "--start", "--json")
        self.assertEqual(again.code, 0, again)
        self.assertEqual(again.json()["pid"], pid)
        self.assertNotIn("started a daemon", again.err)

    async def test_start_then_servers(self) -> None:
        """C{mcpx servers --start} answers from the daemon it started: with no
        configuration of the user's, its one server is the demo."""
        done, _pid = await self.start("servers", "--json")
        self.assertEqual(done.code, 0, done)
        self.assertEqual([server["name"] for server in done.json()["servers"]], ["demo"])


class ImportTests(CommandRunner):
    """What the command line imports."""

    async def test_stays_light(self) -> None:
        """C{mcpx servers --help} imports neither Twisted nor treq, Klein or jsonschema."""
        done = await self.mcpx(
            argv=[sys.executable, "-X", "importtime", "-m", "mcpx", "servers", "--help"]
        )
        self.assertEqual(done.code, 0, done)
        modules = {
            line.split("|")[-1].strip()
            for line in done.err.splitlines()
            if line.startswith("import time:")
        }
        self.assertIn("click", modules)
        self.assertIn("mcpx.cli.commands", modules)
        for heavy in ("twisted", "treq", "klein", "jsonschema"):
            self.assertNotIn(heavy, modules)
            self.assertEqual([m for m in modules if m.startswith(heavy + ".")], [])
