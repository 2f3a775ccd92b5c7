"""Tests for L{mcpx.auth.metadata}: the per-revision rules of MCP authorization."""

from __future__ import annotations

import base64
import hashlib
import time
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from mcpx.auth import metadata
from mcpx.auth.metadata import (
    MAX_CHALLENGE_LENGTH,
    AuthorizationError,
    Challenge,
    ServerMetadata,
    accept_resource_metadata,
    accept_server_metadata,
    authorization_metadata_urls,
    canonical_resource,
    check_callback,
    check_https,
    check_pkce,
    default_server_metadata,
    new_pkce,
    parse_challenge,
    resource_metadata_urls,
    select_scopes,
    token_auth_method,
)
from mcpx.spec.revision import Revision

MODERN = Revision.V2026_07_28
NOV = Revision.V2025_11_25
#: Seconds of this thread's CPU time a reading of a long challenge may take: a linear one
#: takes a few hundredths, the quadratic regular expression a minute.
CPU_BOUND = 2.0


def server(**changes: Any) -> ServerMetadata:
    document: dict[str, Any] = {
        "issuer": "https://as.example",
        "authorization_endpoint": "https://as.example/authorize",
        "token_endpoint": "https://as.example/token",
        "code_challenge_methods_supported": ["S256"],
    }
    document.update(changes)
    return accept_server_metadata(document, "https://as.example", MODERN)


class ChallengeTests(SynchronousTestCase):
    def test_bearer_parameters(self) -> None:
        """The resource_metadata, scope and error of a Bearer challenge are read."""
        found = parse_challenge(
            [
                'Basic realm="x", Bearer error="insufficient_scope", '
                'scope="mcp:read mcp:write", resource_metadata="https://s.example/prm"'
            ]
        )
        self.assertEqual(
            found,
            Challenge("https://s.example/prm", ("mcp:read", "mcp:write"), "insufficient_scope"),
        )

    def test_no_bearer(self) -> None:
        """A challenge of another scheme is no Bearer challenge."""
        self.assertIsNone(parse_challenge(['Basic realm="x"']))

    def test_quoting(self) -> None:
        """
        A quoted value keeps its commas and spaces and loses its escapes; an unclosed
        quote is a bare value; the first of a name counts, in any case; text that is no
        parameter is passed over.
        """
        found = parse_challenge(
            ['Bearer junk 9x, SCOPE = "a\\"b c, d" error=first error=second scope=x']
        )
        self.assertEqual(found, Challenge(None, ('a"b', "c,", "d"), "first"))
        found = parse_challenge(['Bearer error="unclosed, resource_metadata=https://r'])
        self.assertEqual(found, Challenge("https://r", None, '"unclosed'))

    def test_long_challenge_linear(self) -> None:
        """
        A challenge's parameters are read in time linear in its length: after 100,000
        letters (which took a regular expression's quadratic matching a minute; 16,000
        took 1.7 s) its parameters are found within a bound of CPU time a hundred times
        what a linear reading takes (so a quadratic one cannot pass).
        """
        self.patch(metadata, "MAX_CHALLENGE_LENGTH", 1 << 20)
        value = "Bearer " + "a" * 100_000 + ' error="invalid_token"'
        started = time.thread_time()
        found = parse_challenge([value])
        spent = time.thread_time() - started
        self.assertEqual(found, Challenge(error="invalid_token"))
        self.assertLess(spent, CPU_BOUND)

    def test_challenge_too_long(self) -> None:
        """
        A challenge longer than MAX_CHALLENGE_LENGTH is a Bearer challenge with no
        parameters: none of its text is read, however long.
        """
        padding = "a" * (MAX_CHALLENGE_LENGTH - 40)
        short = f'Bearer {padding} error="invalid_token"'
        self.assertEqual(parse_challenge([short]), Challenge(error="invalid_token"))
        value = "Bearer " + "a" * 100_000 + ' error="invalid_token"'
        started = time.thread_time()
        found = parse_challenge([value])
        spent = time.thread_time() - started
        self.assertEqual(found, Challenge())
        self.assertLess(spent, CPU_BOUND)


class DiscoveryOrderTests(SynchronousTestCase):
    def test_resource_metadata_from_challenge_only(self) -> None:
        """A challenge's resource_metadata is the only place looked at."""
        urls = resource_metadata_urls("https://s.example/mcp", Challenge("https://s.example/x"))
        self.assertEqual(urls, ["https://s.example/x"])

    def test_resource_metadata_path_then_root(self) -> None:
        """Without a challenge: the path-inserted well-known, then the root."""
        self.assertEqual(
            resource_metadata_urls("https://s.example/mcp/", None),
            [
                "https://s.example/.well-known/oauth-protected-resource/mcp",
                "https://s.example/.well-known/oauth-protected-resource",
            ],
        )

    def test_server_metadata_with_path(self) -> None:
        """An issuer with a path: 8414 inserted, OIDC inserted, OIDC appended."""
        self.assertEqual(
            authorization_metadata_urls("https://as.example/tenant1", NOV),
            [
                "https://as.example/.well-known/oauth-authorization-server/tenant1",
                "https://as.example/.well-known/openid-configuration/tenant1",
                "https://as.example/tenant1/.well-known/openid-configuration",
            ],
        )

    def test_server_metadata_root(self) -> None:
        self.assertEqual(
            authorization_metadata_urls("https://as.example", NOV),
            [
                "https://as.example/.well-known/oauth-authorization-server",
                "https://as.example/.well-known/openid-configuration",
            ],
        )

    def test_2025_03_26_origin(self) -> None:
        """At 2025-03-26 the metadata is at the MCP server's origin, path dropped."""
        self.assertEqual(
            authorization_metadata_urls("https://s.example/mcp", Revision.V2025_03_26),
            ["https://s.example/.well-known/oauth-authorization-server"],
        )

    def test_default_endpoints(self) -> None:
        """The 2025-03-26 fallback endpoints are at the origin."""
        fallback = default_server_metadata("https://s.example/api/mcp")
        self.assertEqual(
            (
                fallback.authorization_endpoint,
                fallback.token_endpoint,
                fallback.registration_endpoint,
            ),
            (
                "https://s.example/authorize",
                "https://s.example/token",
                "https://s.example/register",
            ),
        )


class ResourceMetadataTests(SynchronousTestCase):
    def test_canonical(self) -> None:
        self.assertEqual(canonical_resource("HTTPS://S.Example/mcp/#x"), "https://s.example/mcp")

    def test_accepted(self) -> None:
        found = accept_resource_metadata(
            {
                "resource": "https://s.example/mcp",
                "authorization_servers": ["https://as.example"],
                "scopes_supported": ["a"],
            },
            "https://s.example/mcp",
        )
        self.assertEqual(found.authorization_servers, ("https://as.example",))

    def test_other_resource_refused(self) -> None:
        """A document about another server is refused."""
        error = self.assertRaises(
            AuthorizationError,
            accept_resource_metadata,
            {"resource": "https://evil.example/mcp", "authorization_servers": ["https://a"]},
            "https://s.example/mcp",
        )
        self.assertIn("evil.example", str(error))

    def test_no_servers_refused(self) -> None:
        self.assertRaises(
            AuthorizationError,
            accept_resource_metadata,
            {"resource": "https://s.example/mcp", "authorization_servers": []},
            "https://s.example/mcp",
        )


class ServerMetadataTests(SynchronousTestCase):
    def test_issuer_mismatch_modern(self) -> None:
        """At 2026-07-28 the metadata's issuer must equal the issuer looked up."""
        self.assertRaises(
            AuthorizationError,
            accept_server_metadata,
            {
                "issuer": "https://other.example",
                "authorization_endpoint": "https://other.example/a",
                "token_endpoint": "https://other.example/t",
            },
            "https://as.example",
            MODERN,
        )

    def test_issuer_mismatch_tolerated_before(self) -> None:
        found = accept_server_metadata(
            {
                "issuer": "https://other.example",
                "authorization_endpoint": "https://other.example/a",
                "token_endpoint": "https://other.example/t",
            },
            "https://as.example",
            NOV,
        )
        self.assertEqual(found.token_endpoint, "https://other.example/t")

    def test_https_endpoints_required(self) -> None:
        """
        An authorization server endpoint over plain http is refused, saying so, unless
        it is on a loopback address (localhost, 127.0.0.0/8, ::1).
        """
        for endpoint in ("http://as.example/token", "http://192.168.1.5/token", "ftp://x/t"):
            with self.assertRaises(AuthorizationError) as raised:
                accept_server_metadata(
                    {
                        "issuer": "https://as.example",
                        "authorization_endpoint": "https://as.example/authorize",
                        "token_endpoint": endpoint,
                    },
                    "https://as.example",
                    MODERN,
                )
            self.assertIn("https", str(raised.exception))
        for loopback in ("http://localhost:8", "http://127.8.9.10", "http://[::1]:9"):
            found = accept_server_metadata(
                {
                    "issuer": loopback,
                    "authorization_endpoint": loopback + "/authorize",
                    "token_endpoint": loopback + "/token",
                },
                loopback,
                MODERN,
            )
            self.assertEqual(found.token_endpoint, loopback + "/token")

    def test_https_issuer_required(self) -> None:
        """The issuer itself (and at 2025-03-26 the server's origin) must be https too."""
        check_https("https://as.example", "authorization server")
        self.assertRaises(AuthorizationError, check_https, "http://as.example", "x")

    def test_refusal_names_only_scheme_and_host(self) -> None:
        """
        A refused URL (one a hostile server may have written) is named by its scheme, host
        and port alone: its path, query and fragment reach no error; a fragment, or a
        URL with no host, is refused too.
        """
        hostile = "http://198.51.100.1:81/x/SECRET?q=SECRET#SECRET"
        with self.assertRaises(AuthorizationError) as raised:
            check_https(hostile, "protected-resource metadata")
        message = str(raised.exception)
        self.assertIn("http://198.51.100.1:81", message)
        self.assertNotIn("SECRET", message)
        for refused in ("https://as.example/#frag", "https:///nohost", "not a url"):
            self.assertRaises(AuthorizationError, check_https, refused, "x")

    def test_pkce_refused_unadvertised(self) -> None:
        """From 2025-11-25 a server that does not advertise S256 is refused."""
        self.assertRaises(
            AuthorizationError, check_pkce, server(code_challenge_methods_supported=None), NOV
        )
        self.assertRaises(
            AuthorizationError, check_pkce, server(code_challenge_methods_supported=["plain"]), NOV
        )
        check_pkce(server(), NOV)

    def test_pkce_challenge(self) -> None:
        """The challenge is the unpadded base64url SHA-256 of a fresh verifier."""
        pair = new_pkce()
        digest = hashlib.sha256(pair.verifier.encode()).digest()
        self.assertEqual(pair.challenge, base64.urlsafe_b64encode(digest).rstrip(b"=").decode())
        self.assertGreaterEqual(len(pair.verifier), 43)
        self.assertNotEqual(new_pkce().verifier, pair.verifier)

    def test_auth_method(self) -> None:
        """The advertised method is used; a public client uses none."""
        post = server(token_endpoint_auth_methods_supported=["client_secret_post"])
        self.assertEqual(token_auth_method(post, True), "client_secret_post")
        self.assertEqual(token_auth_method(server(), True), "client_secret_basic")
        self.assertEqual(token_auth_method(post, False), "none")
        jwt_only = server(token_endpoint_auth_methods_supported=["private_key_jwt"])
        self.assertRaises(AuthorizationError, token_auth_method, jwt_only, True)


class ScopeTests(SynchronousTestCase):
    def test_order(self) -> None:
        """Challenge scope, then scopes_supported, then none."""
        prm = accept_resource_metadata(
            {
                "resource": "https://s/mcp",
                "authorization_servers": ["https://a"],
                "scopes_supported": ["x"],
            },
            "https://s/mcp",
        )
        self.assertEqual(
            select_scopes(Challenge(scope=("c",)), prm, server(), revision=NOV), ("c",)
        )
        self.assertEqual(select_scopes(None, prm, server(), revision=NOV), ("x",))
        self.assertEqual(select_scopes(None, None, server(), revision=NOV), ())

    def test_union_and_offline_access(self) -> None:
        """At 2026-07-28 step-up keeps old scopes; offline_access only when listed."""
        listed = server(scopes_supported=["a", "offline_access"])
        self.assertEqual(
            select_scopes(Challenge(scope=("b",)), None, listed, previous=("a",), revision=MODERN),
            ("a", "b", "offline_access"),
        )
        self.assertEqual(
            select_scopes(
                Challenge(scope=("b", "offline_access")), None, server(), revision=MODERN
            ),
            ("b",),
        )


class CallbackTests(SynchronousTestCase):
    def test_state(self) -> None:
        self.assertRaises(
            AuthorizationError,
            check_callback,
            {"code": "c", "state": "other"},
            state="s",
            server=server(),
            revision=NOV,
        )

    def test_error_from_wrong_issuer_not_shown(self) -> None:
        """
        At 2026-07-28 an error response whose iss is not the issuer is refused for its
        issuer, without acting on or showing its error or description.
        """
        with self.assertRaises(AuthorizationError) as raised:
            check_callback(
                {
                    "state": "s",
                    "iss": "https://evil",
                    "error": "access_denied",
                    "error_description": "visit https://evil/phish",
                },
                state="s",
                server=server(),
                revision=MODERN,
            )
        self.assertIn("https://evil", str(raised.exception))
        self.assertNotIn("access_denied", str(raised.exception))
        self.assertNotIn("phish", str(raised.exception))
        with self.assertRaises(AuthorizationError) as raised:
            check_callback(
                {"state": "s", "iss": "https://as.example", "error": "access_denied"},
                state="s",
                server=server(),
                revision=MODERN,
            )
        self.assertIn("access_denied", str(raised.exception))

    def test_iss(self) -> None:
        """iss: exact equality, required when advertised, checked when present."""
        advertised = server(authorization_response_iss_parameter_supported=True)
        check = check_callback
        self.assertEqual(
            check(
                {"code": "c", "state": "s", "iss": "https://as.example"},
                state="s",
                server=advertised,
                revision=MODERN,
            ),
            "c",
        )
        for params, meta in [
            ({"code": "c", "state": "s"}, advertised),
            ({"code": "c", "state": "s", "iss": "https://evil"}, server()),
            ({"code": "c", "state": "s", "iss": "https://as.example/"}, advertised),
        ]:
            self.assertRaises(
                AuthorizationError, check, params, state="s", server=meta, revision=MODERN
            )
        self.assertEqual(
            check({"code": "c", "state": "s"}, state="s", server=server(), revision=MODERN), "c"
        )
