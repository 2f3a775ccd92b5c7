"""
The gate with C{daemon.auth} the C{oauth} object (L{mcpx.daemon.bearer}), in memory:
raw HTTP into the daemon's site, the stand-in authorization server behind StubTreq.
"""

from __future__ import annotations

import json
from typing import Any

from treq.testing import StubTreq
from twisted.trial.unittest import SynchronousTestCase

from mcpx.auth.metadata import parse_challenge
from mcpx.auth.resource_server import TokenVerifier
from mcpx.daemon.gate import Gate, HostRule, OriginRule
from mcpx.daemon.listeners import exposure_warning
from mcpx.daemon.run import http_host_lines
from mcpx.daemon.site import DaemonSite, SiteOptions
from mcpx.daemon.token import TokenFile
from mcpx.settings.oauth_resource import OAuthResource
from tests.auth.standin_issuer import AUDIENCE, ISSUER, StandInIssuer
from tests.daemon.fake_pool import daemon_http
from tests.daemon.test_gate import OWNER, ROUTES, UNIX, Answer, GateCase

SETTINGS = OAuthResource(issuer=ISSUER, audience=AUDIENCE, scopes=("mcp:tools",))
PROTECTED = [(method, path, status) for method, path, status in ROUTES if path != "/health"]


class OAuthGateCase(GateCase):
    def setUp(self) -> None:
        super().setUp()
        self.issuer = StandInIssuer()
        stub: Any = StubTreq(self.issuer)
        self.verifier = TokenVerifier(SETTINGS, stub, self.clock)
        http = daemon_http(clock=self.clock, pid=4242)
        self.gate = Gate(
            http.resource(),
            origins=OriginRule(self.allowed_origins),
            hosts=HostRule(self.allowed_hosts),
            auth=SETTINGS,
            token=TokenFile(self.state, self.clock.seconds),
            verifier=self.verifier,
            uid=OWNER,
            lookup_uid=self.lookup,
            lookup_unix_uid=self.lookup_unix,
        )
        self.site = DaemonSite(self.gate, self.clock, SiteOptions())

    def bearer(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def challenge_of(self, answer: Answer) -> Any:
        parsed = parse_challenge([answer.headers["www-authenticate"]])
        self.assertIsNotNone(parsed)
        return parsed


class RefusalTests(OAuthGateCase):
    def test_no_token_on_every_route(self) -> None:
        """
        Without a token every route but /health gets 401 and the challenge naming the
        metadata document, even the owner's loopback connection.
        """
        for method, path, _ in PROTECTED:
            answer = self.send(method, path)
            self.assertRefused(answer, 401, "unauthorized", path)
            challenge = self.challenge_of(answer)
            self.assertEqual(
                challenge.resource_metadata,
                "https://mcp.example/.well-known/oauth-protected-resource/mcp",
            )
            self.assertEqual(challenge.scope, ("mcp:tools",))
        self.assertEqual(self.send("GET", "/health").status, 200)

    def test_daemon_token_is_not_enough(self) -> None:
        """The daemon's own token (`mcpx token`) is no OAuth token: 401 invalid_token."""
        answer = self.send("GET", "/v1/servers", self.bearer(self.token))
        self.assertRefused(answer, 401, "invalid_token", "/v1/servers")
        self.assertEqual(self.challenge_of(answer).error, "invalid_token")

    def test_hostile_token(self) -> None:
        """A token from another issuer gets 401 invalid_token on /mcp, as JSON-RPC."""
        token = self.issuer.mint(self.clock.seconds(), iss="https://evil.example")
        answer = self.send("POST", "/mcp", self.bearer(token))
        self.assertRefused(answer, 401, "invalid_token", "/mcp")
        self.assertEqual(self.challenge_of(answer).error, "invalid_token")

    def test_missing_scope(self) -> None:
        """A good token without the scope gets 403 and error="insufficient_scope"."""
        token = self.issuer.mint(self.clock.seconds(), scope="profile")
        answer = self.send("GET", "/v1/servers", self.bearer(token))
        self.assertRefused(answer, 403, "insufficient_scope", "/v1/servers")
        self.assertEqual(self.challenge_of(answer).error, "insufficient_scope")


class AcceptTests(OAuthGateCase):
    def test_good_token_on_every_route(self) -> None:
        """
        A good token reaches every route, which answers for itself: /metrics, which
        counts everyone's calls, answers a subject 403 owner_only.
        """
        token = self.issuer.mint(self.clock.seconds())
        for method, path, status in PROTECTED:
            answer = self.send(method, path, self.bearer(token))
            self.assertEqual(answer.status, 403 if path == "/metrics" else status, path)

    def test_owner_unix_socket_needs_no_token(self) -> None:
        """The owner's unix socket stays as it is."""
        answer = self.send("GET", "/v1/servers", own=UNIX, peer=UNIX)
        self.assertEqual(answer.status, 503)

    def test_metadata_without_token(self) -> None:
        """The RFC 9728 document is served to anyone, at both paths."""
        for path in (
            "/.well-known/oauth-protected-resource/mcp",
            "/.well-known/oauth-protected-resource",
        ):
            answer = self.send("GET", path)
            self.assertEqual(answer.status, 200, path)
            self.assertEqual(
                json.loads(answer.body),
                {
                    "resource": AUDIENCE,
                    "authorization_servers": [ISSUER],
                    "scopes_supported": ["mcp:tools"],
                    "bearer_methods_supported": ["header"],
                },
            )


class StartupTextTests(SynchronousTestCase):
    def test_banner_does_not_offer_the_daemon_token(self) -> None:
        """With oauth the start-up lines speak of the issuer's tokens, not `mcpx token`."""
        (line,) = http_host_lines("http://127.0.0.1:8899", "oauth")
        self.assertIn("access token from its issuer", line)
        self.assertNotIn("mcpx token", line)
        warning = exposure_warning("tcp:8899", "oauth")
        self.assertIn("access token", warning)
        self.assertNotIn("`mcpx token`", warning)
