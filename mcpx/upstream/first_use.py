# -*- test-case-name: tests.daemon.test_lean_start -*-
"""
An HTTP client made at its first request (L{ClientOnFirstUse}), for the sign-ins' client
most daemons never use: an idle daemon then holds neither it, nor treq, nor the HTTP
client machinery of L{mcpx.upstream.http_client} and C{twisted.web.client} it is made of.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from treq.client import HTTPClient
    from treq.response import _Response
    from twisted.internet.defer import Deferred


class ClientOnFirstUse:
    """
    An HTTP client made by C{make} at its first request, for a client most daemons never
    use (the OAuth sign-ins'): an idle daemon then holds neither it nor treq.
    """

    def __init__(self, make: Callable[[], HTTPClient]) -> None:
        self._make = make
        self._client: HTTPClient | None = None

    def _made(self) -> HTTPClient:
        if self._client is None:
            self._client = self._make()
        return self._client

    def request(self, *args: Any, **kwargs: Any) -> Deferred[_Response]:
        """L{HTTPClient.request} of the client, made now if it was not yet."""
        return self._made().request(*args, **kwargs)

    def post(self, *args: Any, **kwargs: Any) -> Deferred[_Response]:
        """L{HTTPClient.post} of the client, made now if it was not yet."""
        return self._made().post(*args, **kwargs)
