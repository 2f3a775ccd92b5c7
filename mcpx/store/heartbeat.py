# -*- test-case-name: tests.store.test_fleet -*-
"""
Each daemon's heartbeat in the shared store, so the others can tell a daemon that is
alive from one that died with work it owned.

A daemon gets an id when it starts (L{new_daemon_id}) and writes the clock's time under
it every L{Heartbeat.every} seconds; a daemon whose last beat is older than
L{Heartbeat.timeout} is dead.  The clock is the injected one; daemons sharing a store
are expected to agree on the time within a few seconds (NTP).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from attrs import define, field
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from mcpx.store.records import RecordStore

log = Logger()

#: Seconds between two beats of a daemon.
EVERY = 5.0
#: Seconds without a beat after which a daemon is taken for dead.
TIMEOUT = 20.0


def new_daemon_id() -> str:
    """A fresh daemon id: C{d_} and 12 hex digits."""
    return "d_" + secrets.token_hex(6)


def alive_in(
    records: RecordStore, clock: IReactorTime, timeout: float = TIMEOUT
) -> Deferred[set[str]]:
    """The daemons whose last beat in C{records} is at most C{timeout} seconds old."""
    return records.alive(clock.seconds() - timeout)


@define(eq=False)
class Heartbeat:
    """The beats of the daemon C{daemon}, written to C{records}."""

    _clock: IReactorTime
    _records: RecordStore
    daemon: str
    every: float = field(default=EVERY, kw_only=True)
    timeout: float = field(default=TIMEOUT, kw_only=True)
    #: Told, after each beat, which daemons are alive (L{on_beat}).
    _watchers: list[Callable[[set[str]], Deferred[Any]]] = field(factory=list, kw_only=True)
    _timer: IDelayedCall | None = field(default=None, init=False)
    _beating: Deferred[None] | None = field(default=None, init=False)
    _stopped: bool = field(default=False, init=False)

    def on_beat(self, watcher: Callable[[set[str]], Deferred[Any]]) -> None:
        """Tell C{watcher}, after each beat, which daemons are alive (to fail the dead's work)."""
        self._watchers.append(watcher)

    def start(self) -> Deferred[None]:
        """Beat now (the Deferred fires once it is written), then every L{every} seconds."""
        first = self._records.beat(self.daemon, self._clock.seconds())
        first.addCallback(lambda _: self._watch())
        first.addCallback(lambda _: self._schedule())
        return first

    def _watch(self) -> Deferred[None] | None:
        """Tell the watchers who is alive; fires once they are done."""
        if not self._watchers:
            return None

        def tell(alive: set[str]) -> Deferred[Any]:
            return gatherResults([watcher(alive) for watcher in self._watchers])

        def failed(failure: Failure) -> None:
            # A store restarting, say: the next beat looks again.
            log.failure("Could not check the other daemons' work", failure, level=LogLevel.warn)

        return self.alive().addCallback(tell).addCallbacks(lambda _: None, failed)

    def _schedule(self) -> None:
        if not self._stopped:
            self._timer = self._clock.callLater(self.every, self._beat)

    def _beat(self) -> None:
        self._timer = None

        def failed(failure: Failure) -> None:
            # The store may be restarting: the next beat tries again.
            log.failure("Could not write the heartbeat", failure, level=LogLevel.warn)

        def done(_: object) -> None:
            self._beating = None
            self._schedule()

        beating = self._records.beat(self.daemon, self._clock.seconds())
        beating.addCallback(lambda _: self._watch())
        self._beating = beating.addErrback(failed).addBoth(done)

    def alive(self) -> Deferred[set[str]]:
        """The daemons (this one among them) whose last beat is recent enough."""
        return alive_in(self._records, self._clock, self.timeout)

    def stop(self) -> Deferred[None]:
        """
        Beat no more, and say so in the store (a daemon that stopped cleanly is not
        waited for: its pending questions are orphans to the next daemon at once).
        """
        return Deferred.fromCoroutine(self._stop())

    async def _stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        beating, self._beating = self._beating, None
        if beating is not None:
            follower: Deferred[None] = Deferred()
            beating.addBoth(lambda _: follower.callback(None))
            await follower
        try:
            await self._records.depart(self.daemon)
        except Exception:
            # The store may be down: the beats then stop by themselves, and age out.
            log.failure("Could not remove the heartbeat", level=LogLevel.warn)
