# -*- test-case-name: tests.upstream.test_stdio -*-
"""
The stdio channel: an upstream server mcpx runs as a child process.

Every revision frames stdio the same way: one JSON-RPC message per line, mcpx writing
to the child's stdin and reading its stdout.  The child's stderr is free-form text,
which goes to mcpx's log line by line (never to mcpx's own stdout, which may itself
be an MCP stream).

Servers are not always tidy about stdout.  A line that is not JSON (a banner, a
stray C{print}) is logged and skipped: answering it with a -32700 error would only
feed the server a message it did not ask for.  A line longer than the size limit is
dropped without being kept whole; its first and last few KiB are, and when they show
a response to one of our requests (L{oversized_response_id}) that request fails at
once with L{MessageTooLarge}, naming the limit.  Any other such line is only logged.

With L{ProcessGroups} (as the daemon runs it), the server starts in a session and
process group of its own, in its directory (by default the user's home, never the
daemon's), and dies with the daemon; every signal goes to the whole group, and when
the server exits, whatever it left in its group is ended too.

Shutdown escalates: stdin is closed (the spec's way of asking a stdio server to
exit), then after a grace period C{SIGTERM}, then after another C{SIGKILL}.  The
channel always waits for the process to be reaped (and its group to be empty) before
it calls itself closed.
"""

from __future__ import annotations

import shlex
import signal
from collections import deque
from collections.abc import Callable, Mapping
from typing import Final

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import ProcessExitedAlready
from twisted.internet.interfaces import (
    IConsumer,
    IDelayedCall,
    IProcessTransport,
    IPushProducer,
    IReactorProcess,
    IReactorTime,
)
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from mcpx.once import Once
from mcpx.settings.secrets import excerpt
from mcpx.settings.servers import StdioServer
from mcpx.upstream.channel import ChannelClosed, MessageTooLarge, Negotiated
from mcpx.upstream.groups import RUN_VARIABLE, ProcessGroups
from mcpx.upstream.stderr_lines import StderrLines, StderrTail
from mcpx.upstream.stdio_spawn import (
    SpawnFailed,
    child_directory,
    child_environment,
    child_executable,
    spawn_failed,
)
from mcpx.wire.errors import PARSE_ERROR, ProtocolError
from mcpx.wire.framing import (
    DEFAULT_MAX_MESSAGE_SIZE,
    LineBuffer,
    LineTooLong,
    oversized_response_id,
)
from mcpx.wire.messages import Request, RequestId, parse
from mcpx.wire.peer import RpcPeer
from mcpx.wire.prompt_write import write_now
from mcpx.wire.twisted_private import read_into

#: The default time a server gets to exit after each step of L{StdioChannel.close}.
DEFAULT_GRACE: Final = 5.0

#: The longest stderr line logged whole; the rest of a longer line is cut off.
STDERR_LINE_LIMIT: Final = 8192

#: The most bytes of answers and notifications that wait for a server whose stdin is
#: full (it is not reading); past it they are dropped, so a server that asks and never
#: reads the answers cannot make the daemon hold them all.
STDIN_BACKLOG: Final = 16 * 1024 * 1024

#: How much of a garbage stdout line is quoted in the log.
_QUOTED: Final = 200

#: How much of each end of an oversized stdout line is kept to find its request id.
_ENDS_KEPT: Final = 4096

#: How often a group the server left behind is looked at while it is being ended.
GROUP_POLL: Final = 0.05

#: The bytes a JSON-RPC message (an object) or batch (an array) can start with.
_MESSAGE_STARTS: Final = b"{["
_NEWLINE: Final = b"\n"


@implementer(IPushProducer)
class _Unread:
    """
    What waits for a server that is not reading its stdin: registered on its pipe, so
    Twisted says when the pipe's buffer is full; answers and notifications then wait
    here, up to L{STDIN_BACKLOG} bytes, and go when it drains.  Past that they are
    dropped, and counted.
    """

    def __init__(self, write: Callable[[bytes], None]) -> None:
        self._write = write
        self.paused = False
        self.dropped = 0
        self._waiting: deque[bytes] = deque()
        self._bytes = 0

    def send(self, data: bytes) -> bool:
        """
        Write C{data}, or have it wait while the pipe is full.

        @return: C{False} if it was dropped.
        """
        if not self.paused and not self._waiting:
            self._write(data)
            return True
        if self._bytes + len(data) > STDIN_BACKLOG:
            self.dropped += 1
            return False
        self._waiting.append(data)
        self._bytes += len(data)
        return True

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False
        while self._waiting and not self.paused:
            data = self._waiting.popleft()
            self._bytes -= len(data)
            self._write(data)

    def stopProducing(self) -> None:
        self.paused = False
        self._waiting.clear()
        self._bytes = 0


class IReactorSpawn(IReactorProcess, IReactorTime):
    """What a stdio channel needs of its reactor: to spawn a process, and to wait."""


class StdioChannel:
    """
    A L{mcpx.upstream.channel.Channel} to a server run as a child process.

    @ivar name: the server's name, as the config file gives it.
    """

    log = Logger()

    #: stdio has no per-request stream to close: giving up is said in a notification.
    cancels_with_notification = True

    def __init__(
        self,
        name: str,
        server: StdioServer,
        reactor: IReactorSpawn,
        environ: Mapping[str, str],
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        grace: float = DEFAULT_GRACE,
        groups: ProcessGroups | None = None,
    ) -> None:
        """
        @param server: the command, arguments, environment and directory to run.
        @param reactor: provides C{IReactorProcess} (to spawn) and C{IReactorTime} (to
            time the shutdown).
        @param environ: the daemon's environment, of which the child is given what
            L{child_environment} lets through, under the server's configured C{env}.
        @param max_message_size: the longest stdout line accepted, in bytes.
        @param grace: seconds the process gets to exit at each step of L{close}.
        @param groups: runs the server in a process group of its own and records it;
            without it the process is spawned and signalled alone.
        """
        self.name = name
        self.negotiated = Negotiated()
        self._server = server
        self._spawner: IReactorProcess = reactor
        self._clock: IReactorTime = reactor
        self._environ = environ
        self._grace = grace
        self._groups = groups
        self._stdout = LineBuffer(max_message_size, ends=_ENDS_KEPT)
        self._stderr = StderrLines(STDERR_LINE_LIMIT)
        self._stderr_tail = StderrTail()
        self._peer: RpcPeer | None = None
        self._transport: IProcessTransport | None = None
        #: Where a request is written at once (L{_write_line}): the server's stdin.
        self._stdin: object = None
        self._stdin_open = False
        self._unread = _Unread(self._write_line)
        self._closing = False
        self._exited = False
        self._ended = False
        self._timer: IDelayedCall | None = None
        #: Fails with why the channel is gone, once it is.
        self._lost: Once[Failure] = Once()
        #: Fires once the process is reaped and its group is empty.
        self._reaped: Once[None] = Once()
        self._pid: int | None = None
        #: Ending what the server left in its group: C{None} (not begun), C{"TERM"},
        #: C{"KILL"}, or C{"gone"}.
        self._group_step: str | None = None
        self._group_deadline = 0.0
        self._group_timer: IDelayedCall | None = None

    # Setting up

    def attach(self, peer: RpcPeer) -> None:
        """Deliver what the server writes on stdout to C{peer}."""
        self._peer = peer

    def start(self) -> Deferred[None]:
        """
        Spawn the process.

        @return: fires once it is spawned, or fails with L{SpawnFailed} (after which the
            channel counts as lost).
        """
        if self._peer is None:
            raise RuntimeError("attach a peer to the channel before starting it")
        if self._transport is not None or self._lost.done:
            raise RuntimeError(f"the channel to {self._label} was already started")
        try:
            env = child_environment(self._server, self._environ)
            cwd = child_directory(self._label, self._server, env)
            executable = child_executable(self._label, self._server, env, cwd)
            args = [self._server.command, *self._server.args]
            path: str | None = cwd
            upstream_mark: str | None = None
            if self._groups is not None:
                upstream_mark = self._groups.new_mark()
                env[RUN_VARIABLE] = upstream_mark
                executable, args = self._groups.launch(executable, args, cwd)
                # The launcher changes directory: without a path, Twisted can use
                # posix_spawn instead of forking the daemon.
                path = None
            transport = self._spawner.spawnProcess(
                _ChildProtocol(self), executable, args, env, path=path
            )
        except Exception as e:
            error = e if isinstance(e, SpawnFailed) else spawn_failed(self._label, f"{e}")
            self._lose(error)
            return fail(error)
        self._transport = transport
        # A spawned process's stdin is its writer pipe, a plain descriptor; without one
        # (a test's transport), the transport's own write.  The pipe stays the same
        # until it is gone, and nothing is written once it is (_stdin_open).
        pipes: dict[int, object] = getattr(transport, "pipes", {})
        self._stdin = pipes.get(0, transport)
        # What the server writes on stdout comes straight to _stdout_received, up to a
        # pipe's whole buffer a read (otherwise through Twisted's process, which only
        # hands it on, and _ChildProtocol, 8 KiB a read).
        read_into(transport, 1, self._stdout_received)
        self._pid = transport.pid
        self._stdin_open = True
        self._watch_stdin()
        if self._groups is not None and self._pid is not None:
            self._groups.record(self.name, self._pid, upstream_mark)
        self.log.info(
            "started upstream {server} (pid {pid}): {command}",
            server=self.name,
            pid=transport.pid,
            command=self.describe(),
        )
        return succeed(None)

    @property
    def pid(self) -> int | None:
        """The child's process id, from its start until it has been reaped."""
        if self._transport is None or self._ended:
            return None
        pid: int | None = self._transport.pid
        return pid

    @property
    def _label(self) -> str:
        return f'upstream "{self.name}"'

    # Sending

    def _write_line(self, data: bytes, *, now: bool = True) -> None:
        """
        Write one message and its newline to the server's stdin: with C{now}, sent at
        once when nothing is queued there (L{write_now}: the request goes out without
        waiting for the reactor's next pass); otherwise queued for that pass, with
        whatever else is written before it.  The joined copy costs nothing more: Twisted
        joins its buffer before sending it anyway.
        """
        transport = self._transport
        assert transport is not None
        if not now:
            transport.write(data + _NEWLINE)
            return
        write_now(self._stdin, data + _NEWLINE)

    def _stdin_pipe(self) -> IConsumer | None:
        """The server's stdin, where it is a pipe that takes a producer."""
        pipes: dict[int, object] = getattr(self._transport, "pipes", {})
        stdin = pipes.get(0)
        return stdin if stdin is not None and IConsumer.providedBy(stdin) else None

    def _watch_stdin(self) -> None:
        """Have Twisted say when the server's stdin is full (L{_Unread})."""
        stdin = self._stdin_pipe()
        if stdin is not None:
            stdin.registerProducer(self._unread, True)

    def _unwatch_stdin(self) -> None:
        # A pipe with a producer paused on it would not close once drained.
        stdin = self._stdin_pipe()
        if stdin is not None:
            stdin.unregisterProducer()
        self._unread.stopProducing()

    def send(self, data: bytes) -> None:
        """
        Write a notification or a response; dropped once the server is out of reach, or
        while it leaves L{STDIN_BACKLOG} bytes of them unread.
        """
        if self._transport is None:
            if not self._lost.done:
                raise RuntimeError(f"the channel to {self._label} is not started")
            return
        if self._stdin_open and not self._unread.send(data) and self._unread.dropped == 1:
            self.log.warn(
                "upstream {server} does not read its stdin: more than {backlog} bytes of "
                "answers and notifications wait for it; the rest are dropped",
                server=self.name,
                backlog=STDIN_BACKLOG,
            )

    def send_request(self, data: bytes, request: Request) -> None:
        """Write a request, or fail it at once if the server can no longer read it."""
        if self._stdin_open:
            # Alone, a request is sent now: the call's latency.  With others in flight,
            # it waits for the reactor's pass, which sends every request it brought down
            # the pipe in one write: the daemon's and the server's CPU per call.
            alone = self._peer is None or self._peer.in_flight_outgoing <= 1
            self._write_line(data, now=alone)
            return
        lost = self._lost.failure
        if self._transport is None and lost is None:
            raise RuntimeError(f"the channel to {self._label} is not started")
        if lost is not None:
            why = str(lost.value)
        elif self._closing:
            why = f"{self._label} is being closed"
        else:
            why = f"{self._label} closed its stdin"
        assert self._peer is not None
        self._peer.fail_outgoing(request.id, ChannelClosed(why))

    def abandon(self, request_id: RequestId) -> None:
        """Nothing to do: the peer has already sent C{notifications/cancelled}."""

    def initialized(self) -> None:
        """Nothing to do: stdio carries server-initiated messages on stdout all along."""

    def reset_session(self) -> None:
        """Nothing to do: stdio has no session id."""

    # Receiving

    def _stdout_received(self, data: bytes) -> None:
        for item in self._stdout.feed(data):
            if type(item) is bytes:
                self._line_received(item)
            else:
                assert isinstance(item, LineTooLong)
                self._too_large(item)

    def _too_large(self, dropped: LineTooLong) -> None:
        """Fail the request an oversized line answered, when that is certain."""
        peer = self._peer
        assert peer is not None
        request_id = oversized_response_id(dropped.head, dropped.tail)
        error = MessageTooLarge(self._label, dropped.limit)
        if request_id is not None and peer.fail_outgoing(request_id, error):
            self.log.warn(
                "upstream {server} answered request {id} with a message longer than "
                "{limit} bytes (transport.maxMessageSize); that request failed",
                server=self.name,
                id=request_id,
                limit=dropped.limit,
            )
            return
        self.log.warn(
            "upstream {server} wrote a line longer than {limit} bytes on stdout "
            "(transport.maxMessageSize); dropped",
            server=self.name,
            limit=dropped.limit,
        )

    def _line_received(self, line: bytes) -> None:
        peer = self._peer
        assert peer is not None
        # Messages are objects or arrays.  Checking the first byte keeps stray prints,
        # including JSON scalars, from being answered with an error.
        if line[0] not in _MESSAGE_STARTS:
            stripped = line.lstrip()
            if not stripped or stripped[0] not in _MESSAGE_STARTS:
                self._garbage(line)
                return
        try:
            message = parse(line, allow_batch=peer.allow_batches)
        except ProtocolError as e:
            if e.code == PARSE_ERROR and not e.about_response:
                self._garbage(line)
            else:
                # JSON but not JSON-RPC, or a response strict reading refused (NaN): rare
                # enough to let the peer parse it again and answer it, or fail the request
                # it names, as the protocol requires.
                peer.receive(line)
            return
        peer.receive_message(message)

    def _garbage(self, line: bytes) -> None:
        quoted = excerpt(line, _QUOTED)
        self.log.warn(
            "upstream {server} wrote a line on stdout that is not JSON-RPC; ignored: {line}",
            server=self.name,
            line=quoted,
        )

    def _stderr_received(self, data: bytes) -> None:
        for line, cut in self._stderr.feed(data):
            self._stderr_line(line, cut)

    def _stderr_line(self, line: bytes, cut: bool) -> None:
        text = line.rstrip(b"\r").decode("utf-8", "replace")
        if not text.strip():
            return
        if cut:
            text += " [line cut off]"
        self._stderr_tail.add(text)
        self.log.info("upstream {server} (stderr): {line}", server=self.name, line=text)

    def _child_lost_fd(self, fd: int) -> None:
        if fd == 0:
            self._stdin_open = False
        elif fd == 1 and not self._closing and not self._exited:
            # Nothing it says can reach us any more.  It may be on its way out, so it gets
            # a grace period before being shut down.
            self._cancel_timer()
            self._timer = self._clock.callLater(self._grace, self._stdout_gone)

    def _stdout_gone(self) -> None:
        self._timer = None
        self.log.warn(
            "upstream {server} closed its stdout but kept running; shutting it down",
            server=self.name,
        )
        self.close()

    # Ending

    def when_lost(self) -> Deferred[Failure]:
        """
        A fresh Deferred that fails with the reason (a L{ChannelClosed} naming the
        server and its exit status) once the channel is gone.

        A Deferred given a L{Failure} runs its errbacks, so the reason arrives through
        C{addErrback} or C{addBoth}, never C{addCallback}.
        """
        return self._lost.wait()

    def _lose(self, reason: ChannelClosed) -> None:
        if self._lost.done:
            return
        self._stdin_open = False
        if self._peer is not None:
            self._peer.close(reason)
        self._lost.fire(Failure(reason))

    def _process_exited(self) -> None:
        self._exited = True
        if self._groups is not None:
            # Whatever the server forked may still hold its pipes; the group is ended
            # now rather than when the close escalation gets there.
            self._end_group()

    def _process_ended(self, reason: Failure) -> None:
        self._ended = True
        self._exited = True
        self._stdin_open = False
        self._cancel_timer()
        for line, cut in self._stderr.flush():
            self._stderr_line(line, cut)
        if self._stdout.buffered:
            self.log.warn(
                "upstream {server} ended in the middle of a stdout line; dropped",
                server=self.name,
            )
        why = self._exit_status(reason.value)
        said = self._stderr_tail.said()
        if said is not None and not self._closing:
            # The pool masks the configured secrets in it, as in all a reason says.
            why += f"; its stderr ended with: {said}"
        if self._closing:
            self.log.info("{why} after being asked to close", server=self.name, why=why)
        else:
            self.log.warn("{why}", server=self.name, why=why)
        self._lose(ChannelClosed(why))
        if self._groups is not None:
            self._end_group()
        self._maybe_reaped()

    def _maybe_reaped(self) -> None:
        """Tell L{close} callers, once the process is reaped and its group is empty."""
        if not self._ended or (self._groups is not None and self._group_step != "gone"):
            return
        self._reaped.fire(None)

    # The process group

    def _end_group(self) -> None:
        """
        The server has exited: end what is left in its group, C{SIGTERM} first and
        C{SIGKILL} after the grace period.
        """
        groups, pid = self._groups, self._pid
        assert groups is not None
        if self._group_step is not None:
            return
        if pid is None or not groups.alive(pid):
            self._group_gone()
            return
        self.log.warn(
            "upstream {server} exited but left processes in its group; sending them SIGTERM",
            server=self.name,
        )
        self._signal_group(groups, pid, signal.SIGTERM, "TERM")
        self._group_timer = self._clock.callLater(GROUP_POLL, self._check_group)

    def _check_group(self) -> None:
        groups, pid = self._groups, self._pid
        assert groups is not None and pid is not None
        self._group_timer = None
        if not groups.alive(pid):
            self._group_gone()
            return
        if self._clock.seconds() >= self._group_deadline:
            if self._group_step == "KILL":
                # Killed, but still listed (a zombie its new parent has not reaped yet):
                # nothing more can be done.
                self._group_gone()
                return
            self.log.warn(
                "processes upstream {server} left in its group still running {grace}s "
                "after SIGTERM; sending SIGKILL",
                server=self.name,
                grace=self._grace,
            )
            self._signal_group(groups, pid, signal.SIGKILL, "KILL")
        self._group_timer = self._clock.callLater(GROUP_POLL, self._check_group)

    def _signal_group(self, groups: ProcessGroups, pid: int, number: int, step: str) -> None:
        """Send the group's processes but its leader C{number}; C{step} lasts the grace period."""
        groups.signal(pid, number, leader=False)
        self._group_step = step
        self._group_deadline = self._clock.seconds() + self._grace

    def _group_gone(self) -> None:
        assert self._groups is not None
        self._group_step = "gone"
        if self._pid is not None:
            self._groups.forget(self._pid)
        if not self._ended:
            # The pipes are still open: their last bytes are on their way, or a process
            # that left the group holds them.  Give them the grace period, then close
            # our ends so that processEnded can come.
            if self._timer is None:
                self._timer = self._clock.callLater(self._grace, self._release)
            return
        self._maybe_reaped()

    def _exit_status(self, reason: BaseException | None) -> str:
        code = getattr(reason, "exitCode", None)
        number = getattr(reason, "signal", None)
        if number is not None:
            try:
                shown = f"{number} ({signal.Signals(number).name})"
            except ValueError:
                shown = f"{number}"
            return f"{self._label} was killed by signal {shown}"
        if code is not None:
            return f"{self._label} exited with status {code}"
        return f"{self._label} exited"

    def close(self) -> Deferred[None]:
        """
        Ask the server to exit by closing its stdin; C{SIGTERM} it if it is still
        running after the grace period, and C{SIGKILL} it after another.

        @return: fires once the process has been reaped; at once if it already was,
            or never started.
        """
        if self._ended and (self._groups is None or self._group_step == "gone"):
            return succeed(None)
        if self._transport is None:
            self._lose(ChannelClosed(f"{self._label} was closed before it started"))
            return succeed(None)
        reaped = self._reaped.wait()
        if not self._closing and not self._ended:
            self._closing = True
            self._stdin_open = False
            self._cancel_timer()
            self._unwatch_stdin()
            self._transport.closeStdin()
            self._timer = self._clock.callLater(self._grace, self._terminate)
        return reaped

    def _terminate(self) -> None:
        self._timer = None
        if self._signal("TERM"):
            self._timer = self._clock.callLater(self._grace, self._kill)

    def _kill(self) -> None:
        self._timer = None
        if self._signal("KILL"):
            self._timer = self._clock.callLater(self._grace, self._release)

    def _signal(self, name: str) -> bool:
        """
        Send SIG<name> (to the whole group, with L{ProcessGroups}), unless the process
        is already gone; C{False} if it was.
        """
        assert self._transport is not None
        if not self._exited:
            self.log.warn(
                "upstream {server} still running {grace}s after {step}; sending SIG{signal}",
                server=self.name,
                grace=self._grace,
                step="closing its stdin" if name == "TERM" else "SIGTERM",
                signal=name,
            )
            if self._groups is not None and self._pid is not None:
                number = signal.Signals[f"SIG{name}"]
                if self._groups.signal(self._pid, number, leader=True):
                    return True
                self._release()
                return False
            try:
                self._transport.signalProcess(name)
            except ProcessExitedAlready:
                pass
            else:
                return True
        self._release()
        return False

    def _release(self) -> None:
        # The process is gone but a child it left holds the pipes open, which keeps
        # processEnded from firing: close our ends so it can.
        self._timer = None
        assert self._transport is not None
        self._unwatch_stdin()
        self._transport.loseConnection()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            if self._timer.active():
                self._timer.cancel()
            self._timer = None

    def describe(self) -> str:
        """The command line (the environment is left out: it may hold secrets)."""
        return shlex.join([self._server.command, *self._server.args])


class _ChildProtocol(ProcessProtocol):
    """Hands what happens to the child process to its L{StdioChannel}."""

    def __init__(self, channel: StdioChannel) -> None:
        self._channel = channel

    def childDataReceived(self, childFD: int, data: bytes) -> None:
        if childFD == 1:
            self._channel._stdout_received(data)
        elif childFD == 2:
            self._channel._stderr_received(data)

    def childConnectionLost(self, childFD: int) -> None:
        self._channel._child_lost_fd(childFD)

    def processExited(self, reason: Failure) -> None:
        self._channel._process_exited()

    def processEnded(self, reason: Failure) -> None:
        self._channel._process_ended(reason)
