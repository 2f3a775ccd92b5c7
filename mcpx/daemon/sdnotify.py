# -*- test-case-name: tests.daemon.test_sdnotify -*-
"""
Telling systemd how the daemon is doing: the C{sd_notify} datagram protocol.

A service of C{Type=notify} is given C{NOTIFY_SOCKET}, a unix datagram socket (a
path, or an abstract name written C{@name}); each datagram is newline-separated
C{KEY=value} lines.  The daemon says C{READY=1} once every listener is bound,
C{STOPPING=1} when its stop begins, C{RELOADING=1} then C{READY=1} around a
configuration reload, and C{WATCHDOG=1} every half of C{WATCHDOG_USEC} when
C{WatchdogSec=} is set.  Sending never blocks: a datagram the socket cannot take
at once is dropped, as systemd's own C{sd_notify} would fail it.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping, MutableMapping

from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

#: What systemd hands the service for itself alone: children must not inherit them,
#: or an upstream would speak for the daemon, or adopt its sockets.
SYSTEMD_VARIABLES = (
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
)

_log = Logger()


def socket_address(value: str) -> str | bytes:
    """C{NOTIFY_SOCKET} as C{sendto} takes it: C{@name} is a name in the abstract namespace."""
    if value.startswith("@"):
        return b"\0" + value[1:].encode("utf-8")
    return value


def watchdog_interval(environ: Mapping[str, str], pid: int) -> float | None:
    """
    Seconds between two C{WATCHDOG=1}: half of C{WATCHDOG_USEC}, as systemd advises;
    C{None} without a watchdog, or when C{WATCHDOG_PID} names another process.
    """
    watchdog_pid = environ.get("WATCHDOG_PID")
    if watchdog_pid is not None and watchdog_pid.strip() != str(pid):
        return None
    try:
        usec = int(environ.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    if usec <= 0:
        return None
    return usec / 2_000_000


class Notifier:
    """
    Sends the daemon's state to systemd's notification socket.

    @ivar watchdog_every: seconds between watchdog pings, or C{None}.
    """

    def __init__(self, address: str | bytes, watchdog_every: float | None = None) -> None:
        self.address = address
        self.watchdog_every = watchdog_every
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.setblocking(False)
        self._pinger: LoopingCall | None = None
        self._failing = False

    def send(self, *lines: str) -> None:
        """Send one datagram of C{KEY=value} lines; a failure is logged once, not per send."""
        try:
            self._socket.sendto("\n".join(lines).encode("utf-8"), self.address)
        except OSError as e:
            if not self._failing:
                _log.warn(
                    "cannot notify systemd through {address!r}: {why}",
                    address=self.address,
                    why=e.strerror or str(e),
                )
            self._failing = True
        else:
            self._failing = False

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def reloading(self) -> None:
        # MONOTONIC_USEC lets Type=notify-reload tell this reload from an older one.
        monotonic = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.send(
            "RELOADING=1", "STATUS=reloading the configuration", f"MONOTONIC_USEC={monotonic}"
        )

    def stopping(self) -> None:
        self.stop_watchdog()
        self.send("STOPPING=1", "STATUS=stopping: answering the calls in flight")

    def start_watchdog(self, clock: IReactorTime) -> None:
        """Ping every L{watchdog_every} seconds on C{clock}, from now on (nothing without one)."""
        if self.watchdog_every is None or self._pinger is not None:
            return
        self._pinger = LoopingCall(self.send, "WATCHDOG=1")
        self._pinger.clock = clock
        self._pinger.start(self.watchdog_every, now=True).addErrback(
            lambda failure: _log.failure("systemd watchdog pings stopped", failure)
        )

    def stop_watchdog(self) -> None:
        pinger, self._pinger = self._pinger, None
        if pinger is not None and pinger.running:
            pinger.stop()

    def close(self) -> None:
        self.stop_watchdog()
        self._socket.close()


def notifier_from(environ: Mapping[str, str], pid: int) -> Notifier | None:
    """The notifier C{environ} asks for, or C{None} when systemd is not listening."""
    value = environ.get("NOTIFY_SOCKET", "")
    if not value.startswith(("@", "/")):
        return None
    return Notifier(socket_address(value), watchdog_interval(environ, pid))


def forget_systemd_variables(environ: MutableMapping[str, str]) -> None:
    """Remove L{SYSTEMD_VARIABLES} from C{environ} (the process's, once they are read)."""
    for name in SYSTEMD_VARIABLES:
        environ.pop(name, None)
