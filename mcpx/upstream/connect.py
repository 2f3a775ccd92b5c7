# -*- test-case-name: tests.upstream.test_real_servers -*-
"""
Wiring the real transports into a L{Connector}: the one place that knows which
channel serves which kind of server configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from mcpx.settings.servers import RemoteServer, StdioServer
from mcpx.upstream.channel import Channel
from mcpx.upstream.endpoints import IReactorHTTP
from mcpx.upstream.groups import ProcessGroups
from mcpx.upstream.probe import Connector, EraCache, ServerConfig, cache_path
from mcpx.upstream.stdio import DEFAULT_GRACE, IReactorSpawn, StdioChannel
from mcpx.wire.framing import DEFAULT_MAX_MESSAGE_SIZE

if TYPE_CHECKING:
    from mcpx.upstream.http_client import Credentials


class IReactorUpstream(IReactorHTTP, IReactorSpawn):
    """What the real transports need of the reactor: processes, TCP, names and time."""


def make_connector(
    reactor: IReactorUpstream,
    environ: Mapping[str, str],
    state_dir: Path | None,
    *,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    grace: float = DEFAULT_GRACE,
    probe_timeout: float = 5.0,
    open_timeout: float = 30.0,
    lenient: bool = False,
    max_rounds: int = 8,
    http_connections: int = 16,
    groups: ProcessGroups | None = None,
    credentials: Callable[[str, RemoteServer, str], Credentials | None] | None = None,
) -> Connector:
    """
    A connector on the real transports.

    @param state_dir: where the era cache lives; C{None} keeps it in memory only.
    @param max_message_size: the largest message read, on every transport.
    @param probe_timeout: C{pool.probeTimeout}: how long the modern probe may take.
    @param open_timeout: C{pool.startTimeout}: how long opening a session may take.
    @param http_connections: the idle connections kept per remote server.
    @param credentials: the OAuth credentials of a remote server, if it uses OAuth, as
        one principal presents them (L{mcpx.auth.signin.SignIns.credentials_for}; the
        owner's is C{""}).
    @param groups: runs each stdio server in a process group of its own (as the
        daemon does); without it a server is a plain child process.
    """

    def channels(name: str, server: ServerConfig) -> Channel:
        return principal_channels(name, server, "")

    def principal_channels(name: str, server: ServerConfig, principal: str) -> Channel:
        if isinstance(server, StdioServer):
            return StdioChannel(
                name,
                server,
                reactor,
                environ,
                max_message_size=max_message_size,
                grace=grace,
                groups=groups,
            )
        # Deferred for start-up memory: an idle daemon, or one of stdio servers, has no
        # HTTP server's channel (nor the HTTP client it is made of).
        from mcpx.upstream.http import StreamableHTTPChannel

        return StreamableHTTPChannel(
            name,
            server,
            reactor,
            max_message_size=max_message_size,
            http_connections=http_connections,
            credentials=None if credentials is None else credentials(name, server, principal),
        )

    def http_sse_channels(name: str, server: ServerConfig) -> Channel:
        assert not isinstance(server, StdioServer)
        from mcpx.upstream.http_sse import HTTPSSEChannel  # deferred as above

        return HTTPSSEChannel(name, server, reactor, max_message_size=max_message_size)

    cache = EraCache.load(None if state_dir is None else cache_path(state_dir))
    return Connector(
        clock=reactor,
        cache=cache,
        channels=channels,
        http_sse_channels=http_sse_channels,
        probe_timeout=probe_timeout,
        open_timeout=open_timeout,
        lenient=lenient,
        max_rounds=max_rounds,
        principal_channels=principal_channels,
    )
