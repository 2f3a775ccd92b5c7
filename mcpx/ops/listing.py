# -*- test-case-name: tests.daemon.test_api,tests.server.test_surface -*-
"""
A listing across every server answers in bounded time: a server that has not given its
catalogue within C{pool.listWait} (still starting, hung at start-up, waiting out its
back-off) is listed from the catalogue its instance has cached, if any, and otherwise left
out and named as still starting. Its listing goes on meanwhile, so the next one has it.
A server whose era is not known yet is waited for the era probe's time longer, at
most twice as long in all (L{server_wait}).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx.ops.errors import OpError
from mcpx.pool.interface import PoolInterface
from mcpx.settings.resolve import Settings

log = Logger()

T = TypeVar("T")


def still_starting(server: str, wait: float) -> OpError:
    """Why a server is missing from a listing that could not wait for it."""
    return OpError(
        503,
        "server_starting",
        f"server {server!r} did not list within {wait:g}s (pool.listWait) and has no "
        "catalogue cached yet: it is still starting, or failing to; left out of this "
        f"listing. GET /v1/servers shows its state, GET /v1/events?server={server} why",
    )


def within(
    clock: IReactorTime,
    wait: float,
    server: str,
    listing: Deferred[T],
    cached: Callable[[], T | None],
) -> Deferred[T]:
    """
    C{listing}'s result if it comes within C{wait} seconds; otherwise what C{cached}
    gives then, or the failure L{still_starting}. A listing that comes later is dropped,
    its failure logged at debug: the pool keeps its catalogue for the next one.
    """

    def cancelled(_: Deferred[T]) -> None:
        # A caller that goes away cancels the wait, and with it the listing it started.
        if timer.active():
            timer.cancel()
        listing.cancel()

    answer: Deferred[T] = Deferred(cancelled)

    def give_up() -> None:
        kept = cached()
        if kept is not None:
            answer.callback(kept)
        else:
            answer.errback(still_starting(server, wait))

    timer = clock.callLater(wait, give_up)

    def came(result: T | Failure) -> None:
        if timer.active():
            timer.cancel()
            if isinstance(result, Failure):
                answer.errback(result)
            else:
                answer.callback(result)
        elif isinstance(result, Failure) and not result.check(CancelledError):
            log.debug(
                "server {server}'s late listing failed: {why}",
                server=server,
                why=result.getErrorMessage(),
            )

    listing.addBoth(came)
    return answer


def list_wait(settings: Settings) -> float:
    """C{pool.listWait}."""
    return settings.duration("pool.listWait")


def server_wait(settings: Settings, pool: PoolInterface, server: str) -> float:
    """
    How long a listing waits for C{server}: C{pool.listWait}, and while C{server}'s era
    is not known yet (met for the first time, not pinned:
    L{mcpx.pool.pool.Pool.probe_wait}) the era probe's timeout more, at most
    C{pool.listWait} more: it is probed before it starts in earnest, and the first
    listing should have a server that ends the connection on the probe (the Python SDK
    up to 1.8) and is started again, while a server that answers nothing holds a
    listing up no more than twice C{pool.listWait}.
    """
    wait = list_wait(settings)
    return wait + min(wait, pool.probe_wait(server))
