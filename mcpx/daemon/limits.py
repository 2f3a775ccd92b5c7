# -*- test-case-name: tests.daemon.test_limits -*-
"""
The limits that keep the daemon's owner in: descriptors, connections, deadlines
and request bodies on the HTTP listeners.

A peer that opens connections by the thousand, drips its headers a byte at a time
or uploads a gigabyte must not lock out the owner's own unix socket, nor fill the
disk or the memory.  So:

  - at start the soft descriptor limit is raised to the hard one
    (L{raise_descriptor_limit});
  - TCP connections are capped per peer address and in total, the total kept
    L{RESERVED_DESCRIPTORS} below the descriptor limit so the unix sockets, the
    upstreams' pipes and the files always find a descriptor; a connection over a
    cap is answered C{503} with C{Retry-After} and closed (L{Admission}), or, while
    L{MAX_REFUSING} others are still being answered, closed at once;
  - a request's headers must arrive within C{transport.headerTimeout} of its first
    byte, its body within C{transport.bodyTimeout} of the end of the headers, and a
    keep-alive connection waiting for its next request is closed after
    C{transport.idleTimeout}; while a request is being answered no deadline runs,
    so event streams and long calls are never cut (L{LimitedChannel});
  - a body is refused from its C{Content-Length} before it is read, cut off as soon
    as a chunked one passes C{transport.maxRequestBody}, held in memory only (never
    in a temporary file), and the bodies held at once are bounded by
    C{transport.maxRequestBodyTotal} (L{BoundedRequest}).
"""

from __future__ import annotations

import json
import resource
from collections.abc import Callable
from io import BytesIO
from typing import Any

from attrs import frozen
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IAddress, IDelayedCall, IReactorTime
from twisted.internet.protocol import Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.http import RESPONSES, HTTPChannel
from twisted.web.server import Request, Site

from mcpx.settings.resolve import Settings

_log = Logger()

#: Descriptors kept free of TCP connections: the unix sockets and their clients, the
#: upstreams' pipes, the log and the question store.
RESERVED_DESCRIPTORS = 256

#: Refused connections still being answered at once; past this, one more is closed
#: without an answer, so a burst of accepts cannot spend the descriptors kept free.
MAX_REFUSING = 64

#: How long a refused or timed-out connection may take to read its answer and go
#: before it is aborted.
ABORT_AFTER = 2.0

#: How often a refusal that keeps happening is summed up in the log.
SUMMARY_INTERVAL = 60.0

#: The C{Retry-After} of a connection refused for being over a cap, in seconds.
RETRY_AFTER = 5


def descriptor_limit() -> int:
    """The soft limit on this process's open descriptors."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def raise_descriptor_limit() -> int:
    """
    Raise the soft descriptor limit to the hard limit, log it, and return it.

    An unlimited hard limit (macOS) is not a value C{setrlimit} takes for the soft
    one, so the raise stops at 65,536 there.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if soft != resource.RLIM_INFINITY and target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as e:
            _log.warn(
                "cannot raise the descriptor limit from {soft} to {hard}: {error}",
                soft=soft,
                hard=target,
                error=e,
            )
    limit = descriptor_limit()
    _log.info("descriptor limit: {limit}", limit=limit)
    return limit


@frozen(kw_only=True)
class TransportLimits:
    """
    The HTTP transport's limits, as the C{transport.*} settings give them.

    @ivar max_body: the largest request body, in bytes.
    @ivar max_bodies_total: the bytes of request bodies held at once, all connections
        together.
    @ivar max_connections: TCP connections open at once, all peers together.
    @ivar max_connections_per_peer: TCP connections open at once from one address.
    @ivar header_timeout: seconds from a request's first byte to the end of its headers.
    @ivar body_timeout: seconds from the end of the headers to the end of the body.
    @ivar idle_timeout: seconds a connection may wait for its (next) request.
    """

    max_body: int = 4 * 1024 * 1024
    max_bodies_total: int = 64 * 1024 * 1024
    max_connections: int = 1024
    max_connections_per_peer: int = 128
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    idle_timeout: float = 60.0

    @classmethod
    def from_settings(cls, settings: Settings) -> TransportLimits:
        max_body = settings.integer("transport.maxRequestBody")
        return cls(
            max_body=max_body,
            max_bodies_total=max(max_body, settings.integer("transport.maxRequestBodyTotal")),
            max_connections=settings.integer("transport.maxConnections"),
            max_connections_per_peer=settings.integer("transport.maxConnectionsPerPeer"),
            header_timeout=settings.duration("transport.headerTimeout"),
            body_timeout=settings.duration("transport.bodyTimeout"),
            idle_timeout=settings.duration("transport.idleTimeout"),
        )

    def connection_cap(self, descriptors: int) -> int:
        """The total TCP connections allowed under a descriptor limit of C{descriptors}."""
        room = max(descriptors - RESERVED_DESCRIPTORS, descriptors // 2)
        return max(1, min(self.max_connections, room))


def error_response(status: int, code: str, message: str, retry_after: int | None = None) -> bytes:
    """A whole HTTP/1.1 answer with a JSON error body, after which the connection closes."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode("utf-8")
    head = [
        b"HTTP/1.1 %d %s" % (status, RESPONSES.get(status, b"Error")),
        b"Content-Type: application/json",
        b"Content-Length: %d" % len(body),
        b"Connection: close",
    ]
    if retry_after is not None:
        head.append(b"Retry-After: %d" % retry_after)
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class RefusalLog:
    """
    Log a kind of refusal once, then at most one summary a minute while it goes on.

    A flood of refused connections must not become a flood of log lines.
    """

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        self._counts: dict[str, int] = {}
        self._summaries: dict[str, IDelayedCall] = {}

    def refused(self, kind: str, message: str) -> None:
        if kind in self._counts:
            self._counts[kind] += 1
            return
        _log.warn("{refusal} (further refusals are summed up each minute)", refusal=message)
        self._counts[kind] = 0
        self._summaries[kind] = self._clock.callLater(SUMMARY_INTERVAL, self._summarise, kind)

    def _summarise(self, kind: str) -> None:
        count = self._counts.pop(kind, 0)
        del self._summaries[kind]
        if count:
            _log.warn(
                "refused {count} more ({kind}) in the last {interval:.0f} s",
                count=count,
                kind=kind,
                interval=SUMMARY_INTERVAL,
            )
            self._counts[kind] = 0
            self._summaries[kind] = self._clock.callLater(SUMMARY_INTERVAL, self._summarise, kind)

    def close(self) -> None:
        summaries, self._summaries = self._summaries, {}
        self._counts.clear()
        for call in summaries.values():
            call.cancel()


class Admission:
    """
    The connections and body bytes the whole site holds, and who may have more.

    @ivar body_bytes: the bytes of request bodies held, all connections together;
        each connection holds and lets go of its own (L{LimitedChannel}).

    Only TCP peers are counted: the unix socket is its owner's, and always answers.
    """

    def __init__(self, limits: TransportLimits, clock: IReactorTime, descriptors: int) -> None:
        self.limits = limits
        self.log = RefusalLog(clock)
        self.cap = limits.connection_cap(descriptors)
        self.total = 0
        self.per_peer: dict[str, int] = {}
        self.body_bytes = 0
        self.refusing = 0

    def admit(self, address: IAddress | None) -> tuple[str | None, bytes | None]:
        """
        Count a new connection from C{address}.

        @return: the peer key to hand back to L{release} (C{None} for a connection
            that is not counted), and the refusal to send instead if it is over a cap.
        """
        if not isinstance(address, IPv4Address | IPv6Address):
            return None, None
        peer = address.host
        if self.total >= self.cap:
            message = (
                f"too many connections: {self.cap} are open "
                "(transport.maxConnections, bounded by the descriptor limit)"
            )
            self.log.refused("connections in total", f"refused a connection from {peer}: {message}")
            return None, error_response(503, "too_many_connections", message, RETRY_AFTER)
        held = self.per_peer.get(peer, 0)
        if held >= self.limits.max_connections_per_peer:
            message = (
                f"too many connections from {peer}: {held} are open "
                "(transport.maxConnectionsPerPeer)"
            )
            self.log.refused("connections per peer", f"refused a connection: {message}")
            return None, error_response(503, "too_many_connections", message, RETRY_AFTER)
        self.total += 1
        self.per_peer[peer] = held + 1
        return peer, None

    def release(self, peer: str | None) -> None:
        if peer is None:
            return
        self.total -= 1
        left = self.per_peer[peer] - 1
        if left:
            self.per_peer[peer] = left
        else:
            del self.per_peer[peer]


class RefusedConnection(Protocol):
    """Send one canned answer on connect, then close: a connection over a cap."""

    def __init__(self, answer: bytes, admission: Admission) -> None:
        self._answer = answer
        self._admission = admission
        admission.refusing += 1

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.write(self._answer)
        self.transport.loseConnection()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._admission.refusing -= 1


_IDLE, _HEADERS, _BODY, _BUSY = "idle", "headers", "body", "busy"


class LimitedChannel(HTTPChannel):
    """
    An HTTP/1.1 channel with deadlines per request phase and bounded bodies.

    One deadline runs at a time, for the phase the connection is in: waiting for a
    request (idle), receiving headers, receiving the body.  Unlike C{TimeoutMixin},
    bytes arriving do not push it back, so a client dripping a byte every few
    seconds is cut off all the same.  Once the request is whole nothing runs until
    it is answered.
    """

    def __init__(self, admission: Admission, peer: str | None, clock: IReactorTime) -> None:
        HTTPChannel.__init__(self)
        self._admission = admission
        self._limits = admission.limits
        self._peer = peer
        self._clock = clock
        self._phase = _IDLE
        self._deadline: IDelayedCall | None = None
        #: When the timer fires (it may be before the phase's deadline, L{_expect}).
        self._deadline_at = 0.0
        #: When the phase's deadline is.
        self._due = 0.0
        self._abort: IDelayedCall | None = None
        self._received = 0
        self._reserved = 0
        self._closing = False
        #: Told of the connection as it is made, before anything is read (the site's).
        self.opened: Callable[[LimitedChannel], None] | None = None

    # the phases

    def connectionMade(self) -> None:
        HTTPChannel.connectionMade(self)
        if self.opened is not None:
            self.opened(self)
        transport: Any = self.transport
        set_no_delay = getattr(transport, "setTcpNoDelay", None)
        if set_no_delay is not None and isinstance(transport.getHost(), (IPv4Address, IPv6Address)):
            # An answer is written in a few pieces and the client waits for all of them:
            # Nagle's algorithm would hold the last piece back for the client's ACK.
            set_no_delay(True)
        self._expect(_IDLE, self._limits.idle_timeout)

    @property
    def closing(self) -> bool:
        """Whether the connection is being closed: nothing more it sends is read."""
        return self._closing

    def dataReceived(self, data: bytes) -> None:
        if self._closing or getattr(self.transport, "disconnecting", False):
            # Refused or ended: twisted.web stops reading at the line that closed the
            # connection, but only within one read; nothing later may become a request
            # (a header it refused with 400 would otherwise be answered as well).
            return
        if data:
            self.headers_begun()
        HTTPChannel.dataReceived(self, data)

    def headers_begun(self) -> None:
        """A request's first bytes arrived: its headers have until the header deadline."""
        if self._phase == _IDLE:
            self._expect(_HEADERS, self._limits.header_timeout)

    def body_awaited(self) -> None:
        """The headers are in: the body has until the body deadline."""
        self._expect(_BODY, self._limits.body_timeout)

    def request_whole(self) -> None:
        """The request is whole: no deadline runs while it is answered."""
        # The timer is kept for the idle deadline after the answer, and does nothing if
        # it fires meanwhile: a connection costs one DelayedCall, not one per request.
        self._phase = _BUSY

    def request_answered(self) -> None:
        """The answer is written: the body's bytes are let go, the idle deadline runs."""
        self._release_body()
        self._expect(_IDLE, self._limits.idle_timeout)

    def allHeadersReceived(self) -> None:
        length = self.length
        if not self.body_allowed(length):
            return
        HTTPChannel.allHeadersReceived(self)
        if length != 0:
            self.body_awaited()

    def body_allowed(self, length: int | None) -> bool:
        """
        Whether a body of C{length} bytes (C{None}: chunked, counted as it comes) may
        be received, held against the total; if not, the request is refused and the
        connection closes.
        """
        limit = self._limits.max_body
        if length is not None and length > limit:
            self._refuse(
                413,
                "body_too_large",
                f"the request body of {length} bytes is larger than {limit} bytes "
                "(transport.maxRequestBody)",
            )
            return False
        return not length or self._reserve(length)

    def body_arrived(self, size: int) -> bool:
        """
        Count C{size} more bytes of the current body; refuse the request once it is
        too large or the total is spent.

        @return: whether the bytes may be kept.
        """
        if self._closing:
            return False
        self._received += size
        limit = self._limits.max_body
        if self._received > limit:
            self._refuse(
                413,
                "body_too_large",
                f"the request body is larger than {limit} bytes (transport.maxRequestBody)",
            )
            return False
        if self._received > self._reserved:
            # A chunked body holds its bytes as they come.
            return self._reserve(self._received - self._reserved)
        return True

    def allContentReceived(self) -> None:
        if self._closing:
            # The end of a body already refused: the request must not run.
            return
        self.request_whole()
        HTTPChannel.allContentReceived(self)

    def requestDone(self, request: Any) -> None:
        self.request_answered()
        HTTPChannel.requestDone(self, request)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._expect(_BUSY, None)
        if self._abort is not None and self._abort.active():
            self._abort.cancel()
        self._abort = None
        self._release_body()
        self._admission.release(self._peer)
        self._peer = None
        HTTPChannel.connectionLost(self, reason)

    # helpers

    def _expect(self, phase: str, timeout: float | None) -> None:
        # One timer per connection, for all its phases: a request costs no new
        # DelayedCall on the way, and no reset of the one there is when it fires
        # before the new deadline (as the idle one after each answer mostly does):
        # it is moved on to the deadline then (_expired).
        self._phase = phase
        deadline = self._deadline
        if not timeout:
            if deadline is not None:
                self._deadline = None
                deadline.cancel()
            return
        due = self._clock.seconds() + timeout
        self._due = due
        if deadline is None:
            self._deadline = self._clock.callLater(timeout, self._expired)
            self._deadline_at = due
        elif due < self._deadline_at:
            deadline.reset(timeout)
            self._deadline_at = due

    def _expired(self) -> None:
        self._deadline = None
        phase = self._phase
        if phase == _BUSY:
            return
        left = self._due - self._clock.seconds()
        if left > 0:
            # The timer fired before the phase's deadline (see _expect).
            self._deadline = self._clock.callLater(left, self._expired)
            self._deadline_at = self._due
            return
        if phase == _IDLE:
            self._close()
        elif phase == _HEADERS:
            timeout = self._limits.header_timeout
            self._refuse(
                408,
                "request_timeout",
                f"the request headers did not arrive within {timeout:g} s "
                "(transport.headerTimeout)",
            )
        else:
            timeout = self._limits.body_timeout
            self._refuse(
                408,
                "request_timeout",
                f"the request body did not arrive within {timeout:g} s (transport.bodyTimeout)",
            )

    def _reserve(self, size: int) -> bool:
        """Hold C{size} more bytes of request bodies, if the site's total allows it."""
        # Admission.body_bytes counted here, for every request, without a call of its own.
        admission = self._admission
        total = admission.limits.max_bodies_total
        if admission.body_bytes + size <= total:
            admission.body_bytes += size
            self._reserved += size
            return True
        self._refuse(
            503,
            "busy_receiving",
            f"the daemon is already receiving {total} bytes of request bodies "
            "(transport.maxRequestBodyTotal); try again shortly",
            retry_after=1,
        )
        return False

    def _release_body(self) -> None:
        if self._reserved:
            self._admission.body_bytes -= self._reserved
        self._reserved = 0
        self._received = 0

    def _refuse(self, status: int, code: str, message: str, retry_after: int | None = None) -> None:
        if self._closing:
            return
        peer = self._peer or "the unix socket"
        self._admission.log.refused(code, f"refused a request from {peer}: {message}")
        assert self.transport is not None
        self.transport.write(error_response(status, code, message, retry_after))
        self._close(linger=True)

    def _close(self, linger: bool = False) -> None:
        """
        Close and stop reading; abort if the peer has not gone after L{ABORT_AFTER}.

        @param linger: end only the sending side, and drop what the peer still sends
            until it closes: closing a socket with unread input resets the
            connection, and the peer would lose the answer just written.
        """
        self._closing = True
        self._expect(_BUSY, None)
        self._release_body()
        transport: Any = self.transport
        if linger and hasattr(transport, "loseWriteConnection"):
            transport.loseWriteConnection()
        else:
            HTTPChannel.loseConnection(self)
        if self._abort is None:
            self._abort = self._clock.callLater(ABORT_AFTER, self._force_abort)

    def _force_abort(self) -> None:
        self._abort = None
        transport: Any = self.transport
        if transport is not None:
            transport.abortConnection()


class BoundedRequest(Request):
    """A request whose body lives in memory and is counted as it arrives."""

    def gotLength(self, length: int | None) -> None:
        # Never Request's temporary file: the channel has already bounded the length.
        self.content = BytesIO()

    def handleContentChunk(self, data: bytes) -> None:
        channel = self.channel
        if isinstance(channel, LimitedChannel) and not channel.body_arrived(len(data)):
            return
        content = self.content
        if content is not None:
            content.write(data)


class LimitedSite(Site):
    """A site whose connections are admitted by an L{Admission} and run a L{LimitedChannel}."""

    requestFactory = BoundedRequest

    def __init__(
        self,
        resource: Any,
        reactor: IReactorTime,
        limits: TransportLimits | None = None,
        descriptors: int | None = None,
    ) -> None:
        Site.__init__(self, resource, reactor=reactor)
        self.admission = Admission(
            limits or TransportLimits(),
            reactor,
            descriptor_limit() if descriptors is None else descriptors,
        )

    def buildProtocol(self, addr: IAddress | None) -> Any:
        peer, refusal = self.admission.admit(addr)
        if refusal is not None:
            if self.admission.refusing >= MAX_REFUSING:
                # The listening port closes the socket before it accepts another.
                return None
            return RefusedConnection(refusal, self.admission)
        channel = self.channel(peer)
        channel.factory = self
        channel.requestFactory = self.requestFactory
        channel.site = self  # type: ignore[attr-defined]
        # The channel keeps its own deadlines; TimeoutMixin's would reset on each byte.
        channel.timeOut = None
        return channel

    def channel(self, peer: str | None) -> LimitedChannel:
        """The channel of a connection admitted from C{peer} (C{None}: not counted)."""
        return LimitedChannel(self.admission, peer, self.reactor)

    def startFactory(self) -> None:
        Site.startFactory(self)
        admission = self.admission
        _log.info(
            "TCP connections: at most {cap} at once, {per_peer} from one address",
            cap=admission.cap,
            per_peer=admission.limits.max_connections_per_peer,
        )

    def stopFactory(self) -> None:
        self.admission.log.close()
        Site.stopFactory(self)
