"""Real child processes for the few tests that are about processes."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from twisted.internet import reactor as _reactor
from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.interfaces import IReactorProcess, IReactorTime
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent

reactor: Any = _reactor


def free_tcp_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ChildProcess(ProcessProtocol):
    """Collects a child's output and lets a test wait for text or for the exit."""

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        self.output: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
        self._watchers: list[tuple[int, re.Pattern[bytes], Deferred[bytes]]] = []
        self._ended: Deferred[int] = Deferred()
        self.exit_code: int | None = None

    def childDataReceived(self, childFD: int, data: bytes) -> None:
        self.output.setdefault(childFD, bytearray()).extend(data)
        self._check()

    def _check(self) -> None:
        remaining = []
        matched = []
        for fd, pattern, waiter in self._watchers:
            match = pattern.search(bytes(self.output.get(fd, b"")))
            if match:
                matched.append((waiter, match.group(0)))
            else:
                remaining.append((fd, pattern, waiter))
        # The list is settled before any waiter fires: a callback may start a new wait.
        self._watchers = remaining
        for waiter, text in matched:
            waiter.callback(text)

    def wait_for(self, pattern: bytes, fd: int = 2, timeout: float = 30) -> Deferred[bytes]:
        """Fire when the child has written C{pattern} on C{fd}; fail after C{timeout}."""
        waiter: Deferred[bytes] = Deferred()
        self._watchers.append((fd, re.compile(pattern), waiter))
        waiter.addTimeout(timeout, self._clock)
        self._check()
        return waiter

    def processEnded(self, reason: Failure) -> None:
        if reason.check(ProcessDone):
            self.exit_code = 0
        elif reason.check(ProcessTerminated):
            value: Any = reason.value
            self.exit_code = value.exitCode if value.exitCode is not None else -value.signal
        for _fd, _pattern, waiter in self._watchers:
            waiter.errback(
                AssertionError(f"child exited ({self.exit_code}) first; output: {self.text()}")
            )
        self._watchers = []
        self._ended.callback(self.exit_code or 0)

    def ended(self, timeout: float = 30) -> Deferred[int]:
        waiter: Deferred[int] = Deferred()

        def relay(code: int) -> int:
            waiter.callback(code)
            return code

        self._ended.addCallback(relay)
        return waiter.addTimeout(timeout, self._clock)

    def signal(self, name: str = "TERM") -> None:
        if self.transport is not None and self.exit_code is None:
            self.transport.signalProcess(name)

    def text(self, fd: int | None = None) -> str:
        if fd is None:
            return "".join(b.decode("utf-8", "replace") for b in self.output.values())
        return self.output.get(fd, bytearray()).decode("utf-8", "replace")


def spawn(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    process_reactor: Any = None,
) -> ChildProcess:
    """Start C{argv} with pipes on 0, 1 and 2."""
    r = process_reactor or reactor
    child = ChildProcess(r)
    full_env = dict(os.environ if env is None else env)
    spawner: IReactorProcess = r
    spawner.spawnProcess(child, argv[0], list(argv), env=full_env, path=cwd)
    return child


def kill_on_cleanup(child: ChildProcess) -> None:
    """Last-resort KILL for a child a failing test left running."""
    if child.exit_code is None and child.transport is not None:
        pid = child.transport.pid
        if pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
