# -*- test-case-name: tests.daemon.test_shutdown -*-
"""
What the daemon does once it starts to stop, and how a second signal hurries it.

  - L{Shutdown.begun} is consulted by the gate (L{mcpx.daemon.gate.Gate}) for every
    request: from the moment the stop begins, a request (on a new connection or a
    keep-alive one) is answered C{503 shutting_down}, on C{/mcp} as a JSON-RPC error,
    and its connection is closed after the answer.  No reload, no new event stream and
    no new listen starts during a stop.
  - The connections the site opened are tracked (weakly), so that once every caller
    has had its answer L{Shutdown.drain} can close them and wait, briefly, until what
    was written has left; otherwise the reactor's last step would cut the final frames
    of the streams that were just ended.
  - L{Shutdown.hurry}, the second C{SIGTERM} or C{SIGINT}: the upstreams' process
    groups are killed and the stop stops waiting for them.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger

from mcpx.pool.instances import SHUTTING_DOWN
from mcpx.wire.errors import INTERNAL_ERROR, RpcError

_log = Logger()

#: The error code of the HTTP refusals during a stop.
SHUTTING_DOWN_CODE: Final = "shutting_down"

#: How long the stop waits for the last bytes of the connections to leave.
DRAIN_BOUND: Final = 1.0
_DRAIN_STEP: Final = 0.01


def shutting_down_error() -> RpcError:
    """The JSON-RPC error of a request the stop ended or refused."""
    return RpcError(INTERNAL_ERROR, SHUTTING_DOWN, {"code": SHUTTING_DOWN_CODE})


class Shutdown:
    """
    The daemon's stop, from its first signal to its last connection.

    @ivar begun: whether the stop has begun.
    @ivar hurried: fires when a second signal asks to stop at once.
    """

    def __init__(self, clock: IReactorTime, *, kill: Sequence[Callable[[], object]] = ()) -> None:
        """@param kill: what to call when the stop is hurried (the upstreams' processes)."""
        self.begun = False
        self.hurried: Deferred[None] = Deferred()
        self._clock = clock
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()
        self._kill: list[Callable[[], object]] = list(kill)

    def begin(self) -> None:
        """
        From now on no new work is accepted, and a connection whose request is being
        answered closes after that answer (a stream's end is then the connection's).
        """
        self.begun = True
        for channel in tuple(self._connections):
            if getattr(channel, "requests", None):
                channel.persistent = False

    def hurry(self) -> None:
        """A second signal: kill what is still running, and stop waiting for it."""
        if self.hurried.called:
            return
        _log.warn("stopping at once: the upstreams still running are killed")
        for kill in self._kill:
            try:
                kill()
            except Exception:
                _log.failure("killing the upstreams failed")
        self.hurried.callback(None)

    def track(self, protocol: Any) -> None:
        """
        A connection the site opened: its protocol, or the HTTP channel inside it
        (Twisted wraps each channel in a protocol that picks HTTP/1 or HTTP/2).
        """
        self._connections.add(getattr(protocol, "_channel", protocol))

    def drain(self, bound: float = DRAIN_BOUND) -> Deferred[None]:
        """
        Close every connection once what was written to it has been sent; fires when
        all are closed, or after C{bound} seconds.
        """
        for connection in tuple(self._connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.loseConnection()

        deadline = self._clock.seconds() + bound

        async def waited() -> None:
            while self._clock.seconds() < deadline and any(
                _open(c) for c in tuple(self._connections)
            ):
                await deferLater(self._clock, _DRAIN_STEP, lambda: None)

        return Deferred.fromCoroutine(waited())


def _open(connection: Any) -> bool:
    transport = getattr(connection, "transport", None)
    return transport is not None and not getattr(transport, "disconnected", True)
