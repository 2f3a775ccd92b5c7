# -*- test-case-name: tests.wire.test_peer -*-
"""
C{notifications/cancelled}: the other side gave up on a request.  The peer cancels the
request's handler, withdrawing first the call it is handled as
(L{mcpx.wire.peer.RpcPeer.calling}).
"""

from __future__ import annotations

from typing import Final

CANCELLED: Final = "notifications/cancelled"
