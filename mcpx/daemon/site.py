# -*- test-case-name: tests.daemon.test_limits,tests.daemon.test_lean_path -*-
"""
The daemon's twisted.web site (L{DaemonSite}): bounded connections and bodies, a
counter instead of an access log, the lean path for C{POST /mcp}, and each connection
told to the stop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attrs import frozen
from twisted.internet.interfaces import IReactorTime
from twisted.web.server import Request

from mcpx.daemon.lean_path import LeanChannel, LeanMcp
from mcpx.daemon.limits import BoundedRequest, LimitedChannel, LimitedSite, TransportLimits
from mcpx.daemon.metrics import Metrics
from mcpx.ops.shutdown import Shutdown


class JSONRequest(BoundedRequest):
    """
    A request whose body is never parsed as an HTML form: every body mcpx accepts is
    JSON, and looking for form data costs a MIME parse per POST.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["parsePOSTFormSubmission"] = False
        Request.__init__(self, *args, **kwargs)


@frozen
class SiteOptions:
    """
    What the daemon's site is fitted with beyond a bounded twisted.web site.

    @ivar limits: bounds its connections and bodies; C{None}, L{TransportLimits}' defaults.
    @ivar metrics: counts each request (L{Metrics}); C{None}, nothing is counted.
    @ivar shutdown: is told of each connection, so the stop can close it once its
        answers have left; C{None}, nothing tracks them.
    @ivar lean: answers C{POST /mcp} on the lean path (L{mcpx.daemon.lean_path});
        C{None}, every request goes through twisted.web and the Klein app.
    @ivar opened: told of each connection (its channel) as it is made, before it is
        read from: the gate judges who opened it (L{mcpx.daemon.gate.Gate.connection_made}).
    """

    limits: TransportLimits | None = None
    metrics: Metrics | None = None
    shutdown: Shutdown | None = None
    lean: LeanMcp | None = None
    opened: Callable[[Any], None] | None = None


class DaemonSite(LimitedSite):
    """
    The daemon's site: no access-log line per request.  A call is already visible on
    C{/v1/events} and in the pool's log; one log line per request was a tenth of the
    cost of a C{/v1/call}.  Each request is counted in L{Metrics} instead.  Its
    connections and bodies are bounded by L{TransportLimits}.
    """

    requestFactory = JSONRequest

    def __init__(self, resource: Any, reactor: IReactorTime, options: SiteOptions) -> None:
        LimitedSite.__init__(self, resource, reactor, options.limits)
        self.noisy = False
        self.metrics = options.metrics
        if self.metrics is not None:
            # Each request counted (mcpx_http_requests), by route template and status,
            # by the metrics themselves rather than through a log method that forwards.
            self.log = self.metrics.request_finished  # type: ignore[method-assign]
        self.shutdown = options.shutdown
        self.lean = options.lean
        self.opened = options.opened

    def channel(self, peer: str | None) -> LimitedChannel:
        if self.lean is None:
            return LimitedSite.channel(self, peer)
        return LeanChannel(self.admission, peer, self.reactor, self.lean)

    def buildProtocol(self, addr: Any) -> Any:
        protocol = LimitedSite.buildProtocol(self, addr)
        if self.shutdown is not None and protocol is not None:
            # So that the stop can close the connection once its answers have left.
            self.shutdown.track(protocol)
        if protocol is not None:
            protocol.opened = self.opened
        return protocol

    def log(self, request: Any) -> None:
        # No access-log line; with metrics, counted instead (see __init__).
        pass
