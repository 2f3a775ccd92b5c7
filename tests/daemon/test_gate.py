"""
The daemon's trust boundary (L{mcpx.daemon.gate}), driven in memory: raw HTTP bytes
into the daemon's site on a string transport, so each test chooses the addresses of
the connection (unix socket, loopback TCP, beyond loopback) and the user behind it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.internet.interfaces import ISSLTransport
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import directlyProvides

from mcpx.daemon.browser_login import BrowserLogins
from mcpx.daemon.gate import (
    Gate,
    HostRule,
    OriginRule,
    host_name,
    parse_origin,
    unauthenticated_exposure,
)
from mcpx.daemon.site import DaemonSite, SiteOptions
from mcpx.daemon.token import RECHECK_INTERVAL, TokenFile, read_token, rotate_token
from mcpx.wire.errors import INVALID_REQUEST
from tests.daemon.fake_pool import daemon_http
from tests.support.logs import observe_log

OWNER = 1000
OTHER = 65534

LOOPBACK = IPv4Address("TCP", "127.0.0.1", 8899)
LOOPBACK_CLIENT = IPv4Address("TCP", "127.0.0.1", 40000)
UNIX = UNIXAddress(b"/state/mcpx.sock")

#: One request to each kind of route; with no pool and no MCP endpoint wired in, each
#: answers a status of its own once past the gate.
ROUTES: tuple[tuple[str, str, int], ...] = (
    ("GET", "/health", 200),
    ("GET", "/openapi.json", 200),
    ("GET", "/metrics", 503),
    ("GET", "/v1/servers", 503),
    ("POST", "/v1/call", 400),
    ("POST", "/mcp", 503),
    ("GET", "/mcp", 503),
    ("DELETE", "/mcp", 503),
)


class Answer:
    def __init__(self, raw: bytes) -> None:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        if self.headers.get("transfer-encoding") == "chunked":
            body = bytearray()
            while rest:
                size_line, _, rest = rest.partition(b"\r\n")
                size = int(size_line, 16)
                if size == 0:
                    break
                body += rest[:size]
                rest = rest[size + 2 :]
            self.body = bytes(body)
        else:
            self.body = rest[: int(self.headers.get("content-length", len(rest)))]

    def json(self) -> Any:
        return json.loads(self.body)


class GateCase(SynchronousTestCase):
    auth = "peer"
    #: The status page's sign-ins, for a case that has them.
    logins: BrowserLogins | None = None
    allowed_origins: Sequence[str] = ("https://app.example.com",)
    allowed_hosts: Sequence[str] = ("mcpx.internal", "gateway.example:443")

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1000)
        self.state = Path(tempfile.mkdtemp())
        self.token = read_token(self.state)
        self.uids: dict[tuple[str, int], int] = {}
        self.unix_uid: int | None = None
        self.unix_lookups = 0
        self.lookups: list[tuple[tuple[str, int], tuple[str, int]]] = []
        http = daemon_http(clock=self.clock, pid=4242)
        self.gate = Gate(
            http.resource(),
            origins=OriginRule(self.allowed_origins),
            hosts=HostRule(self.allowed_hosts),
            auth=self.auth,
            token=TokenFile(self.state, self.clock.seconds),
            uid=OWNER,
            lookup_uid=self.lookup,
            lookup_unix_uid=self.lookup_unix,
            logins=self.logins,
        )
        self.site = DaemonSite(self.gate, self.clock, SiteOptions())

    def lookup(self, peer: tuple[str, int], own: tuple[str, int]) -> int | None:
        self.lookups.append((peer, own))
        return self.uids.get(peer)

    def lookup_unix(self, request: object) -> int | None:
        self.unix_lookups += 1
        return self.unix_uid

    def connect(self, own: Any = LOOPBACK, peer: Any = LOOPBACK_CLIENT) -> Any:
        channel = self.site.buildProtocol(peer)
        transport = StringTransport(hostAddress=own, peerAddress=peer)
        channel.makeConnection(transport)
        self.addCleanup(channel.connectionLost, None)
        return channel, transport

    def send(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str] | None = None,
        *,
        body: bytes | None = None,
        connection: Any = None,
        own: Any = LOOPBACK,
        peer: Any = LOOPBACK_CLIENT,
    ) -> Answer:
        """One request; the default is the owner's loopback connection with a JSON body."""
        channel, transport = connection or self.connect(own, peer)
        if connection is None and isinstance(peer, IPv4Address | IPv6Address):
            self.uids.setdefault((peer.host, peer.port), OWNER)
        sent: dict[str, str] = {"Host": "127.0.0.1:8899"}
        if method == "POST":
            sent["Content-Type"] = "application/json"
            body = b"{}" if body is None else body
        sent.update(headers or {})
        lines = [f"{method} {path} HTTP/1.1"]
        lines += [f"{name}: {value}" for name, value in sent.items() if value is not None]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        transport.clear()
        channel.dataReceived(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))
        return Answer(transport.value())

    def assertRefused(self, answer: Answer, status: int, code: str, path: str) -> None:
        self.assertEqual(answer.status, status, path)
        self.assertEqual(answer.headers["content-type"], "application/json")
        body = answer.json()
        if path == "/mcp":
            # A JSON-RPC error response without an id, as MCP clients read one.
            self.assertEqual(body["jsonrpc"], "2.0")
            self.assertIsNone(body["id"])
            self.assertEqual(body["error"]["code"], INVALID_REQUEST)
        else:
            self.assertEqual(body["error"]["code"], code)
        self.assertIsInstance(body["error"]["message"], str)


class OriginTests(GateCase):
    def test_foreign_origin_is_refused_on_every_route(self) -> None:
        """A foreign Origin gets 403 with a JSON body on every route, /health included."""
        for method, path, _ in ROUTES:
            answer = self.send(method, path, {"Origin": "http://evil.example"})
            self.assertRefused(answer, 403, "origin_not_allowed", path)
            self.assertIn("transport.allowedOrigins", answer.json()["error"]["message"])

    def test_routes_pass_without_origin(self) -> None:
        """Without an Origin the owner reaches every route (each answers for itself)."""
        for method, path, status in ROUTES:
            self.assertEqual(self.send(method, path).status, status, path)

    def test_loopback_and_allowed_origins(self) -> None:
        """Loopback origins on any port, and those in transport.allowedOrigins, are served."""
        for origin in (
            "http://localhost:3000",
            "http://127.0.0.1",
            "http://127.8.9.10:5",
            "http://[::1]:6274",
            "https://app.example.com",
            "https://APP.example.com:443",
        ):
            self.assertEqual(self.send("GET", "/health", {"Origin": origin}).status, 200, origin)
        for origin in ("null", "https://app.example.com:8443", "http://app.example.com", "x"):
            self.assertEqual(self.send("GET", "/health", {"Origin": origin}).status, 403, origin)

    def test_own_address(self) -> None:
        """The address the connection arrived at, with its port, is an allowed origin."""
        own = IPv4Address("TCP", "192.168.1.5", 8899)
        headers = {"Host": "192.168.1.5:8899"}
        for origin, status in (
            ("http://192.168.1.5:8899", 200),
            ("http://192.168.1.5:9999", 403),
            ("http://192.168.1.6:8899", 403),
        ):
            answer = self.send("GET", "/health", {**headers, "Origin": origin}, own=own)
            self.assertEqual(answer.status, status, origin)

    def test_unix_socket_checks_origin_too(self) -> None:
        """A browser's request relayed onto the unix socket still carries, and fails, its Origin."""
        answer = self.send(
            "POST", "/v1/call", {"Origin": "http://evil.example"}, own=UNIX, peer=UNIX
        )
        self.assertRefused(answer, 403, "origin_not_allowed", "/v1/call")

    def test_unix_socket_judges_each_request(self) -> None:
        """
        The owner's unix connection, let in once, is let in again without the rules
        asked again only for what they cannot refuse there: a later request on it with
        a foreign Origin, or a POST under /v1/ that is not JSON, is refused all the same.
        """
        connection = self.connect(UNIX, UNIX)
        first = self.send("POST", "/mcp", connection=connection)
        self.assertNotIn(first.status, (401, 403, 415))
        for _ in range(2):
            again = self.send("POST", "/mcp", connection=connection)
            self.assertEqual((again.status, again.body), (first.status, first.body))
            foreign = self.send(
                "POST", "/mcp", {"Origin": "http://evil.example"}, connection=connection
            )
            self.assertRefused(foreign, 403, "origin_not_allowed", "/mcp")
            text = self.send(
                "POST", "/v1/call", {"Content-Type": "text/plain"}, connection=connection
            )
            self.assertRefused(text, 415, "unsupported_media_type", "/v1/call")
        self.assertEqual(self.unix_lookups, 1)

    def test_refusals_are_logged_once(self) -> None:
        """The same refusal a hundred times is one log line; a different one is another."""
        events = observe_log(self)
        for _ in range(100):
            self.send("GET", "/v1/servers", {"Origin": "http://evil.example"})
        self.send("GET", "/v1/servers", {"Origin": "http://other.example"})
        refusals = [e for e in events if "refused a request" in e.get("log_format", "")]
        self.assertEqual(len(refusals), 2)
        self.assertEqual(refusals[0]["code"], "origin_not_allowed")

    def test_parse_origin(self) -> None:
        """Origins are compared by scheme, host and port, the port defaulted."""
        self.assertEqual(parse_origin("HTTP://LocalHost"), ("http", "localhost", 80))
        self.assertEqual(parse_origin("https://[::1]"), ("https", "::1", 443))
        self.assertIsNone(parse_origin("null"))
        self.assertIsNone(parse_origin("file://x"))
        self.assertIsNone(parse_origin("http://x:99999"))


class HostTests(GateCase):
    def test_foreign_host_is_refused_on_every_route(self) -> None:
        """A Host that is not this daemon's (DNS rebinding) gets 403 on every route."""
        for method, path, _ in ROUTES:
            for host in ("evil.example:8899", "evil.example", "127.0.0.1.evil.example"):
                answer = self.send(method, path, {"Host": host})
                self.assertRefused(answer, 403, "host_not_allowed", path)
        self.assertIn("transport.allowedHosts", answer.json()["error"]["message"])

    def test_rebinding_with_matching_origin_is_refused(self) -> None:
        """A rebinding page's Origin matches its Host; the Host still gives it away."""
        answer = self.send(
            "POST",
            "/v1/call",
            {"Host": "evil.example:8899", "Origin": "http://evil.example:8899"},
        )
        self.assertEqual(answer.status, 403)

    def test_loopback_names_allowed_hosts_and_own_address(self) -> None:
        """Loopback names and addresses, transport.allowedHosts and the own address pass."""
        for host in (
            "127.0.0.1:8899",
            "127.0.0.1",
            "127.5.5.5:1",
            "localhost:8899",
            "LOCALHOST",
            "[::1]:8899",
            "[::1]",
            "mcpx.internal",
            "mcpx.internal:1234",
            "gateway.example:443",
        ):
            self.assertEqual(self.send("GET", "/health", {"Host": host}).status, 200, host)
        for host in ("gateway.example", "gateway.example:80", "[::1", "a:b", ":8899", ""):
            self.assertEqual(self.send("GET", "/health", {"Host": host}).status, 403, host)
        own = IPv4Address("TCP", "10.0.0.7", 8899)
        answer = self.send("GET", "/health", {"Host": "10.0.0.7:8899"}, own=own)
        self.assertEqual(answer.status, 200)

    def test_missing_host_is_refused_on_tcp(self) -> None:
        """HTTP/1.1 requires Host; on TCP a request without one is refused."""
        channel, transport = self.connect()
        channel.dataReceived(b"GET /health HTTP/1.0\r\n\r\n")
        self.assertEqual(Answer(transport.value()).status, 403)

    def test_unix_socket_takes_any_host(self) -> None:
        """On the unix socket the Host is whatever the client calls it (the CLI says mcpx)."""
        for host in ("mcpx", "localhost", "anything.example"):
            answer = self.send("GET", "/v1/servers", {"Host": host}, own=UNIX, peer=UNIX)
            self.assertEqual(answer.status, 503, host)

    def test_host_name(self) -> None:
        """The name of a Host header, without port or brackets; None when malformed."""
        self.assertEqual(host_name("LocalHost:8899"), "localhost")
        self.assertEqual(host_name("[::1]:80"), "::1")
        self.assertEqual(host_name("example.com"), "example.com")
        for bad in ("[::1]x", "a:b", "", "[]", "::1"):
            self.assertIsNone(host_name(bad), bad)


class ContentTypeTests(GateCase):
    def test_post_to_v1_must_be_json(self) -> None:
        """A POST to /v1 that does not say application/json is 415, before any route runs."""
        for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
            answer = self.send("POST", "/v1/call", {"Content-Type": ctype})
            self.assertRefused(answer, 415, "unsupported_media_type", "/v1/call")
            self.assertIn("application/json", answer.json()["error"]["message"])
        channel, transport = self.connect()
        self.uids[("127.0.0.1", 40000)] = OWNER
        channel.dataReceived(
            b"POST /v1/reload HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n"
        )
        self.assertEqual(Answer(transport.value()).status, 415)

    def test_json_with_parameters_passes(self) -> None:
        """Parameters after the media type are fine."""
        for ctype in ("application/json", "application/json; charset=utf-8", "Application/JSON"):
            answer = self.send("POST", "/v1/call", {"Content-Type": ctype})
            self.assertEqual(answer.status, 400, ctype)

    def test_only_v1_posts(self) -> None:
        """GETs, and POSTs to /mcp (which answers for itself), are not held to it."""
        self.assertEqual(self.send("POST", "/mcp", {"Content-Type": "text/plain"}).status, 503)
        self.assertEqual(self.send("GET", "/v1/servers").status, 503)


class CrossOriginTests(GateCase):
    """
    CORS on C{/mcp} for a page at a listed origin (a browser-based host), whatever
    C{daemon.auth} asks of its requests; for no other origin and no other route.
    """

    auth = "token"
    listed = "https://app.example.com"
    preflight = {
        "Origin": listed,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,mcp-protocol-version, mcp-session-id",
    }

    def assertNoCors(self, answer: Answer, what: str) -> None:
        cors = [name for name in answer.headers if name.startswith("access-control-")]
        self.assertEqual(cors, [], what)

    def test_preflight_from_a_listed_origin(self) -> None:
        """
        A listed origin's preflight of /mcp is answered 204 with the methods, the headers
        it asked for and how long to keep that, without the token it cannot send.
        """
        answer = self.send("OPTIONS", "/mcp", self.preflight)
        self.assertEqual(answer.status, 204)
        self.assertEqual(answer.body, b"")
        self.assertEqual(answer.headers["access-control-allow-origin"], self.listed)
        self.assertEqual(answer.headers["access-control-allow-methods"], "GET, POST, DELETE")
        self.assertEqual(
            answer.headers["access-control-allow-headers"],
            "content-type,mcp-protocol-version, mcp-session-id",
        )
        self.assertEqual(answer.headers["access-control-max-age"], "600")
        self.assertEqual(answer.headers["vary"], "origin")

    def test_requests_from_a_listed_origin(self) -> None:
        """
        Its requests still pass every rule (here the token), and their answers, a refusal
        included, are readable by the page, with the session id and WWW-Authenticate.
        """
        refused = self.send("POST", "/mcp", {"Origin": self.listed})
        self.assertRefused(refused, 401, "unauthorized", "/mcp")
        self.assertEqual(refused.headers["access-control-allow-origin"], self.listed)
        bearer = {"Origin": self.listed, "Authorization": f"Bearer {self.token}"}
        answer = self.send("POST", "/mcp", bearer)
        self.assertEqual(answer.status, 503)
        self.assertEqual(answer.headers["access-control-allow-origin"], self.listed)
        self.assertEqual(
            answer.headers["access-control-expose-headers"],
            "mcp-session-id, mcp-protocol-version, www-authenticate",
        )

    def test_no_cors_for_other_origins_or_routes(self) -> None:
        """
        A loopback page that is not listed, the daemon's own origin, and a listed
        origin on a route other than /mcp get no CORS answer: a preflight there is an
        ordinary request, refused for want of the token.
        """
        for origin in ("http://localhost:3000", "http://127.0.0.1:8899"):
            answer = self.send("OPTIONS", "/mcp", {**self.preflight, "Origin": origin})
            self.assertRefused(answer, 401, "unauthorized", "/mcp")
            self.assertNoCors(answer, origin)
        for path in ("/v1/servers", "/metrics", "/"):
            answer = self.send("OPTIONS", path, self.preflight)
            self.assertEqual(answer.status, 401, path)
            self.assertNoCors(answer, path)
        bearer = {"Origin": self.listed, "Authorization": f"Bearer {self.token}"}
        self.assertNoCors(self.send("GET", "/v1/servers", bearer), "GET /v1/servers")

    def test_odd_request_headers_are_not_echoed(self) -> None:
        """Asked-for headers that are not a list of names, or too long, are not echoed."""
        for asked in ("content-type; x=<y>", "a,,b", "a b", "x" * 2000):
            answer = self.send(
                "OPTIONS", "/mcp", {**self.preflight, "Access-Control-Request-Headers": asked}
            )
            self.assertEqual(answer.status, 204, asked[:20])
            self.assertNotIn("access-control-allow-headers", answer.headers)


class PeerAuthTests(GateCase):
    """C{daemon.auth} C{peer}, the default."""

    other = IPv4Address("TCP", "127.0.0.1", 40001)

    def test_owner_over_loopback_needs_no_token(self) -> None:
        """A loopback connection of the daemon's own user is let in without a token."""
        for method, path, status in ROUTES:
            self.assertEqual(self.send(method, path).status, status, path)

    def test_other_user_needs_the_token(self) -> None:
        """Another local user gets 401 with WWW-Authenticate: Bearer on every route but /health."""
        self.uids[("127.0.0.1", 40001)] = OTHER
        for method, path, status in ROUTES:
            answer = self.send(method, path, peer=self.other)
            if path == "/health":
                self.assertEqual(answer.status, 200)
                continue
            self.assertRefused(answer, 401, "unauthorized", path)
            self.assertEqual(answer.headers["www-authenticate"], "Bearer")
            self.assertIn("mcpx token", answer.json()["error"]["message"])
            bearer = {"Authorization": f"Bearer {self.token}"}
            self.assertEqual(self.send(method, path, bearer, peer=self.other).status, status)

    def test_other_loopback_page_needs_the_token(self) -> None:
        """
        A page from another loopback origin (another local web server, opened in the
        owner's browser) passes the Origin rule but not the owner's pass: without the
        token it gets 401; the daemon's own origin and listed origins need none.
        """
        for origin in ("http://localhost:3000", "http://127.0.0.1:6274", "http://[::1]:8080"):
            answer = self.send("GET", "/v1/servers", {"Origin": origin})
            self.assertRefused(answer, 401, "unauthorized", origin)
            bearer = {"Origin": origin, "Authorization": f"Bearer {self.token}"}
            self.assertEqual(self.send("GET", "/v1/servers", bearer).status, 503, origin)
        for origin in ("http://127.0.0.1:8899", "https://app.example.com"):
            self.assertEqual(self.send("GET", "/v1/servers", {"Origin": origin}).status, 503)
        self.assertEqual(
            self.send("GET", "/health", {"Origin": "http://localhost:3000"}).status, 200
        )

    def test_wrong_token_or_scheme(self) -> None:
        """A wrong token, an empty one, or the right one under another scheme is refused."""
        self.uids[("127.0.0.1", 40001)] = OTHER
        for value in ("Bearer nope", "Bearer ", f"Basic {self.token}", self.token):
            answer = self.send("GET", "/v1/servers", {"Authorization": value}, peer=self.other)
            self.assertEqual(answer.status, 401, value)
        answer = self.send(
            "GET", "/v1/servers", {"Authorization": f"bearer  {self.token} "}, peer=self.other
        )
        self.assertEqual(answer.status, 503)

    def test_unknown_socket_owner_needs_the_token(self) -> None:
        """When the system does not say who connected (not Linux), a token is required."""
        answer = self.send("GET", "/v1/servers", peer=IPv4Address("TCP", "127.0.0.1", 40002))
        self.assertEqual(answer.status, 503)  # the owner, filled in by send()
        channel = self.connect(peer=IPv4Address("TCP", "127.0.0.1", 40003))
        answer = self.send("GET", "/v1/servers", connection=channel)
        self.assertEqual(answer.status, 401)

    def test_beyond_loopback_needs_the_token(self) -> None:
        """A peer on the network needs the token, and its socket is not looked up."""
        own = IPv4Address("TCP", "192.168.1.5", 8899)
        peer = IPv4Address("TCP", "192.168.1.9", 50000)
        headers = {"Host": "192.168.1.5:8899"}
        self.assertEqual(self.send("POST", "/v1/call", headers, own=own, peer=peer).status, 401)
        headers["Authorization"] = f"Bearer {self.token}"
        self.assertEqual(self.send("POST", "/v1/call", headers, own=own, peer=peer).status, 400)
        self.assertEqual(self.lookups, [])

    def test_unix_socket_needs_no_token(self) -> None:
        """The unix socket is its owner's: nobody is asked for a token there."""
        self.assertEqual(self.send("POST", "/v1/call", own=UNIX, peer=UNIX).status, 400)
        self.assertEqual(self.lookups, [])

    def test_other_user_on_an_open_unix_socket_needs_the_token(self) -> None:
        """A unix socket another user reached (one added to daemon.listen) asks for the token."""
        self.unix_uid = OTHER
        answer = self.send("GET", "/v1/servers", own=UNIX, peer=UNIX)
        self.assertRefused(answer, 401, "unauthorized", "/v1/servers")
        bearer = {"Authorization": f"Bearer {self.token}"}
        self.assertEqual(self.send("GET", "/v1/servers", bearer, own=UNIX, peer=UNIX).status, 503)
        self.assertEqual(self.send("GET", "/health", own=UNIX, peer=UNIX).status, 200)
        self.unix_uid = OWNER
        connection = self.connect(UNIX, UNIX)
        lookups = self.unix_lookups
        for _ in range(3):
            self.assertEqual(self.send("GET", "/v1/servers", connection=connection).status, 503)
        self.assertEqual(self.unix_lookups, lookups + 1)

    def test_owner_is_looked_up_once_per_connection(self) -> None:
        """Three requests on one connection cost one socket lookup."""
        self.uids[("127.0.0.1", 40000)] = OWNER
        connection = self.connect()
        for _ in range(3):
            self.assertEqual(self.send("GET", "/v1/servers", connection=connection).status, 503)
        self.assertEqual(self.lookups, [(("127.0.0.1", 40000), ("127.0.0.1", 8899))])

    def test_ipv6_loopback(self) -> None:
        """The owner over [::1] is looked up and let in like over 127.0.0.1."""
        own = IPv6Address("TCP", "::1", 8899)
        peer = IPv6Address("TCP", "::1", 40000)
        answer = self.send("GET", "/v1/servers", {"Host": "[::1]:8899"}, own=own, peer=peer)
        self.assertEqual(answer.status, 503)
        self.assertEqual(self.lookups, [(("::1", 40000), ("::1", 8899))])


class TokenAuthTests(GateCase):
    auth = "token"

    def test_owner_needs_the_token_too(self) -> None:
        """daemon.auth token: every TCP request but /health needs the token."""
        self.assertEqual(self.send("GET", "/v1/servers").status, 401)
        self.assertEqual(self.send("GET", "/health").status, 200)
        bearer = {"Authorization": f"Bearer {self.token}"}
        self.assertEqual(self.send("GET", "/v1/servers", bearer).status, 503)
        self.assertEqual(self.send("GET", "/v1/servers", own=UNIX, peer=UNIX).status, 503)

    def test_rotation_is_picked_up(self) -> None:
        """A rotated token works at once; the old one stops within the recheck interval."""
        old = {"Authorization": f"Bearer {self.token}"}
        new_token = rotate_token(self.state)
        new = {"Authorization": f"Bearer {new_token}"}
        self.assertEqual(self.send("GET", "/v1/servers", new).status, 503)
        self.assertEqual(self.send("GET", "/v1/servers", old).status, 401)
        newer = {"Authorization": f"Bearer {rotate_token(self.state)}"}
        self.clock.advance(RECHECK_INTERVAL)
        self.assertEqual(self.send("GET", "/v1/servers", new).status, 401)
        self.assertEqual(self.send("GET", "/v1/servers", newer).status, 503)


class BrowserCookieTests(GateCase):
    """
    The status page's session cookie (daemon.auth token) counts over TLS, or from
    loopback by the owner's uid; never from another local user, nor over plain HTTP
    from the network, whatever Origin it names.
    """

    auth = "token"

    def setUp(self) -> None:
        self.logins = BrowserLogins(Clock())
        session = self.logins.exchange(self.logins.new_code())
        assert session is not None
        self.cookie = f"mcpx_session={session}"
        GateCase.setUp(self)

    def signed_in(self, own: Any, peer: Any, channel: Any = None) -> Answer:
        """The status of the page's own GET /v1/servers with the cookie."""
        headers = {"Host": f"{own.host}:{own.port}", "Cookie": self.cookie}
        headers["Origin"] = f"http://{own.host}:{own.port}"
        return self.send("GET", "/v1/servers", headers, own=own, peer=peer, connection=channel)

    def test_loopback_owner_only(self) -> None:
        """From loopback: the owner's socket is let in, another user's is 401."""
        self.assertEqual(self.signed_in(LOOPBACK, LOOPBACK_CLIENT).status, 503)
        other = IPv4Address("TCP", "127.0.0.1", 40001)
        self.uids[(other.host, other.port)] = OTHER
        answer = self.signed_in(LOOPBACK, other, self.connect(LOOPBACK, other))
        self.assertRefused(answer, 401, "unauthorized", "/v1/servers")

    def test_network_needs_tls(self) -> None:
        """From the network: 401 over plain HTTP, let in over TLS."""
        own = IPv4Address("TCP", "192.168.1.5", 8899)
        peer = IPv4Address("TCP", "192.168.1.9", 50000)
        answer = self.signed_in(own, peer)
        self.assertRefused(answer, 401, "unauthorized", "/v1/servers")
        channel, transport = self.connect(own, peer)
        directlyProvides(transport, ISSLTransport)
        self.assertEqual(self.signed_in(own, peer, (channel, transport)).status, 503)
        self.assertEqual(self.lookups, [])


class NoAuthTests(GateCase):
    auth = "none"

    def test_nobody_is_asked(self) -> None:
        """daemon.auth none: another user passes; Origin and Host still apply."""
        self.uids[("127.0.0.1", 40001)] = OTHER
        peer = IPv4Address("TCP", "127.0.0.1", 40001)
        self.assertEqual(self.send("GET", "/v1/servers", peer=peer).status, 503)
        self.assertEqual(self.send("GET", "/v1/servers", {"Host": "evil.example"}).status, 403)
        self.assertEqual(self.lookups, [])

    def test_network_without_auth_needs_saying_so(self) -> None:
        """auth none with a listener beyond loopback is refused unless explicitly allowed."""
        refusal = unauthenticated_exposure("none", ["tcp:8899"], allowed=False)
        assert refusal is not None
        self.assertIn("daemon.allowUnauthenticatedNetwork", refusal)
        self.assertIn("tcp:8899", refusal)
        self.assertIsNone(unauthenticated_exposure("none", ["tcp:8899"], allowed=True))
        self.assertIsNone(unauthenticated_exposure("none", [], allowed=False))
        self.assertIsNone(unauthenticated_exposure("peer", ["tcp:8899"], allowed=False))


class TokenFileTests(SynchronousTestCase):
    def test_made_once_private_and_stable(self) -> None:
        """The token is made at first use, mode 0600, and read back unchanged."""
        state = Path(tempfile.mkdtemp()) / "state"
        token = read_token(state)
        self.assertGreaterEqual(len(token), 43)
        self.assertEqual(os.stat(state / "token").st_mode & 0o777, 0o600)
        self.assertEqual(read_token(state), token)
        rotated = rotate_token(state)
        self.assertNotEqual(rotated, token)
        self.assertEqual(read_token(state), rotated)
        self.assertEqual(os.stat(state / "token").st_mode & 0o777, 0o600)
        self.assertEqual(sorted(p.name for p in state.iterdir()), ["token"])

    def test_daemon_tightens_a_loose_mode(self) -> None:
        """A token file someone made readable is made private again when the daemon starts."""
        state = Path(tempfile.mkdtemp())
        read_token(state)
        os.chmod(state / "token", 0o644)
        TokenFile(state, Clock().seconds)
        self.assertEqual(os.stat(state / "token").st_mode & 0o777, 0o600)
