"""
C{--daemon ssh://host}: the endpoint's syntax and the ssh command line, what each way of
failing says, and whole sessions against a real OpenSSH server on loopback driven by the
real OpenSSH client: CLI commands, C{mcpx serve}, a daemon started on demand there,
Ctrl-C, and the errors a user meets.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from twisted.internet.task import deferLater
from twisted.trial.unittest import SynchronousTestCase

from mcpx._version import __version__
from mcpx.cli.bridge_command import bridge_api, client_gone, read_waiting
from mcpx.cli.client import BadEndpoint, DaemonClient, socket_path
from mcpx.cli.remote import (
    EXIT_NO_DAEMON,
    EXIT_VERSION_MISMATCH,
    SshEndpoint,
    diagnose,
    parse_endpoint,
)
from tests.cli.test_real_daemon import Done, RealDaemonCase, children_of, parent_of
from tests.server.test_resource_updates import Host
from tests.support.peers import fixture_argv
from tests.support.processes import REPO, kill_on_cleanup, reactor, spawn
from tests.support.sshd import SshServer


class EndpointTests(SynchronousTestCase):
    def test_parsed(self) -> None:
        """User, host (its case kept, IPv6 unbracketed) and port are read."""
        cases = {
            "ssh://buildbox": ("buildbox", None, None),
            "ssh://me@BuildBox:2222": ("BuildBox", "me", 2222),
            "ssh://[::1]:22": ("::1", None, 22),
            "SSH://me@10.0.0.1/": ("10.0.0.1", "me", None),
        }
        for text, (host, user, port) in cases.items():
            endpoint = parse_endpoint(text)
            assert endpoint is not None
            self.assertEqual((endpoint.host, endpoint.user, endpoint.port), (host, user, port))
        self.assertIsNone(parse_endpoint(""))
        self.assertEqual(str(parse_endpoint("ssh://me@[::1]:22")), "ssh://me@[::1]:22")

    def test_refused(self) -> None:
        """Other schemes, passwords, paths, options posing as hosts: each refused, saying so."""
        for text in (
            "buildbox",
            "http://buildbox",
            "ssh://me:secret@buildbox",
            "ssh://buildbox/var/mcpx",
            "ssh://buildbox?x=1",
            "ssh://-oProxyCommand=evil",
            "ssh://",
            "ssh://host:99999",
        ):
            with self.assertRaises(BadEndpoint, msg=text) as raised:
                parse_endpoint(text)
            self.assertIn(repr(text), str(raised.exception))

    def test_argv(self) -> None:
        """BatchMode, no terminal, the host after --, and the remote words quoted."""
        endpoint = SshEndpoint("box", "me", 2222)
        argv = endpoint.argv(["bridge-api", "--passthrough", "a b"], {})
        self.assertEqual(argv[:2], ["ssh", "-T"])
        self.assertIn("BatchMode=yes", argv)
        self.assertEqual(argv[argv.index("-p") + 1], "2222")
        self.assertEqual(argv[argv.index("-l") + 1], "me")
        self.assertEqual(argv[-3:], ["--", "box", "mcpx bridge-api --passthrough 'a b'"])
        replaced = endpoint.argv(
            ["bridge-api"],
            {"MCPX_SSH_COMMAND": "ssh -F '/my config'", "MCPX_REMOTE_MCPX": "/opt/mcpx"},
        )
        self.assertEqual(replaced[:3], ["ssh", "-F", "/my config"])
        self.assertEqual(replaced[-1], "/opt/mcpx bridge-api")


class DiagnoseTests(SynchronousTestCase):
    endpoint = SshEndpoint("box")

    def test_each_failure_says_what_to_do(self) -> None:
        """Each way ssh fails gets a message naming the cause and the way out."""
        cases = [
            (255, "ssh: Could not resolve hostname box: Name or service not known", "cannot reach"),
            (255, "ssh: connect to host box port 22: Connection refused", "cannot reach"),
            (255, "me@box: Permission denied (publickey).", "could not log in"),
            (255, "Host key verification failed.", "host key"),
            (127, "bash: line 1: mcpx: command not found", "not installed on box"),
            (EXIT_VERSION_MISMATCH, "mcpx bridge-api: box runs mcpx 9 ...", "runs mcpx 9"),
        ]
        for status, stderr, expected in cases:
            self.assertIn(expected, diagnose(self.endpoint, status, stderr), stderr)
        self.assertIn("MCPX_REMOTE_MCPX", diagnose(self.endpoint, 127, ""))
        self.assertIn("BatchMode", diagnose(self.endpoint, 255, "Permission denied"))


class BridgeVersionTests(SynchronousTestCase):
    def test_version_mismatch_refused(self) -> None:
        """The remote end refuses a client of another version, naming both."""
        result = CliRunner().invoke(bridge_api, ["--client-version", "0.0.0-other"])
        self.assertEqual(result.exit_code, EXIT_VERSION_MISMATCH)
        self.assertIn(f"runs mcpx {__version__}", result.output)
        self.assertIn("mcpx 0.0.0-other", result.output)


class ClientGoneTests(SynchronousTestCase):
    def pipe(self) -> tuple[int, int]:
        read_end, write_end = os.pipe()
        self.addCleanup(os.close, read_end)
        return read_end, write_end

    def test_open_pipe_is_not_gone(self) -> None:
        """A client that has sent nothing yet, or a request, is still there."""
        read_end, write_end = self.pipe()
        self.assertFalse(client_gone(read_end))
        os.write(write_end, b"GET /v1/health HTTP/1.1\r\n")
        self.assertFalse(client_gone(read_end))
        os.close(write_end)
        # A request sent before the client went is still a request to answer.
        self.assertFalse(client_gone(read_end))
        self.assertEqual(os.read(read_end, 100)[:3], b"GET")

    def test_closed_pipe_is_gone(self) -> None:
        read_end, write_end = self.pipe()
        os.close(write_end)
        self.assertTrue(client_gone(read_end))

    def test_read_waiting(self) -> None:
        """
        What an API client sent is read without waiting; a request followed by the end
        of the input is a client that has gone.
        """
        read_end, write_end = self.pipe()
        self.assertEqual(read_waiting(read_end), b"")
        os.write(write_end, b"GET /v1/health")
        self.assertEqual(read_waiting(read_end), b"GET /v1/health")
        os.write(write_end, b" HTTP/1.1")
        os.close(write_end)
        self.assertIsNone(read_waiting(read_end))


class SshCase(RealDaemonCase):
    """A real sshd on loopback; the "remote" daemon runs in this test's state directory."""

    timeout = 120

    def setUp(self) -> None:
        super().setUp()
        # Registered first, so it runs last: after sshd and the test's own daemon stopped.
        self.addCleanup(self.end_remote_sessions)
        self.ssh_dir = Path(tempfile.mkdtemp(prefix="mcpx-ssh-"))
        self.addCleanup(shutil.rmtree, self.ssh_dir, True)
        self.sshd = SshServer(self.ssh_dir)
        # The local side has a state directory of its own, where no daemon runs: whatever
        # answers comes over ssh.
        self.local_state = tempfile.mkdtemp(prefix="mcpx-local-")
        self.addCleanup(shutil.rmtree, self.local_state, True)

    async def start_sshd(self) -> None:
        await self.sshd.start()
        self.addCleanup(self.sshd.stop)

    def remote_mcpx(self) -> str:
        """How sshd's session runs this checkout's mcpx, on the test's remote state."""
        words = ["env", f"MCPX_STATE_DIR={self.state_dir}", f"XDG_CONFIG_HOME={self.config_home}"]
        if "MCPX_CONFIG" in self.env:
            words.append(f"MCPX_CONFIG={self.env['MCPX_CONFIG']}")
        words += [sys.executable, "-m", "mcpx"]
        return " ".join(shlex.quote(w) for w in words)

    def local_env(self, **more: str) -> dict[str, str]:
        env = {k: v for k, v in self.env.items() if not k.startswith("MCPX_")}
        env.update(
            MCPX_STATE_DIR=self.local_state,
            MCPX_SSH_COMMAND=self.sshd.ssh_command,
            MCPX_REMOTE_MCPX=self.remote_mcpx(),
        )
        env.update(more)
        return env

    async def remote(self, *args: str, **env: str) -> Done:
        """Run C{mcpx args} locally, against the daemon over ssh, to its end."""
        child = spawn(
            [sys.executable, "-m", "mcpx", *args], env=self.local_env(**env), cwd=str(REPO)
        )
        self.addCleanup(kill_on_cleanup, child)
        assert child.transport is not None
        child.transport.closeStdin()
        code = await child.ended(timeout=60)
        return Done(code, child)

    def write_servers(self, servers: dict[str, list[str]]) -> None:
        config = Path(self.config_home) / "servers.json"
        entries = {name: {"command": a[0], "args": a[1:]} for name, a in servers.items()}
        config.write_text(json.dumps({"servers": entries}))
        self.env["MCPX_CONFIG"] = str(config)

    async def stop_remote_daemon(self) -> None:
        """
        Stop the daemon bridge-api started there, by the pid it reports; when it does not
        answer (still starting, or too busy before the test timed out), by the pid its
        socket's lock names, so that a failed test leaves no daemon behind.
        """
        sock = socket_path(Path(self.state_dir))
        try:
            pid = int(DaemonClient(sock).health()["pid"])
        except Exception:
            try:
                # Twisted's FilesystemLock: a symlink whose target is the holder's pid.
                pid = int(os.readlink(f"{sock}.lock"))
            except (OSError, ValueError):
                return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        for _ in range(200):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            await deferLater(reactor, 0.05, lambda: None)
        os.kill(pid, signal.SIGKILL)

    async def end_remote_sessions(self) -> None:
        """
        Stop whatever the ssh sessions left running on the remote state: stopping sshd
        does not end its sessions.
        """
        await end_processes_on(self.state_dir)


async def end_processes_on(state_dir: str) -> None:
    """Stop the processes L{running_on} C{state_dir}: TERM, then KILL after five seconds."""
    left = running_on(state_dir)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        if all(parent_of(pid) is None for pid in left):
            return
        await deferLater(reactor, 0.05, lambda: None)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def running_on(state_dir: str, word: str | None = None) -> list[int]:
    """
    The processes (bar this one) run with C{MCPX_STATE_DIR=state_dir} in their
    environment, and C{word} in their command line if given.  The environment, not the
    command line: ssh's sessions run mcpx under C{env}, and a daemon started on demand
    there names no directory in its arguments.
    """
    mark = f"MCPX_STATE_DIR={state_dir}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environment = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            line = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if mark in environment and (word is None or word.encode() in line):
            found.append(int(entry))
    return found


class RemoteCommandTests(SshCase):
    async def test_commands_over_ssh_start_the_daemon_there(self) -> None:
        """
        With no daemon running on the remote host, C{mcpx --daemon ssh://…} starts one
        there; C{servers}, C{tools}, C{call} (the fast path, with C{MCPX_DAEMON}),
        C{status}, C{exec}, C{tasks} and C{events} all answer through ssh alone.
        """
        self.write_servers({"sdk": fixture_argv("stdio", "legacy")})
        await self.start_sshd()
        self.addCleanup(self.stop_remote_daemon)
        done = await self.remote("--daemon", self.sshd.endpoint, "servers", "--json")
        self.assertEqual(done.code, 0, done)
        self.assertEqual([s["name"] for s in done.json()["servers"]], ["sdk"])
        self.assertIn("started a daemon", done.err)
        self.assertTrue(socket_path(Path(self.state_dir)).exists())
        self.assertFalse(socket_path(Path(self.local_state)).exists())
        tools = await self.remote("--daemon", self.sshd.endpoint, "tools", "sdk", "--json")
        self.assertIn("echo", [t["name"] for t in tools.json()["tools"]])
        called = await self.remote(
            "call", "sdk", "echo", "text=over ssh", MCPX_DAEMON=self.sshd.endpoint
        )
        self.assertEqual((called.code, called.out.strip()), (0, "over ssh"), called)
        status = await self.remote("status", MCPX_DAEMON=self.sshd.endpoint)
        self.assertIn(self.sshd.endpoint, status.out)
        # mcpx exec sends the local program to the remote daemon, which runs it there.
        program = Path(self.mktemp()).resolve()
        program.write_text('reply = await sdk.echo(text="from a program")\nreply\n')
        ran = await self.remote("--daemon", self.sshd.endpoint, "exec", str(program))
        self.assertEqual(ran.code, 0, ran)
        self.assertIn("from a program", ran.out)
        tasks = await self.remote("--daemon", self.sshd.endpoint, "tasks", "list", "--json")
        self.assertEqual(tasks.code, 0, tasks)
        # A stream, too: the remote daemon's events arrive as they happen.
        following = spawn(
            [sys.executable, "-m", "mcpx", "events", "--kind", "server.restarted", "--json"],
            env=self.local_env(MCPX_DAEMON=self.sshd.endpoint),
            cwd=str(REPO),
        )
        self.addCleanup(kill_on_cleanup, following)
        for _ in range(40):
            # Restarted until the stream, once its ssh is up and subscribed, hears one.
            restarted = await self.remote("--daemon", self.sshd.endpoint, "restart", "sdk")
            self.assertEqual(restarted.code, 0, restarted)
            if '"kind":"server.restarted"' in following.text(1):
                break
            await deferLater(reactor, 0.25, lambda: None)
        self.assertIn('"server":"sdk"', following.text(1))
        following.signal("INT")
        self.assertEqual(await following.ended(timeout=15), 0, following.text())

    async def test_errors_say_what_to_do(self) -> None:
        """
        Authentication refused, host unreachable, mcpx missing there, another version of
        mcpx there, ssh missing here, a bad endpoint: each says what is wrong.
        """
        await self.start_sshd()
        refused = await self.remote(
            "--daemon", self.sshd.endpoint, "servers", MCPX_SSH_COMMAND=self.sshd.wrong_key_command
        )
        self.assertEqual(refused.code, 1, refused)
        self.assertIn("could not log in", refused.err)
        closed_port = self.sshd.port + 1 if self.sshd.port < 65535 else 1
        unreachable = await self.remote("--daemon", f"ssh://127.0.0.1:{closed_port}", "servers")
        self.assertEqual(unreachable.code, 1, unreachable)
        self.assertIn("cannot reach ssh://127.0.0.1", unreachable.err)
        missing = await self.remote(
            "--daemon", self.sshd.endpoint, "servers", MCPX_REMOTE_MCPX="/nonexistent/mcpx"
        )
        self.assertEqual(missing.code, 1, missing)
        self.assertIn("mcpx is not installed on 127.0.0.1", missing.err)
        pretender = (
            "import mcpx._version as v; v.__version__ = '9.9.9'; "
            "from mcpx.cli.quick import main; main()"
        )
        other_version = await self.remote(
            "--daemon",
            self.sshd.endpoint,
            "servers",
            MCPX_REMOTE_MCPX=f"{shlex.quote(sys.executable)} -c {shlex.quote(pretender)}",
        )
        self.assertEqual(other_version.code, 1, other_version)
        self.assertIn(f"runs mcpx 9.9.9 but the client runs mcpx {__version__}", other_version.err)
        no_ssh = await self.remote(
            "--daemon", self.sshd.endpoint, "servers", MCPX_SSH_COMMAND="/nonexistent/ssh"
        )
        self.assertIn("is not installed", no_ssh.err)
        bad = await self.remote("--daemon", "http://box", "servers")
        self.assertEqual(bad.code, 2, bad)
        self.assertIn("ssh://[user@]host[:port]", bad.err)

    async def test_interrupted_call_leaves_nothing_running(self) -> None:
        """
        Ctrl-C of C{mcpx call} over ssh ends it at once; its ssh, the remote
        bridge-api and the daemon's request are all gone, and the daemon lives on.
        """
        await self.start_daemon({"sdk": fixture_argv("stdio", "legacy")})
        await self.start_sshd()
        await self.ok("call", "sdk", "echo", "text=warm")
        child = spawn(
            [sys.executable, "-m", "mcpx", "call", "sdk", "slow", "seconds=30", "steps=30"],
            env=self.local_env(MCPX_DAEMON=self.sshd.endpoint),
            cwd=str(REPO),
        )
        self.addCleanup(kill_on_cleanup, child)
        await self.wait_for_in_flight(1)
        child.signal("INT")
        code = await child.ended(timeout=15)
        self.assertNotEqual(code, 0)
        await self.wait_for_in_flight(0)
        self.assertEqual(await self.processes_named("bridge-api"), [])
        self.assertEqual((await self.ok("call", "sdk", "echo", "text=still")).out.strip(), "still")

    async def test_dropped_connection_leaves_nothing_running(self) -> None:
        """
        The ssh connection of a call in flight dies (its ssh is killed): the command says
        the way to the daemon broke and exits 1, and the remote side lets go of the call.
        """
        await self.start_daemon({"sdk": fixture_argv("stdio", "legacy")})
        await self.start_sshd()
        await self.ok("call", "sdk", "echo", "text=warm")
        child = spawn(
            [sys.executable, "-m", "mcpx", "call", "sdk", "slow", "seconds=30", "steps=30"],
            env=self.local_env(MCPX_DAEMON=self.sshd.endpoint),
            cwd=str(REPO),
        )
        self.addCleanup(kill_on_cleanup, child)
        await self.wait_for_in_flight(1)
        assert child.transport is not None
        # The call's ssh, and the one a question watch may have open beside it.
        sshes = children_of(child.transport.pid)
        self.assertTrue(sshes)
        for ssh in sshes:
            with contextlib.suppress(ProcessLookupError):  # a watch's look may have ended
                os.kill(ssh, signal.SIGKILL)
        self.assertEqual(await child.ended(timeout=15), 1, child.text())
        self.assertIn(f"the ssh connection to {self.sshd.endpoint} was lost", child.text(2))
        # Nor does an ssh its question watch had open outlive the command.
        ssh_program = shutil.which("ssh") or "ssh"
        self.assertEqual(await self.processes_named(ssh_program, self.local_state), [])
        await self.wait_for_in_flight(0)
        self.assertEqual(await self.processes_named("bridge-api"), [])

    async def wait_for_in_flight(self, count: int) -> None:
        for _ in range(300):
            servers = (await self.ok("servers", "--json")).json()["servers"]
            if servers[0]["in_flight"] == count:
                return
            await deferLater(reactor, 0.1, lambda: None)
        raise AssertionError(f"never {count} in flight: {servers}")

    async def processes_named(self, word: str, state_dir: str | None = None) -> list[int]:
        """
        The processes on C{state_dir} (the remote state by default) whose command line
        holds C{word}, once they have had five seconds to end.
        """
        for _ in range(50):
            found = running_on(state_dir or self.state_dir, word)
            if not found:
                return []
            await deferLater(reactor, 0.1, lambda: None)
        return found


class BridgeWithoutClientTests(RealDaemonCase):
    async def test_gone_client_starts_no_daemon(self) -> None:
        """
        C{mcpx bridge-api} run for a client that has already gone (its standard input
        closed before it looked) where no daemon runs ends at once and starts none, for
        the API (with a request sent before it went, too) and for C{--mcp}.
        """
        self.addCleanup(end_processes_on, self.state_dir)  # what a failure would leave
        request = b"GET /v1/questions HTTP/1.1\r\nHost: localhost\r\n\r\n"
        bridge = ("bridge-api", "--client-version", __version__)
        for extra, sent in (([], b""), ([], request), (["--mcp"], b"")):
            done = await self.mcpx(*bridge, *extra, stdin=sent)
            self.assertIn(done.code, (0, EXIT_NO_DAEMON), (extra, done))
            self.assertNotIn("started a daemon", done.err)
            self.assertFalse(socket_path(Path(self.state_dir)).exists())
            self.assertEqual(running_on(self.state_dir, "daemon"), [])


class RemoteServeTests(SshCase):
    async def test_serve_session_over_ssh(self) -> None:
        """
        C{mcpx serve --daemon ssh://…}: a host's whole MCP session is served by the
        remote daemon, and the question an upstream there asks (elicitation) is put to
        the local host and answered by it; the host closing its input ends the session
        with status 0.
        """
        await self.start_daemon({"sdk": fixture_argv("stdio", "legacy")})
        await self.start_sshd()
        host = _SshHost(self, ["serve", "--daemon", self.sshd.endpoint])
        answer: Any = await host.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "remote-host", "version": "1"},
            },
        )
        self.assertIn("serverInfo", answer)
        host.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        called = await host.request(
            "tools/call",
            {
                "name": "mcpx_call",
                "arguments": {"server": "sdk", "tool": "echo", "arguments": {"text": "far"}},
            },
        )
        self.assertIn("far", json.dumps(called))
        host.next_id += 1
        call_id = host.next_id
        host.send(
            {
                "jsonrpc": "2.0",
                "id": call_id,
                "method": "tools/call",
                "params": {"name": "mcpx_call", "arguments": {"server": "sdk", "tool": "ask_name"}},
            }
        )
        question = await host.message(lambda m: m.get("method") == "elicitation/create")
        host.send(
            {
                "jsonrpc": "2.0",
                "id": question["id"],
                "result": {"action": "accept", "content": {"name": "Ada"}},
            }
        )
        greeted = await host.message(lambda m: m.get("id") == call_id and "method" not in m)
        self.assertIn("Hello, Ada", json.dumps(greeted))
        assert host.child.transport is not None
        host.child.transport.closeStdin()
        self.assertEqual(await host.child.ended(timeout=30), 0, host.child.text(2))

    async def test_serve_says_why_it_cannot_connect(self) -> None:
        """mcpx serve towards a refused login or mcpx missing there says so and exits 1."""
        await self.start_sshd()
        cases = (
            ({"MCPX_SSH_COMMAND": self.sshd.wrong_key_command}, "ssh could not log in"),
            ({"MCPX_REMOTE_MCPX": "/nonexistent/mcpx"}, "mcpx is not installed on 127.0.0.1"),
        )
        for env, expected in cases:
            child = spawn(
                [sys.executable, "-m", "mcpx", "serve", "--daemon", self.sshd.endpoint],
                env=self.local_env(**env),
                cwd=str(REPO),
            )
            self.addCleanup(kill_on_cleanup, child)
            self.assertEqual(await child.ended(timeout=30), 1, child.text())
            self.assertIn(f"mcpx serve: {expected}", child.text(2))
            self.assertEqual(child.text(1), "")


class _SshHost(Host):
    """L{Host} on a local C{mcpx serve} bridging over ssh."""

    def __init__(self, case: SshCase, args: list[str]) -> None:
        self.child = spawn(
            [sys.executable, "-m", "mcpx", *args], env=case.local_env(), cwd=str(REPO)
        )
        case.addCleanup(kill_on_cleanup, self.child)
        self.next_id = 0
        self.claimed: set[int] = set()
