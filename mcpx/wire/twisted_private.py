# -*- test-case-name: tests.wire.test_twisted_private -*-
"""
The one room for the private Twisted and Klein names mcpx relies on.

Each is here, and nowhere else, because no public API does what it does on the hot path
or at start-up; each use says why where it is made.  They were read in the versions named
by L{PINNED}, and C{tests.wire.test_twisted_private} fails when the installed Twisted or
Klein is another: read each name below in the new version's source, check it still means
what is written here, then move L{PINNED} on.

  - C{FileDescriptor}'s write state (C{_writeDisconnecting}, C{_writeDisconnected},
    C{_tempDataBuffer}): whether a message may be sent now rather than on the reactor's
    next pass (L{mcpx.wire.prompt_write});
  - the readers a poll reactor watches (C{_reads}, by descriptor): a process's stdin
    written at once is not asked to be watched again when it is already
    (L{mcpx.wire.prompt_write}, L{watched_for_reading});
  - C{HTTPChannel}'s request state (C{_waitingForTransport}, C{_networkProducer},
    C{_handlingRequest}): the lean C{/mcp} path answers requests twisted.web did not
    parse, and keeps the channel's own account of them (L{mcpx.daemon.lean_path});
  - C{klein._resource.extractURLparts} and C{URLDecodeError}: a request's URL checked as
    Klein will read it, before the app does (L{mcpx.daemon.http}, L{url_refused_by_klein});
  - C{twisted.internet.endpoints._SystemdParser}: the descriptors systemd passed, the
    only record left once Twisted has cleaned the environment
    (L{mcpx.daemon.activation});
  - C{twisted.web.client._HTTP11ClientFactory}: the upstream HTTP client's quiet
    connection factory (L{mcpx.upstream.http_client}, L{http11_client_factory});
  - C{twisted.web._newclient.RequestNotSent}: a request that failed before any of it
    was sent (L{mcpx.upstream.http}, L{request_not_sent});
  - C{twisted.web.http.Request}'s answer state (C{_disconnected}, C{_encoder},
    C{_inFakeHead}) and its C{_parsePOSTFormSubmission}: the lean path makes its
    requests without C{Request.__init__} and frames a whole answer itself when nothing of
    twisted.web's own stands in the way (L{mcpx.daemon.lean_path}, L{frames_plainly},
    L{parses_no_forms});
  - C{twisted.internet.unix.Server}'s reading and writing, which are those of
    C{twisted.internet.tcp.Connection} but for the descriptors a unix socket can pass:
    the daemon's unix sockets pass none, so their connections read and write as TCP's
    do (L{mcpx.daemon.listeners}, L{plain_unix_reactor});
  - C{EPollReactor}'s C{doPoll}, C{_poller}, C{_selectables} and C{_doReadOrWrite}, and
    the context stack of C{twisted.python.context}'s tracker (C{contexts}): the daemon's
    poll hands each ready descriptor to the reactor without a log context made for it,
    and a legacy log event made meanwhile still says which descriptor it came from
    (L{mcpx.daemon.service}, L{poll_with_lazy_log_prefix});
  - what C{ProcessReader.doRead}, C{ProcessReader.dataReceived} and
    C{Process.childDataReceived} do with a child's pipe (read it with
    C{fdesc.readFromFD} and hand what it gives on, to the process protocol's
    C{childDataReceived} with the pipe's child descriptor): a stdio upstream's stdout
    is read straight into its channel, four Python calls fewer for every read, and in
    reads of up to a pipe's whole buffer (L{mcpx.upstream.stdio}, L{read_into});
  - C{ReactorBase}'s C{mainLoop}, C{runUntilCurrent} and C{timeout}, the state they read
    (C{_started}, C{threadCallQueue}, C{_newTimedCalls}, C{_pendingTimedCalls} and a
    C{DelayedCall}'s C{time}, C{_cancellations}, C{_justStopped}) and
    C{twisted.internet.base}'s C{_topHandler} and C{_log}: the daemon's main loop reads
    the clock once, and calls C{runUntilCurrent} and C{timeout} only when one of them
    has something to do (L{mcpx.daemon.service}, L{loop_without_idle_calls}).  That one
    checks the installed Twisted is L{PINNED}'s itself, and is installed on no other.

Klein, the endpoints and the HTTP client are imported only by the functions that need
them, so that importing this module (as the stdio channel's L{mcpx.wire.prompt_write}
does) costs nothing more than it did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

__all__ = [
    "PINNED",
    "frames_plainly",
    "handling_request",
    "http11_client_factory",
    "loop_without_idle_calls",
    "network_producer",
    "nothing_queued",
    "parses_no_forms",
    "plain_unix_reactor",
    "poll_with_lazy_log_prefix",
    "read_into",
    "request_not_sent",
    "systemd_descriptors",
    "url_refused_by_klein",
    "waiting_for_transport",
    "watched_for_reading",
]

#: The versions whose source the names here were read in.
PINNED: Final = {"twisted": "26.10.0", "klein": "24.8.0"}


def http11_client_factory() -> type[Any]:
    """Twisted's HTTP/1.1 client connection factory, to subclass."""
    from twisted.web.client import _HTTP11ClientFactory

    return _HTTP11ClientFactory


def request_not_sent() -> type[Exception]:
    """The error of a request the HTTP client failed before sending any of it."""
    from twisted.web._newclient import RequestNotSent

    return RequestNotSent


def url_refused_by_klein(request: Any) -> bool:
    """Whether Klein would refuse C{request}'s URL (its path or host not UTF-8 decoded)."""
    from klein._resource import URLDecodeError, extractURLparts

    try:
        extractURLparts(request)
    except URLDecodeError:
        return True
    return False


def nothing_queued(transport: Any) -> bool:
    """
    Whether a C{FileDescriptor} has no write of its own in progress: not closing for
    writing, not closed for writing, and no bytes held in its small-write buffer.
    """
    return not (
        transport._writeDisconnecting or transport._writeDisconnected or transport._tempDataBuffer
    )


def watched_for_reading(writer: Any) -> bool:
    """
    Whether the reactor of a process's stdin C{writer} watches it for reading now, as
    far as a reactor keeping its readers by descriptor (epoll, poll) says: another (the
    select reactor's) always answers C{False}.
    """
    watched: bool = writer.fd in writer.reactor._reads
    return watched


#: The most a pipe's reader set by L{read_into} reads at once: a pipe's whole buffer
#: (64 KiB on Linux), where Twisted's C{readFromFD} reads 8 KiB.
PIPE_READ: Final = 65536


def read_into(process: Any, child_fd: int, received: Callable[[bytes], object]) -> bool:
    """
    Have what a spawned process's pipe from C{child_fd} reads go to C{received} (called
    with the bytes) directly, instead of through C{Process.childDataReceived} to its
    protocol's C{childDataReceived(child_fd, data)}, which only hand it on: the same
    bytes, in order, from the pipe's C{doRead}, which reads as C{fdesc.readFromFD} does
    (and says the pipe ended or broke as it does) but up to L{PIPE_READ} bytes at once.
    C{False} (nothing changed) when C{process} is not a Twisted C{Process} reading that
    descriptor through a plain C{ProcessReader} (a test's transport, another reactor's
    process).
    """
    import errno
    import os

    from twisted.internet.main import CONNECTION_DONE, CONNECTION_LOST
    from twisted.internet.process import Process, ProcessReader

    reader = getattr(process, "pipes", {}).get(child_fd) if type(process) is Process else None
    if type(reader) is not ProcessReader or reader.name != child_fd:
        return False
    fd: int = reader.fd
    read, size, again = os.read, PIPE_READ, (errno.EAGAIN, errno.EINTR)

    def do_read() -> object:
        # ProcessReader.doRead: readFromFD(self.fd, self.dataReceived), whose
        # dataReceived is Process.childDataReceived(self.name, data).
        try:
            data = read(fd, size)
        except OSError as e:
            return None if e.errno in again else CONNECTION_LOST
        if not data:
            return CONNECTION_DONE
        received(data)
        return None

    # An attribute of the reader itself, which the reactor calls when the pipe is ready.
    reader.doRead = do_read  # type: ignore[method-assign]
    return True


def waiting_for_transport(channel: Any) -> bool:
    """Whether an C{HTTPChannel} paused reading because its transport's buffer is full."""
    waiting: bool = channel._waitingForTransport
    return waiting


def network_producer(channel: Any) -> Any:
    """The producer an C{HTTPChannel} pauses and resumes the connection's reading with."""
    return channel._networkProducer


def frames_plainly(request: Any) -> bool:
    """
    Whether a twisted.web C{Request}'s answer has nothing of twisted.web's own in the way
    of its being framed by its writer: the connection not lost, no content encoding (such
    as gzip) wrapped around it, and not a C{HEAD} answered as its C{GET}.
    """
    return not (request._disconnected or request._encoder is not None or request._inFakeHead)


def parses_no_forms(request: Any) -> None:
    """Make a twisted.web C{Request} made without its C{__init__} leave a POST's form unparsed."""
    request._parsePOSTFormSubmission = False


def handling_request(channel: Any, handling: bool) -> None:
    """Set whether an C{HTTPChannel} is answering a request (it holds the next meanwhile)."""
    channel._handlingRequest = handling


def systemd_descriptors() -> list[int] | None:
    """The descriptors Twisted's C{systemd:} endpoints found passed, or C{None}."""
    from twisted.internet import endpoints

    parser = getattr(endpoints, "_SystemdParser", None)
    listen_fds = getattr(parser, "_sddaemon", None)
    if listen_fds is None:
        return None
    descriptors: list[int] = listen_fds.inheritedDescriptors()
    return descriptors


def plain_unix_reactor(reactor: Any, *, descriptors_first: bool = False) -> Any:
    """
    C{reactor}, but for C{listenUNIX}: its connections read with C{recv} and write with
    C{send}, as a TCP connection's do, not with C{recvmsg} and C{sendmsg} and their
    ancillary data (the file descriptors a unix socket can pass: the daemon takes none,
    and those a peer sends anyway are closed by the kernel when a plain C{recv} leaves
    them, as Twisted closes those its protocol does not take).  Reading a request that
    way costs about 14,000 instructions less (callgrind, C{bench/bench_mcp.py}'s
    requests).  C{listenUNIX} is the reactor's own
    (C{PosixReactorBase.listenUNIX}), with the port's connection class changed; a
    reactor that is not a C{PosixReactorBase} (a test's) is given back as it is.

    With C{descriptors_first}, a connection reads with C{recvmsg} (its protocol taking
    the descriptors passed) for as long as its protocol's C{wants_descriptors} is true,
    and plainly after: the MCP socket, whose first line may hand over a host's pipes
    (L{mcpx.server.mcp_socket}).
    """
    from twisted.internet import tcp, unix
    from twisted.internet.posixbase import PosixReactorBase

    if not isinstance(reactor, PosixReactorBase):
        return reactor

    class PlainUnixConnection(unix.Server):
        doRead = tcp.Connection.doRead  # type: ignore[assignment]
        writeSomeData = tcp.Connection.writeSomeData

    class DescriptorsFirstConnection(PlainUnixConnection):
        def doRead(self) -> Any:
            if self.protocol.wants_descriptors:  # type: ignore[attr-defined]
                return unix.Server.doRead(self)  # type: ignore[no-untyped-call]
            return tcp.Connection.doRead(self)

    class PlainUnixPort(unix.Port):
        transport = DescriptorsFirstConnection if descriptors_first else PlainUnixConnection

    class PlainUnixReactor:
        def __getattr__(self, name: str) -> Any:
            return getattr(reactor, name)

        def listenUNIX(
            self, address: Any, factory: Any, backlog: int = 50, mode: int = 0o666, wantPID: int = 0
        ) -> Any:
            port = PlainUnixPort(address, factory, backlog, mode, reactor, wantPID)
            port.startListening()  # type: ignore[no-untyped-call]
            return port

    return PlainUnixReactor()


class _SystemOfTheSelectable(dict[str, Any]):
    """
    The legacy log context of the reactor's thread: C{system} is the log prefix of the
    descriptor the reactor is handing an event to (C{"-"} between events), asked of it
    only when an event is logged (each legacy event and each new context starts as a
    C{copy} of this).
    """

    __slots__ = ("selectable",)

    def __init__(self) -> None:
        super().__init__(system="-")
        self.selectable: Any = None

    def copy(self) -> dict[str, Any]:
        selectable = self.selectable
        if selectable is None:
            return {"system": "-"}
        return {"system": _log_prefix(selectable)}


def _log_prefix(selectable: Any) -> str:
    # As twisted.python.log.callWithLogger names a descriptor.
    try:
        prefix: str = selectable.logPrefix()
    except Exception:
        return "(buggy logPrefix method)"
    return prefix


def poll_with_lazy_log_prefix(reactor: Any) -> None:
    """
    Make C{reactor}, when it is Twisted's epoll reactor, poll as its own C{doPoll} does
    but hand each ready descriptor to C{_doReadOrWrite} directly, not through
    C{twisted.python.log.callWithLogger}: that asks the descriptor's C{logPrefix()} and
    makes and pushes a log context of it for every event (about 3,500 instructions an
    event, two or more events a request).  What a log shows is the same: a legacy event
    logged while a descriptor is handled (Twisted's "Starting factory", a failure of
    its C{doRead}) has the descriptor's prefix as C{system}, asked of it then, from a
    context pushed once under everything on the calling (the reactor's) thread; an
    error escaping C{_doReadOrWrite} is logged with it as C{callWithLogger} logs it.
    Any other reactor (a test's), or one already made so, is left as it is.
    """
    import errno

    from twisted.internet.epollreactor import EPollReactor
    from twisted.python import context, log

    if (
        type(reactor) is not EPollReactor
        or getattr(reactor.doIteration, "__func__", None) is not EPollReactor.doPoll
    ):
        # Not Twisted's epoll reactor, or one already polling so.  (Not vars(reactor):
        # an object's __dict__ once asked for is a dict of its own, and every attribute
        # of the reactor is then read slower, about 6,000 instructions a request.)
        return
    tracker = context.theContextTracker
    if not isinstance(tracker, context.ThreadedContextTracker):
        return
    system = _SystemOfTheSelectable()
    # Just above the defaults, so that any context pushed later still counts first.
    stack: list[dict[Any, Any]] = tracker.currentContext().contexts  # type: ignore[no-untyped-call]
    stack.insert(1, {log.ILogContext: system})
    epoll: Any = reactor
    poller, selectables, handle = epoll._poller, epoll._selectables, epoll._doReadOrWrite

    def poll(timeout: float | None) -> None:
        # EPollReactor.doPoll, but for callWithLogger.
        try:
            events = poller.poll(-1 if timeout is None else timeout, len(selectables))
        except OSError as e:
            if e.errno == errno.EINTR:
                return
            raise
        for fd, event in events:
            selectable = selectables.get(fd)
            if selectable is None:
                continue
            system.selectable = selectable
            try:
                handle(selectable, fd, event)
            except KeyboardInterrupt:
                raise
            except BaseException:
                log.err(system=_log_prefix(selectable))  # type: ignore[no-untyped-call]
            finally:
                system.selectable = None

    epoll.doIteration = poll


#: The longest a poll may wait, in seconds, as C{ReactorBase.timeout} bounds it.
_LONGEST_WAIT: Final = 2147483


def loop_without_idle_calls(reactor: Any) -> None:
    """
    Make C{reactor}, when it is Twisted's epoll reactor of the L{PINNED} version, run
    the main loop of C{ReactorBase.mainLoop} with C{runUntilCurrent} and C{timeout}
    called only on an iteration where one of them has something to do: a call from a
    thread waiting, a timed call made or changed since the last iteration (not yet in
    the heap), one due, enough cancelled ones to sweep, or the reactor just stopped.
    On any other iteration they would only read the clock twice and find the time to
    wait: here the clock is read once, and the wait worked out from that reading as
    C{timeout} does.  An iteration that does call them calls Twisted's own, so timed
    calls, calls from threads, cancellations and their errors run and are logged as
    ever; an error escaping an iteration is logged by Twisted's own handler, as
    C{mainLoop}'s is, and the loop goes on; C{stop}, C{crash} and C{running} mean
    what they did.  It saves about six Python calls an iteration, and a pass-through
    call is two iterations.  Any other reactor or version, or one whose C{mainLoop},
    C{runUntilCurrent} or C{timeout} was already changed, is left as it is.
    """
    from twisted.internet import base
    from twisted.internet.epollreactor import EPollReactor

    import twisted

    if (
        twisted.__version__ != PINNED["twisted"]
        or type(reactor) is not EPollReactor
        or getattr(reactor.mainLoop, "__func__", None) is not base.ReactorBase.mainLoop
        or getattr(reactor.runUntilCurrent, "__func__", None)
        is not base.ReactorBase.runUntilCurrent
        or getattr(reactor.timeout, "__func__", None) is not base.ReactorBase.timeout
    ):
        return
    epoll: Any = reactor
    top_handled = base._topHandler.__exit__
    log = base._log
    longest = _LONGEST_WAIT

    def main_loop() -> None:
        # ReactorBase.mainLoop, with runUntilCurrent and timeout when they have work.
        while epoll._started:
            try:
                now = epoll.seconds()
                pending = epoll._pendingTimedCalls
                cancelled = epoll._cancellations
                if (
                    epoll.threadCallQueue
                    or epoll._newTimedCalls
                    or (pending and pending[0].time <= now)
                    or (cancelled > 50 and cancelled > len(pending) >> 1)
                    or epoll._justStopped
                ):
                    epoll.runUntilCurrent()
                    wait = epoll.timeout()
                elif pending:
                    wait = max(0, min(longest, pending[0].time - now))
                else:
                    wait = None
                epoll.doIteration(epoll.running and wait)
            except BaseException as e:
                # As `with _topHandler:` does: logged, and the loop goes on.
                top_handled(type(e), e, e.__traceback__)
        log.info("Main loop terminated.")

    epoll.mainLoop = main_loop
