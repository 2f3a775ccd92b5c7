"""
Where a hostile server can send the daemon's OAuth discovery: a real daemon with a
client-credentials server entry (so discovery and the token request happen on the first
call, with nobody signing in), against an upstream on loopback that points discovery
elsewhere.  Every URL must pass the https-or-loopback rule before any connection, no
redirect is followed, and nothing of a refused answer is quoted back.
"""

from __future__ import annotations

import json

from twisted.trial.unittest import TestCase
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from tests.daemon.test_client_credentials_process import GuardedUpstream
from tests.support.oauth import call_with_client_credentials
from tests.support.processes import reactor

#: An address from TEST-NET-2 (RFC 5737), never routed: the daemon must refuse it
#: before connecting (the tests run with loopback only, so a connection attempt would
#: fail differently: "could not be reached").
OFF_LOOPBACK = "http://198.51.100.1"

#: Text in the body of every redirect and every answer behind one: it must not reach
#: the caller.
BODY_TEXT = b"hostile-answer-text"


class Elsewhere(Resource):
    """Where a redirect points: another loopback server that records every request."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[bytes] = []

    def render(self, request: Request) -> bytes:
        self.requests.append(request.uri)
        request.setHeader(b"content-type", b"application/json")
        return json.dumps(
            {"error": "invalid_client", "error_description": BODY_TEXT.decode()}
        ).encode()


class HostileUpstream(GuardedUpstream):
    """
    The client-credentials upstream, whose challenge may name another protected-resource
    URL, and whose discovery document or token endpoint may redirect.

    @ivar redirects: the paths answered with a 302 to C{target}.
    """

    def __init__(self) -> None:
        super().__init__()
        self.challenge_url: str | None = None
        self.redirects: set[bytes] = set()
        self.target = ""

    def _redirected(self, request: Request) -> bytes | None:
        if request.path not in self.redirects:
            return None
        request.setResponseCode(302)
        request.setHeader(b"location", self.target.encode())
        return BODY_TEXT

    def render_POST(self, request: Request) -> bytes:
        redirected = self._redirected(request)
        if redirected is not None:
            return redirected
        if self.challenge_url is not None and request.path == b"/mcp":
            request.setResponseCode(401)
            challenge = f'Bearer resource_metadata="{self.challenge_url}"'
            request.setHeader(b"www-authenticate", challenge.encode())
            return BODY_TEXT
        return super().render_POST(request)

    def render_GET(self, request: Request) -> bytes:
        redirected = self._redirected(request)
        return redirected if redirected is not None else super().render_GET(request)


class DiscoveryTargetTests(TestCase):
    timeout = 60

    def setUp(self) -> None:
        self.upstream = HostileUpstream()
        port = reactor.listenTCP(0, Site(self.upstream), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.upstream.base = f"http://127.0.0.1:{port.getHost().port}"
        self.elsewhere = Elsewhere()
        other = reactor.listenTCP(0, Site(self.elsewhere), interface="127.0.0.1")
        self.addCleanup(other.stopListening)
        self.upstream.target = f"http://127.0.0.1:{other.getHost().port}/{BODY_TEXT.decode()}"

    async def call(self) -> tuple[int, bytes]:
        """A real daemon's C{/v1/call} to the upstream: its status and answer."""
        upstream = self.upstream.base + "/mcp"
        self.child, code, content = await call_with_client_credentials(self, upstream)
        return code, content

    def assertRefused(self, code: int, content: bytes, *said: bytes) -> None:
        """The call was refused, saying C{said}, quoting nothing a server answered."""
        self.assertNotEqual(code, 200, content)
        self.assertNotIn(b"echoed", content)
        for words in said:
            self.assertIn(words, content)
        self.assertNotIn(BODY_TEXT, content)
        self.assertNotIn(BODY_TEXT, bytes(self.child.output[2]) + bytes(self.child.output[1]))
        self.assertEqual(self.elsewhere.requests, [])
        self.assertEqual(self.upstream.token_forms, [])

    async def test_challenge_off_loopback(self) -> None:
        """
        A challenge naming plain-http protected-resource metadata beyond this machine
        is refused by the rule, before any connection (a connection attempt would have
        failed as unreachable, saying so).
        """
        self.upstream.challenge_url = OFF_LOOPBACK + "/.well-known/oauth-protected-resource"
        code, content = await self.call()
        self.assertRefused(code, content, b"not served over https", OFF_LOOPBACK.encode())
        self.assertNotIn(b"could not be reached", content)
        self.assertNotIn(b"oauth-protected-resource", content)

    async def test_metadata_redirect_not_followed(self) -> None:
        """
        The allowed loopback server's protected-resource metadata answers a redirect:
        refused, the target never asked, the redirect's body not quoted.
        """
        self.upstream.redirects = {b"/.well-known/oauth-protected-resource/mcp"}
        code, content = await self.call()
        self.assertRefused(code, content, b"HTTP 302", b"redirect")

    async def test_token_redirect_not_followed(self) -> None:
        """
        The token endpoint answers a redirect: refused, the target never asked (with or
        without the client's secret), nothing of either answer quoted.
        """
        self.upstream.redirects = {b"/token"}
        code, content = await self.call()
        self.assertRefused(code, content, b"token endpoint", b"HTTP 302", b"redirect")
        self.assertNotIn(b"robot-secret", content)
