# -*- test-case-name: tests.pool.test_budget -*-
"""
How long things may take: the one place that says which timeout bounds what,
which one wins when several apply, and which of them are enforced yet.

    ===========  =====================  ========  ==========================================
    bound        setting                default   what it bounds
    ===========  =====================  ========  ==========================================
    call         C{pool.callTimeout}    60s       one upstream request the pool makes: a
                                                  C{tools/call}, any other request, one
                                                  catalogue listing.  A caller may ask for
                                                  a shorter bound for one call, never a
                                                  longer one (L{effective_call_timeout}).
                                                  For a C{tools/call} it is an idle bound:
                                                  each progress report starts it afresh.
    progress     C{pool.callMaxDuration} 1h       one C{tools/call} that keeps reporting
                                                  progress: however often it reports, it
                                                  ends this long after it began.
    exec         C{exec.timeout}        120s      one whole C{mcpx_exec} script run, every
                                                  upstream call it makes included.
    ask          C{proto.askTimeout}    600s      how long one client request may be held
                                                  open while its questions are answered.
    question     C{proto.brokerTimeout} 120s      how long one question (elicitation,
                                                  sampling, a confirmation) waits in the
                                                  broker for its answer; expiry answers
                                                  "cancel", never "decline".
    ===========  =====================  ========  ==========================================

Precedence, from the narrowest scope outwards:

  1. A question's own deadline (C{proto.brokerTimeout}) ends that question only.
  2. While a question asked by a call is pending, the call's clock
     (C{pool.callTimeout}) is paused: a person answering must not be raced by the
     bound of the call that asked them (L{Deadline.pause}).
  3. One upstream call ends at the tighter of its own bound (the configured
     C{pool.callTimeout}, or the shorter bound the caller asked for) and what is
     left of the script run it belongs to, if any (L{call_timeout_in_run}).  A
     C{notifications/progress} about a C{tools/call} gives it that bound again from
     the moment of the report (L{Deadline.extend}), as the MCP specification lets a
     receiver do, but never past C{pool.callMaxDuration} from its start (time paused
     for questions not counted).  Every C{tools/call} the pool makes carries a
     progress token of its own, so this holds on every path: the gateway,
     pass-through, C{/v1/call}, script runs and tasks.
  4. C{exec.timeout} ends a whole script run, whatever its calls are doing.
  5. C{proto.askTimeout} bounds how long the client's own request is held; it
     does not shorten the upstream call, which may go on as a task.

Starting an upstream server is not part of any call's bound: the connector's
own probe and open timeouts cover it, so a cold start does not eat into the
first call's budget.

Where each is enforced today:

  - call: by L{mcpx.pool.pool.Pool}, one L{Deadline} per upstream request; on
    expiry the request is cancelled (so the upstream hears
    C{notifications/cancelled}) and the caller gets L{mcpx.pool.errors.CallTimedOut}.
  - progress: by the same L{Deadline}, extended by the pool on each progress
    report for the call's token.
  - call paused by a question: L{Deadline} can pause and resume, but nothing
    pauses it yet: questions, and the broker that holds them, arrive with a
    later issue.  Until then a question a server asks during a call runs on
    the call's clock.
  - question: by L{mcpx.questions.broker.Broker}, whose C{ttl} is
    C{proto.brokerTimeout}; an expired confirmation refuses its call unsent.
  - exec, ask: not enforced yet here.  L{call_timeout_in_run} states the exec
    rule for the runner to use.

@see: L{mcpx.pool.errors.CallTimedOut}
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

from attrs import frozen
from twisted.internet.interfaces import IDelayedCall, IReactorTime


@frozen
class Bound:
    """One row of the table above, for documentation and for the tests that keep it true."""

    name: str
    setting: str
    default: float
    bounds: str
    enforced: str | None


CALL: Final = Bound(
    "call",
    "pool.callTimeout",
    60.0,
    "one upstream request made through the pool",
    "mcpx.pool.pool.Pool (a Deadline per request)",
)
PROGRESS: Final = Bound(
    "progress",
    "pool.callMaxDuration",
    3600.0,
    "one tools/call that keeps reporting progress, however often it reports",
    "mcpx.pool.pool.Pool (Deadline.extend on each progress report)",
)
EXEC: Final = Bound("exec", "exec.timeout", 120.0, "one whole script run", None)
ASK: Final = Bound(
    "ask", "proto.askTimeout", 600.0, "one client request held open for its questions", None
)
QUESTION: Final = Bound(
    "question",
    "proto.brokerTimeout",
    120.0,
    "one question waiting in the broker for its answer",
    "mcpx.questions.broker.Broker (its ttl)",
)

#: Every bound, narrowest scope last.
BOUNDS: Final = (ASK, EXEC, PROGRESS, CALL, QUESTION)

#: A question's own deadline in the broker, unless C{proto.brokerTimeout} says otherwise.
QUESTION_TTL: Final = QUESTION.default


def _positive(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a positive number of seconds, not {value!r}")
    return float(value)


def effective_call_timeout(configured: float, requested: float | None) -> float:
    """
    The bound on one upstream call.

    A caller may shorten the bound for its own call; asking for more than the
    configured C{pool.callTimeout} gets the configured value (the daemon's
    operator decides how long a server may be kept busy, not each caller).

    @param configured: C{pool.callTimeout}, in seconds.
    @param requested: the caller's bound for this call, or C{None} for the configured one.
    @raise ValueError: if either is not a positive, finite number of seconds.
    """
    limit = _positive(configured, "pool.callTimeout")
    if requested is None:
        return limit
    return min(limit, _positive(requested, "a call timeout"))


def call_timeout_in_run(
    configured: float, requested: float | None, run_remaining: float | None
) -> float:
    """
    The bound on one upstream call made by a script run: the tighter of the call's
    own bound (L{effective_call_timeout}) and what is left of the run's
    C{exec.timeout}.

    @param run_remaining: seconds left in the run, or C{None} outside any run.  A run
        with no time left gives its calls no time either (C{0.0}).
    """
    bound = effective_call_timeout(configured, requested)
    if run_remaining is None:
        return bound
    return max(0.0, min(bound, run_remaining))


class Deadlines:
    """
    The deadlines on one clock, under one timer between them: a deadline is a due time
    kept here while its clock runs, not a timer of its own (one was made and cancelled
    for every upstream request, which nearly always answers long before its bound).

    The timer is armed at the earliest due time it knows of, or earlier: when it fires,
    every running deadline whose time is up expires, in the order they were started, and
    it is armed again at the earliest one left.  A deadline that ends or moves later
    leaves the timer as it is (it fires, finds nothing due, and is armed again or not at
    all), so a deadline still expires at its own time and the clock wakes at most once
    per earliest due time, not once per request.  L{stop} cancels the timer.
    """

    __slots__ = ("_at", "_live", "_timer", "clock")

    def __init__(self, clock: IReactorTime) -> None:
        self.clock = clock
        #: The running deadlines, in the order they were started.
        self._live: dict[Deadline, None] = {}
        self._timer: IDelayedCall | None = None
        #: When the timer fires (infinity when it is not armed).
        self._at = math.inf

    def _watch(self, deadline: Deadline) -> None:
        self._live[deadline] = None
        due = deadline._due
        if due < self._at:
            self._arm(due)

    def _arm(self, due: float) -> None:
        """Have the timer fire at C{due}, before it would (C{due < self._at})."""
        if self._timer is not None:
            self._timer.cancel()
        self._at = due
        self._timer = self.clock.callLater(max(due - self.clock.seconds(), 0.0), self._fire)

    def _unwatch(self, deadline: Deadline) -> None:
        self._live.pop(deadline, None)

    def _fire(self) -> None:
        # The time it was armed for counts as reached, whatever the float sum said.
        now = max(self.clock.seconds(), self._at)
        self._timer = None
        self._at = math.inf
        for deadline in [d for d in self._live if d._due <= now]:
            # An earlier one's expiry may have ended it.
            if deadline in self._live:
                del self._live[deadline]
                deadline._expire()
        if self._live:
            due = min(d._due for d in self._live)
            if due < self._at:
                self._arm(due)

    def stop(self) -> None:
        """Cancel the timer (its owner stops); a deadline running still is not expired."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._at = math.inf


class Deadline:
    """
    A bound on one piece of work, on a clock (L{Deadlines}), that can be paused and
    extended.

    Pauses nest: each L{pause} needs its L{resume}, and the clock runs again only
    when none is left.  (A call with two questions out waits for both.)
    """

    __slots__ = (
        "_ceiling",
        "_clock",
        "_deadlines",
        "_due",
        "_left",
        "_on_expire",
        "_paused",
        "_running",
        "_since",
        "_spent",
        "expired",
        "extended",
    )

    def __init__(
        self,
        deadlines: Deadlines,
        seconds: float,
        on_expire: Callable[[], object],
        *,
        ceiling: float | None = None,
        now: float | None = None,
    ) -> None:
        """
        @param deadlines: the clock's deadlines, whose timer this one runs under.
        @param seconds: how long the work may run (paused time not counted).
        @param on_expire: called once, when the time is up.
        @param ceiling: the most running time L{extend} may grant in all, counted
            from now (paused time not counted); C{None} for no extension at all.
        @param now: the clock's time now, where the caller read it just before (in the
            same synchronous step): the clock is not read again; else it is.
        """
        clock = self._clock = deadlines.clock
        self._deadlines = deadlines
        self._left = seconds
        self._on_expire = on_expire
        self._paused = 0
        since = self._since = clock.seconds() if now is None else now
        #: Running time before C{_since} (paused time not counted).
        self._spent = 0.0
        self._ceiling = ceiling
        #: Whether its clock runs (neither paused nor over).
        self._running = True
        #: When its time is up, while it runs.
        due = self._due = since + seconds
        #: Whether the time ran out (as opposed to the deadline being cancelled).
        self.expired = False
        #: Whether L{extend} ever moved it.
        self.extended = False
        # Deadlines._watch, without a call.
        deadlines._live[self] = None
        if due < deadlines._at:
            deadlines._arm(due)

    def _expire(self) -> None:
        self._spent = self.running()
        self._running = False
        self._left = 0.0
        self.expired = True
        self._on_expire()

    def remaining(self) -> float:
        """Seconds left; while paused, the time that was left when the pause began."""
        if not self._running:
            return self._left
        return max(0.0, self._left - (self._clock.seconds() - self._since))

    def running(self) -> float:
        """The running time so far (paused time not counted)."""
        if not self._running:
            return self._spent
        return self._spent + (self._clock.seconds() - self._since)

    def extend(self, seconds: float) -> None:
        """
        Give the work C{seconds} from now (the work showed it is alive), never past
        the ceiling and never less than it has left; does nothing once it is over.
        """
        if self._ceiling is None or self.expired or (not self._running and not self._paused):
            return
        running = self.running()
        granted = min(seconds, self._ceiling - running)
        if granted <= self.remaining():
            return
        self.extended = True
        if not self._running:
            self._left = granted  # paused: the clock starts from here on resume
            return
        self._spent = running
        self._since = self._clock.seconds()
        self._left = granted
        # Later than before: the timer, armed no later than the old time, finds it then.
        self._due = self._since + granted

    def pause(self) -> None:
        """Stop the clock (a question is pending); does nothing once the deadline is over."""
        self._paused += 1
        if self._paused == 1 and self._running:
            self._left = self.remaining()
            self._spent = self.running()
            self._running = False
            self._deadlines._unwatch(self)

    def resume(self) -> None:
        """Undo one L{pause}; the clock runs again once every pause is undone."""
        if self._paused == 0:
            raise RuntimeError("resume() without a matching pause()")
        self._paused -= 1
        if self._paused == 0 and not self.expired and self._left > 0:
            self._since = self._clock.seconds()
            self._running = True
            self._due = self._since + self._left
            self._deadlines._watch(self)

    def cancel(self) -> None:
        """The work ended: forget the deadline (it will never expire)."""
        if self._running:
            self._running = False
            self._deadlines._live.pop(self, None)  # _unwatch, without a call
        # Nothing may restart the clock after this.
        self._left = 0.0
        self._ceiling = None
