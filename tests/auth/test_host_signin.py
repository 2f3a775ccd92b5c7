"""
Tests for L{mcpx.auth.host_signin}: one offer per server, its listener, and the
browser's redirect trusted by its C{state} alone, once.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactor
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.test.requesthelper import DummyRequest

from mcpx.auth.host_signin import HostSignIns, _Callback
from mcpx.auth.signin import PENDING_TTL, SignIns
from mcpx.auth.store import TokenStore
from mcpx.settings.secrets import SecretMasker
from tests.auth.test_flow import stub
from tests.auth.test_signin import ProtectedServers, remote, run


class HostSignInTests(SynchronousTestCase):
    def setUp(self) -> None:
        fake = ProtectedServers()
        fake.documents["/.well-known/openid-configuration/tenant1"][
            "authorization_response_iss_parameter_supported"
        ] = True
        self.clock = Clock()
        self.reactor = MemoryReactor()
        self.sign_ins = SignIns(stub(fake), self.clock, TokenStore(None), SecretMasker())
        self.restarted: list[str] = []

        async def restart(name: str, principal: str) -> None:
            self.restarted.append(name)

        self.hosted = HostSignIns(self.sign_ins, self.reactor, self.clock, on_signed_in=restart)
        self.server = remote()

    def redirect(self, url: str, **changes: str) -> str:
        """Where the authorization server sends the browser back to."""
        query = parse_qs(urlsplit(url).query)
        params = {
            "code": "the-code",
            "state": query["state"][0],
            "iss": "https://mcp.example/tenant1",
        }
        params.update(changes)
        return query["redirect_uri"][0] + "?" + urlencode(params)

    def test_one_offer_per_server(self) -> None:
        """A second call while the user has not finished gets the same offer and URL."""
        self.assertTrue(self.hosted.needs("remote", self.server))
        first = run(self, self.hosted.offer("remote", self.server))
        second = run(self, self.hosted.offer("remote", self.server))
        self.assertIs(first, second)
        self.assertEqual(len(self.reactor.tcpServers), 1)
        port, _, _, interface = self.reactor.tcpServers[0]
        self.assertEqual((port, interface), (0, "127.0.0.1"))
        self.assertIn("redirect_uri=http%3A%2F%2F127.0.0.1%3A", first.url)

    def test_state_once(self) -> None:
        """The redirect signs in and tells the waiters; the same state again is refused."""
        offer = run(self, self.hosted.offer("remote", self.server))
        told: list[str] = []
        offer.wait("host", lambda: told.append("once"))
        offer.wait("host", lambda: told.append("latest"))
        back = self.redirect(offer.url)
        self.assertEqual(run(self, self.hosted.returned(back)), "remote")
        self.assertEqual(told, ["latest"])
        self.assertEqual(self.restarted, ["remote"])
        self.assertFalse(self.hosted.needs("remote", self.server))
        self.failureResultOf(Deferred.fromCoroutine(self.hosted.returned(back)), LookupError)
        self.assertIsNone(self.hosted.pending("remote"))

    def test_restart_failing_still_signed_in(self) -> None:
        """A server that fails to start again after the sign-in does not undo it."""

        async def failing(name: str, principal: str) -> None:
            raise RuntimeError("the server would not start")

        self.hosted.on_signed_in = failing
        offer = run(self, self.hosted.offer("remote", self.server))
        told: list[bool] = []
        offer.wait("host", lambda: told.append(True))
        self.assertEqual(run(self, self.hosted.returned(self.redirect(offer.url))), "remote")
        self.assertEqual(told, [True])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_forged_state_changes_nothing(self) -> None:
        """A state no offer has is refused, and the real redirect still signs in."""
        offer = run(self, self.hosted.offer("remote", self.server))
        forged = self.redirect(offer.url, state="forged")
        self.failureResultOf(Deferred.fromCoroutine(self.hosted.returned(forged)), LookupError)
        missing = self.redirect(offer.url).split("?")[0] + "?code=c"
        self.failureResultOf(Deferred.fromCoroutine(self.hosted.returned(missing)), LookupError)
        self.assertIs(self.hosted.pending("remote"), offer)
        run(self, self.hosted.returned(self.redirect(offer.url)))
        self.assertFalse(self.hosted.needs("remote", self.server))

    def test_expires(self) -> None:
        """An offer nobody completes goes after the sign-in's lifetime, with its listener."""
        offer = run(self, self.hosted.offer("remote", self.server))
        back = self.redirect(offer.url)
        self.clock.advance(PENDING_TTL + 1)
        self.assertIsNone(self.hosted.pending("remote"))
        self.failureResultOf(Deferred.fromCoroutine(self.hosted.returned(back)), LookupError)
        fresh = run(self, self.hosted.offer("remote", self.server))
        self.assertIsNot(fresh, offer)

    def test_close(self) -> None:
        """The daemon stopping drops every offer and closes its listener."""
        offer = run(self, self.hosted.offer("remote", self.server))
        stopped: list[bool] = []
        self.patch(offer.port, "stopListening", lambda: stopped.append(True))
        self.hosted.close()
        self.assertIsNone(self.hosted.pending("remote"))
        self.assertEqual(stopped, [True])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_callback_page(self) -> None:
        """The listener answers a forged redirect 400 with a page saying so."""
        run(self, self.hosted.offer("remote", self.server))
        request: Any = DummyRequest([b"callback"])
        request.path = b"/callback"
        request.uri = b"/callback?code=c&state=forged"
        _Callback(self.hosted).render(request)
        self.assertEqual(request.responseCode, 400)
        self.assertIn(b"used or expired", b"".join(request.written))
        self.assertEqual(request.responseHeaders.getRawHeaders(b"cache-control"), [b"no-store"])
