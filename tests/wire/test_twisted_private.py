"""
The private Twisted and Klein names of L{mcpx.wire.twisted_private}: read in the versions
it pins, and still there.
"""

from __future__ import annotations

import array
import contextlib
import os
import socket
import sys
import threading
from importlib.metadata import version
from typing import Any

from twisted.internet import reactor, tcp
from twisted.internet.abstract import FileDescriptor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import serverFromString
from twisted.internet.epollreactor import EPollReactor
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Factory, ProcessProtocol, Protocol
from twisted.internet.task import deferLater
from twisted.internet.testing import MemoryReactor, StringTransport
from twisted.logger import ILogObserver, globalLogPublisher
from twisted.python import log
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.http import HTTPChannel
from twisted.web.server import Request
from twisted.web.test.requesthelper import DummyChannel
from zope.interface import provider

import twisted
from mcpx.wire import twisted_private
from mcpx.wire.twisted_private import (
    PINNED,
    frames_plainly,
    handling_request,
    http11_client_factory,
    loop_without_idle_calls,
    network_producer,
    nothing_queued,
    parses_no_forms,
    plain_unix_reactor,
    poll_with_lazy_log_prefix,
    read_into,
    request_not_sent,
    url_refused_by_klein,
    waiting_for_transport,
)


class PinnedTests(SynchronousTestCase):
    def test_installed_versions_are_the_pinned_ones(self) -> None:
        """
        Another Twisted or Klein than the one whose source the private names were read
        in fails here, loudly, before anything relies on them.
        """
        installed = {"twisted": twisted.__version__, "klein": version("klein")}
        self.assertEqual(
            installed,
            PINNED,
            "Twisted or Klein changed: read each private name of "
            f"{twisted_private.__file__} in the new source, check it still means what its "
            "docstring says (or stop using it), then update PINNED",
        )


class NamesTests(SynchronousTestCase):
    def test_file_descriptor_write_state(self) -> None:
        """A descriptor's write state reads as nothing queued, and something once queued."""
        descriptor = FileDescriptor()
        self.assertTrue(nothing_queued(descriptor))
        descriptor._tempDataBuffer.append(b"x")
        self.assertFalse(nothing_queued(descriptor))

    def test_http_channel_state(self) -> None:
        """An HTTP channel's request state is where the lean path reads and sets it."""
        channel = HTTPChannel()
        channel.makeConnection(StringTransport())
        self.assertFalse(waiting_for_transport(channel))
        self.assertIsNotNone(network_producer(channel))
        handling_request(channel, True)
        self.assertTrue(channel._handlingRequest)
        handling_request(channel, False)
        self.assertFalse(channel._handlingRequest)

    def test_request_answer_state(self) -> None:
        """
        A twisted.web request's answer frames plainly until its connection is lost, its
        answer is encoded, or it is a C{HEAD} answered as a C{GET}; and a request made
        without C{__init__} is told to leave a POST's form unparsed.
        """
        self.assertTrue(frames_plainly(Request(DummyChannel())))
        lost = Request(DummyChannel())
        lost.connectionLost(Failure(ConnectionDone()))
        self.assertFalse(frames_plainly(lost))
        encoded = Request(DummyChannel())
        encoded._encoder = object()  # type: ignore[assignment]
        self.assertFalse(frames_plainly(encoded))
        head = Request(DummyChannel())
        head._inFakeHead = True
        self.assertFalse(frames_plainly(head))
        bare = Request.__new__(Request)
        parses_no_forms(bare)
        self.assertIs(bare._parsePOSTFormSubmission, False)
        self.assertTrue(Request(DummyChannel())._parsePOSTFormSubmission)

    def test_klein_url_check(self) -> None:
        """A path that is not UTF-8 (once percent-decoded) is refused as Klein would."""
        for path, refused in ((b"mcp", False), (b"\xff", True)):
            request = Request(DummyChannel())
            request.prepath, request.postpath = [], [path]
            request.setHost(b"localhost", 80)
            self.assertEqual(url_refused_by_klein(request), refused, path)

    def test_client_names(self) -> None:
        """The HTTP/1.1 client's connection factory and its not-sent error are classes."""
        self.assertIsInstance(http11_client_factory(), type)
        self.assertTrue(issubclass(request_not_sent(), Exception))


class _Echo(Protocol):
    """Sends back what it receives, and keeps its transport for the test to look at."""

    def connectionMade(self) -> None:
        connections.append(self.transport)

    def dataReceived(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)


connections: list[Any] = []


class PlainUnixTests(TestCase):
    """
    L{plain_unix_reactor}: the daemon's unix sockets read with C{recv} and write with
    C{send}, and a descriptor a client passes anyway is not kept.
    """

    async def test_echo_and_no_descriptor_kept(self) -> None:
        path = self.mktemp()
        endpoint = serverFromString(plain_unix_reactor(reactor), f"unix:{path}:mode=600")
        port = await endpoint.listen(Factory.forProtocol(_Echo))
        self.addCleanup(port.stopListening)
        del connections[:]
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(client.close)
        client.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            client.connect(path)
        read_end, write_end = os.pipe()
        self.addCleanup(os.close, read_end)
        # The write end of a pipe, passed along with the first bytes, then closed here:
        # if the daemon kept it, the pipe would never read as ended.
        fds = array.array("i", [write_end])
        client.sendmsg([b"ping"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        os.close(write_end)
        received = b""
        for _ in range(3000):
            with contextlib.suppress(BlockingIOError):
                received += client.recv(100)
            if received == b"ping":
                break
            await deferLater(reactor, 0.01, lambda: None)
        self.assertEqual(received, b"ping")
        [transport] = connections
        self.assertIs(type(transport).doRead, tcp.Connection.doRead)
        self.assertIs(type(transport).writeSomeData, tcp.Connection.writeSomeData)
        os.set_blocking(read_end, False)
        self.assertEqual(os.read(read_end, 1), b"")

    def test_a_reactor_not_posix_as_it_is(self) -> None:
        """A test's reactor (not a C{PosixReactorBase}) is given back unchanged."""
        memory = MemoryReactor()
        self.assertIs(plain_unix_reactor(memory), memory)


class _Child(ProcessProtocol):
    """Keeps what a child writes on each descriptor, and fires C{ended} when it is reaped."""

    def __init__(self) -> None:
        self.received: list[tuple[int, bytes]] = []
        self.ended: Deferred[None] = Deferred()

    def childDataReceived(self, childFD: int, data: bytes) -> None:
        self.received.append((childFD, data))

    def processEnded(self, reason: Failure) -> None:
        self.ended.callback(None)


class ReadIntoTests(TestCase):
    """L{read_into}: a child's stdout read straight into a callable, its stderr as before."""

    timeout = 20

    async def test_stdout_to_the_callable_stderr_to_the_protocol(self) -> None:
        """
        Every byte the child writes on stdout (a megabyte, read in many pieces) reaches
        the callable, in order, and none of it the protocol; its stderr still goes to
        the protocol.
        """
        script = (
            "import sys\n"
            "sys.stdout.buffer.write(bytes(range(256)) * 4096)\n"
            "sys.stdout.flush()\n"
            "sys.stderr.write('said')\n"
        )
        child = _Child()
        process = reactor.spawnProcess(child, sys.executable, [sys.executable, "-c", script])
        got: list[bytes] = []
        self.assertTrue(read_into(process, 1, got.append))
        await child.ended
        self.assertEqual(b"".join(got), bytes(range(256)) * 4096)
        self.assertGreater(len(got), 1)
        self.assertEqual(child.received, [(2, b"said")])

    def test_not_a_process(self) -> None:
        """A test's transport, or a descriptor the process does not read, is left alone."""
        self.assertFalse(read_into(StringTransport(), 1, print))
        self.assertFalse(read_into(object(), 1, print))


class _PipeReader(FileDescriptor):
    """
    The read end of a pipe: logs (as Twisted's older modules do) what it reads when that
    says C{log}, fails on C{fail}, and counts how often its log prefix is asked.
    """

    def __init__(self, reactor: Any, fd: int) -> None:
        super().__init__(reactor)
        self.fd = fd
        self.prefixes = 0

    def fileno(self) -> int:
        return self.fd

    def logPrefix(self) -> str:
        self.prefixes += 1
        return "PipeReader"

    def doRead(self) -> None:
        data = os.read(self.fd, 100)
        if data == b"fail":
            raise ValueError("read failed")
        if data == b"log":
            log.msg("read: log")


class LazyLogPrefixTests(SynchronousTestCase):
    """
    L{poll_with_lazy_log_prefix}: the epoll reactor hands a ready descriptor its event
    without asking its log prefix, and what a log shows is the same as under Twisted's
    own poll: a legacy event logged while it is handled, or its failure, names it as
    C{system}; one logged from a timed call says C{-}.
    """

    def test_prefix_asked_only_for_what_is_logged(self) -> None:
        events: list[dict[str, Any]] = []
        asked: dict[str, int] = {}

        @provider(ILogObserver)
        def observe(event: dict[str, Any]) -> None:
            if event.get("message") in (("read: log",), ("timed",)) or event.get("isError"):
                events.append(event)

        def run() -> None:
            # On a thread of its own: the log context it pushes is that thread's only.
            poller = EPollReactor()
            poll_with_lazy_log_prefix(poller)
            # Made so once: a second time changes nothing.
            poll_with_lazy_log_prefix(poller)
            read_end, write_end = os.pipe()
            reader = _PipeReader(poller, read_end)
            reader.startReading()
            try:
                for data in (b"quiet", b"log"):
                    os.write(write_end, data)
                    poller.iterate(0)
                    asked[data.decode()] = reader.prefixes
                poller.callLater(0, log.msg, "timed")
                poller.iterate(0)
                os.write(write_end, b"fail")
                poller.iterate(0)
            finally:
                poller.removeAll()
                poller.waker.connectionLost(None)
                os.close(read_end)
                os.close(write_end)

        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)
        thread = threading.Thread(target=run)
        thread.start()
        thread.join(60)
        self.assertFalse(thread.is_alive())
        self.assertEqual(asked, {"quiet": 0, "log": 1})
        self.assertEqual(
            [(event.get("message"), event["system"]) for event in events],
            [(("read: log",), "PipeReader"), (("timed",), "-"), ((), "PipeReader")],
        )
        self.assertEqual(len(self.flushLoggedErrors(ValueError)), 1)

    def test_another_reactor_as_it_is(self) -> None:
        """A test's reactor (not Twisted's epoll one) is left as it is."""
        memory = MemoryReactor()
        poll_with_lazy_log_prefix(memory)
        self.assertNotIn("doIteration", vars(memory))


#: A fresh epoll reactor run twice: crashed from a timed call, then run again through
#: timed calls (made, cancelled, moved sooner, delayed, one failing), calls from a
#: thread (one failing), a clock that fails once (an error escaping an iteration) and a
#: stop from a descriptor's read, with a shutdown trigger that waits on a timed call.
#: What ran, in order, and what was logged are printed as JSON; with C{mcpx}, the
#: reactor is first made as the daemon makes it.
_LOOP_SCRIPT = """
import json, os, sys, threading
from twisted.internet.abstract import FileDescriptor
from twisted.internet.defer import Deferred
from twisted.internet.epollreactor import EPollReactor
from twisted.logger import globalLogPublisher
from mcpx.wire.twisted_private import loop_without_idle_calls, poll_with_lazy_log_prefix

ran, logged = [], []

def observe(event):
    failure = event.get("log_failure")
    if failure is not None:
        logged.append([event.get("log_format"), type(failure.value).__name__])
    elif event.get("log_format") == "Main loop terminated.":
        logged.append(["Main loop terminated.", None])

globalLogPublisher.addObserver(observe)
reactor = EPollReactor()
if sys.argv[1] == "mcpx":
    poll_with_lazy_log_prefix(reactor)
    loop_without_idle_calls(reactor)
ran.append(["loop", reactor.mainLoop.__qualname__])

def note(what):
    ran.append([what, reactor.running])

def fail(what):
    ran.append([what, reactor.running])
    raise ValueError(what)

def crash():
    note("crash")
    reactor.crash()

def step1():
    note("step1")
    def thread():
        reactor.callFromThread(note, "from thread")
        reactor.callFromThread(fail, "failing from thread")
        reactor.callFromThread(step2)
    threading.Thread(target=thread).start()

def step2():
    note("step2")
    reactor.callLater(0.02, note, "late")
    reactor.callLater(0.01, note, "early")
    calls["cancelled"] = reactor.callLater(0.005, note, "cancelled")
    calls["reset"] = reactor.callLater(10, note, "reset sooner")
    calls["delayed"] = reactor.callLater(0.003, note, "delayed")
    reactor.callLater(0.012, fail, "failing timed call")
    reactor.callLater(0.001, step2b)
    reactor.callLater(0.05, step3)

def step2b():
    note("step2b")
    calls["cancelled"].cancel()
    calls["reset"].reset(0.016)
    calls["delayed"].delay(0.03)

def step3():
    note("step3")
    def clock_fails_once():
        del reactor.seconds
        raise RuntimeError("clock")
    reactor.callLater(0, step4)
    reactor.seconds = clock_fails_once

def step4():
    note("step4")
    def before():
        note("before shutdown")
        waited = Deferred()
        reactor.callLater(0.01, waited.callback, None)
        reactor.callLater(0.005, note, "timed during shutdown")
        return waited
    reactor.addSystemEventTrigger("before", "shutdown", before)
    reactor.addSystemEventTrigger("during", "shutdown", note, "during shutdown")
    reactor.addSystemEventTrigger("after", "shutdown", note, "after shutdown")
    # Stopped from a descriptor's read, as a signal or a request stops the daemon.
    read_end, write_end = os.pipe()
    reader = Stopper(reactor)
    reader.fileno = lambda: read_end
    reader.startReading()
    os.write(write_end, b"stop")

class Stopper(FileDescriptor):
    def doRead(self):
        self.stopReading()
        reactor.stop()
        note("stopped")

calls = {}
reactor.callLater(0, crash)
reactor.run(installSignalHandlers=False)
note("crashed")
reactor.callLater(0, step1)
reactor.run(installSignalHandlers=False)
note("ended")
print(json.dumps({"ran": ran, "logged": logged}))
"""


#: The qualified name of the daemon's main loop.
_DAEMONS_LOOP = "loop_without_idle_calls.<locals>.main_loop"


def _run_loop_script(mode: str) -> Any:
    import json
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _LOOP_SCRIPT, mode],
        capture_output=True,
        timeout=60,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    return json.loads(done.stdout)


class LoopWithoutIdleCallsTests(SynchronousTestCase):
    """
    L{loop_without_idle_calls}: the daemon's main loop runs timed calls, calls from
    threads, their errors, C{stop}, C{crash} and C{running} as Twisted's own does.
    """

    def test_the_same_as_twisteds_loop(self) -> None:
        """
        A real epoll reactor (in a process of its own) runs and logs the same things,
        in the same order, with the daemon's loop as with Twisted's; and those are what
        Twisted's loop is known to do.
        """
        twisted_run = _run_loop_script("twisted")
        mcpx_run = _run_loop_script("mcpx")
        self.assertEqual(twisted_run["ran"][0], ["loop", "ReactorBase.mainLoop"])
        self.assertEqual(mcpx_run["ran"][0], ["loop", _DAEMONS_LOOP])
        self.assertEqual(mcpx_run["ran"][1:], twisted_run["ran"][1:])
        self.assertEqual(mcpx_run["logged"], twisted_run["logged"])
        self.assertEqual(
            mcpx_run["ran"][1:],
            [
                ["crash", True],
                ["crashed", False],
                ["step1", True],
                ["from thread", True],
                ["failing from thread", True],
                ["step2", True],
                ["step2b", True],
                ["early", True],
                ["failing timed call", True],
                ["reset sooner", True],
                ["late", True],
                ["delayed", True],
                ["step3", True],
                ["step4", True],
                ["stopped", True],
                ["before shutdown", True],
                ["timed during shutdown", True],
                ["during shutdown", False],
                ["after shutdown", False],
                ["ended", False],
            ],
        )
        self.assertEqual(
            mcpx_run["logged"],
            [
                ["Main loop terminated.", None],
                ["while calling from thread", "ValueError"],
                ["while handling timed call", "ValueError"],
                ["Unexpected error in main loop", "RuntimeError"],
                ["Main loop terminated.", None],
            ],
        )

    def test_another_reactor_or_version_as_it_is(self) -> None:
        """
        A test's reactor, a subclass of the epoll reactor, or the epoll reactor under
        another Twisted version than the pinned one keeps its own loop; one already
        given the daemon's keeps that one.
        """
        memory = MemoryReactor()
        loop_without_idle_calls(memory)
        self.assertNotIn("mainLoop", vars(memory))

        class Epoll(EPollReactor):
            pass

        def made(kind: type[EPollReactor]) -> EPollReactor:
            poller = kind()
            self.addCleanup(poller._poller.close)
            self.addCleanup(poller.waker.connectionLost, None)
            return poller

        subclassed = made(Epoll)
        loop_without_idle_calls(subclassed)
        self.assertEqual(subclassed.mainLoop.__qualname__, "ReactorBase.mainLoop")

        other_version = made(EPollReactor)
        self.patch(twisted, "__version__", "27.1.0")
        loop_without_idle_calls(other_version)
        self.assertEqual(other_version.mainLoop.__qualname__, "ReactorBase.mainLoop")

        self.patch(twisted, "__version__", PINNED["twisted"])
        pinned = made(EPollReactor)
        loop_without_idle_calls(pinned)
        installed = pinned.mainLoop
        self.assertEqual(installed.__qualname__, _DAEMONS_LOOP)
        loop_without_idle_calls(pinned)
        self.assertIs(pinned.mainLoop, installed)
