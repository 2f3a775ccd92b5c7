"""The writes to a store still under way: each one's failure logged, all of them awaitable."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, gatherResults
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

log = Logger()

__all__ = ["Writes"]


class Writes:
    """
    Writes nobody waits for one by one (a question saved, a task forgotten), kept until
    they end so that closing can wait for them; each one's failure is logged, not raised.
    """

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: set[Deferred[Any]] = set()

    def track(self, pending: Deferred[Any], what: str) -> None:
        """Keep C{pending} until it ends; log its failure as "Could not C{what}"."""

        def failed(failure: Failure) -> None:
            log.failure("Could not {what}", failure, level=LogLevel.error, what=what)

        def done(_: object) -> None:
            self._pending.discard(pending)

        self._pending.add(pending)
        pending.addErrback(failed).addBoth(done)

    def settled(self) -> Deferred[None]:
        """Fires once the writes under way now have ended (each already logs its failure)."""
        return gatherResults(list(self._pending), consumeErrors=True).addCallback(lambda _: None)
