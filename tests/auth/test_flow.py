"""Tests for L{mcpx.auth.flow}: discovery, registration and tokens over HTTP (StubTreq)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

from treq.testing import StubTreq
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource
from twisted.web.server import Request

from mcpx.auth.flow import GrantRefused, OAuthClient, Registration, Tokens
from mcpx.auth.metadata import AuthorizationError, Challenge
from mcpx.spec.revision import Revision

MODERN = Revision.V2026_07_28
MCP = "https://mcp.example/mcp"


class FakeServers(Resource):
    """An MCP server's metadata and its authorization server, at one host."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.documents: dict[str, Any] = {
            "/.well-known/oauth-protected-resource/mcp": {
                "resource": MCP,
                "authorization_servers": ["https://mcp.example/tenant1"],
                "scopes_supported": ["mcp:read"],
            },
            "/.well-known/openid-configuration/tenant1": {
                "issuer": "https://mcp.example/tenant1",
                "authorization_endpoint": "https://mcp.example/authorize",
                "token_endpoint": "https://mcp.example/token",
                "registration_endpoint": "https://mcp.example/register",
                "code_challenge_methods_supported": ["S256"],
            },
        }
        self.requests: list[tuple[str, str, dict[str, list[str]], dict[str, str]]] = []
        self.token_answer: tuple[int, Any] = (
            200,
            {"access_token": "tok-1", "refresh_token": "ref-1", "expires_in": 60, "scope": "a"},
        )
        #: The last registration request's metadata.
        self.registered: dict[str, Any] = {}
        #: What C{/revoke} answers, when the metadata names it (RFC 7009).
        self.revoke_answer: tuple[int, Any] = (200, {})

    def render(self, request: Request) -> bytes:
        path = request.path.decode()
        assert request.content is not None
        body = request.content.read().decode()
        headers = {
            k.decode().lower(): v[0].decode() for k, v in request.requestHeaders.getAllRawHeaders()
        }
        form = parse_qs(body) if "form" in headers.get("content-type", "") else {}
        self.requests.append((request.method.decode(), path, form, headers))
        request.setHeader(b"content-type", b"application/json")
        if path == "/register":
            request.setResponseCode(201)
            sent = json.loads(body)
            self.registered = sent
            return json.dumps({"client_id": "dcr-id", **sent}).encode()
        if path == "/revoke":
            code, answer = self.revoke_answer
            request.setResponseCode(code)
            return json.dumps(answer).encode()
        if path == "/token":
            code, answer = self.token_answer
            request.setResponseCode(code)
            return json.dumps(answer).encode()
        if path in self.documents:
            return json.dumps(self.documents[path]).encode()
        request.setResponseCode(404)
        return b"{}"

    def paths(self) -> list[str]:
        return [path for _, path, _, _ in self.requests]


def stub(resource: Resource) -> Any:
    """A treq client answered by C{resource} (StubTreq quacks like L{HTTPClient})."""
    return StubTreq(resource)


def result(test: SynchronousTestCase, coroutine: Any) -> Any:
    return test.successResultOf(Deferred.fromCoroutine(coroutine))


class DiscoveryTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.fake = FakeServers()
        self.clock = Clock()
        self.client = OAuthClient(stub(self.fake), self.clock)

    def test_well_known_order(self) -> None:
        """PRM at the path well-known, then the issuer's metadata in the spec's order."""
        found = result(self, self.client.discover(MCP, None, Revision.V2025_11_25))
        self.assertEqual(found.server.token_endpoint, "https://mcp.example/token")
        self.assertEqual(found.resource, MCP)
        self.assertEqual(
            self.fake.paths(),
            [
                "/.well-known/oauth-protected-resource/mcp",
                "/.well-known/oauth-authorization-server/tenant1",
                "/.well-known/openid-configuration/tenant1",
            ],
        )

    def test_resource_as_published(self) -> None:
        """The resource sent is the PRM's identifier as written, even a pathless one."""
        self.fake.documents["/.well-known/oauth-protected-resource/mcp"]["resource"] = (
            "https://mcp.example"
        )
        found = result(self, self.client.discover(MCP, None, Revision.V2025_11_25))
        self.assertEqual(found.resource, "https://mcp.example")

    def test_challenge_metadata_url(self) -> None:
        """The challenge's resource_metadata is fetched, nothing else for the PRM."""
        self.fake.documents["/custom"] = self.fake.documents.pop(
            "/.well-known/oauth-protected-resource/mcp"
        )
        challenge = Challenge("https://mcp.example/custom")
        result(self, self.client.discover(MCP, challenge, Revision.V2025_11_25))
        self.assertEqual(self.fake.paths()[0], "/custom")

    def test_resource_mismatch(self) -> None:
        """A PRM for another resource stops discovery before any authorization server."""
        self.fake.documents["/.well-known/oauth-protected-resource/mcp"]["resource"] = (
            "https://evil.example/mcp"
        )
        failure = self.failureResultOf(
            Deferred.fromCoroutine(self.client.discover(MCP, None, MODERN)), AuthorizationError
        )
        self.assertIn("evil.example", str(failure.value))
        self.assertEqual(len(self.fake.requests), 1)

    def test_2025_03_26_fallback(self) -> None:
        """No metadata at 2025-03-26: default endpoints at the origin, no resource."""
        self.fake.documents.clear()
        found = result(self, self.client.discover(MCP, None, Revision.V2025_03_26))
        self.assertEqual(found.server.token_endpoint, "https://mcp.example/token")
        self.assertIsNone(found.resource)
        self.assertEqual(self.fake.requests[0][3].get("mcp-protocol-version"), "2025-03-26")


class RegistrationAndTokenTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.fake = FakeServers()
        self.clock = Clock()
        self.clock.advance(1000)
        self.client = OAuthClient(stub(self.fake), self.clock)
        self.discovery = result(self, self.client.discover(MCP, None, MODERN))
        del self.fake.requests[:]

    def test_configured_client_first(self) -> None:
        """A configured clientId is used without registering."""
        got = result(
            self, self.client.register(self.discovery, "http://127.0.0.1:1/cb", client_id="mine")
        )
        self.assertEqual(got.client_id, "mine")
        self.assertEqual(self.fake.requests, [])

    def test_dynamic_registration_application_type(self) -> None:
        """
        At 2026-07-28 dynamic registration says application_type native, registers the
        loopback redirect URI, and asks for refresh tokens among its grant types.
        """
        got = result(self, self.client.register(self.discovery, "http://127.0.0.1:1/cb"))
        self.assertEqual(got.client_id, "dcr-id")
        self.assertEqual(self.fake.paths(), ["/register"])
        self.assertEqual(self.fake.registered["application_type"], "native")
        self.assertEqual(self.fake.registered["redirect_uris"], ["http://127.0.0.1:1/cb"])
        self.assertIn("refresh_token", self.fake.registered["grant_types"])

    def test_cimd_when_supported(self) -> None:
        """The client ID metadata document URL is the client id where supported."""
        self.fake.documents["/.well-known/openid-configuration/tenant1"][
            "client_id_metadata_document_supported"
        ] = True
        discovery = result(self, self.client.discover(MCP, None, MODERN))
        got = result(
            self,
            self.client.register(
                discovery, "http://127.0.0.1:1/cb", metadata_url="https://me/c.json"
            ),
        )
        self.assertEqual(got.client_id, "https://me/c.json")

    def test_authorization_url(self) -> None:
        """The URL carries PKCE S256, state, scope and resource."""
        client = Registration("https://mcp.example/tenant1", "cid", None, "none")
        url = self.client.authorization_url(
            self.discovery,
            client,
            redirect_uri="http://127.0.0.1:5/cb",
            state="st",
            code_challenge="ch",
            scopes=["a", "b"],
        )
        query = parse_qs(urlsplit(url).query)
        self.assertEqual(query["resource"], [MCP])
        self.assertEqual(query["code_challenge_method"], ["S256"])
        self.assertEqual(query["scope"], ["a b"])
        self.assertEqual(query["state"], ["st"])

    def test_exchange_basic_with_resource(self) -> None:
        """The code exchange sends resource and authenticates with client_secret_basic."""
        client = Registration("i", "cid", "sec", "client_secret_basic")
        tokens = result(
            self,
            self.client.exchange(
                self.discovery, client, code="c", verifier="v", redirect_uri="http://x/cb"
            ),
        )
        self.assertEqual((tokens.access_token, tokens.expires_at), ("tok-1", 1060))
        _, _, form, headers = self.fake.requests[0]
        self.assertEqual(form["resource"], [MCP])
        self.assertEqual(form["code_verifier"], ["v"])
        self.assertTrue(headers["authorization"].startswith("Basic "))
        self.assertNotIn("client_secret", form)

    def test_exchange_post(self) -> None:
        client = Registration("i", "cid", "sec", "client_secret_post")
        result(
            self,
            self.client.exchange(
                self.discovery, client, code="c", verifier="v", redirect_uri="http://x/cb"
            ),
        )
        _, _, form, headers = self.fake.requests[0]
        self.assertEqual(form["client_secret"], ["sec"])
        self.assertNotIn("authorization", headers)

    def test_refresh_sends_resource_keeps_refresh_token(self) -> None:
        """Refresh sends resource; without a new refresh token the old one stays."""
        self.fake.token_answer = (200, {"access_token": "tok-2", "expires_in": 60})
        client = Registration("i", "cid", None, "none")
        old = Tokens("tok-1", "ref-1", 0.0, ("a",))
        fresh = result(self, self.client.refresh(self.discovery, client, old))
        self.assertEqual((fresh.access_token, fresh.refresh_token), ("tok-2", "ref-1"))
        _, _, form, _ = self.fake.requests[0]
        self.assertEqual(form["resource"], [MCP])
        self.assertEqual(form["refresh_token"], ["ref-1"])

    def test_invalid_grant_needs_sign_in(self) -> None:
        """invalid_grant is a refusal that needs a new sign-in; a 503 is a network error."""
        self.fake.token_answer = (400, {"error": "invalid_grant"})
        client = Registration("i", "cid", None, "none")
        old = Tokens("tok-1", "ref-1", 0.0, ())
        failure = self.failureResultOf(
            Deferred.fromCoroutine(self.client.refresh(self.discovery, client, old)), GrantRefused
        )
        self.assertTrue(failure.value.needs_sign_in)
        from mcpx.auth.flow import NetworkError

        self.fake.token_answer = (503, "down")
        self.failureResultOf(
            Deferred.fromCoroutine(self.client.refresh(self.discovery, client, old)), NetworkError
        )

    def test_tokens_repr_hides_secrets(self) -> None:
        self.assertNotIn("tok", repr(Tokens("tok-1", "ref-1", None, ())))
        self.assertNotIn("sec", repr(Registration("i", "cid", "sec", "x")))
