# -*- test-case-name: tests.scripts.test_runner,tests.scripts.test_cpython -*-
"""
One program running (L{Run}), and the worker process it talks to over pipes (L{Worker},
or L{CPythonChild} in CPython mode): its lines read as messages, its calls handed to
its owner (L{RunOwner}, the daemon's L{mcpx.scripts.runner.Scripts}), and its end,
however it comes, waited for before its outcome is told.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import signal
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, Final, Protocol

from attrs import define, field, frozen
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ProcessDone, ProcessExitedAlready
from twisted.internet.interfaces import IDelayedCall, IProcessTransport, IReactorTime
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx.call import Call
from mcpx.scripts import protocol
from mcpx.scripts.outcome import RunFailed, RunOutcome
from mcpx.wire.framing import LineBuffer, LineTooLong

_log = Logger()


class RunOwner(Protocol):
    """What a run asks of the runs' keeper (L{mcpx.scripts.runner.Scripts})."""

    @property
    def clock(self) -> IReactorTime: ...

    def answer(self, run: Run, message: Mapping[str, Any]) -> Coroutine[Any, Any, dict[str, Any]]:
        """The reply to one call the program made."""

    def inlined(self, outcome: RunOutcome) -> RunOutcome:
        """C{outcome} with a value too large to inline moved into an artifact."""

    def ended(self, run: Run) -> None:
        """The run is over and its process gone."""


#: How much of a worker's stderr is kept to explain a crash.
STDERR_KEPT: Final = 4096


@frozen
class Limits:
    """What one run may spend (the C{exec.*} settings)."""

    timeout: float = 120.0
    call_timeout: float = 60.0
    memory: int = 256 * 1024 * 1024
    output: int = 1024 * 1024
    calls: int = 1000
    artifact_bytes: int = 64 * 1024 * 1024
    runs: int = 8
    inline: int = 64 * 1024
    mode: str = "monty"


class Worker(ProcessProtocol):
    """A Monty-mode worker: each line it writes on stdout is a message of the run's."""

    def __init__(self, run: Run, max_line: int) -> None:
        self.run = run
        self.lines = LineBuffer(max_line)
        self.stderr = b""
        self.ended: Deferred[None] = Deferred()
        self.gone = False

    def outReceived(self, data: bytes) -> None:
        for item in self.lines.feed(data):
            if isinstance(item, LineTooLong):
                self.run.stop(
                    "output_too_large", f"the program sent a line over {item.limit} bytes"
                )
            else:
                self.run.line(item)

    def errReceived(self, data: bytes) -> None:
        self.stderr = (self.stderr + data)[-STDERR_KEPT:]

    def processEnded(self, reason: Failure) -> None:
        self.gone = True
        self.run.process_ended(reason)
        self.ended.callback(None)


#: Seconds the end of a CPython-mode program waits for the rest of its output.
OUTPUT_GRACE: Final = 1.0


class CPythonChild(Worker):
    """
    A CPython-mode program: what it prints on stdout is its output, as it comes; how
    it ended (and its confinement) comes in lines on descriptor 3.

    The two pipes are read in whatever order the reactor sees them, so the line saying
    the program ended is held until its stdout has closed (the runner closes it first),
    or L{OUTPUT_GRACE} has passed (a child the program started may hold it open).
    """

    def __init__(self, run: Run, max_line: int) -> None:
        super().__init__(run, max_line)
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stdout_closed = False
        self._held: bytes | None = None
        self._grace: IDelayedCall | None = None

    def childDataReceived(self, childFD: int, data: bytes) -> None:
        if childFD == 1:
            self._printed(self._text.decode(data))
        elif childFD == 2:
            self.errReceived(data)
        elif childFD == 3:
            for item in self.lines.feed(data):
                if isinstance(item, LineTooLong):
                    self.run.stop(
                        "output_too_large", f"the program sent a line over {item.limit} bytes"
                    )
                elif not self._stdout_closed and item.startswith((b'{"done"', b'{"failed"')):
                    self._held = item
                    self._grace = self.run.scripts.clock.callLater(OUTPUT_GRACE, self._release)
                else:
                    self.run.line(item)

    def _printed(self, text: str) -> None:
        if text and not self.run.finished:
            self.run.printed_text(text)

    def childConnectionLost(self, childFD: int) -> None:
        if childFD == 1:
            self._stdout_closed = True
            self._printed(self._text.decode(b"", final=True))
            self._release()

    def _release(self) -> None:
        if self._grace is not None and self._grace.active():
            self._grace.cancel()
        held, self._held = self._held, None
        if held is not None:
            self.run.line(held)

    def processEnded(self, reason: Failure) -> None:
        self._release()
        super().processEnded(reason)


@define(eq=False)
class Run:
    """One program running."""

    id: str
    identity: str
    call: Call
    scripts: RunOwner
    limits: Limits
    started: float
    deadline_at: float
    printed: list[str] = field(factory=list)
    printed_bytes: int = 0
    calls: int = 0
    in_flight: dict[Any, Deferred[Any]] = field(factory=dict)
    outcome: Deferred[RunOutcome] = field(init=False)
    worker: Worker | None = None
    transport: IProcessTransport | None = None
    timer: IDelayedCall | None = None
    finished: bool = False
    key: str = ""
    confinement: str | None = None
    run_dir: Path | None = None

    def __attrs_post_init__(self) -> None:
        self.outcome = Deferred()

    @property
    def output(self) -> str:
        return "".join(self.printed)

    # From the worker

    def line(self, raw: bytes) -> None:
        if self.finished:
            return
        try:
            message = json.loads(raw)
        except ValueError:
            self.stop("worker_failed", "the worker sent a line that is not JSON")
            return
        if not isinstance(message, dict):
            self.stop("worker_failed", "the worker sent something other than an object")
        elif "print" in message:
            self.printed_text(str(message["print"]))
        elif "call" in message:
            self.worker_call(message)
        elif "confinement" in message:
            self.confinement = str(message["confinement"])
        elif "done" in message:
            self.done(message["done"])
        elif "failed" in message:
            failed = message["failed"] if isinstance(message["failed"], dict) else {}
            kind = str(failed.get("kind", "runtime"))
            code = {"syntax": "program_syntax", "crashed": "program_crashed"}.get(
                kind, "program_failed"
            )
            self.stop(code, f"the program failed: {failed.get('message', 'no reason given')}")

    def printed_text(self, text: str) -> None:
        size = len(text.encode())
        room = self.limits.output - self.printed_bytes
        if size > room:
            self.printed.append(text.encode()[: max(room, 0)].decode(errors="ignore"))
            self.printed_bytes = self.limits.output
            self.stop(
                "output_too_large",
                f"the program printed more than {self.limits.output} bytes (exec.maxOutput); "
                "it was stopped — print less, or write large results to a file under /out",
            )
            return
        self.printed.append(text)
        self.printed_bytes += size

    def worker_call(self, message: Mapping[str, Any]) -> None:
        call_id = message.get("call")
        self.calls += 1
        if self.calls > self.limits.calls:
            self.stop(
                "too_many_calls",
                f"the program made more than {self.limits.calls} calls (exec.maxCalls)",
            )
            return
        work = Deferred.fromCoroutine(self.scripts.answer(self, message))
        self.in_flight[call_id] = work

        def answered(reply: dict[str, Any]) -> None:
            self.in_flight.pop(call_id, None)
            self.send({"result": call_id, **reply})

        def failed(failure: Failure) -> None:
            self.in_flight.pop(call_id, None)
            if not failure.check(CancelledError):
                _log.failure("a program's call failed unexpectedly", failure)
                self.send({"result": call_id, "error": "the daemon failed making this call"})

        work.addCallbacks(answered, failed)

    def done(self, value: Mapping[str, Any]) -> None:
        has_value = isinstance(value, dict) and "json" in value
        shown = value.get("repr") if isinstance(value, dict) else None
        result = value.get("json") if has_value else None
        if not has_value and shown is None:
            has_value = False
        self.finish(
            lambda: self.scripts.inlined(
                RunOutcome(
                    self.id,
                    self.output,
                    has_value and result is not None,
                    result,
                    shown if isinstance(shown, str) else None,
                    [],
                )
            )
        )

    def process_ended(self, reason: Failure) -> None:
        if self.finished:
            return
        why = "" if reason.check(ProcessDone) else f" ({reason.getErrorMessage()})"
        stderr = self.worker.stderr.decode(errors="replace").strip() if self.worker else ""
        tail = f": {stderr.splitlines()[-1]}" if stderr else ""
        self.stop(
            "program_crashed", f"the program's process ended before the program did{why}{tail}"
        )

    # To the worker

    def send(self, message: Mapping[str, Any]) -> None:
        if self.finished or self.transport is None:
            return
        self.transport.write(protocol.encode(message))

    # Ending

    def stop(self, code: str, message: str) -> None:
        """End the run with an error (timeout, cancellation, a limit, a failure)."""
        error = RunFailed(code, message, self.output, self.id)
        self.finish(lambda: error)

    def finish(self, make: Callable[[], RunOutcome | RunFailed]) -> None:
        if self.finished:
            return
        self.finished = True
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        # The run's membership ends with it: its calls still in flight are cancelled,
        # which takes its caller off every pool instance.
        for work in list(self.in_flight.values()):
            work.cancel()
        self.in_flight.clear()
        result = make()
        ended = self.kill()

        def answer(_: object) -> None:
            self.scripts.ended(self)
            if self.outcome.called:
                return
            if isinstance(result, RunFailed):
                self.outcome.errback(Failure(result))
            else:
                self.outcome.callback(result)

        ended.addCallback(answer)

    def kill(self) -> Deferred[None]:
        """Kill the worker's process group; fires once the worker is gone."""
        worker = self.worker
        if worker is None or worker.gone:
            return Deferred.fromCoroutine(_nothing())
        pid = self.transport.pid if self.transport is not None else None
        if pid:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        if self.transport is not None:
            with contextlib.suppress(ProcessExitedAlready, OSError):
                self.transport.signalProcess("KILL")
        return worker.ended


async def _nothing() -> None:
    return None
