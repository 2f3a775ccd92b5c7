# -*- test-case-name: tests.upstream.test_endpoints -*-
"""
Where the HTTP client of a remote server connects: TCP for C{http}, TLS over TCP for
C{https}, with Nagle's algorithm off on the socket either way.

mcpx gives its agents this factory instead of Twisted's standard one for two reasons.
A JSON-RPC request is a few small writes that wait for an answer, exactly the pattern
Nagle's algorithm delays, so every connection sets C{TCP_NODELAY}.  And the TLS machinery
(pyOpenSSL, cryptography) is imported when the first C{https} connection is made, not
when the module is: the daemon may have been started without it (see
L{mcpx.daemon.lean_start}), and the standard factory, once imported without it, would
refuse C{https} for the life of the process.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import HostnameEndpoint
from twisted.internet.interfaces import (
    IProtocol,
    IProtocolFactory,
    IReactorPluggableNameResolver,
    IReactorTCP,
    IReactorTime,
    IStreamClientEndpoint,
)
from twisted.web.error import SchemeNotSupported
from twisted.web.iweb import IAgentEndpointFactory, IPolicyForHTTPS
from zope.interface import implementer


class IReactorHTTP(IReactorTCP, IReactorTime, IReactorPluggableNameResolver):
    """What an HTTP client needs of its reactor: to resolve names, connect, and wait."""


def _no_delay(protocol: IProtocol) -> IProtocol:
    transport = getattr(protocol, "transport", None)
    set_no_delay = getattr(transport, "setTcpNoDelay", None)
    if set_no_delay is not None:
        set_no_delay(True)
    return protocol


@implementer(IStreamClientEndpoint)
class _NoDelayEndpoint:
    """A TCP endpoint whose connections have C{TCP_NODELAY} set once connected."""

    def __init__(self, tcp: IStreamClientEndpoint) -> None:
        self._tcp = tcp

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[IProtocol]:
        return self._tcp.connect(protocolFactory).addCallback(_no_delay)


@implementer(IStreamClientEndpoint)
class _TlsEndpoint:
    """TLS over a TCP endpoint, C{TCP_NODELAY} on the socket beneath."""

    def __init__(self, tcp: IStreamClientEndpoint, creator: Any) -> None:
        self._tcp = tcp
        self._creator = creator

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[IProtocol]:
        # Deferred to the first https connection: it needs pyOpenSSL (see above).
        from twisted.protocols.tls import TLSMemoryBIOFactory

        def unwrap(tls: Any) -> IProtocol:
            _no_delay(tls)
            wrapped: IProtocol = tls.wrappedProtocol
            return wrapped

        tls_factory = TLSMemoryBIOFactory(self._creator, True, protocolFactory)
        return self._tcp.connect(tls_factory).addCallback(unwrap)


@implementer(IPolicyForHTTPS)
class SystemTrust:
    """The TLS client options for a server without C{tls} settings: the system's authorities."""

    def creatorForNetloc(self, hostname: bytes, port: int) -> Any:
        # Deferred to the first https connection: it needs pyOpenSSL (see above).
        from twisted.internet.ssl import optionsForClientTLS

        return optionsForClientTLS(hostname.decode("ascii"))


@implementer(IAgentEndpointFactory)
class UpstreamEndpoints:
    """
    The endpoint for each URI an agent is asked to request.

    @param policy: the TLS options per host for C{https} (L{SystemTrust} by default).
    @param connect_timeout: seconds to wait for the TCP connection.
    """

    def __init__(
        self, reactor: IReactorHTTP, connect_timeout: float, policy: IPolicyForHTTPS | None = None
    ) -> None:
        self._reactor = reactor
        self._connect_timeout = connect_timeout
        self._policy = policy if policy is not None else SystemTrust()

    def endpointForURI(self, uri: Any) -> IStreamClientEndpoint:
        host = uri.host.decode("ascii")
        tcp = HostnameEndpoint(self._reactor, host, uri.port, timeout=self._connect_timeout)
        if uri.scheme == b"http":
            return _NoDelayEndpoint(tcp)
        if uri.scheme == b"https":
            creator = self._policy.creatorForNetloc(uri.host, uri.port)
            return _TlsEndpoint(tcp, creator)
        raise SchemeNotSupported(f"unsupported scheme: {uri.scheme!r}")
