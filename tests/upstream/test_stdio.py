"""
Tests for L{mcpx.upstream.stdio}.

Most tests drive a L{StdioChannel} through a fake process reactor: it records what
would have been spawned and hands back a fake process whose stdout, stderr and exit
the test controls, with a L{Clock} for the shutdown timers.  L{RealProcessTests}
runs small scripts from C{tests/upstream/scripts} as real child processes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from attrs import define, field
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.error import ProcessDone, ProcessExitedAlready, ProcessTerminated
from twisted.internet.interfaces import IProcessProtocol, IProcessTransport
from twisted.internet.task import Clock
from twisted.internet.testing import EventLoggingObserver
from twisted.logger import LogLevel, globalLogPublisher
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase
from zope.interface import implementer

from mcpx.settings.servers import Auth, AuthType, Secret, StdioServer
from mcpx.upstream import stdio as stdio_module
from mcpx.upstream.channel import ChannelClosed, MessageTooLarge
from mcpx.upstream.stdio import (
    STDERR_LINE_LIMIT,
    STDIN_BACKLOG,
    IReactorSpawn,
    StdioChannel,
    _Unread,
)
from mcpx.upstream.stdio_spawn import SpawnFailed
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import Notification, Request
from mcpx.wire.peer import ConnectionClosed, RpcPeer

SCRIPTS = Path(__file__).parent / "scripts"


def observe_log(case: SynchronousTestCase) -> EventLoggingObserver:
    """Collect every log event emitted until C{case} ends."""
    events = EventLoggingObserver()
    globalLogPublisher.addObserver(events)
    case.addCleanup(globalLogPublisher.removeObserver, events)
    return events


def events_of(observer: EventLoggingObserver, level: LogLevel) -> list[Mapping[str, Any]]:
    return [event for event in observer if event["log_level"] is level]


@implementer(IProcessTransport)
class FakeProcess:
    """
    A child process the test plays: what mcpx writes to its stdin is kept, and the
    test writes its stdout and stderr and decides when and how it ends.
    """

    pid = 4242

    def __init__(self, protocol: IProcessProtocol) -> None:
        self.protocol = protocol
        self.stdin = bytearray()
        self.stdin_closed = False
        self.signals: list[str | int] = []
        self.pipes_released = False
        self.exited = False
        self.ended = False

    # IProcessTransport

    def write(self, data: bytes) -> None:
        assert not self.stdin_closed, "wrote to a closed stdin"
        self.stdin += data

    def writeSequence(self, data: Iterable[bytes]) -> None:
        for part in data:
            self.write(part)

    def writeToChild(self, childFD: int, data: bytes) -> None:
        assert childFD == 0
        self.write(data)

    def closeStdin(self) -> None:
        self.stdin_closed = True

    def closeStdout(self) -> None:
        pass

    def closeStderr(self) -> None:
        pass

    def closeChildFD(self, descriptor: int) -> None:
        pass

    def loseConnection(self) -> None:
        self.stdin_closed = True
        self.pipes_released = True

    def signalProcess(self, signalID: str | int) -> None:
        if self.exited:
            raise ProcessExitedAlready()
        self.signals.append(signalID)

    def getPeer(self) -> Any:
        raise NotImplementedError()

    def getHost(self) -> Any:
        raise NotImplementedError()

    # Playing the child

    def stdout(self, data: bytes) -> None:
        self.protocol.childDataReceived(1, data)

    def stderr(self, data: bytes) -> None:
        self.protocol.childDataReceived(2, data)

    def written(self) -> list[Any]:
        """The messages mcpx wrote to stdin, decoded, checking each ends in a newline."""
        assert self.stdin.endswith(b"\n") or not self.stdin
        return [json.loads(line) for line in bytes(self.stdin).splitlines()]

    def exit(self, code: int | None = 0, signal_number: int | None = None) -> None:
        """The process ends (is reaped) but, as far as this says, its pipes stay open."""
        self.exited = True
        self.protocol.processExited(self._reason(code, signal_number))

    def end(self, code: int | None = 0, signal_number: int | None = None) -> None:
        """The process exits, its pipes close, and it is reaped."""
        for fd in (0, 1, 2):
            self.protocol.childConnectionLost(fd)
        if not self.exited:
            self.exit(code, signal_number)
        self.ended = True
        self.protocol.processEnded(self._reason(code, signal_number))

    def _reason(self, code: int | None, signal_number: int | None) -> Failure:
        if code == 0 and signal_number is None:
            return Failure(ProcessDone(0))
        return Failure(ProcessTerminated(code, signal_number, 0))


@define
class Spawn:
    """One call to C{spawnProcess}."""

    executable: str
    args: list[str]
    env: dict[str, str]
    path: str | None
    process: FakeProcess


class FakeProcessReactor(Clock):
    """A L{Clock} that also pretends to spawn processes."""

    def __init__(self) -> None:
        super().__init__()
        self.spawned: list[Spawn] = []
        self.refuse: Exception | None = None

    def spawnProcess(
        self,
        processProtocol: IProcessProtocol,
        executable: str,
        args: Sequence[str],
        env: Mapping[str, str] | None = None,
        path: str | None = None,
        uid: int | None = None,
        gid: int | None = None,
        usePTY: bool = False,
        childFDs: Mapping[int, int | str] | None = None,
    ) -> FakeProcess:
        if self.refuse is not None:
            raise self.refuse
        assert env is not None
        process = FakeProcess(processProtocol)
        self.spawned.append(Spawn(executable, list(args), dict(env), path, process))
        processProtocol.makeConnection(process)
        return process

    @property
    def process(self) -> FakeProcess:
        [spawn] = self.spawned
        return spawn.process


@define
class Upstream:
    """A channel to a fake server, the peer speaking through it, and what reaches the peer."""

    channel: StdioChannel
    reactor: FakeProcessReactor
    peer: RpcPeer
    requests: list[Request] = field(factory=list)
    notifications: list[Notification] = field(factory=list)

    @property
    def process(self) -> FakeProcess:
        return self.reactor.process


def executable(directory: Path, name: str, mode: int = 0o755) -> Path:
    """Create a file called C{name} in C{directory} with C{mode}."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n")
    path.chmod(mode)
    return path


def spawner() -> IReactorSpawn:
    """A L{FakeProcessReactor}, as the channel's reactor (it spawns and tells time)."""
    return cast(IReactorSpawn, FakeProcessReactor())


def connect(
    server: StdioServer,
    environ: Mapping[str, str] | None = None,
    reactor: FakeProcessReactor | None = None,
    **options: Any,
) -> Upstream:
    """Build a channel and its peer the way the session layer does, without starting it."""
    reactor = reactor or FakeProcessReactor()
    channel = StdioChannel(
        server.name, server, cast(IReactorSpawn, reactor), environ or {}, **options
    )
    requests: list[Request] = []
    notifications: list[Notification] = []
    peer = RpcPeer(
        channel.send,
        send_request=channel.send_request,
        on_abandon=channel.abandon,
        on_request=requests.append,
        on_notification=notifications.append,
        clock=reactor,
        name=server.name,
    )
    upstream = Upstream(channel, reactor, peer, requests, notifications)
    channel.attach(peer)
    return upstream


class StdioTestCase(SynchronousTestCase):
    """Starts channels to a server whose command is an executable in a temporary PATH."""

    def setUp(self) -> None:
        self.bin = Path(self.mktemp()).absolute() / "bin"
        self.command = executable(self.bin, "demo-server")
        self.environ = {"PATH": str(self.bin), "HOME": "/home/mcpx"}

    def server(self, **fields: Any) -> StdioServer:
        fields.setdefault("command", "demo-server")
        return StdioServer(name="demo", **fields)

    def started(self, server: StdioServer | None = None, **options: Any) -> Upstream:
        upstream = connect(server or self.server(), self.environ, **options)
        self.successResultOf(upstream.channel.start())
        return upstream


class SpawnTests(StdioTestCase):
    """Which process is spawned, and how failing to spawn one is reported."""

    def test_environment(self) -> None:
        """
        The child gets the daemon's environment with the server's configured C{env}
        over it, and an C{env} credential on top.
        """
        server = self.server(
            env={"HOME": Secret("/srv/demo"), "DEMO_MODE": Secret("fast")},
            auth=Auth(AuthType.ENV, Secret("s3cret"), name="DEMO_TOKEN"),
        )
        upstream = self.started(server)
        [spawn] = upstream.reactor.spawned
        self.assertEqual(
            spawn.env,
            {
                "PATH": str(self.bin),
                "HOME": "/srv/demo",
                "DEMO_MODE": "fast",
                "DEMO_TOKEN": "s3cret",
            },
        )

    def test_environment_is_not_the_daemons(self) -> None:
        """
        Of the daemon's variables, the child gets only what every server gets (the SDKs'
        list, the locale, C{TMPDIR}, C{XDG_RUNTIME_DIR}) and what its C{envPassthrough}
        names; never another secret of the daemon's, never C{MCPX_*}, never a shell
        function by default.
        """
        self.environ.update(
            {
                "USER": "ada",
                "LOGNAME": "ada",
                "SHELL": "/bin/sh",
                "TERM": "xterm",
                "LANG": "de_DE.UTF-8",
                "LC_TIME": "C",
                "TMPDIR": "/tmp/ada",
                "XDG_RUNTIME_DIR": "/run/user/1000",
                "GITHUB_TOKEN": "ghp_other_servers",
                "PGPASSWORD": "store-password",
                "AWS_PROFILE": "work",
                "MCPX_STATE_DIR": "/home/ada/.local/state/mcpx",
                "MCPX_TOKEN": "daemon-token",
                "XDG_STATE_HOME": "/home/ada/.local/state",
            }
        )
        self.environ["TERM"] = "() { :; }; echo pwned"
        [spawn] = self.started(self.server(env_passthrough=("AWS_PROFILE",))).reactor.spawned
        self.assertEqual(
            spawn.env,
            {
                "PATH": str(self.bin),
                "HOME": "/home/mcpx",
                "USER": "ada",
                "LOGNAME": "ada",
                "SHELL": "/bin/sh",
                "LANG": "de_DE.UTF-8",
                "LC_TIME": "C",
                "TMPDIR": "/tmp/ada",
                "XDG_RUNTIME_DIR": "/run/user/1000",
                "AWS_PROFILE": "work",
            },
        )

    def test_daemon_environment_untouched(self) -> None:
        """Composing the child's environment leaves the daemon's mapping as it was."""
        before = dict(self.environ)
        self.started(self.server(env={"EXTRA": Secret("1")}))
        self.assertEqual(self.environ, before)

    def test_command_args_and_directory(self) -> None:
        """
        The command is found on PATH and run by its full path, with the configured
        arguments after it and the configured directory as its working directory.
        """
        workdir = os.path.abspath(self.mktemp())
        os.mkdir(workdir)
        upstream = self.started(self.server(args=("--stdio", "-v"), cwd=workdir))
        [spawn] = upstream.reactor.spawned
        self.assertEqual(spawn.executable, str(self.command))
        self.assertEqual(spawn.args, ["demo-server", "--stdio", "-v"])
        self.assertEqual(spawn.path, workdir)

    def test_configured_path_searched(self) -> None:
        """The command is looked up on the PATH the child will have, the configured one."""
        other = executable(Path(self.mktemp()).absolute(), "other-server")
        server = self.server(command="other-server", env={"PATH": Secret(str(other.parent))})
        upstream = self.started(server)
        self.assertEqual(upstream.reactor.spawned[0].executable, str(other))

    def test_earlier_path_entry_wins(self) -> None:
        """As with C{execvp}, the first executable on PATH is the one run."""
        first = executable(Path(self.mktemp()).absolute(), "demo-server")
        self.environ["PATH"] = os.pathsep.join([str(first.parent), str(self.bin)])
        upstream = self.started()
        self.assertEqual(upstream.reactor.spawned[0].executable, str(first))

    def test_relative_command_from_directory(self) -> None:
        """A command with a slash is taken relative to the server's directory."""
        workdir = Path(self.mktemp()).absolute()
        local = executable(workdir / "tools", "serve")
        upstream = self.started(self.server(command="./tools/serve", cwd=str(workdir)))
        self.assertEqual(upstream.reactor.spawned[0].executable, str(local.absolute()))

    def test_command_not_found(self) -> None:
        """
        A command on no PATH directory fails C{start} with an error naming the server
        and the command, and nothing is spawned.
        """
        upstream = connect(self.server(command="no-such-server"), self.environ)
        error = self.failureResultOf(upstream.channel.start(), SpawnFailed).value
        self.assertIn('upstream "demo"', str(error))
        self.assertIn("'no-such-server' was not found on PATH", str(error))
        self.assertIn(str(self.bin), str(error))
        self.assertEqual(upstream.reactor.spawned, [])

    def test_configured_path_not_shown(self) -> None:
        """A PATH from the server's C{env} (which may hold secrets) is not quoted in errors."""
        server = self.server(command="no-such-server", env={"PATH": Secret("/opt/secret-bin")})
        error = self.failureResultOf(connect(server, self.environ).channel.start()).value
        self.assertIn("was not found on PATH", str(error))
        self.assertNotIn("secret-bin", str(error))

    def test_command_not_executable(self) -> None:
        """A command that exists but cannot be executed is reported as such."""
        executable(self.bin, "plain-file", mode=0o644)
        upstream = connect(self.server(command="plain-file"), self.environ)
        error = self.failureResultOf(upstream.channel.start(), SpawnFailed).value
        self.assertIn('upstream "demo"', str(error))
        self.assertIn("is not executable", str(error))

    def test_explicit_path_missing(self) -> None:
        """A command given as a path that does not exist is reported as such."""
        upstream = connect(self.server(command="/nonexistent/server"), self.environ)
        error = self.failureResultOf(upstream.channel.start(), SpawnFailed).value
        self.assertIn("'/nonexistent/server' does not exist", str(error))

    def test_directory_missing(self) -> None:
        """A configured working directory that does not exist fails C{start} clearly."""
        upstream = connect(self.server(cwd="/nonexistent/dir"), self.environ)
        error = self.failureResultOf(upstream.channel.start(), SpawnFailed).value
        self.assertIn('upstream "demo"', str(error))
        self.assertIn("'/nonexistent/dir' does not exist", str(error))

    def test_spawn_raises(self) -> None:
        """An error from C{spawnProcess} itself fails C{start} with the server's name."""
        reactor = FakeProcessReactor()
        reactor.refuse = OSError("out of file descriptors")
        upstream = connect(self.server(), self.environ, reactor)
        error = self.failureResultOf(upstream.channel.start(), SpawnFailed).value
        self.assertIn('upstream "demo" could not be started', str(error))
        self.assertIn("out of file descriptors", str(error))

    def test_failed_start_loses_channel(self) -> None:
        """
        After a failed start the channel is lost: the peer refuses requests,
        C{when_lost} reports the reason and C{close} is immediate.
        """
        upstream = connect(self.server(command="no-such-server"), self.environ)
        self.failureResultOf(upstream.channel.start())
        self.assertTrue(upstream.peer.closed)
        self.failureResultOf(upstream.channel.when_lost(), SpawnFailed)
        self.successResultOf(upstream.channel.close())

    def test_start_needs_peer(self) -> None:
        """Starting a channel that has no peer attached is a programming error."""
        channel = StdioChannel("demo", self.server(), spawner(), self.environ)
        self.assertRaises(RuntimeError, channel.start)

    def test_pid(self) -> None:
        """The channel shows the child's pid from its start until it is reaped."""
        upstream = connect(self.server(), self.environ)
        self.assertIsNone(upstream.channel.pid)
        self.successResultOf(upstream.channel.start())
        self.assertEqual(upstream.channel.pid, FakeProcess.pid)
        upstream.process.end(0)
        self.assertIsNone(upstream.channel.pid)

    def test_describe(self) -> None:
        """C{describe} gives the command line, quoted, and no environment values."""
        server = self.server(args=("--root", "/srv/my files"), env={"TOKEN": Secret("s3cret")})
        description = StdioChannel("demo", server, spawner(), {}).describe()
        self.assertEqual(description, "demo-server --root '/srv/my files'")


class TrafficTests(StdioTestCase):
    """Messages to and from the child."""

    def test_request_written_as_line(self) -> None:
        """A request goes to the child's stdin as one line of JSON."""
        upstream = self.started()
        upstream.peer.request("tools/list", {"cursor": "x"})
        self.assertEqual(
            upstream.process.written(),
            [{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"cursor": "x"}}],
        )

    def test_a_request_alone_is_sent_now_others_wait_for_the_pass(self) -> None:
        """
        A request with nothing else in flight goes to the child's stdin at once (no
        wait for the reactor's next pass: the call's latency); one sent while another is
        in flight is queued, so the pass sends all of them down the pipe in one write.
        """
        sent_now: list[bytes] = []

        def write_now(transport: Any, data: bytes) -> None:
            sent_now.append(data)
            transport.write(data)

        self.patch(stdio_module, "write_now", write_now)
        upstream = self.started()
        upstream.peer.request("tools/list", {})
        self.assertEqual([json.loads(line)["id"] for line in sent_now], [1])
        upstream.peer.request("tools/list", {})
        self.assertEqual([json.loads(line)["id"] for line in sent_now], [1])
        self.assertEqual([m["id"] for m in upstream.process.written()], [1, 2])

    def test_notification_written_as_line(self) -> None:
        """A notification goes to the child's stdin as one line of JSON."""
        upstream = self.started()
        upstream.peer.notify("notifications/initialized")
        self.assertEqual(
            upstream.process.written(),
            [{"jsonrpc": "2.0", "method": "notifications/initialized"}],
        )

    def test_response_split_across_chunks(self) -> None:
        """A response arriving in several pieces answers its request once complete."""
        upstream = self.started()
        d = upstream.peer.request("ping")
        upstream.process.stdout(b'{"jsonrpc": "2.0", ')
        upstream.process.stdout(b'"id": 1, "resu')
        self.assertNoResult(d)
        upstream.process.stdout(b'lt": {"ok": true}}\n')
        self.assertEqual(self.successResultOf(d), {"ok": True})

    def test_response_with_non_finite_numbers_fails_its_request(self) -> None:
        """
        A response holding NaN, 1e400 or nesting past the limit fails the request it answers
        at once, with -32700 naming the problem, instead of leaving it to its deadline; the
        channel goes on working.
        """
        upstream = self.started()
        cases = {
            b'{"jsonrpc":"2.0","id":%d,"result":{"x":NaN}}\n': "NaN",
            b'{"jsonrpc":"2.0","id":%d,"result":{"x":[1e400]}}\n': "1e400",
            b'{"jsonrpc":"2.0","id":%d,"result":' + b"[" * 200 + b"]" * 200 + b"}\n": "nested",
        }
        for number, (line, named) in enumerate(cases.items(), start=1):
            d = upstream.peer.request("tools/call")
            upstream.process.stdout(line % number)
            error = self.failureResultOf(d, RpcError).value
            self.assertEqual(error.code, -32700)
            self.assertIn(named, error.message)
        d = upstream.peer.request("ping")
        upstream.process.stdout(b'{"jsonrpc":"2.0","id":4,"result":{}}\n')
        self.assertEqual(self.successResultOf(d), {})

    def test_several_messages_per_chunk(self) -> None:
        """Several lines in one chunk are all delivered, in order."""
        upstream = self.started()
        first = upstream.peer.request("ping")
        second = upstream.peer.request("ping")
        upstream.process.stdout(
            b'{"jsonrpc":"2.0","id":2,"result":"b"}\r\n'
            b'{"jsonrpc":"2.0","method":"notifications/message","params":{}}\n'
            b'{"jsonrpc":"2.0","id":1,"result":"a"}\n'
        )
        self.assertEqual(self.successResultOf(first), "a")
        self.assertEqual(self.successResultOf(second), "b")
        self.assertEqual(upstream.notifications, [Notification("notifications/message", {})])

    def test_server_request_answered(self) -> None:
        """A request from the server reaches the peer, whose answer goes back on stdin."""
        upstream = self.started()
        upstream.process.stdout(b'{"jsonrpc":"2.0","id":7,"method":"roots/list"}\n')
        self.assertEqual(upstream.requests, [Request(7, "roots/list")])
        self.assertEqual(upstream.process.written(), [{"jsonrpc": "2.0", "id": 7, "result": None}])

    def test_cancel_sends_notification(self) -> None:
        """
        The channel cancels with a notification: cancelling a request writes
        C{notifications/cancelled} to stdin, and the channel stays open.
        """
        upstream = self.started()
        self.assertTrue(upstream.channel.cancels_with_notification)
        d = upstream.peer.request("tools/call", {"name": "slow"})
        d.cancel()
        self.failureResultOf(d)
        cancelled = upstream.process.written()[1]
        self.assertEqual(cancelled["method"], "notifications/cancelled")
        self.assertEqual(cancelled["params"]["requestId"], 1)
        self.assertFalse(upstream.peer.closed)

    def test_garbage_skipped_and_logged(self) -> None:
        """
        Lines on stdout that are not JSON (text, broken JSON, a JSON scalar) are logged
        as warnings naming the server and skipped: nothing is sent back to the server,
        and the messages around them still arrive.
        """
        events = observe_log(self)
        upstream = self.started()
        d = upstream.peer.request("ping")
        upstream.process.stdout(
            b"Starting demo server v1.2...\n"
            b"{oops, not json\n"
            b"  42\n"
            b'  {"jsonrpc":"2.0","id":1,"result":{}}\n'
        )
        self.assertEqual(self.successResultOf(d), {})
        self.assertEqual(len(upstream.process.written()), 1)
        warnings = events_of(events, LogLevel.warn)
        self.assertEqual([event["server"] for event in warnings], ["demo"] * 3)
        self.assertEqual(
            [event["line"] for event in warnings],
            ["Starting demo server v1.2...", "{oops, not json", "  42"],
        )
        self.assertFalse(upstream.peer.closed)

    def test_garbage_quoted_briefly(self) -> None:
        """A long garbage line is quoted only in part in the log."""
        events = observe_log(self)
        upstream = self.started()
        upstream.process.stdout(b"x" * 5000 + b"\n")
        [warning] = events_of(events, LogLevel.warn)
        self.assertLess(len(warning["line"]), 300)

    def test_json_but_not_jsonrpc_answered(self) -> None:
        """
        A JSON object that is not a JSON-RPC message is not garbage: the peer answers
        it with -32600, as JSON-RPC requires.
        """
        upstream = self.started()
        upstream.process.stdout(b'{"hello": "world"}\n')
        [answer] = upstream.process.written()
        self.assertEqual(answer["error"]["code"], -32600)

    def test_oversized_answer_fails_its_request(self) -> None:
        """
        An answer longer than the size limit fails the request it answers at once, with
        an error naming the limit and the setting; the other request in flight and the
        lines after it are served as usual.
        """
        events = observe_log(self)
        upstream = self.started(max_message_size=64)
        first = upstream.peer.request("ping")
        second = upstream.peer.request("ping")
        upstream.process.stdout(b'{"jsonrpc":"2.0","id":1,"result":"' + b"x" * 100)
        upstream.process.stdout(b'"}\n{"jsonrpc":"2.0","method":"notifications/progress"}\n')
        error = self.failureResultOf(first, MessageTooLarge).value
        self.assertIn("longer than 64 bytes", str(error))
        self.assertIn("transport.maxMessageSize", str(error))
        self.assertNoResult(second)
        upstream.process.stdout(b'{"jsonrpc":"2.0","id":2,"result":{}}\n')
        self.assertEqual(self.successResultOf(second), {})
        self.assertEqual(upstream.notifications, [Notification("notifications/progress")])
        self.assertEqual(len(upstream.process.written()), 2, "nothing is sent back")
        [warning] = events_of(events, LogLevel.warn)
        self.assertEqual((warning["server"], warning["limit"], warning["id"]), ("demo", 64, 1))
        self.assertFalse(upstream.peer.closed)

    def test_oversized_answer_with_id_last(self) -> None:
        """
        The TypeScript SDK writes the id after the result; the request is still found,
        in the end of the line.
        """
        upstream = self.started(max_message_size=64)
        d = upstream.peer.request("ping")
        line = json.dumps({"result": {"text": "x" * 5000}, "jsonrpc": "2.0", "id": 1})
        upstream.process.stdout(line.encode() + b"\n")
        self.failureResultOf(d, MessageTooLarge)

    def test_oversized_other_line_only_dropped(self) -> None:
        """
        An oversized line that is not a response (a notification, a request of the
        server's) fails nothing, even when it names an id in flight: it is logged and
        dropped.
        """
        events = observe_log(self)
        upstream = self.started(max_message_size=64)
        d = upstream.peer.request("ping")
        for message in (
            {"jsonrpc": "2.0", "method": "notifications/message", "params": {"x": "y" * 99}},
            {"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": "z" * 99},
            {"params": {"x": "y" * 99}, "method": "roots/list", "jsonrpc": "2.0", "id": 1},
        ):
            upstream.process.stdout(json.dumps(message).encode() + b"\n")
        self.assertNoResult(d)
        warnings = events_of(events, LogLevel.warn)
        self.assertEqual([w["limit"] for w in warnings], [64, 64, 64])
        self.assertFalse(upstream.peer.closed)

    def test_default_size_limit(self) -> None:
        """
        Without a limit given, lines up to 64 MiB are accepted: a 6 MB answer (a 3 MB
        file, as text and as structured content) gets through.
        """
        upstream = self.started()
        d = upstream.peer.request("ping")
        big = "y" * (6 * 1000 * 1000)
        upstream.process.stdout(b'{"jsonrpc":"2.0","id":1,"result":"%s"}\n' % big.encode())
        self.assertEqual(self.successResultOf(d), big)

    def test_stderr_logged_per_line(self) -> None:
        """
        Each stderr line is logged on its own, with the server's name, however the
        bytes are split; a last line without a newline is logged when the process ends.
        """
        events = observe_log(self)
        upstream = self.started()
        upstream.process.stderr(b"first li")
        upstream.process.stderr(b"ne\r\nsecond\n\nthird ")
        upstream.process.stderr(b"\xff line")
        upstream.process.end()
        lines = [
            (event["server"], event["line"])
            for event in events
            if event["log_level"] is LogLevel.info and "line" in event
        ]
        self.assertEqual(
            lines, [("demo", "first line"), ("demo", "second"), ("demo", "third \ufffd line")]
        )

    def test_stderr_line_bounded(self) -> None:
        """
        A stderr line longer than the limit is logged cut off, once, and the rest of it
        is skipped without being held in memory.
        """
        events = observe_log(self)
        upstream = self.started()
        upstream.process.stderr(b"a" * (STDERR_LINE_LIMIT - 10))
        upstream.process.stderr(b"b" * 100)
        upstream.process.stderr(b"c" * (STDERR_LINE_LIMIT * 3))
        upstream.process.stderr(b"ccc\nnext\n")
        lines = [event["line"] for event in events if "line" in event]
        self.assertEqual(len(lines), 2)
        self.assertTrue(lines[0].startswith("a" * (STDERR_LINE_LIMIT - 10) + "b" * 10))
        self.assertTrue(lines[0].endswith("[line cut off]"))
        self.assertEqual(lines[1], "next")

    def test_stderr_line_exactly_at_limit(self) -> None:
        """A stderr line exactly as long as the limit is logged whole."""
        events = observe_log(self)
        upstream = self.started()
        upstream.process.stderr(b"z" * STDERR_LINE_LIMIT + b"\n")
        [line] = [event["line"] for event in events if "line" in event]
        self.assertEqual(line, "z" * STDERR_LINE_LIMIT)


class ExitTests(StdioTestCase):
    """The child process ending by itself."""

    def test_exit_fails_request_in_flight(self) -> None:
        """
        A process that exits while a request is in flight fails it with an error
        naming the server and the exit status.
        """
        upstream = self.started()
        d = upstream.peer.request("tools/call")
        upstream.process.end(3)
        error = self.failureResultOf(d, ConnectionClosed).value
        self.assertIsInstance(error.reason, ChannelClosed)
        self.assertIn('upstream "demo" exited with status 3', str(error))

    def test_killed_by_signal(self) -> None:
        """A process killed by a signal is reported with the signal's number and name."""
        upstream = self.started()
        lost = upstream.channel.when_lost()
        upstream.process.end(None, signal.SIGKILL)
        reason = self.failureResultOf(lost, ChannelClosed).value
        self.assertEqual(str(reason), 'upstream "demo" was killed by signal 9 (SIGKILL)')

    def test_when_lost_fresh_per_caller(self) -> None:
        """
        Every caller of C{when_lost} gets its own Deferred, failing with the reason,
        including callers that ask after the process is gone.
        """
        upstream = self.started()
        early = [upstream.channel.when_lost(), upstream.channel.when_lost()]
        self.assertIsNot(early[0], early[1])
        self.assertNoResult(early[0])
        upstream.process.end(0)
        late = upstream.channel.when_lost()
        for d in [*early, late]:
            reason = self.failureResultOf(d, ChannelClosed).value
            self.assertEqual(str(reason), 'upstream "demo" exited with status 0')

    def test_exit_quotes_last_stderr_lines(self) -> None:
        """
        The reason a server exited quotes the last five lines it wrote on stderr (the
        last one even without its newline), so a caller sees why without the log.
        """
        upstream = self.started()
        lost = upstream.channel.when_lost()
        upstream.process.stderr(b"".join(b"line %d\n" % n for n in range(1, 6)) + b"\n  oops")
        upstream.process.end(3)
        reason = self.failureResultOf(lost, ChannelClosed).value
        self.assertEqual(
            str(reason),
            'upstream "demo" exited with status 3; its stderr ended with: '
            "line 2 | line 3 | line 4 | line 5 | oops",
        )

    def test_stderr_quote_is_bounded(self) -> None:
        """However long its lines, the quote keeps only the last 500 characters."""
        upstream = self.started()
        lost = upstream.channel.when_lost()
        upstream.process.stderr((b"x" * 4000 + b"\n") * 3 + b"the end\n")
        upstream.process.end(1)
        reason = str(self.failureResultOf(lost, ChannelClosed).value)
        said = reason.split("its stderr ended with: ", 1)[1]
        self.assertEqual(len(said), 500)
        self.assertTrue(said.endswith("x | the end"), said[-20:])

    def test_stderr_quote_keeps_why(self) -> None:
        """A stack trace after the line that says what failed does not push that line out
        of the quote (node's missing module), and its frames are left out."""
        upstream = self.started()
        lost = upstream.channel.when_lost()
        upstream.process.stderr(
            b"node:internal/modules/cjs/loader:1228\n  throw err;\n  ^\n\n"
            b"Error: Cannot find module '/srv/missing/index.js'\n"
            b"    at Module._resolveFilename (node:internal/modules/cjs/loader:1225:15)\n"
            b"    at Module._load (node:internal/modules/cjs/loader:1051:27)\n"
            b"    at node:internal/main/run_main_module:28:49 {\n"
            b"  code: 'MODULE_NOT_FOUND',\n  requireStack: []\n}\n\nNode.js v20.20.2\n"
        )
        upstream.process.end(1)
        said = str(self.failureResultOf(lost, ChannelClosed).value).split("ended with: ", 1)[1]
        self.assertIn("Error: Cannot find module '/srv/missing/index.js'", said)
        self.assertIn("MODULE_NOT_FOUND", said)
        self.assertNotIn("at Module._load", said)

    def test_stderr_quote_keeps_why_when_cut(self) -> None:
        """Cut to 500 characters, the quote still holds the line that says why."""
        upstream = self.started()
        lost = upstream.channel.when_lost()
        upstream.process.stderr(b"fatal: no such repository\n" + (b"y" * 4000 + b"\n") * 3)
        upstream.process.end(1)
        said = str(self.failureResultOf(lost, ChannelClosed).value).split("ended with: ", 1)[1]
        self.assertLessEqual(len(said), 500)
        self.assertTrue(said.startswith("fatal: no such repository"), said[:60])

    def test_no_quote_when_asked_to_close(self) -> None:
        """A server closed on purpose is not made to look as if it died saying something."""
        upstream = self.started()
        lost = upstream.channel.when_lost()
        upstream.process.stderr(b"bye\n")
        upstream.channel.close()
        upstream.process.end(0)
        self.assertNotIn("bye", str(self.failureResultOf(lost, ChannelClosed).value))

    def test_unexpected_exit_logged(self) -> None:
        """An exit nobody asked for is logged as a warning naming the server and status."""
        events = observe_log(self)
        upstream = self.started()
        upstream.process.end(3)
        [warning] = events_of(events, LogLevel.warn)
        self.assertEqual(warning["server"], "demo")
        self.assertIn("exited with status 3", warning["why"])

    def test_last_output_delivered_before_loss(self) -> None:
        """An answer the server wrote just before exiting still settles its request."""
        upstream = self.started()
        d = upstream.peer.request("ping")
        upstream.process.stdout(b'{"jsonrpc":"2.0","id":1,"result":"bye"}\n')
        upstream.process.end(0)
        self.assertEqual(self.successResultOf(d), "bye")

    def test_request_after_exit_fails(self) -> None:
        """A request made after the process exited fails with the exit status."""
        upstream = self.started()
        upstream.process.end(3)
        error = self.failureResultOf(upstream.peer.request("ping"), ConnectionClosed).value
        self.assertIn("exited with status 3", str(error))

    def test_send_after_exit_dropped(self) -> None:
        """Sending straight to a channel whose process is gone is quietly dropped."""
        upstream = self.started()
        upstream.process.end(0)
        upstream.channel.send(b'{"jsonrpc":"2.0","method":"x"}')
        self.assertEqual(upstream.process.stdin, bytearray())

    def test_request_once_child_closed_stdin(self) -> None:
        """
        Once the child has closed its stdin, a request fails at once with
        L{ChannelClosed} rather than waiting for an answer that cannot come.
        """
        upstream = self.started()
        upstream.process.protocol.childConnectionLost(0)
        error = self.failureResultOf(upstream.peer.request("ping"), ChannelClosed).value
        self.assertEqual(str(error), 'upstream "demo" closed its stdin')
        self.assertEqual(upstream.peer.in_flight_outgoing, 0)

    def test_stdout_closed_but_running(self) -> None:
        """
        A child that closes its stdout but keeps running is shut down after the grace
        period, starting by closing its stdin.
        """
        upstream = self.started(grace=2.0)
        upstream.process.protocol.childConnectionLost(1)
        upstream.reactor.advance(1.9)
        self.assertFalse(upstream.process.stdin_closed)
        upstream.reactor.advance(0.1)
        self.assertTrue(upstream.process.stdin_closed)
        upstream.process.end(0)
        self.assertEqual(upstream.reactor.getDelayedCalls(), [])

    def test_stdout_closed_then_exit(self) -> None:
        """A child that closes stdout on its way out is not shut down: no timer outlives it."""
        upstream = self.started()
        upstream.process.end(0)
        self.assertFalse(upstream.process.stdin_closed)
        self.assertEqual(upstream.reactor.getDelayedCalls(), [])


class CloseTests(StdioTestCase):
    """Shutting the child down."""

    def test_escalation(self) -> None:
        """
        Closing closes stdin; a process still running after the grace period gets
        SIGTERM, and after another grace period SIGKILL.  C{close} fires once the
        process is reaped, leaving no timer behind.
        """
        upstream = self.started(grace=3.0)
        process = upstream.process
        closed = upstream.channel.close()
        self.assertTrue(process.stdin_closed)
        upstream.reactor.advance(2.9)
        self.assertEqual(process.signals, [])
        upstream.reactor.advance(0.1)
        self.assertEqual(process.signals, ["TERM"])
        upstream.reactor.advance(2.9)
        self.assertEqual(process.signals, ["TERM"])
        upstream.reactor.advance(0.1)
        self.assertEqual(process.signals, ["TERM", "KILL"])
        self.assertNoResult(closed)
        process.end(None, signal.SIGKILL)
        self.assertIsNone(self.successResultOf(closed))
        self.assertEqual(upstream.reactor.getDelayedCalls(), [])

    def test_exit_on_stdin_close(self) -> None:
        """
        A server that exits when its stdin closes is never signalled, and the grace
        timer is cancelled.
        """
        upstream = self.started()
        closed = upstream.channel.close()
        upstream.process.end(0)
        self.successResultOf(closed)
        self.assertEqual(upstream.process.signals, [])
        self.assertEqual(upstream.reactor.getDelayedCalls(), [])

    def test_exit_on_term(self) -> None:
        """A server that exits on SIGTERM is not KILLed, and no timer is left."""
        upstream = self.started(grace=1.0)
        closed = upstream.channel.close()
        upstream.reactor.advance(1.0)
        upstream.process.end(None, signal.SIGTERM)
        self.successResultOf(closed)
        upstream.reactor.advance(10)
        self.assertEqual(upstream.process.signals, ["TERM"])
        self.assertEqual(upstream.reactor.getDelayedCalls(), [])

    def test_default_grace(self) -> None:
        """Without a grace period given, SIGTERM follows five seconds after stdin closes."""
        upstream = self.started()
        upstream.channel.close()
        upstream.reactor.advance(4.9)
        self.assertEqual(upstream.process.signals, [])
        upstream.reactor.advance(0.1)
        self.assertEqual(upstream.process.signals, ["TERM"])
        upstream.process.end(None, signal.SIGTERM)

    def test_in_flight_until_exit(self) -> None:
        """
        Requests in flight when closing starts may still be answered; new requests
        fail at once; the rest fail when the process is gone.
        """
        upstream = self.started()
        answered = upstream.peer.request("ping")
        unanswered = upstream.peer.request("ping")
        upstream.channel.close()
        late = upstream.peer.request("ping")
        self.assertIn("is being closed", str(self.failureResultOf(late, ChannelClosed).value))
        upstream.process.stdout(b'{"jsonrpc":"2.0","id":1,"result":"done"}\n')
        self.assertEqual(self.successResultOf(answered), "done")
        self.assertNoResult(unanswered)
        upstream.process.end(0)
        error = self.failureResultOf(unanswered, ConnectionClosed).value
        self.assertIn('upstream "demo" exited with status 0', str(error))

    def test_close_twice(self) -> None:
        """Closing twice escalates once, and both Deferreds fire when the process is reaped."""
        upstream = self.started(grace=1.0)
        first = upstream.channel.close()
        upstream.reactor.advance(0.5)
        second = upstream.channel.close()
        upstream.reactor.advance(0.5)
        self.assertEqual(upstream.process.signals, ["TERM"])
        upstream.process.end(None, signal.SIGTERM)
        self.successResultOf(first)
        self.successResultOf(second)

    def test_close_after_exit(self) -> None:
        """Closing a channel whose process has already ended fires at once."""
        upstream = self.started()
        upstream.process.end(1)
        self.successResultOf(upstream.channel.close())
        self.assertFalse(upstream.process.stdin_closed)
        self.assertEqual(upstream.reactor.getDelayedCalls(), [])

    def test_close_before_start(self) -> None:
        """Closing a channel never started fires at once and marks it lost."""
        upstream = connect(self.server(), self.environ)
        self.successResultOf(upstream.channel.close())
        self.failureResultOf(upstream.channel.when_lost(), ChannelClosed)
        self.assertEqual(upstream.reactor.spawned, [])

    def test_reaped_but_pipes_held(self) -> None:
        """
        A process that has exited while something it left behind holds its pipes is
        not signalled: at the first step the channel closes its ends of the pipes so
        that the process can be reported ended.
        """
        upstream = self.started(grace=1.0)
        closed = upstream.channel.close()
        upstream.process.exit(0)
        upstream.reactor.advance(1.0)
        self.assertEqual(upstream.process.signals, [])
        self.assertTrue(upstream.process.pipes_released)
        upstream.process.end(0)
        self.successResultOf(closed)
        self.assertEqual(upstream.reactor.getDelayedCalls(), [])

    def test_killed_but_pipes_held(self) -> None:
        """
        If the process has still not been reported ended a grace period after
        SIGKILL, the channel closes its ends of the pipes.
        """
        upstream = self.started(grace=1.0)
        closed = upstream.channel.close()
        upstream.reactor.advance(1.0)
        upstream.reactor.advance(1.0)
        self.assertEqual(upstream.process.signals, ["TERM", "KILL"])
        self.assertFalse(upstream.process.pipes_released)
        upstream.reactor.advance(1.0)
        self.assertTrue(upstream.process.pipes_released)
        upstream.process.end(None, signal.SIGKILL)
        self.successResultOf(closed)

    def test_signal_races_exit(self) -> None:
        """A process that dies just as SIGTERM is sent has its pipes released, not signalled."""
        upstream = self.started(grace=1.0)
        closed = upstream.channel.close()
        upstream.process.exited = True  # gone, though not yet reported
        upstream.reactor.advance(1.0)
        self.assertEqual(upstream.process.signals, [])
        self.assertTrue(upstream.process.pipes_released)
        upstream.process.end(None, signal.SIGTERM)
        self.successResultOf(closed)

    def test_closing_logged_quietly(self) -> None:
        """An exit after being asked to close is logged as information, not a warning."""
        events = observe_log(self)
        upstream = self.started()
        upstream.channel.close()
        upstream.process.end(0)
        self.assertEqual(events_of(events, LogLevel.warn), [])
        [event] = [event for event in events if "why" in event]
        self.assertEqual(event["log_level"], LogLevel.info)


def real_server(script: str) -> StdioServer:
    return StdioServer(name="demo", command=sys.executable, args=("-u", str(SCRIPTS / script)))


class RealProcessTests(TestCase):
    """Real child processes, on the real reactor."""

    timeout = 20

    def setUp(self) -> None:
        from twisted.internet import reactor

        self.reactor: Any = reactor

    def connect(self, script: str, **options: Any) -> StdioChannel:
        events = EventLoggingObserver()
        globalLogPublisher.addObserver(events)
        self.addCleanup(globalLogPublisher.removeObserver, events)
        self.events = events
        channel = StdioChannel("demo", real_server(script), self.reactor, os.environ, **options)
        self.peer = RpcPeer(
            channel.send,
            send_request=channel.send_request,
            on_abandon=channel.abandon,
            on_request=lambda request: None,
            clock=self.reactor,
            name="demo",
        )
        channel.attach(self.peer)
        # Whatever a test does, the process must be gone before the test ends.
        self.addCleanup(self.reap, channel)
        return channel

    def reap(self, channel: StdioChannel) -> Deferred[None]:
        """Close C{channel}; should that not end its process, KILL it, failing the test."""
        closing = channel.close()
        if closing.called:
            return closing

        def still_running() -> None:
            pid = channel.pid
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                self.fail(f"process {pid} was still running when the test ended")

        # Cancelled when the process ends; the close itself gets five seconds.
        timer = self.reactor.callLater(5, still_running)
        return closing.addBoth(lambda outcome: timer.cancel() if timer.active() else None)

    def assert_gone(self, pid: int) -> None:
        """The process C{pid} has been reaped: it no longer exists at all."""
        self.assertRaises(ProcessLookupError, os.kill, pid, 0)

    def test_round_trip(self) -> Deferred[None]:
        """
        A request goes to a real child and its answer comes back; the child's
        garbage on stdout is skipped with a warning and its stderr is logged.
        """

        async def run() -> None:
            channel = self.connect("echo_server.py")
            await channel.start()
            result = await self.peer.request("tools/call", {"name": "echo", "n": 1})
            self.assertEqual(result["echo"], {"name": "echo", "n": 1})
            await self.peer.request("complain", {"text": "something odd"})
            await channel.close()
            self.assert_gone(result["pid"])
            logged = [(e["log_level"], e["line"]) for e in self.events if "line" in e]
            warnings = [line for level, line in logged if level is LogLevel.warn]
            self.assertEqual(warnings, ["echo server ready (this line is not JSON)"])
            stderr = [line for level, line in logged if level is LogLevel.info]
            self.assertEqual(stderr, ["echo server: listening on stdin", "something odd"])

        return ensureDeferred(run())

    def test_large_answers_read_in_pieces(self) -> Deferred[None]:
        """
        Answers of several megabytes of UTF-8 (its characters cut across the pipe's
        reads), one after another, each come back whole to their own request.
        """

        async def run() -> None:
            channel = self.connect("echo_server.py")
            await channel.start()
            for n, text in enumerate(("é" * 700_000, "日本" * 400_000, "x" * 2_000_000)):
                result = await self.peer.request("tools/call", {"n": n, "text": text})
                self.assertEqual(result["echo"], {"n": n, "text": text})

        return ensureDeferred(run())

    def test_exit_mid_request(self) -> Deferred[None]:
        """A child exiting with status 3 mid-request fails the request clearly."""

        async def run() -> None:
            channel = self.connect("echo_server.py")
            await channel.start()
            lost = channel.when_lost()
            with self.assertRaises(ConnectionClosed) as caught:
                await self.peer.request("exit", {"status": 3})
            self.assertIn('upstream "demo" exited with status 3', str(caught.exception))
            reason = await lost.addErrback(lambda failure: failure.value)
            self.assertIsInstance(reason, ChannelClosed)

        return ensureDeferred(run())

    def test_stubborn_child_killed(self) -> Deferred[None]:
        """
        A child that ignores the end of its stdin and SIGTERM is KILLed after two
        grace periods and reaped.
        """

        async def run() -> None:
            channel = self.connect("stubborn_server.py", grace=0.2)
            await channel.start()
            lost = channel.when_lost()
            result = await self.peer.request("ping")
            started = self.reactor.seconds()
            await channel.close()
            self.assertGreaterEqual(self.reactor.seconds() - started, 0.4)
            reason = await lost.addErrback(lambda failure: failure.value)
            self.assertEqual(str(reason), 'upstream "demo" was killed by signal 9 (SIGKILL)')
            self.assert_gone(result["pid"])

        return ensureDeferred(run())

    def test_missing_command(self) -> None:
        """A command that cannot be found fails to start without spawning anything."""
        server = StdioServer(name="demo", command="mcpx-no-such-command-anywhere")
        channel = StdioChannel("demo", server, self.reactor, os.environ)
        channel.attach(RpcPeer(channel.send, on_request=lambda request: None))
        self.failureResultOf(channel.start(), SpawnFailed)

    def test_no_leftover_delayed_calls(self) -> Deferred[None]:
        """After a graceful close the channel leaves nothing scheduled on the reactor."""

        async def run() -> None:
            channel = self.connect("echo_server.py", grace=5.0)
            await channel.start()
            closed = channel.close()
            mine = [c for c in self.reactor.getDelayedCalls() if c.func.__self__ is channel]
            self.assertEqual(len(mine), 1)
            await closed
            self.assertFalse(mine[0].active())

        return ensureDeferred(run())


class UnreadStdinTests(SynchronousTestCase):
    """What waits for a server whose stdin is full: bounded, and sent when it drains."""

    def test_waits_while_full_then_goes_in_order(self) -> None:
        written: list[bytes] = []
        unread = _Unread(written.append)
        unread.send(b"a")
        unread.pauseProducing()
        unread.send(b"b")
        unread.send(b"c")
        self.assertEqual(written, [b"a"])
        unread.resumeProducing()
        self.assertEqual(written, [b"a", b"b", b"c"])

    def test_past_the_backlog_dropped_and_counted(self) -> None:
        written: list[bytes] = []
        unread = _Unread(written.append)
        unread.pauseProducing()
        big = b"x" * (STDIN_BACKLOG // 2)
        self.assertTrue(unread.send(big))
        self.assertTrue(unread.send(big))
        self.assertFalse(unread.send(b"y"))
        self.assertEqual(unread.dropped, 1)
        unread.stopProducing()
        unread.resumeProducing()
        self.assertEqual(written, [])
