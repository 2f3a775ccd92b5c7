"""
A real daemon with a server entry using the client-credentials grant, against an
upstream that wants a token and its authorization server, both served by this test:
C{/v1/call} works with nobody signing in.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from twisted.trial.unittest import TestCase
from twisted.web.server import Request, Site

from tests.daemon.test_no_passthrough import RecordingUpstream
from tests.support.oauth import call_with_client_credentials
from tests.support.processes import reactor


class GuardedUpstream(RecordingUpstream):
    """
    The recording upstream at C{/mcp}, wanting C{Bearer cc-1}; its authorization server
    at the origin, which (like many machine-to-machine ones) advertises no PKCE.
    """

    def __init__(self) -> None:
        super().__init__()
        self.base = ""
        self.token_forms: list[dict[str, list[str]]] = []

    def render_POST(self, request: Request) -> bytes:
        if request.path == b"/token":
            assert request.content is not None
            self.token_forms.append(parse_qs(request.content.read().decode()))
            request.setHeader(b"content-type", b"application/json")
            return json.dumps({"access_token": "cc-1", "expires_in": 3600}).encode()
        if request.getHeader("authorization") != "Bearer cc-1":
            request.setResponseCode(401)
            challenge = (
                f'Bearer resource_metadata="{self.base}/.well-known/oauth-protected-resource/mcp"'
            )
            request.setHeader(b"www-authenticate", challenge.encode())
            return b""
        return super().render_POST(request)

    def render_GET(self, request: Request) -> bytes:
        documents: dict[bytes, Any] = {
            b"/.well-known/oauth-protected-resource/mcp": {
                "resource": self.base + "/mcp",
                "authorization_servers": [self.base],
            },
            b"/.well-known/oauth-authorization-server": {
                "issuer": self.base,
                "authorization_endpoint": self.base + "/authorize",
                "token_endpoint": self.base + "/token",
                "grant_types_supported": ["client_credentials"],
            },
        }
        if request.path in documents:
            request.setHeader(b"content-type", b"application/json")
            return json.dumps(documents[request.path]).encode()
        return super().render_GET(request)


class ClientCredentialsDaemonTests(TestCase):
    timeout = 60

    async def test_call_without_sign_in(self) -> None:
        upstream = GuardedUpstream()
        port = reactor.listenTCP(0, Site(upstream), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        upstream.base = f"http://127.0.0.1:{port.getHost().port}"
        _, code, content = await call_with_client_credentials(self, upstream.base + "/mcp")
        self.assertEqual(code, 200, content)
        self.assertIn(b"echoed", content)
        self.assertEqual(upstream.token_forms[0]["grant_type"], ["client_credentials"])
        self.assertEqual(upstream.token_forms[0]["resource"], [upstream.base + "/mcp"])
        # The daemon's token stayed in the state directory, never in the answer.
        self.assertNotIn(b"cc-1", content)
