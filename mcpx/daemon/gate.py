# -*- test-case-name: tests.daemon.test_gate -*-
"""
The daemon's trust boundary: every HTTP request passes L{Gate} before any route.

The rules, in the order they are applied, the same on every route (C{/health}, C{/v1},
C{/openapi.json}, C{/mcp} and anything added later):

  1. B{Origin.}  An C{Origin} header, when present, must be loopback (any port), the
     address the connection arrived at (with its port), or one of
     C{transport.allowedOrigins}; otherwise 403.  A web page the user opens cannot
     drive the daemon.  A page at a listed origin may also use C{/mcp} from its own
     origin (CORS, L{cross_origin}): its requests are answered with
     C{Access-Control-Allow-Origin}, and its preflights with what it may send, before
     rule 4 (a preflight never carries credentials).  No other origin and no other
     route is answered for CORS.
  2. B{Host.}  On TCP, C{Host} must name a loopback address or C{localhost}, the
     address the connection arrived at, or one of C{transport.allowedHosts} (a name,
     any port, or C{name:port}); otherwise 403.  This defeats DNS rebinding, where a
     hostile name is made to resolve to 127.0.0.1.  The unix socket is exempt: it is
     reached by its path, never by a name a browser resolves.
  3. B{Content type.}  A C{POST} under C{/v1/} must say C{Content-Type:
     application/json} (parameters allowed); otherwise 415.  A browser sends a
     cross-site "simple request" only as C{text/plain}, form data or without a body.
  4. B{Authentication} (C{daemon.auth}), C{/health} exempt.  The unix socket is its
     owner's (mode 0600 in a 0700 directory); a unix socket added to C{daemon.listen}
     may be open to others, so where the system names the user at the other end
     (C{SO_PEERCRED}) anyone but the daemon's own user is asked for the token there
     too.  On TCP, C{peer}, the default,
     lets in a loopback connection opened by the daemon's own user (found once per
     connection, L{mcpx.daemon.peers}) and asks everything else for the token,
     C{Authorization: Bearer <token>} (L{mcpx.daemon.token}); C{token} asks every TCP
     connection; C{none} asks nobody, and a listener beyond loopback then needs
     C{daemon.allowUnauthenticatedNetwork} (L{unauthenticated_exposure}).  A refusal
     is 401 with C{WWW-Authenticate: Bearer}.  The C{oauth} object asks every TCP
     connection (and a unix one not the owner's) for an OAuth access token instead
     (L{mcpx.daemon.bearer}), and serves the protected-resource metadata unasked.
     Whatever C{daemon.auth} says, a browser the owner signed in to the status page
     (L{mcpx.daemon.browser_login}) is let in by its session cookie, to the page and
     C{/v1} only, and only from the daemon's own origin: a C{GET} without C{Origin}
     (a browser sends none on a same-origin one) or with the daemon's own.  C{/login}
     and its script need nothing; a C{POST /login} needs the daemon's own C{Origin}.

Before all of them, on every route and whatever C{daemon.auth} says (a token does not
help): B{the daemon's own upstream processes are refused} (403 C{upstream_process}).
A stdio server runs as the daemon's user and could read its token file, so neither the
peer's uid nor the token tells it from the user.  On a unix socket the process that
connected (C{SO_PEERCRED}'s pid), on a TCP connection the process holding the client's
socket (its inode in C{/proc/net/tcp}, listed there when the client is on this
machine, from whichever of its addresses), is checked against the running upstreams'
process trees, what they left to the daemon and the run mark
(L{mcpx.upstream.lineage}).  On a unix socket that is done as the connection is made
(L{Gate.connection_made}) and again at its first request, and a maker that has ended
by then counts as an upstream's (L{mcpx.upstream.groups.ProcessGroups.owns_peer}): an
upstream could connect from a child that exits and use the socket it left.  On TCP it
is done once per connection.  C{mcpx serve}'s socket applies the same check as it
accepts a connection (L{upstream_door}).

Once the daemon has begun to stop (L{mcpx.ops.shutdown}), a request that passes
the rules is answered C{503 shutting_down} instead of reaching its route.

Refusals are JSON: C{{"error": {"code": ..., "message": ...}}}, and on C{/mcp} a
JSON-RPC error response without an id, as MCP clients expect there.  Each distinct
refusal is logged once.

What a connection is (unix or TCP, loopback, its owner) is worked out at its first
request (a unix one's maker as it is made) and kept on the connection; a request costs
a few header lookups.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final, Protocol
from urllib.parse import urlsplit

from twisted.internet.address import UNIXAddress
from twisted.internet.interfaces import ITransport
from twisted.logger import Logger
from twisted.web.iweb import IRequest
from twisted.web.resource import IResource
from zope.interface import implementer

from mcpx.daemon.bearer import OAuthGuard
from mcpx.daemon.browser_login import COOKIE, BrowserLogins
from mcpx.daemon.peers import connecting_inode, connecting_uid, unix_peer_pid, unix_peer_uid
from mcpx.daemon.status_page import LOGIN_PATHS, PAGE_PATHS
from mcpx.daemon.token import TokenFile
from mcpx.lasting import Lasting
from mcpx.ops.shutdown import SHUTTING_DOWN_CODE, Shutdown, shutting_down_error
from mcpx.pool.instances import SHUTTING_DOWN
from mcpx.settings.oauth_resource import OAuthResource, is_loopback
from mcpx.upstream.lineage import boot_ticks
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import ErrorResponse, encode

if TYPE_CHECKING:
    from mcpx.auth.resource_server import TokenVerifier

__all__ = [
    "AUTH_CHOICES",
    "Gate",
    "HostRule",
    "OriginRule",
    "Upstreams",
    "cross_origin",
    "host_name",
    "owners_unix_socket",
    "parse_origin",
    "unauthenticated_exposure",
    "upstream_door",
]

log = Logger()

#: The values of C{daemon.auth}.
AUTH_PEER: Final = "peer"
AUTH_TOKEN: Final = "token"
AUTH_NONE: Final = "none"
AUTH_CHOICES: Final = (AUTH_PEER, AUTH_TOKEN, AUTH_NONE)

#: Routes that need no authentication: a liveness probe says nothing worth a token.
OPEN_PATHS: Final = frozenset({b"/health"})

#: How many distinct refusals are logged; beyond that they are only answered.
LOGGED_REFUSALS: Final = 64

_JSON: Final = b"application/json"
_MCP_PATH: Final = b"/mcp"
_API_PREFIX: Final = b"/v1/"
#: What a page at a listed origin may do on C{/mcp} across origins (L{cross_origin}).
_CORS_METHODS: Final = b"GET, POST, DELETE"
#: The response headers such a page may read: a legacy session's id, the revision, and
#: why it was refused.
_CORS_EXPOSED: Final = b"mcp-session-id, mcp-protocol-version, www-authenticate"
#: How long (seconds) a browser may keep a preflight's answer before asking again.
CORS_MAX_AGE: Final = 600
#: A preflight's C{Access-Control-Request-Headers}: header names, comma-separated.
_HEADER_NAMES: Final = re.compile(
    rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+(?:[ \t]*,[ \t]*[!#$%&'*+.^_`|~0-9A-Za-z-]+)*"
)
#: How long it may be to be echoed back (bytes).
CORS_HEADERS_MAX: Final = 1024
#: How much of a refused header value a refusal quotes.
_ECHOED: Final = 200
#: Where the per-connection record is kept on the HTTP channel.
_SLOT: Final = "_mcpx_gate_connection"

#: The code and message of a request from one of the daemon's own upstream processes.
UPSTREAM_CODE: Final = "upstream_process"
UPSTREAM_REFUSED: Final = (
    "this connection comes from one of the daemon's own upstream servers or a process "
    "one started; the daemon takes no requests from the servers it runs"
)


class Upstreams(Protocol):
    """Which processes are the daemon's upstreams' (L{mcpx.upstream.groups.ProcessGroups})."""

    def owns_peer(self, pid: int, since: int | None) -> bool:
        """
        Whether process C{pid}, which connected a unix socket accepted at C{since}
        (L{boot_ticks}), is an upstream's or one an upstream started, or is no longer
        there to say.
        """

    def owns_socket(self, inode: int) -> bool:
        """Whether such a process holds the socket of C{inode}."""


def _handle_pid(transport: object) -> int | None:
    """The pid that connected the unix socket under C{transport}, when the system says."""
    get_handle = getattr(transport, "getHandle", None)
    return None if get_handle is None else unix_peer_pid(get_handle())


def upstream_door(upstreams: Upstreams) -> Callable[[ITransport], str | None]:
    """
    The same check for C{mcpx serve}'s socket (L{mcpx.server.mcp_socket.StdioFactory}): why
    a connection from one of the daemon's own upstream processes is refused.
    """
    logged = Lasting[int](LOGGED_REFUSALS)

    def refuse(transport: ITransport) -> str | None:
        pid = _handle_pid(transport)
        if pid is None or not upstreams.owns_peer(pid, boot_ticks()):
            return None
        if logged.begins(pid):
            log.warn(
                "refused a connection to the MCP socket from process {pid}: {message}",
                pid=pid,
                message=UPSTREAM_REFUSED,
            )
        return UPSTREAM_REFUSED

    return refuse


def parse_origin(origin: str) -> tuple[str, str, int] | None:
    """
    C{(scheme, host, port)} of an origin (host lowercased, without IPv6 brackets; the
    scheme's default port when none is written), or C{None} for C{null} and anything
    that is not an http(s) origin.
    """
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname
    if scheme not in ("http", "https") or not host:
        return None
    return scheme, host, port if port is not None else (443 if scheme == "https" else 80)


def host_name(value: str) -> str | None:
    """
    The name in a C{Host} header, lowercased, without its port or IPv6 brackets;
    C{None} when the header is not C{name}, C{name:port} or C{[v6]:port}.
    """
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        rest = value[end + 1 :]
        if end < 0 or (rest and not (rest[0] == ":" and rest[1:].isdigit())):
            return None
        return value[1:end] or None
    name, colon, port = value.partition(":")
    if colon and not port.isdigit():
        return None
    return name or None


def same_address(host: str, own: str) -> bool:
    """
    Whether C{host} names the address C{own}; C{localhost} names every loopback one (it
    is what a person types for the daemon at 127.0.0.1 or ::1).
    """
    if host == "localhost":
        return is_loopback(own.split("%", 1)[0])
    try:
        return ipaddress.ip_address(host) == ipaddress.ip_address(own.split("%", 1)[0])
    except ValueError:
        return host == own.lower()


class OriginRule:
    """Rule 1: which C{Origin} values may call the daemon."""

    def __init__(self, allowed: Iterable[str] = ()) -> None:
        parsed = set()
        for origin in allowed:
            one = parse_origin(origin)
            if one is None:
                log.warn("transport.allowedOrigins: {origin!r} is not an origin", origin=origin)
            else:
                parsed.add(one)
        self._allowed = frozenset(parsed)

    def allows(self, origin: str, own_host: str | None, own_port: int | None) -> bool:
        """
        Whether a request from C{origin} that arrived at C{own_host:own_port} (C{None}
        for the unix socket) is let in.
        """
        parsed = parse_origin(origin)
        if parsed is None:
            return False
        return is_loopback(parsed[1]) or self._own_or_listed(parsed, own_host, own_port)

    def listed(self, origin: str) -> bool:
        """Whether C{origin} is one of C{transport.allowedOrigins}."""
        return parse_origin(origin) in self._allowed

    def trusted(self, origin: str, own_host: str | None, own_port: int | None) -> bool:
        """
        Whether C{origin} is the daemon's own (the address the request arrived at) or
        one the user listed: a page there may use the owner's connection without the
        token.  Any other loopback page (another local web server, whatever it serves)
        is let in by L{allows} but must present the token, as Jupyter asks of it.
        """
        parsed = parse_origin(origin)
        return parsed is not None and self._own_or_listed(parsed, own_host, own_port)

    def _own_or_listed(
        self, parsed: tuple[str, str, int], own_host: str | None, own_port: int | None
    ) -> bool:
        """Whether a parsed origin is one the user listed, or the daemon's own address."""
        if parsed in self._allowed:
            return True
        _, host, port = parsed
        return own_host is not None and port == own_port and same_address(host, own_host)


class HostRule:
    """Rule 2: which C{Host} names reach the daemon over TCP."""

    def __init__(self, allowed: Iterable[str] = ()) -> None:
        self._allowed = frozenset(entry.strip().lower() for entry in allowed if entry.strip())

    def allows(self, host: str, own_host: str | None) -> bool:
        """Whether C{Host: host} is this daemon's, on a connection to C{own_host}."""
        name = host_name(host)
        if name is None:
            return False
        if name in self._allowed or host.strip().lower() in self._allowed:
            return True
        return is_loopback(name) or (own_host is not None and same_address(name, own_host))


def cross_origin(request: IRequest, origin: bytes) -> bytes | None:
    """
    CORS on C{/mcp} for a page at an origin the user listed in
    C{transport.allowedOrigins}, such as a browser-based host: its responses say it may
    read them; a preflight (C{OPTIONS} with C{Access-Control-Request-Method}) is
    answered here, C{204} with the methods and the headers it asked to send, and the
    empty body returned; any other request goes on (C{None}).
    """
    request.setHeader(b"access-control-allow-origin", origin)
    request.setHeader(b"access-control-expose-headers", _CORS_EXPOSED)
    request.setHeader(b"vary", b"origin")
    if request.method != b"OPTIONS" or request.getHeader(b"access-control-request-method") is None:
        return None
    request.setResponseCode(204)
    request.setHeader(b"access-control-allow-methods", _CORS_METHODS)
    asked = (request.getHeader(b"access-control-request-headers") or b"").strip()
    if len(asked) <= CORS_HEADERS_MAX and _HEADER_NAMES.fullmatch(asked):
        request.setHeader(b"access-control-allow-headers", asked)
    request.setHeader(b"access-control-max-age", b"%d" % CORS_MAX_AGE)
    return b""


def unauthenticated_exposure(auth: str, exposed: Iterable[str], allowed: bool) -> str | None:
    """
    Why the daemon must not start, or C{None}: C{daemon.auth} C{none} with a listener
    beyond loopback (C{exposed}) serves tools to the network unless the user said so.
    """
    exposed = tuple(exposed)
    if auth != AUTH_NONE or not exposed or allowed:
        return None
    return (
        f"daemon.auth is none, and {', '.join(exposed)} listens beyond loopback: anyone "
        "who can reach it could run tools as this user. Set daemon.auth to peer or token, "
        "bind daemon.listen to 127.0.0.1, or set daemon.allowUnauthenticatedNetwork to "
        "true if that is really what you want."
    )


class _Connection:
    """
    What the gate knows about one connection, worked out as it is made
    (L{Gate.connection_made}) or at its first request.

    @ivar unix: whether it came through a unix socket.
    @ivar own_host: the address it arrived at (TCP), else C{None}.
    @ivar peer: the client's address and port (TCP), else C{None}.
    @ivar owner: whether the daemon's own user opened it; C{None} until asked.  On a
        unix socket whose peer the system does not name, the file permissions decide
        and it counts as the owner's.
    @ivar host: the last C{Host} value let in, so a keep-alive connection checks once.
    @ivar upstream: whether one of the daemon's own upstream processes opened it;
        C{None} until asked.
    @ivar since: when it was accepted (L{boot_ticks}), for the unix socket's pid.
    @ivar recheck: whether it was judged as it was made, to be judged again at its
        first request.
    @ivar owners_unix: whether it is a unix one of the owner's, not an upstream's, so
        judged: a request on it without C{Origin} to C{/mcp} passes every rule as it
        did, and is let in without asking them again (L{Gate._check}).
    """

    __slots__ = (
        "host",
        "loopback",
        "own_host",
        "own_port",
        "owner",
        "owners_unix",
        "peer",
        "recheck",
        "since",
        "unix",
        "upstream",
    )

    def __init__(self, own: Any, client: Any) -> None:
        self.unix = isinstance(own, UNIXAddress)
        self.own_host: str | None = None if self.unix else getattr(own, "host", None)
        self.own_port: int | None = None if self.unix else getattr(own, "port", None)
        peer_host, peer_port = getattr(client, "host", None), getattr(client, "port", None)
        self.peer: tuple[str, int] | None = (
            (peer_host, peer_port)
            if isinstance(peer_host, str) and isinstance(peer_port, int)
            else None
        )
        self.loopback = self.peer is not None and is_loopback(self.peer[0].split("%", 1)[0])
        self.owner: bool | None = None
        self.host: bytes | None = None
        self.upstream: bool | None = None
        self.since = boot_ticks() if self.unix else None
        self.recheck = False
        self.owners_unix = False


class _Bearer:
    """What L{Gate._check} says when the OAuth guard must decide."""


_BEARER: Final = _Bearer()


def owners_unix_socket(request: IRequest) -> bool:
    """
    Whether C{request} came through a unix socket opened by the daemon's own user (or
    one whose peer the system does not name, so its file permissions decided).
    """
    if not isinstance(request.getHost(), UNIXAddress):
        return False
    uid = _unix_uid(request)
    return uid is None or uid == os.getuid()


def _unix_uid(request: IRequest) -> int | None:
    """The uid behind a unix-socket request's connection, when the system says."""
    transport = getattr(getattr(request, "channel", None), "transport", None)
    get_handle = getattr(transport, "getHandle", None)
    return None if get_handle is None else unix_peer_uid(get_handle())


@implementer(IResource)
class Gate:
    """
    The resource in front of the daemon's Klein app: applies the rules above, then
    hands the request to C{inner}.

    @param uid: the daemon's own user, the process's by default.
    @param lookup_uid: finds the uid behind a loopback connection (peer, own address);
        injected so tests need not open sockets as other users.
    @param lookup_unix_uid: finds the uid behind a unix-socket request's connection
        (C{SO_PEERCRED} by default).
    @param upstreams: the daemon's upstream processes, whose requests are refused;
        C{None} to refuse none (a gate without upstreams).
    @param lookup_unix_pid: finds the pid that connected a unix-socket connection,
        given its transport (C{SO_PEERCRED} by default).
    @param lookup_inode: finds the inode of the client's socket of a TCP connection
        (peer, own address); C{None} when it is not on this machine.
    """

    isLeaf = True

    def __init__(
        self,
        inner: IResource,
        *,
        origins: OriginRule,
        hosts: HostRule,
        auth: str | OAuthResource = AUTH_PEER,
        token: TokenFile | None = None,
        verifier: TokenVerifier | None = None,
        logins: BrowserLogins | None = None,
        uid: int | None = None,
        lookup_uid: Callable[[tuple[str, int], tuple[str, int]], int | None] = connecting_uid,
        lookup_unix_uid: Callable[[IRequest], int | None] | None = None,
        shutdown: Shutdown | None = None,
        upstreams: Upstreams | None = None,
        lookup_unix_pid: Callable[[object], int | None] = _handle_pid,
        lookup_inode: Callable[[tuple[str, int], tuple[str, int]], int | None] = connecting_inode,
    ) -> None:
        self._oauth: OAuthGuard | None = None
        if isinstance(auth, OAuthResource):
            if verifier is None:
                raise ValueError("daemon.auth oauth needs a token verifier")
            self._oauth = OAuthGuard(auth, verifier)
            # The unix socket's rules are token's; TCP goes to the guard.
            auth = AUTH_TOKEN
        if auth not in AUTH_CHOICES:
            raise ValueError(f"daemon.auth must be one of {', '.join(AUTH_CHOICES)}")
        if auth != AUTH_NONE and token is None:
            raise ValueError(f"daemon.auth {auth} needs the token file")
        self._inner = inner
        self._origins = origins
        self._hosts = hosts
        self._auth = auth
        self._token = token
        self._logins = logins
        self._uid = os.getuid() if uid is None else uid
        self._lookup_uid = lookup_uid
        self._lookup_unix_uid = lookup_unix_uid or _unix_uid
        self._logged: Lasting[tuple[str, str]] = Lasting(LOGGED_REFUSALS)
        self._shutdown = shutdown
        self._upstreams = upstreams
        self._lookup_unix_pid = lookup_unix_pid
        self._lookup_inode = lookup_inode

    # IResource: the gate is a leaf, so traversal ends here and render decides.

    def getChildWithDefault(self, name: bytes, request: IRequest) -> IResource:
        return self

    def putChild(self, path: bytes, child: IResource) -> None:
        raise NotImplementedError("the gate has no children; add routes to the Klein app")

    def render(self, request: IRequest) -> Any:
        inner: Any = self._inner
        return self.guard(request, inner.render)

    def guard(self, request: IRequest, proceed: Callable[[IRequest], Any]) -> Any:
        """
        Apply the rules to C{request}, then C{proceed(request)} if it passes them.

        The one entry of every request, whichever path parsed it: the Klein app's
        (L{render}) and C{/mcp}'s lean path (L{mcpx.daemon.lean_path}).

        @return: what C{render} returns: a refusal's bytes, what C{proceed} returned,
            or C{NOT_DONE_YET} while an access token's keys are fetched (the answer is
            then written to C{request} when they arrive).
        """
        refusal = self._check(request)
        if refusal is None:
            # _pass's, without its call: this is every request's way.
            shutdown = self._shutdown
            if shutdown is None or not shutdown.begun:
                return proceed(request)
            return self._refuse_during_stop(request)
        if refusal is _BEARER:
            assert self._oauth is not None
            return self._oauth.check(request, lambda: self._pass(request, proceed), self._refuse)
        return refusal

    def _pass(self, request: IRequest, proceed: Callable[[IRequest], Any]) -> Any:
        """A request that passed the rules: C{proceed(request)}, unless the stop began."""
        if self._shutdown is not None and self._shutdown.begun:
            return self._refuse_during_stop(request)
        return proceed(request)

    def _refuse_during_stop(self, request: IRequest) -> bytes:
        """
        The daemon is stopping: no new work, and the connection closes after this
        answer, so a keep-alive client opens a new one (to the next daemon).
        """
        channel = getattr(request, "channel", None)
        if channel is not None:
            channel.persistent = False
        request.setHeader(b"connection", b"close")
        return self._refuse(
            request,
            503,
            SHUTTING_DOWN_CODE,
            f"{SHUTTING_DOWN}: try again once it has started again",
            "stop",
            rpc=shutting_down_error(),
        )

    def connection_made(self, channel: object) -> None:
        """
        Judge a new connection on a unix socket as it is made, before it sends a byte
        (L{mcpx.daemon.limits.LimitedChannel}'s C{opened}): the process that connected
        is asked about while it should still be there, and a connection whose maker
        is already gone is taken for an upstream's.  Its first request asks again.
        """
        transport: Any = getattr(channel, "transport", None)
        if self._upstreams is None or transport is None:
            return
        connection = _Connection(transport.getHost(), transport.getPeer())
        if not connection.unix:
            return
        connection.upstream = self._unix_upstream(connection, transport)
        connection.recheck = True
        setattr(channel, _SLOT, connection)

    def _check(self, request: IRequest) -> bytes | _Bearer | None:
        channel = getattr(request, "channel", None)
        connection: _Connection | None = getattr(channel, _SLOT, None)
        if connection is None:
            connection = _Connection(request.getHost(), request.getClientAddress())
            if channel is not None:
                setattr(channel, _SLOT, connection)
        origin = request.getHeader(b"origin")
        if connection.owners_unix and origin is None and request.path == _MCP_PATH:
            # Judged as below at an earlier request of the connection, with nothing in
            # this one (no Origin, /mcp) that the rules judge by besides.
            return None
        if self._from_upstream(connection, request):
            return self._refuse(request, 403, UPSTREAM_CODE, UPSTREAM_REFUSED, "upstream")
        if origin is not None and not self._origins.allows(
            origin.decode("latin-1"), connection.own_host, connection.own_port
        ):
            text = origin.decode("latin-1")[:_ECHOED]
            return self._refuse(
                request,
                403,
                "origin_not_allowed",
                f"origin {text} is not allowed; add it to transport.allowedOrigins to let it in",
                text,
            )
        if not connection.unix:
            host = request.getHeader(b"host")
            if host is None or (
                host != connection.host
                and not self._hosts.allows(host.decode("latin-1"), connection.own_host)
            ):
                text = "(none)" if host is None else host.decode("latin-1")[:_ECHOED]
                return self._refuse(
                    request,
                    403,
                    "host_not_allowed",
                    f"Host {text} does not name this daemon; reach it by a loopback address "
                    "or add the name to transport.allowedHosts",
                    text,
                )
            connection.host = host
        path = request.path
        if (
            origin is not None
            and path == _MCP_PATH
            and self._origins.listed(origin.decode("latin-1"))
        ):
            preflight = cross_origin(request, origin)
            if preflight is not None:
                return preflight
        if request.method == b"POST" and path.startswith(_API_PREFIX):
            ctype = request.getHeader(b"content-type")
            if ctype is None or ctype.split(b";", 1)[0].strip().lower() != _JSON:
                return self._refuse(
                    request,
                    415,
                    "unsupported_media_type",
                    "the body must be JSON: send Content-Type: application/json",
                    "content-type",
                )
        if self._auth == AUTH_NONE or path in OPEN_PATHS:
            return None
        if path in LOGIN_PATHS and not connection.unix:
            return self._login_check(request, origin, connection)
        if self._oauth is not None and path in self._oauth.paths:
            return self._oauth.metadata(request)
        if connection.unix:
            if self._is_unix_owner(connection, request):
                # Known now to be the owner's, and not an upstream's (_from_upstream
                # judged it, and judges it no more).
                connection.owners_unix = not connection.upstream and not connection.recheck
                return None
        elif (
            self._auth == AUTH_PEER
            and connection.loopback
            and (
                origin is None
                or self._origins.trusted(
                    origin.decode("latin-1"), connection.own_host, connection.own_port
                )
            )
            and self._is_owner(connection)
        ):
            # A browser runs as the owner too: a page from another origin does not get
            # the owner's pass just because it was opened on this machine.
            return None
        elif self._signed_in_browser(request, origin, connection):
            return None
        if self._oauth is not None:
            return _BEARER
        if self._bearer_matches(request):
            return None
        request.setHeader(b"www-authenticate", b"Bearer")
        return self._refuse(
            request,
            401,
            "unauthorized",
            "this connection needs the daemon's token: send Authorization: Bearer <token> "
            "(`mcpx token` prints it)",
            "authorization",
        )

    def _from_upstream(self, connection: _Connection, request: IRequest) -> bool:
        """Whether one of the daemon's own upstream processes opened the connection."""
        if self._upstreams is None:
            return False
        if connection.upstream is None or (connection.recheck and not connection.upstream):
            connection.recheck = False
            connection.upstream = False
            if connection.unix:
                transport = getattr(getattr(request, "channel", None), "transport", None)
                connection.upstream = self._unix_upstream(connection, transport)
            elif connection.peer is not None and connection.own_host is not None:
                # Whichever address it came from (a listener on 0.0.0.0 or :: is reached
                # from this machine's other addresses too): the client's socket is in
                # /proc/net/tcp only when it is on this machine, and then the process
                # holding it is asked about.
                own = (connection.own_host, connection.own_port or 0)
                inode = self._lookup_inode(connection.peer, own)
                connection.upstream = inode is not None and self._upstreams.owns_socket(inode)
        return connection.upstream

    def _unix_upstream(self, connection: _Connection, transport: object) -> bool:
        """Whether the process that connected a unix socket is an upstream's, or gone."""
        assert self._upstreams is not None
        pid = self._lookup_unix_pid(transport)
        return pid is not None and self._upstreams.owns_peer(pid, connection.since)

    def _own_origin(self, origin: bytes | None, connection: _Connection) -> bool:
        return origin is not None and self._origins.trusted(
            origin.decode("latin-1"), connection.own_host, connection.own_port
        )

    def _login_check(
        self, request: IRequest, origin: bytes | None, connection: _Connection
    ) -> bytes | None:
        """
        C{/login} (the page that exchanges a one-time code) needs no credentials; its
        C{POST} must come from the daemon's own origin, so no other page can sign a
        browser in (or out).
        """
        if request.method != b"POST" or self._own_origin(origin, connection):
            return None
        return self._refuse(
            request,
            403,
            "origin_not_allowed",
            "a sign-in to the status page must come from the page at this daemon's address",
            "login-origin",
        )

    def _signed_in_browser(
        self, request: IRequest, origin: bytes | None, connection: _Connection
    ) -> bool:
        """
        Whether a TCP request is the status page's own, in a browser signed in with a
        one-time link: a session cookie, a path of the page or C{/v1}, and the daemon's
        own origin (a C{GET} without C{Origin} is a same-origin one in a browser;
        C{SameSite=Strict} keeps the cookie off every cross-site request besides).

        A browser sends its cookies to every port of the host, so a web server on another
        port of the machine the owner's browser visits gets the cookie too: it counts
        only on a TLS connection (a network deployment, where it is C{Secure} as well),
        or from loopback when the connecting socket is the owner's (the check C{peer}
        auth makes).  Another local user replaying it, or a peer on the network over
        plain HTTP, is as if it had sent none.
        """
        if self._logins is None or connection.unix:
            return False
        if not request.isSecure() and not (connection.loopback and self._is_owner(connection)):
            return False
        path = request.path
        if path not in PAGE_PATHS and not path.startswith(_API_PREFIX):
            return False
        if origin is None:
            if request.method not in (b"GET", b"HEAD"):
                return False
        elif not self._own_origin(origin, connection):
            return False
        return self._logins.signed_in(request.getCookie(COOKIE))

    def _is_owner(self, connection: _Connection) -> bool:
        if connection.owner is None:
            uid = None
            if connection.peer is not None and connection.own_host is not None:
                own = (connection.own_host, connection.own_port or 0)
                uid = self._lookup_uid(connection.peer, own)
            connection.owner = uid == self._uid
        return connection.owner

    def _is_unix_owner(self, connection: _Connection, request: IRequest) -> bool:
        if connection.owner is None:
            uid = self._lookup_unix_uid(request)
            # Unknown (no SO_PEERCRED here): the socket's file permissions decide.
            connection.owner = uid is None or uid == self._uid
        return connection.owner

    def _bearer_matches(self, request: IRequest) -> bool:
        header = request.getHeader(b"authorization")
        if header is None or self._token is None:
            return False
        scheme, _, credentials = header.strip().partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        return self._token.matches(credentials.strip())

    def _refuse(
        self,
        request: IRequest,
        status: int,
        code: str,
        message: str,
        what: str,
        *,
        rpc: RpcError | None = None,
    ) -> bytes:
        if self._logged.begins((code, what)):
            log.warn(
                "refused a request to {path} ({status} {code}): {message}",
                path=request.path.decode("latin-1")[:_ECHOED],
                status=status,
                code=code,
                message=message,
            )
        request.setResponseCode(status)
        request.setHeader(b"content-type", _JSON)
        if request.path == _MCP_PATH:
            error = RpcError.invalid_request(message) if rpc is None else rpc
            return encode(ErrorResponse(None, error))
        payload = {"error": {"code": code, "message": message}}
        return json.dumps(payload, separators=(",", ":")).encode("utf-8")
