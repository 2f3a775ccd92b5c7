# -*- test-case-name: tests.server.test_progress_flow -*-
"""
Whether a client's stream is keeping up: the one thing mcpx needs to know before it
coalesces progress reports for it.

A L{Flow} is registered as a streaming producer on the transport (or the C{twisted.web}
request) that carries a client's messages, so Twisted tells it, through
C{pauseProducing} and C{resumeProducing}, when that client's write buffer is full and
when it has drained.  Nothing else is produced through it: mcpx writes what it has to
and only asks the flow whether more of the same can wait.
"""

from __future__ import annotations

from collections.abc import Callable

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
