"""
Methods both sides of mcpx name (the server it is to hosts, the client it is to
upstreams), each spelled once.  The three questions a server may ask are in
L{mcpx.spec.questions}.
"""

from __future__ import annotations

from typing import Final

#: 2026-07-28's request whose answer is a stream of notifications, kept open while wanted.
LISTEN: Final = "subscriptions/listen"
