# -*- test-case-name: tests.wire.test_peer -*-
"""
How a request through an L{mcpx.wire.peer.RpcPeer} can end other than with an answer:
its connection closed (L{ConnectionClosed}), it timed out (L{RequestTimedOut}), or its
handler decided it gets no answer at all (L{NoReply}).
"""

from __future__ import annotations

from twisted.internet.defer import TimeoutError

from mcpx.wire.messages import RequestId


class ConnectionClosed(Exception):
    """
    The connection ended: the request was outstanding when it did, or was made after.

    @ivar reason: why the connection ended.
    """

    def __init__(self, name: str, reason: BaseException) -> None:
        where = f" to {name}" if name else ""
        super().__init__(f"JSON-RPC connection{where} closed: {reason}")
        self.reason = reason


class NoReply(Exception):
    """
    Raised by a request handler for a request that must not be answered at all (a
    2026-07-28 client receiving a server-to-client request, which that revision
    does not have): the peer sends nothing back.
    """


class RequestTimedOut(TimeoutError):
    """
    No answer came within the request's timeout; the peer was told to stop working on it.

    A L{twisted.internet.defer.TimeoutError}, as C{addTimeout} would produce.
    """

    def __init__(self, method: str, request_id: RequestId, timeout: float) -> None:
        super().__init__(f"{method} (id {request_id!r}) had no answer within {timeout}s")
        self.method = method
        self.request_id = request_id
        self.timeout = timeout
