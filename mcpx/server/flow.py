# -*- test-case-name: tests.server.test_progress_flow -*-
"""
Whether a client's stream is keeping up: the one thing mcpx needs to know before it
coalesces progress reports for it.

A L{Flow} is registered as a streaming producer on the transport (or the C{twisted.web}
request) that carries a client's messages, so Twisted tells it, through
C{pauseProducing} and C{resumeProducing}, when that client's write buffer is full and
when it has drained.  Nothing else is produced through it: mcpx writes what it has to
and only asks the flow whether more of the same can wait.

What says the same however often it is sent (a list changed, a resource was updated) is
sent through L{Notices}: while a stream is backed up each distinct notice waits there
once, so an upstream that repeats one a million times costs one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from functools import partial
from weakref import WeakKeyDictionary

from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer

from mcpx.once import Calls


@implementer(IPushProducer)
class Flow:
    """
    The back-pressure of one stream to a client.

    @ivar paused: the stream's buffer is full; what can wait should.
    @ivar stopped: the stream is gone; nothing written will arrive.
    """

    def __init__(self) -> None:
        self.paused = False
        self.stopped = False
        self._waiting = Calls()

    def when_resumed(self, callback: Callable[[], None]) -> None:
        """Call C{callback} once, when the stream drains (or ends)."""
        self._waiting.add(callback)

    def _release(self) -> None:
        self._waiting.run()

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False
        self._release()

    def stopProducing(self) -> None:
        self.paused = False
        self.stopped = True
        self._release()


class Notices:
    """
    Notifications that say the same each time (a list changed, a resource was
    updated) or whose latest says all (a task's state): sent at once while their stream
    keeps up; while it is backed up, the latest of each distinct one waits, in the place
    of the first, and goes when it drains (nothing, if it ends).
    """

    def __init__(self) -> None:
        self._waiting: WeakKeyDictionary[Flow, dict[Hashable, Callable[[], None]]] = (
            WeakKeyDictionary()
        )

    def send(self, flow: Flow | None, notice: Hashable, send: Callable[[], None]) -> None:
        """Call C{send} now, or once C{flow} drains instead of what waits as C{notice}."""
        if flow is None or not flow.paused or flow.stopped:
            send()
            return
        waiting = self._waiting.get(flow)
        if waiting is None:
            waiting = self._waiting[flow] = {}
            flow.when_resumed(partial(self._drained, flow))
        waiting[notice] = send

    def waiting(self, flow: Flow) -> int:
        """How many notices wait for C{flow}."""
        return len(self._waiting.get(flow, ()))

    def _drained(self, flow: Flow) -> None:
        waiting = self._waiting.pop(flow, {})
        if flow.stopped:
            return
        for send in waiting.values():
            send()
