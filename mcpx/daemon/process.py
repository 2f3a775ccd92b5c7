# -*- test-case-name: tests.daemon.test_lifecycle,tests.daemon.test_shutdown -*-
"""
What the daemon's process does around its reactor: signals that stop or reload it, and
the memory start-up leaves behind, settled before it serves.
"""

from __future__ import annotations

import ctypes
import gc
import signal

from twisted.internet.interfaces import IReactorFromThreads
from twisted.logger import Logger

from mcpx.daemon.root import DaemonService, IDaemonReactor

_log = Logger()


def settle_memory() -> None:
    """
    Move everything built at start-up out of the garbage collector's sight.

    Modules, the ops table, compiled validators and the like live as long as the
    daemon; without this every full collection walks them all again, which showed
    as 20 ms pauses (the p99 of a call) every couple of thousand requests.
    """
    gc.collect()
    gc.freeze()
    _trim_heap()


def _trim_heap() -> None:
    """
    Give the free pages of the C heap back to the system, which start-up's imports and
    compiling leave behind (glibc's C{malloc_trim}; elsewhere nothing is done).
    """
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return  # not glibc: musl and the BSDs have no malloc_trim
    trim(0)


def stop_on_signals(service: DaemonService, reactor: IDaemonReactor) -> None:
    """
    Make C{SIGTERM} and C{SIGINT} stop the daemon, and a second one hurry the stop
    (L{Shutdown.hurry}).  Installed once the reactor runs, over the reactor's own
    handlers, which would call C{reactor.stop} a second time.
    """
    stopping = False

    def stop() -> None:
        nonlocal stopping
        shutdown = service.shutdown
        if not stopping and not (shutdown is not None and shutdown.begun):
            stopping = True
            _log.info("stopping: answering the calls in flight and ending the upstreams")
            reactor.stop()
        elif shutdown is not None:
            shutdown.hurry()

    def received(signum: int, frame: object) -> None:
        reactor.callFromThread(stop)

    signal.signal(signal.SIGTERM, received)
    signal.signal(signal.SIGINT, received)


def reload_on_sighup(service: DaemonService, reactor: IReactorFromThreads) -> None:
    """Make C{SIGHUP} reload the configuration, on the reactor thread."""

    def hangup(signum: int, frame: object) -> None:
        reactor.callFromThread(service.reload)

    signal.signal(signal.SIGHUP, hangup)
