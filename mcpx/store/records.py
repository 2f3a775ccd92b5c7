# -*- test-case-name: tests.store.test_shared -*-
"""
The one interface the daemon's durable records go through, whatever keeps them.

A record is one row of a kind (L{QUESTIONS}, L{TASKS}): its id, the principal it belongs
to, its state and finish time in columns of their own (so a store can prune and filter
without reading the bodies), and its body as JSON text that only its owner module reads.
Two implementations: L{mcpx.store.sqlite} (a file in the state directory, one daemon, the
default) and L{mcpx.store.postgres} (a database several daemons share, C{store.url}).

Every method answers with a Deferred and never blocks the reactor: the implementations run
their queries on threads of their own.

The principal of a row is the caller identity it belongs to (a question's C{owner}, a
task's C{client}), or C{None} for nobody's; a query given a principal sees only that
principal's rows, and L{ANYONE} (the daemon's own view) sees them all.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Final, Literal, Protocol

from attrs import frozen
from twisted.internet.defer import Deferred

#: The kinds of record, each a table of its own.
Kind = Literal["questions", "tasks", "rounds", "config"]
QUESTIONS: Final = "questions"
TASKS: Final = "tasks"
#: The one-time records of signed C{requestState}s (L{mcpx.server.rounds}).
ROUNDS: Final = "rounds"
#: The notice of the last configuration change a daemon of a fleet made (one row).
CONFIG: Final = "config"
KINDS: Final[frozenset[str]] = frozenset((QUESTIONS, TASKS, ROUNDS, CONFIG))


class Anyone(enum.Enum):
    """The daemon's own view: rows of every principal."""

    ANYONE = "anyone"


ANYONE: Final = Anyone.ANYONE

#: Whose rows a query sees: one principal's (C{None}: nobody's rows), or L{ANYONE}.
Principal = str | None | Anyone


#: Told of a change another daemon (or this one) made: C{(kind, id)}, or C{(None, None)}
#: when changes may have been missed (the listening connection was lost) and every
#: record of interest should be read again.
Heard = Callable[[str | None, str | None], None]


class StoreClosed(Exception):
    """The store was used before it was opened or after it was closed."""


@frozen
class Record:
    """
    One stored row.

    @ivar id: unique within its kind.
    @ivar principal: the caller identity it belongs to; C{None} for nobody's.
    @ivar state: its owner module's state word (C{pending}, C{working}...).
    @ivar finished: clock seconds when it reached a final state, if it has.
    @ivar body: the whole record, as JSON text.
    """

    id: str
    principal: str | None
    state: str
    finished: float | None
    body: str


class RecordStore(Protocol):
    """What the question broker and the task store keep their records through."""

    def describe(self) -> str:
        """Where the records are, for people (never with a password)."""

    def open(self) -> Deferred[None]:
        """
        Make the store ready: create or migrate its schema.  Opening an opened store
        again answers at once.
        """

    def close(self) -> Deferred[None]:
        """Let go of files, connections and threads; later calls fail with L{StoreClosed}."""

    def put(self, kind: Kind, record: Record) -> Deferred[None]:
        """Insert C{record}, or replace the stored one of C{kind} with the same id."""

    def put_if(self, kind: Kind, record: Record, state: str) -> Deferred[bool]:
        """
        Replace the stored record with C{record} only if the stored one is in C{state}
        (so that of two daemons answering one question, one wins); whether it was.
        """

    def get(
        self, kind: Kind, record_id: str, principal: Principal = ANYONE
    ) -> Deferred[Record | None]:
        """The record of that id, if there is one and C{principal} may see it."""

    def find(
        self, kind: Kind, *, principal: Principal = ANYONE, state: str | None = None
    ) -> Deferred[list[Record]]:
        """The records C{principal} may see (those in C{state}, if given), in no order."""

    def delete(self, kind: Kind, record_id: str) -> Deferred[None]:
        """Forget that record (nothing happens if there is none)."""

    def prune(self, kind: Kind, finished_before: float, *, keep: str) -> Deferred[int]:
        """
        Delete the records that finished before C{finished_before}, except those in the
        state C{keep} (a pending question is never pruned); how many went.
        """

    def listen(self, heard: Heard) -> None:
        """
        Tell C{heard}, on the reactor, of every record written or deleted by any daemon
        sharing this store, from now until L{close}.  A store only one daemon uses tells
        nothing.  Several parts of a daemon may listen: each is told everything.
        """

    def beat(self, daemon: str, now: float) -> Deferred[None]:
        """Record that the daemon C{daemon} was alive at clock second C{now}."""

    def depart(self, daemon: str) -> Deferred[None]:
        """Forget C{daemon}'s beats: it stopped cleanly, and is dead from now on."""

    def alive(self, since: float) -> Deferred[set[str]]:
        """The daemons whose last L{beat} is at or after C{since}."""


def checked_kind(kind: str) -> Kind:
    """C{kind}, after checking it names a table (it is written into SQL)."""
    if kind not in KINDS:
        raise ValueError(f"not a kind of record: {kind!r}")
    return kind  # type: ignore[return-value]
