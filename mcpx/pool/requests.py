# -*- test-case-name: tests.pool.test_pool,tests.pool.test_faults,tests.pool.test_budget -*-
"""
One upstream request on a ready instance: counted in flight (with whom it is for),
bounded by its deadline (L{mcpx.pool.budget}), and turned into a clear error of the
pool's when it fails (L{mcpx.pool.errors}).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator
from typing import Any, Final, Generic, NoReturn, TypeAlias, TypeVar

from twisted.internet.defer import CancelledError, Deferred

from mcpx.call import Call
from mcpx.pool.attribution import Attribution
from mcpx.pool.budget import Deadline, Deadlines, effective_call_timeout
from mcpx.pool.errors import AnswerTooLarge, CallTimedOut, masked_rpc_error, transport_error
from mcpx.pool.instance import Instance
from mcpx.pool.instances import Instances
from mcpx.pool.progress import ProgressRoutes, ProgressSink
from mcpx.upstream.channel import ChannelClosed, MessageTooLarge
from mcpx.wire.errors import RpcError
from mcpx.wire.peer import ConnectionClosed

T = TypeVar("T")


#: Told of a C{tools/call}'s end: C{(server, tool, seconds, outcome, principal)}
#: (L{mcpx.pool.pool.Pool.on_call}).
OnCall: TypeAlias = Callable[[str, str, float, str, str | None], None]

#: What is left of a call's bound after its server's start took the rest (seconds).
_LEAST_BOUND: Final = 0.001


def at_least_a_call(seconds: float) -> float:
    """C{pool.callMaxDuration}, checked: a positive number of seconds."""
    if seconds <= 0:
        raise ValueError(f"call_max_duration must be positive, not {seconds!r}")
    return seconds


async def raising(error: Exception) -> NoReturn:
    """
    A coroutine that raises C{error} when awaited: what a plain function handing back
    the coroutine of its work hands back for an error it met first, so that its caller
    meets the error where it awaits, as an C{async def}'s caller would.
    """
    raise error


class _Watched(Generic[T]):
    """
    A coroutine awaited in place, by its caller's own driver, with the Deferred it waits
    on now at hand: L{cancel} cancels that Deferred, as cancelling
    C{Deferred.fromCoroutine(coroutine)} would, without a Deferred and a driver of its
    own between the request and its caller (a call's every resumption went through both).

    Awaited once; the coroutine starts when awaited (C{fromCoroutine} started it at
    once), so L{Requests.run} bounds it first and then sends the request.
    """

    __slots__ = ("_coroutine", "_waiting")

    def __init__(self, coroutine: Coroutine[Any, Any, T]) -> None:
        self._coroutine = coroutine
        self._waiting: Deferred[Any] | None = None

    def __await__(self) -> Generator[Any, Any, T]:
        return self  # an iterator with send, throw and close

    def __iter__(self) -> _Watched[T]:
        return self

    def __next__(self) -> Any:
        # The first step (send(None), without a call more).
        waiting = self._waiting = self._coroutine.send(None)
        return waiting

    def send(self, value: Any) -> Any:
        # The coroutine's StopIteration is this awaitable's own: the await's value.
        waiting = self._waiting = self._coroutine.send(value)
        return waiting

    def throw(self, *thrown: Any) -> Any:
        waiting = self._waiting = self._coroutine.throw(*thrown)
        return waiting

    def close(self) -> None:
        self._coroutine.close()

    def cancel(self) -> None:
        """Cancel what the coroutine waits on (it learns of it as C{CancelledError})."""
        waiting = self._waiting
        if waiting is not None:
            waiting.cancel()


class Requests:
    """
    The requests the pool sends upstream, and the bounds they run under.

    @ivar call_timeout: C{pool.callTimeout}, for requests that start from now on.
    @ivar call_max_duration: C{pool.callMaxDuration}.
    @ivar progress: the progress tokens of the calls in flight.
    @ivar deadlines: the requests' deadlines, under one timer (L{stop} cancels it).
    """

    def __init__(
        self,
        instances: Instances,
        attribution: Attribution,
        *,
        call_timeout: float,
        call_max_duration: float,
    ) -> None:
        effective_call_timeout(call_timeout, None)  # refuses a bound that is no bound
        self.call_timeout = call_timeout
        self.call_max_duration = at_least_a_call(call_max_duration)
        self.progress = ProgressRoutes()
        self.deadlines = Deadlines(instances.clock)
        self._instances = instances
        self._attribution = attribution

    async def run(
        self,
        instance: Instance,
        what: str,
        timeout: float,
        work: Coroutine[Any, Any, T],
        call: Call | None = None,
        *,
        asked: float | None = None,
        progress: str | None = None,
        on_progress: ProgressSink | None = None,
        principal: str | None = None,
        on_call: OnCall | None = None,
    ) -> T:
        """
        One upstream request on a ready instance: C{work}, the coroutine of its session
        that sends it (started here), counted in flight (with whom it is for), bounded by
        C{timeout}, and turned into a clear error if the instance dies under it.

        @param asked: when the caller asked, if waiting for the start came first: that
            wait counted against C{timeout}.
        @param progress: the progress token it was sent with (L{ProgressRoutes.token}):
            each report under it gives it C{timeout} again, up to C{call_max_duration},
            and reaches C{on_progress}.
        @param principal: the subject identity it is made for (L{Instance.principals}).
        @param on_call: told of a C{tools/call}'s end, C{what} being its tool, as
            L{mcpx.pool.pool.Pool.on_call} is (C{asked} given with it).
        """
        instance.in_flight += 1
        instance.calls.append(call)
        instance.principals.append(principal)
        watched = _Watched(work)
        # The server replied (a result or an error), rather than the request being
        # given up on or cut short.
        answered = False
        outcome = "error"
        try:
            try:
                left = timeout
                # The clock read once for what was waited and the deadline's start (the
                # same instant): the deadline read it itself when nothing was waited.
                now = None
                if asked is not None:
                    now = self._instances.clock.seconds()
                    left = max(timeout - (now - asked), _LEAST_BOUND)
                if progress is None:
                    deadline = Deadline(self.deadlines, left, watched.cancel, now=now)
                else:
                    deadline = Deadline(
                        self.deadlines,
                        left,
                        watched.cancel,
                        ceiling=max(self.call_max_duration, left),
                        now=now,
                    )
                    self.progress.open(progress, on_progress, timeout, deadline)
                instance.deadlines.add(deadline)
                try:
                    result = await watched
                    answered = True
                except CancelledError:
                    if deadline.expired:
                        extended_to = deadline.running() if deadline.extended else None
                        raise CallTimedOut(
                            instance.name, what, timeout, extended_to=extended_to
                        ) from None
                    raise
                except (ConnectionClosed, ChannelClosed) as e:
                    raise self._instances.cut_short(instance, e) from None
                except RpcError as e:
                    answered = True
                    if self._instances.masker:
                        raise masked_rpc_error(e, self._instances.masker) from None
                    raise
                except MessageTooLarge as e:
                    raise AnswerTooLarge(instance.name, what, e.limit) from None
                except ConnectionError as e:
                    # A remote server's transport failed this one request (each HTTP
                    # request stands alone, so the instance lives on, and its status says
                    # what broke).
                    broke = transport_error(instance.name, what, e)
                    instance.slot.last_error = broke.message
                    raise broke from None
                finally:
                    deadline.cancel()
                    instance.deadlines.discard(deadline)
                    self._attribution.request_ended(instance, deadline)
                    if progress is not None:
                        self.progress.close(progress)
            finally:
                # When it ended, read once: the instance's last use and the call's
                # duration for on_call (the same synchronous step).
                ended = self._instances.clock.seconds() if on_call is not None else None
                instance.calls.remove(call)
                instance.principals.remove(principal)
                self._instances.finished(instance, ended)
                if call is not None:
                    # The questions it asked that still wait are withdrawn with it
                    # (mcpx.call.Call.call_ended).
                    call.call_ended(answered=answered)
            if instance.slot.failures:
                self._instances.forgive(instance)
            if on_call is not None:
                outcome = (
                    "tool_error" if isinstance(result, dict) and result.get("isError") else "ok"
                )
            return result
        finally:
            if on_call is not None:
                assert asked is not None and ended is not None
                on_call(
                    instance.name,
                    what,
                    ended - asked,
                    outcome,
                    principal,
                )
