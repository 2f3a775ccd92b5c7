"""
One result that any number of parties may wait for (L{Once}); the parties waiting for
the next time something happens (L{Waiters}); the calls to make then (L{Calls}).

Several parts of mcpx hand out "a fresh Deferred that fires when X has happened": a
channel that is lost, a stream the server has answered, a listener that is bound, a
shared start-up many callers wait on. Each waiter gets a Deferred of its own, so one
waiter cancelling (or adding callbacks that change the result) touches nobody else,
and a waiter that arrives after the fact gets the result at once.

This module sits below every other floor: anything may import it, it imports nothing
of mcpx.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import Generic, TypeVar

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

T = TypeVar("T")

__all__ = ["Calls", "Once", "Waiters"]


class Once(Generic[T]):
    """
    The outcome of one event, delivered to each waiter on a Deferred of its own.

    The first L{fire} decides the outcome; later ones are ignored, so whoever notices
    the event first (a connection lost, a timer, a close) may report it without asking
    whether someone already did. A L{Failure} outcome reaches waiters through their
    errbacks; it is not an unhandled error when nobody is waiting.
    """

    __slots__ = ("_done", "_outcome", "_waiters")

    def __init__(self) -> None:
        self._done = False
        self._outcome: T | Failure | None = None
        self._waiters: list[Deferred[T]] = []

    @property
    def done(self) -> bool:
        """Whether the outcome is known."""
        return self._done

    @property
    def failure(self) -> Failure | None:
        """The failure it ended with, if it has ended so."""
        return self._outcome if isinstance(self._outcome, Failure) else None

    def feed(self, work: Deferred[T]) -> None:
        """Take the outcome of C{work}, which ends with it (its errors are consumed)."""
        work.addBoth(self._fire_from)

    def _fire_from(self, outcome: T | Failure) -> None:
        self.fire(outcome)

    def fire(self, outcome: T | Failure) -> None:
        """Decide the outcome, once; every waiter so far gets it."""
        if self._done:
            return
        self._done = True
        self._outcome = outcome
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            self._deliver(waiter)

    def wait(self) -> Deferred[T]:
        """A fresh Deferred for the outcome: at once if it is known, else when it is."""
        waiter: Deferred[T] = Deferred(self._forget)
        if self._done:
            self._deliver(waiter)
        else:
            self._waiters.append(waiter)
        return waiter

    def _forget(self, waiter: Deferred[T]) -> None:
        # A cancelled waiter is dropped, so long-lived outcomes do not collect them.
        with suppress(ValueError):
            self._waiters.remove(waiter)

    def _deliver(self, waiter: Deferred[T]) -> None:
        if waiter.called:  # its waiter cancelled it
            return
        outcome = self._outcome
        if isinstance(outcome, Failure):
            waiter.errback(outcome)
        else:
            waiter.callback(outcome)  # type: ignore[arg-type]


class Waiters(Generic[T]):
    """
    The parties waiting for the next time something happens (a task ends, a call has
    news), each on a Deferred of its own: L{fire} tells those waiting then, and only them;
    one that cancels is forgotten at once.
    """

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: list[Deferred[T]] = []

    def __bool__(self) -> bool:
        """Whether anyone is waiting."""
        return bool(self._waiting)

    def wait(self) -> Deferred[T]:
        """A fresh Deferred that fires at the next L{fire}; cancel it to stop waiting."""
        waiter: Deferred[T] = Deferred(self._forget)
        self._waiting.append(waiter)
        return waiter

    def _forget(self, waiter: Deferred[T]) -> None:
        with suppress(ValueError):
            self._waiting.remove(waiter)

    def fire(self, value: T) -> None:
        """Tell everyone waiting now C{value}; later waiters wait for the next time."""
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            waiter.callback(value)


class Calls:
    """
    Calls to make once, the next time something happens (a request ends, a stream
    drains): L{run} makes those added so far, in order, and forgets them.
    """

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: list[Callable[[], None]] = []

    def add(self, call: Callable[[], None]) -> None:
        """Have C{call} made at the next L{run}."""
        self._calls.append(call)

    def run(self) -> None:
        """Make every call added so far; those added meanwhile wait for the next run."""
        calls, self._calls = self._calls, []
        for call in calls:
            call()
