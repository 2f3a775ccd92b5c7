"""Where a remote server's HTTP client connects: TCP_NODELAY on every connection."""

from __future__ import annotations

from typing import Any, cast

from twisted.internet.defer import succeed
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactor, StringTransport
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.client import URI
from twisted.web.error import SchemeNotSupported
from zope.interface import implementer

from mcpx.upstream.endpoints import IReactorHTTP, UpstreamEndpoints, _NoDelayEndpoint, _TlsEndpoint


class NoDelayTransport(StringTransport):
    no_delay = False

    def setTcpNoDelay(self, enabled: bool) -> None:
        self.no_delay = enabled


@implementer(IStreamClientEndpoint)
class ConnectedEndpoint:
    """An endpoint whose connection is made at once, over a L{NoDelayTransport}."""

    def __init__(self) -> None:
        self.transport = NoDelayTransport()

    def connect(self, factory: Any) -> Any:
        protocol = factory.buildProtocol(None)
        protocol.makeConnection(self.transport)
        return succeed(protocol)


class UpstreamEndpointsTests(SynchronousTestCase):
    def test_http_connection_sets_no_delay(self) -> None:
        """A plain HTTP connection has Nagle's algorithm off once connected."""
        tcp = ConnectedEndpoint()
        connected = self.successResultOf(
            _NoDelayEndpoint(tcp).connect(Factory.forProtocol(Protocol))
        )
        self.assertIsInstance(connected, Protocol)
        self.assertTrue(tcp.transport.no_delay)

    def test_https_connection_sets_no_delay_beneath_tls(self) -> None:
        """
        An HTTPS connection gives the caller its own protocol (not the TLS wrapper), and
        the TCP socket beneath the TLS has Nagle's algorithm off.
        """
        from twisted.internet.ssl import optionsForClientTLS

        tcp = ConnectedEndpoint()
        endpoint = _TlsEndpoint(tcp, optionsForClientTLS("example.com"))
        connected = self.successResultOf(endpoint.connect(Factory.forProtocol(Protocol)))
        self.assertIs(type(connected), Protocol)
        self.assertTrue(tcp.transport.no_delay)
        # The TLS client spoke first: its hello went out on the TCP transport.
        self.assertTrue(tcp.transport.value())

    def test_kinds_by_scheme(self) -> None:
        """C{http} is TCP, C{https} TLS over TCP, anything else is refused."""
        endpoints = UpstreamEndpoints(cast(IReactorHTTP, MemoryReactor()), 5.0)
        http = endpoints.endpointForURI(URI.fromBytes(b"http://127.0.0.1:8080/mcp"))
        https = endpoints.endpointForURI(URI.fromBytes(b"https://example.com/mcp"))
        self.assertIsInstance(http, _NoDelayEndpoint)
        self.assertIsInstance(https, _TlsEndpoint)
        with self.assertRaises(SchemeNotSupported):
            endpoints.endpointForURI(URI.fromBytes(b"ftp://example.com/"))
