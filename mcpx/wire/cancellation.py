# -*- test-case-name: tests.wire.test_peer -*-
"""
C{notifications/cancelled}, and telling a cancel the other side sent from any other:
a handler's canceller asks L{cancelled_by_peer} while L{cancel_for_peer} runs it.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Final

from twisted.internet.defer import Deferred

CANCELLED: Final = "notifications/cancelled"

#: Set while a handler is being cancelled because the other side said so.
_CANCELLED_BY_PEER: ContextVar[bool] = ContextVar("mcpx_cancelled_by_peer", default=False)


def cancelled_by_peer() -> bool:
    """
    Whether the cancellation under way comes from the other side's
    C{notifications/cancelled} (rather than a closed connection or mcpx itself): code
    run by a handler's canceller asks this to tell the two apart.
    """
    return _CANCELLED_BY_PEER.get()


def cancel_for_peer(handling: Deferred[Any]) -> None:
    """Cancel a handler's Deferred because the other side cancelled its request."""
    token = _CANCELLED_BY_PEER.set(True)
    try:
        handling.cancel()
    finally:
        _CANCELLED_BY_PEER.reset(token)
