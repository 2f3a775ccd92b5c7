"""A real HTTP client for integration tests, over TCP or a unix socket."""

from __future__ import annotations

import json
from typing import Any

import treq
from treq.client import HTTPClient
from twisted.internet.endpoints import UNIXClientEndpoint
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers
from twisted.web.iweb import IAgentEndpointFactory
from zope.interface import implementer


@implementer(IAgentEndpointFactory)
class _UnixSocket:
    def __init__(self, reactor: Any, path: str) -> None:
        self._reactor = reactor
        self._path = path

    def endpointForURI(self, uri: Any) -> UNIXClientEndpoint:
        return UNIXClientEndpoint(self._reactor, self._path)


class TestClient:
    """An owned connection pool, closed by C{close()} so trial's reactor stays clean."""

    def __init__(self, reactor: Any, unix_socket: str | None = None) -> None:
        self._pool = HTTPConnectionPool(reactor, persistent=False)
        if unix_socket is None:
            agent = Agent(reactor, pool=self._pool)
        else:
            agent = Agent.usingEndpointFactory(
                reactor, _UnixSocket(reactor, unix_socket), pool=self._pool
            )
        self.http = HTTPClient(agent)

    async def get_json(self, url: str) -> tuple[int, Any]:
        response = await self.http.get(url)
        body = await treq.content(response)
        return response.code, json.loads(body)

    async def close(self) -> None:
        await self._pool.closeCachedConnections()


async def exchange(
    client: HTTPClient, method: str, url: str, headers: dict[str, str], body: Any = None
) -> tuple[int, dict[str, list[str]], bytes]:
    """
    One request, C{body} sent as JSON when given: the answer's status, its headers (by
    lower-cased name) and its body.
    """
    response = await client.request(
        method,
        url,
        headers=Headers({k: [v] for k, v in headers.items()}),
        data=None if body is None else json.dumps(body).encode(),
    )
    content: bytes = await response.content()
    found = {
        k.decode().lower(): [v.decode() for v in vs]
        for k, vs in response.headers.getAllRawHeaders()
    }
    return response.code, found, content
