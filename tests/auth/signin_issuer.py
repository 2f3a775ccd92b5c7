"""
The stand-in issuer (L{tests.auth.standin_issuer}) that also signs users in: dynamic
registration, an authorization endpoint that approves at once (it redirects the browser
back with a code, as the conformance suite's does), and a token endpoint that checks
the PKCE verifier; and an MCP server at C{/mcp} that wants the token it hands out.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from typing import Any
from urllib.parse import parse_qs, urlencode

from twisted.web.server import Request

from tests.auth.standin_issuer import StandInIssuer
from tests.daemon.test_no_passthrough import RecordingUpstream

#: The access token a user's sign-in gets.
USER_TOKEN = "user-token-1"


class SigningInIssuer(StandInIssuer):
    """
    @ivar authorized: the query of every authorization request, in order.
    @ivar tokens_issued: how many codes were exchanged.
    """

    def __init__(self, issuer: str) -> None:
        super().__init__(issuer)
        self.metadata.update(
            {
                "authorization_endpoint": issuer + "/authorize",
                "token_endpoint": issuer + "/token",
                "registration_endpoint": issuer + "/register",
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["none"],
                "authorization_response_iss_parameter_supported": True,
            }
        )
        self.authorized: list[dict[str, str]] = []
        self.tokens_issued = 0
        self._codes: dict[str, str] = {}

    def render(self, request: Request) -> bytes:
        path = request.path.decode()
        if path == self.prefix + "/authorize":
            query = {k.decode(): v[0].decode() for k, v in request.args.items()}
            self.authorized.append(query)
            code = secrets.token_urlsafe(8)
            self._codes[code] = query["code_challenge"]
            back = {"code": code, "state": query["state"], "iss": self.issuer}
            request.redirect((query["redirect_uri"] + "?" + urlencode(back)).encode())
            return b""
        if path == self.prefix + "/register":
            assert request.content is not None
            asked = json.loads(request.content.read())
            request.setResponseCode(201)
            request.setHeader(b"content-type", b"application/json")
            return json.dumps({**asked, "client_id": "host-signin-client"}).encode()
        if path == self.prefix + "/token":
            assert request.content is not None
            form = {k: v[0] for k, v in parse_qs(request.content.read().decode()).items()}
            request.setHeader(b"content-type", b"application/json")
            challenge = self._codes.pop(form.get("code", ""), None)
            verifier = form.get("code_verifier", "").encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=")
            if challenge is None or digest.decode() != challenge:
                request.setResponseCode(400)
                return b'{"error":"invalid_grant"}'
            self.tokens_issued += 1
            token = {"access_token": USER_TOKEN, "token_type": "Bearer", "expires_in": 3600}
            return json.dumps(token).encode()
        return super().render(request)


class SignedInUpstream(RecordingUpstream):
    """The recording MCP server at C{/mcp}, wanting C{Bearer user-token-1}."""

    def __init__(self, issuer: str) -> None:
        super().__init__()
        self.issuer = issuer
        self.base = ""

    def render_POST(self, request: Request) -> bytes:
        if request.getHeader("authorization") != "Bearer " + USER_TOKEN:
            request.setResponseCode(401)
            challenge = (
                f'Bearer resource_metadata="{self.base}/.well-known/oauth-protected-resource/mcp"'
            )
            request.setHeader(b"www-authenticate", challenge.encode())
            return b""
        return super().render_POST(request)

    def render_GET(self, request: Request) -> bytes:
        if request.path == b"/.well-known/oauth-protected-resource/mcp":
            request.setHeader(b"content-type", b"application/json")
            document: dict[str, Any] = {
                "resource": self.base + "/mcp",
                "authorization_servers": [self.issuer],
            }
            return json.dumps(document).encode()
        return super().render_GET(request)
