"""
Tests for L{mcpx.auth.resource_server} and L{mcpx.auth.protected_resource}: mcpx
checking hosts' access tokens against a stand-in authorization server (StubTreq).
"""

from __future__ import annotations

import json
from typing import Any, cast

import jwt
from cryptography.hazmat.primitives import serialization
from treq.testing import StubTreq
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.auth.caller import INSUFFICIENT_SCOPE, INVALID_TOKEN, UNAVAILABLE, Refusal, VerifiedToken
from mcpx.auth.jwks import DOCUMENT_LIMIT, REFETCH_INTERVAL, REQUEST_TIMEOUT
from mcpx.auth.metadata import parse_challenge
from mcpx.auth.protected_resource import (
    challenge,
    metadata_document,
    metadata_paths,
    metadata_url,
)
from mcpx.auth.resource_server import (
    INTROSPECTION_CONCURRENCY,
    LEEWAY,
    TOKEN_LIMIT,
    TokenVerifier,
)
from mcpx.settings.oauth_resource import Introspection, OAuthResource
from tests.auth.standin_issuer import (
    AUDIENCE,
    INTROSPECTION_CLIENT,
    ISSUER,
    StandInIssuer,
    rsa_key,
)

NOW = 1_800_000_000.0


def stub(resource: StandInIssuer) -> Any:
    """A treq client answered by the stand-in (StubTreq quacks like L{HTTPClient})."""
    return StubTreq(resource)


SETTINGS = OAuthResource(issuer=ISSUER, audience=AUDIENCE, scopes=("mcp:tools",))


class VerifierCase(SynchronousTestCase):
    settings = SETTINGS

    def setUp(self) -> None:
        self.issuer = StandInIssuer()
        self.clock = Clock()
        self.clock.advance(NOW)
        self.verifier = TokenVerifier(self.settings, stub(self.issuer), self.clock)

    def verify(self, token: str | bytes) -> VerifiedToken | Refusal:
        outcome: VerifiedToken | Refusal = self.successResultOf(
            Deferred.fromCoroutine(self.verifier.verify(token))
        )
        return outcome

    def assertRefused(self, token: str | bytes, error: str = INVALID_TOKEN) -> Refusal:
        outcome = self.verify(token)
        self.assertIsInstance(outcome, Refusal)
        assert isinstance(outcome, Refusal)
        self.assertEqual(outcome.error, error)
        return outcome

    def mint(self, **changes: Any) -> str:
        return self.issuer.mint(self.clock.seconds(), **changes)


class GoodTokenTests(VerifierCase):
    def test_accepted(self) -> None:
        """A token from the issuer, for this audience, with the scope: its subject and scopes."""
        self.assertEqual(self.verify(self.mint()), VerifiedToken("alice", ("mcp:tools", "profile")))

    def test_keys_found_from_metadata(self) -> None:
        """Without jwksUri the keys' address comes from the issuer's RFC 8414 metadata."""
        self.verify(self.mint())
        self.assertEqual(
            self.issuer.requests,
            ["/.well-known/oauth-authorization-server/realms/tools", "/realms/tools/certs"],
        )

    def test_keys_cached(self) -> None:
        """A second token does not fetch anything."""
        self.verify(self.mint())
        fetched = len(self.issuer.requests)
        self.verify(self.mint(sub="bob"))
        self.assertEqual(len(self.issuer.requests), fetched)

    def test_ps256_on_rsa_key(self) -> None:
        """An RSA key without a declared algorithm checks PS256 and RS512 tokens too."""
        for alg in ("PS256", "RS512"):
            with self.subTest(alg=alg):
                self.assertIsInstance(self.verify(self.mint(alg=alg)), VerifiedToken)

    def test_ec_key(self) -> None:
        """An ES256 token from the issuer's EC key is accepted."""
        self.assertIsInstance(self.verify(self.mint(kid="e1")), VerifiedToken)

    def test_scp_list(self) -> None:
        """Scopes given as an C{scp} list count as well as a C{scope} string."""
        outcome = self.verify(self.mint(scope=None, scp=["mcp:tools"]))
        self.assertEqual(outcome, VerifiedToken("alice", ("mcp:tools",)))

    def test_audience_list(self) -> None:
        """An C{aud} list naming this resource among others is accepted."""
        self.assertIsInstance(self.verify(self.mint(aud=["other", AUDIENCE])), VerifiedToken)

    def test_leeway(self) -> None:
        """A token just past its expiry, within the leeway, still passes."""
        token = self.mint(exp=int(NOW) + 1)
        self.clock.advance(LEEWAY - 5)
        self.assertIsInstance(self.verify(token), VerifiedToken)

    def test_configured_jwks_uri(self) -> None:
        """With jwksUri the metadata is not read."""
        settings = OAuthResource(
            issuer=ISSUER, audience=AUDIENCE, scopes=(), jwks_uri=ISSUER + "/certs"
        )
        verifier = TokenVerifier(settings, stub(self.issuer), self.clock)
        outcome = self.successResultOf(Deferred.fromCoroutine(verifier.verify(self.mint())))
        self.assertIsInstance(outcome, VerifiedToken)
        self.assertEqual(self.issuer.requests, ["/realms/tools/certs"])


class RememberedTokenTests(VerifierCase):
    def test_second_use_is_not_checked_again(self) -> None:
        """A host's token, sent with every request, is checked once, not every time."""
        decoded: list[str] = []
        real = jwt.decode

        def counting(token: str, *args: Any, **kwargs: Any) -> Any:
            decoded.append(token)
            return real(token, *args, **kwargs)

        self.patch(jwt, "decode", counting)
        token = self.mint()
        for _ in range(3):
            self.assertEqual(self.verify(token).subject, "alice")  # type: ignore[union-attr]
        self.assertEqual(len(decoded), 1)

    def test_not_past_expiry(self) -> None:
        """A remembered token is refused once it expires."""
        token = self.mint(exp=int(NOW) + 10)
        self.assertIsInstance(self.verify(token), VerifiedToken)
        self.clock.advance(10 + LEEWAY)
        self.assertRefused(token)

    def test_refusals_are_not_remembered(self) -> None:
        """A token refused while the keys could not be had is accepted once they can."""
        token = self.mint()
        self.issuer.metadata["issuer"] = "https://evil.example"
        self.assertRefused(token, UNAVAILABLE)
        self.issuer.metadata["issuer"] = ISSUER
        self.clock.advance(REFETCH_INTERVAL)
        self.assertIsInstance(self.verify(token), VerifiedToken)


class HostileTokenTests(VerifierCase):
    def test_alg_none(self) -> None:
        """An unsigned token (C{alg: none}) is refused."""
        token = jwt.encode(self.issuer.claims(NOW), "", algorithm="none", headers={"kid": "k1"})
        refusal = self.assertRefused(token)
        self.assertEqual(refusal.status, 401)

    def test_hmac_keyed_with_public_key(self) -> None:
        """An HS256 token whose secret is the issuer's public key PEM is refused."""
        pem = (
            self.issuer.keys["k1"]
            .public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        header = json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode()
        payload = json.dumps(self.issuer.claims(NOW)).encode()
        signing_input = (
            jwt.utils.base64url_encode(header) + b"." + jwt.utils.base64url_encode(payload)
        )
        import hmac
        from hashlib import sha256

        signature = hmac.new(pem, signing_input, sha256).digest()
        token = signing_input + b"." + jwt.utils.base64url_encode(signature)
        self.assertRefused(token)

    def test_other_algorithm_than_declared(self) -> None:
        """A key whose JWK says RS256 does not check a PS256 token, even one it signed."""
        self.issuer.declared["k1"] = "RS256"
        self.assertRefused(self.mint(alg="PS256"))

    def test_rsa_algorithm_on_ec_key(self) -> None:
        """A token claiming RS256 under the EC key's id is refused."""
        self.assertRefused(self.mint(kid="e1", key=self.issuer.keys["k1"], alg="RS256"))

    def test_foreign_key(self) -> None:
        """A token signed by a key the issuer never published, under its key id, is refused."""
        self.assertRefused(self.mint(key=rsa_key()))

    def test_unknown_kid_refetches_once(self) -> None:
        """An unknown key id fetches the keys again once, then is refused."""
        self.verify(self.mint())
        self.clock.advance(REFETCH_INTERVAL)
        fetches = self.verifier.keys.fetches
        self.assertRefused(self.mint(kid="k9", key=rsa_key()))
        self.assertEqual(self.verifier.keys.fetches, fetches + 1)

    def test_second_unknown_kid_within_a_minute(self) -> None:
        """Another unknown key id within a minute is refused without fetching again."""
        self.verify(self.mint())
        self.clock.advance(REFETCH_INTERVAL)
        self.assertRefused(self.mint(kid="k8", key=rsa_key()))
        fetches = self.verifier.keys.fetches
        self.clock.advance(REFETCH_INTERVAL - 1)
        self.assertRefused(self.mint(kid="k9", key=rsa_key()))
        self.assertEqual(self.verifier.keys.fetches, fetches)

    def test_expired(self) -> None:
        """A token past its expiry and the leeway is refused."""
        self.assertRefused(self.mint(exp=int(NOW - LEEWAY) - 1))

    def test_no_expiry(self) -> None:
        """A JWT without C{exp} is refused: it would be good forever."""
        self.assertRefused(self.mint(exp=None))

    def test_not_yet_valid(self) -> None:
        """A token whose C{nbf} is beyond the leeway is refused."""
        self.assertRefused(self.mint(nbf=int(NOW + LEEWAY) + 5))

    def test_wrong_audience(self) -> None:
        """A token for another resource is refused."""
        self.assertRefused(self.mint(aud="https://other.example/mcp"))

    def test_wrong_issuer(self) -> None:
        """A token naming another issuer, even signed with the right key, is refused."""
        self.assertRefused(self.mint(iss="https://evil.example"))

    def test_no_subject(self) -> None:
        """A token without C{sub} is refused: there would be no caller to bind work to."""
        self.assertRefused(self.mint(sub=None))

    def test_not_a_jwt(self) -> None:
        """Strings that are no JWT are refused, not raised."""
        for token in (
            "hello",
            "a.b.c",
            "..",
            "eyJhbGciOiJSUzI1NiJ9.e30.",
            "\u00e9.\u00e9.\u00e9",
            "",
        ):
            with self.subTest(token=token):
                self.assertRefused(token.encode("utf-8"))

    def test_oversized(self) -> None:
        """A token longer than the limit is refused without being parsed or fetched for."""
        self.assertRefused(self.mint(pad="x" * TOKEN_LIMIT))
        self.assertEqual(self.issuer.requests, [])

    def test_tampered_payload(self) -> None:
        """A good token with its claims swapped for another subject's is refused."""
        header, _, signature = self.mint().split(".")
        claims = jwt.utils.base64url_encode(
            json.dumps(self.issuer.claims(NOW, sub="root")).encode()
        )
        self.assertRefused(f"{header}.{claims.decode()}.{signature}")


class ScopeTests(VerifierCase):
    def test_missing_scope(self) -> None:
        """A good token without a required scope is refused with 403 insufficient_scope."""
        refusal = self.assertRefused(self.mint(scope="profile"), INSUFFICIENT_SCOPE)
        self.assertEqual(refusal.status, 403)
        self.assertIn("mcp:tools", refusal.message)


class RotationTests(VerifierCase):
    def test_new_kid_after_rotation(self) -> None:
        """After the issuer rotates its keys, a token with the new key id is accepted."""
        self.assertIsInstance(self.verify(self.mint()), VerifiedToken)
        self.issuer.rotate()
        self.clock.advance(REFETCH_INTERVAL)
        self.assertEqual(
            self.verify(self.mint(kid="k2")), VerifiedToken("alice", ("mcp:tools", "profile"))
        )

    def test_retired_key_refused(self) -> None:
        """Once the keys are fetched after a rotation, a token of a retired key is refused."""
        old = self.mint()
        self.issuer.rotate()
        self.assertIsInstance(self.verify(self.mint(kid="k2")), VerifiedToken)
        self.assertRefused(old)


class UnreachableIssuerTests(VerifierCase):
    def test_no_metadata(self) -> None:
        """An issuer whose metadata cannot be had: 503, then no new fetch for a minute."""
        self.issuer.metadata["issuer"] = "https://evil.example"
        refusal = self.assertRefused(self.mint(), UNAVAILABLE)
        self.assertEqual(refusal.status, 503)
        fetched = len(self.issuer.requests)
        self.assertRefused(self.mint(), UNAVAILABLE)
        self.assertEqual(len(self.issuer.requests), fetched)

    def test_oversized_jwks(self) -> None:
        """A key set larger than the document limit is not read."""
        self.issuer.keys.update(
            {f"k{n}": self.issuer.keys["k1"] for n in range(3, 3 + DOCUMENT_LIMIT // 300)}
        )
        self.assertRefused(self.mint(), UNAVAILABLE)


class IntrospectionTests(VerifierCase):
    settings = OAuthResource(
        issuer=ISSUER,
        audience=AUDIENCE,
        scopes=("mcp:tools",),
        introspection=Introspection(ISSUER + "/introspect", *INTROSPECTION_CLIENT),
    )

    def answer(self, **changes: Any) -> dict[str, Any]:
        return {"active": True, **self.issuer.claims(NOW, exp=None, nbf=None), **changes}

    def test_active(self) -> None:
        """An opaque token the issuer says is active, for this audience: its subject."""
        self.issuer.active["opaque-1"] = self.answer()
        self.assertEqual(self.verify("opaque-1"), VerifiedToken("alice", ("mcp:tools", "profile")))

    def test_cached(self) -> None:
        """An active answer is kept for a while: the same token is not introspected again."""
        self.issuer.active["opaque-1"] = self.answer()
        self.verify("opaque-1")
        self.verify("opaque-1")
        self.assertEqual(self.issuer.requests.count("/realms/tools/introspect"), 1)

    def test_inactive(self) -> None:
        """A token the issuer does not know is refused with 401."""
        self.assertRefused("opaque-unknown")

    def test_active_for_another_audience(self) -> None:
        """An active token for another resource is refused."""
        self.issuer.active["opaque-2"] = self.answer(aud="https://other.example")
        self.assertRefused("opaque-2")

    def test_active_without_scope(self) -> None:
        """An active token without the required scope gets 403."""
        self.issuer.active["opaque-3"] = self.answer(scope="profile")
        self.assertRefused("opaque-3", INSUFFICIENT_SCOPE)


class SilentIssuer:
    """An HTTP client whose requests are never answered."""

    def __init__(self) -> None:
        self.sent = 0

    def request(self, *args: Any, **kwargs: Any) -> Deferred[Any]:
        self.sent += 1
        return Deferred()


class HeldIssuer:
    """An HTTP client that answers from the stand-in only when told to."""

    def __init__(self, issuer: StandInIssuer) -> None:
        self.stub: Any = StubTreq(issuer)
        self.held: list[tuple[tuple[Any, ...], dict[str, Any], Deferred[Any]]] = []

    def request(self, *args: Any, **kwargs: Any) -> Deferred[Any]:
        waiting: Deferred[Any] = Deferred()
        self.held.append((args, kwargs, waiting))
        return waiting

    def release(self) -> None:
        args, kwargs, waiting = self.held.pop(0)
        self.stub.request(*args, **kwargs).chainDeferred(waiting)


class ConcurrentFetchTests(SynchronousTestCase):
    def test_tokens_wait_for_one_fetch(self) -> None:
        """Tokens that arrive while the keys are being fetched wait for that one fetch."""
        issuer = StandInIssuer()
        clock = Clock()
        clock.advance(NOW)
        held = HeldIssuer(issuer)
        verifier = TokenVerifier(SETTINGS, cast(Any, held), clock)
        first = Deferred.fromCoroutine(verifier.verify(issuer.mint(NOW)))
        second = Deferred.fromCoroutine(verifier.verify(issuer.mint(NOW, sub="bob")))
        self.assertFalse(second.called)
        held.release()  # the metadata
        held.release()  # the keys
        self.assertEqual(self.successResultOf(first).subject, "alice")  # type: ignore[union-attr]
        self.assertEqual(self.successResultOf(second).subject, "bob")  # type: ignore[union-attr]
        self.assertEqual((verifier.keys.fetches, held.held), (1, []))


class IntrospectionLimitTests(SynchronousTestCase):
    def test_concurrency(self) -> None:
        """
        Past the limit of introspections waiting at once, an opaque token is refused with
        503 at once and nothing more is sent; a timed-out one frees its place.
        """
        clock = Clock()
        silent = SilentIssuer()
        verifier = TokenVerifier(IntrospectionTests.settings, cast(Any, silent), clock)
        waiting = [
            Deferred.fromCoroutine(verifier.verify(f"opaque-{n}"))
            for n in range(INTROSPECTION_CONCURRENCY)
        ]
        self.assertEqual([d.called for d in waiting], [False] * INTROSPECTION_CONCURRENCY)
        outcome = self.successResultOf(Deferred.fromCoroutine(verifier.verify("opaque-x")))
        self.assertEqual(outcome.error, UNAVAILABLE)  # type: ignore[union-attr]
        self.assertEqual(silent.sent, INTROSPECTION_CONCURRENCY)
        clock.advance(REQUEST_TIMEOUT)
        timed_out: Any = self.successResultOf(waiting[0])
        self.assertEqual(timed_out.status, 503)
        Deferred.fromCoroutine(verifier.verify("opaque-y"))
        self.assertEqual(silent.sent, INTROSPECTION_CONCURRENCY + 1)


class ProtectedResourceTests(SynchronousTestCase):
    def test_document(self) -> None:
        """The RFC 9728 document names the audience, the issuer and the scopes."""
        self.assertEqual(
            metadata_document(SETTINGS),
            {
                "resource": AUDIENCE,
                "authorization_servers": [ISSUER],
                "scopes_supported": ["mcp:tools"],
                "bearer_methods_supported": ["header"],
            },
        )

    def test_paths(self) -> None:
        """The document is served path-inserted and at the root."""
        self.assertEqual(
            metadata_paths(AUDIENCE),
            {
                b"/.well-known/oauth-protected-resource/mcp",
                b"/.well-known/oauth-protected-resource",
            },
        )

    def test_challenge_without_token(self) -> None:
        """No token: the challenge points at the document and names the scope, no error."""
        parsed = parse_challenge([challenge(SETTINGS).decode()])
        assert parsed is not None
        self.assertEqual(parsed.resource_metadata, metadata_url(AUDIENCE))
        self.assertEqual(
            parsed.resource_metadata, "https://mcp.example/.well-known/oauth-protected-resource/mcp"
        )
        self.assertEqual(parsed.scope, ("mcp:tools",))
        self.assertIsNone(parsed.error)

    def test_challenge_insufficient_scope(self) -> None:
        """A 403 challenge says insufficient_scope, as a client reads it."""
        refusal = Refusal(INSUFFICIENT_SCOPE, 'lacks "mcp:tools"')
        parsed = parse_challenge([challenge(SETTINGS, refusal).decode()])
        assert parsed is not None
        self.assertEqual(parsed.error, "insufficient_scope")
        self.assertEqual(parsed.scope, ("mcp:tools",))
