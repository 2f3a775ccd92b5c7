"""
Where the issuer's keys may be fetched from (L{mcpx.auth.jwks}): over real loopback
HTTP, with the daemon's own kind of treq client, a redirect is not followed and a URL
the https-or-loopback rule refuses is never connected to.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase
from twisted.web.client import HTTPConnectionPool
from twisted.web.server import Request, Site

from mcpx.auth.jwks import FetchError, KeySet, fetch_json
from mcpx.upstream.http_client import owned_client
from tests.auth.standin_issuer import StandInIssuer
from tests.daemon.test_oauth_discovery_process import BODY_TEXT, OFF_LOOPBACK, Elsewhere
from tests.support.oauth import serve_issuer
from tests.support.processes import reactor


class RedirectingIssuer(StandInIssuer):
    """The stand-in issuer, whose key set answers a redirect to C{target}."""

    target = ""

    def render(self, request: Request) -> bytes:
        if request.path.decode() == self.prefix + "/certs":
            self.requests.append(request.path.decode())
            request.setResponseCode(302)
            request.setHeader(b"location", self.target.encode())
            return BODY_TEXT
        return super().render(request)


class KeyTargetTests(TestCase):
    timeout = 30

    def setUp(self) -> None:
        self.elsewhere = Elsewhere()
        other = reactor.listenTCP(0, Site(self.elsewhere), interface="127.0.0.1")
        self.addCleanup(other.stopListening)
        self.issuer = serve_issuer(self, RedirectingIssuer)
        self.issuer.target = f"http://127.0.0.1:{other.getHost().port}/{BODY_TEXT.decode()}"
        # Not persistent: nothing is left open once a test ends.
        pool = HTTPConnectionPool(reactor, persistent=False)
        self.http, _ = owned_client(reactor, 10.0, pool=pool)

    async def test_key_set_redirect_not_followed(self) -> None:
        """The issuer's jwks_uri redirects: refused, the target never asked, no body quoted."""
        keys = KeySet(self.http, reactor, self.issuer.issuer, None)
        with self.assertRaises(FetchError) as raised:
            await Deferred.fromCoroutine(keys.key_for("k1"))
        message = str(raised.exception)
        self.assertIn("302", message)
        self.assertIn("redirect", message)
        self.assertNotIn(BODY_TEXT.decode(), message)
        self.assertIn(self.issuer.prefix + "/certs", self.issuer.requests)
        self.assertEqual(self.elsewhere.requests, [])

    async def test_plain_http_beyond_loopback_never_connected(self) -> None:
        """
        A plain-http URL beyond this machine (as an introspection or key URL) is refused
        by the rule before any connection: the error says so, not that it was unreachable.
        """
        with self.assertRaises(FetchError) as raised:
            await fetch_json(self.http, reactor, "GET", OFF_LOOPBACK + "/certs")
        message = str(raised.exception)
        self.assertIn("not served over https", message)
        self.assertNotIn("could not be reached", message)
