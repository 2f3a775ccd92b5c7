# -*- test-case-name: tests.auth.test_resource_server -*-
"""
Checking the access tokens hosts present to mcpx over TCP when C{daemon.auth} is
C{oauth} (L{mcpx.settings.oauth_resource}).

A JWT is checked against the issuer's signing keys (its JWKS, found from the issuer's
RFC 8414 or OpenID Connect metadata unless C{jwksUri} is set): the signature, with an
allow-list of asymmetric algorithms (never C{none}, never HMAC, whose "key" would be
the public key anyone can read); C{iss}; C{aud}; C{exp} and C{nbf} with
L{LEEWAY}; a C{sub}; then the configured scopes.  A token that is no JWT goes to the
RFC 7662 introspection endpoint when one is configured.

PyJWT does the JOSE work; the fetching, caching and clock are ours, on the reactor.
The keys are fetched once and again when a token names a key id not among them, at
most once per L{REFETCH_INTERVAL}, so a stream of made-up key ids costs the issuer
one request a minute and a key rotation is picked up without a restart.

Every outcome is a L{VerifiedToken} or a L{Refusal}; nothing a client sends makes
L{TokenVerifier.verify} raise.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlencode

import jwt
from treq.client import HTTPClient
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from mcpx.auth.caller import (
    INSUFFICIENT_SCOPE,
    INVALID_TOKEN,
    UNAVAILABLE,
    Refusal,
    VerifiedToken,
)
from mcpx.auth.jwks import (
    ALGORITHMS,
    FetchError,
    KeySet,
    fetch_json,
)
from mcpx.settings.oauth_resource import OAuthResource

log = Logger()

#: The longest token looked at, in bytes; real access tokens are a few KiB at most.
TOKEN_LIMIT: Final = 8 * 1024

#: Seconds of clock difference allowed on C{exp} and C{nbf}.
LEEWAY: Final = 30.0

#: How long an accepted token is taken again without a second check (never past its
#: C{exp}), in seconds: a signature check costs about a fifth of a millisecond, and a
#: host sends the same token with every request.
ACCEPTED_TTL: Final = 60.0

#: How many introspection requests may be waiting at once; a flood of made-up opaque
#: tokens beyond that is refused with 503 rather than passed on to the issuer.
INTROSPECTION_CONCURRENCY: Final = 8

#: How many accepted tokens are remembered.
ACCEPTED_CACHE: Final = 1024


class TokenVerifier:
    """
    Decides, for each bearer token, who is calling or why not.

    @param http: the treq client the keys and introspection answers are fetched with.
    @param clock: the time the token's C{exp} and C{nbf} are held against.
    """

    def __init__(self, settings: OAuthResource, http: HTTPClient, clock: IReactorTime) -> None:
        self.settings = settings
        self._http = http
        self._clock = clock
        self.keys = KeySet(http, clock, settings.issuer, settings.jwks_uri)
        self._accepted: dict[bytes, tuple[float, VerifiedToken]] = {}
        self._introspecting = 0

    async def verify(self, token: bytes | str) -> VerifiedToken | Refusal:
        """Who C{token} speaks for, or why it is refused."""
        try:
            return await self._verify(token)
        except Exception:
            log.failure("checking an access token failed unexpectedly")
            return Refusal(INVALID_TOKEN, "the access token could not be checked")

    async def _verify(self, token: bytes | str) -> VerifiedToken | Refusal:
        raw = token.encode("latin-1") if isinstance(token, str) else token
        if not raw:
            return Refusal(INVALID_TOKEN, "no access token was sent")
        if len(raw) > TOKEN_LIMIT:
            return Refusal(INVALID_TOKEN, f"the access token is longer than {TOKEN_LIMIT} bytes")
        now = self._clock.seconds()
        remembered = self._accepted.get(raw)
        if remembered is not None and remembered[0] > now:
            return remembered[1]
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            return Refusal(INVALID_TOKEN, "the access token is not ASCII")
        if text.count(".") != 2:
            if self.settings.introspection is None:
                return Refusal(INVALID_TOKEN, "the access token is not a JWT")
            outcome = await self._introspect(text)
        else:
            outcome = await self._verify_jwt(text)
        if isinstance(outcome, VerifiedToken):
            self._remember(raw, outcome)
        return outcome

    def _remember(self, token: bytes, caller: VerifiedToken) -> None:
        now = self._clock.seconds()
        until = now + ACCEPTED_TTL
        if caller.expires_at is not None:
            until = min(until, caller.expires_at + LEEWAY)
        if len(self._accepted) >= ACCEPTED_CACHE:
            self._accepted = {k: v for k, v in self._accepted.items() if v[0] > now}
        if len(self._accepted) < ACCEPTED_CACHE:
            self._accepted[token] = (until, caller)

    async def _verify_jwt(self, token: str) -> VerifiedToken | Refusal:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            return Refusal(INVALID_TOKEN, "the access token is not a JWT")
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            return Refusal(
                INVALID_TOKEN,
                f"the access token's algorithm is not one of {', '.join(sorted(ALGORITHMS))}",
            )
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            return Refusal(INVALID_TOKEN, "the access token's key id is not a string")
        try:
            key = await self.keys.key_for(kid)
        except FetchError:
            return Refusal(UNAVAILABLE, "the issuer's signing keys cannot be had right now")
        if key is None:
            return Refusal(
                INVALID_TOKEN, "the access token is signed with a key the issuer does not publish"
            )
        if not key.fits(alg):
            return Refusal(INVALID_TOKEN, "the access token's algorithm does not fit its key")
        try:
            claims = jwt.decode(
                token,
                key=key.jwk.key,
                algorithms=[alg],
                # Time and audience are checked below, against the injected clock.
                options={
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                    "verify_aud": False,
                    "verify_iss": False,
                },
            )
        except jwt.InvalidTokenError:
            return Refusal(INVALID_TOKEN, "the access token's signature does not verify")
        return self._check_claims(claims, require_exp=True)

    def _check_claims(
        self, claims: Mapping[str, Any], *, require_exp: bool
    ) -> VerifiedToken | Refusal:
        settings = self.settings
        if claims.get("iss") != settings.issuer:
            return Refusal(INVALID_TOKEN, f"the access token was not issued by {settings.issuer}")
        audience = claims.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if settings.audience not in audiences:
            return Refusal(INVALID_TOKEN, f"the access token is not for {settings.audience}")
        now = self._clock.seconds()
        exp, nbf = claims.get("exp"), claims.get("nbf")
        if exp is None and require_exp:
            return Refusal(INVALID_TOKEN, "the access token has no expiry")
        if exp is not None and (not _number(exp) or exp + LEEWAY <= now):
            return Refusal(INVALID_TOKEN, "the access token has expired")
        if nbf is not None and (not _number(nbf) or nbf - LEEWAY > now):
            return Refusal(INVALID_TOKEN, "the access token is not valid yet")
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            return Refusal(INVALID_TOKEN, "the access token names no subject")
        scopes = _scopes(claims)
        missing = [scope for scope in settings.scopes if scope not in scopes]
        if missing:
            return Refusal(
                INSUFFICIENT_SCOPE, f"the access token lacks the scope {' '.join(missing)}"
            )
        expires = float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None
        return VerifiedToken(subject, scopes, expires)

    async def _introspect(self, token: str) -> VerifiedToken | Refusal:
        introspection = self.settings.introspection
        assert introspection is not None
        if self._introspecting >= INTROSPECTION_CONCURRENCY:
            return Refusal(UNAVAILABLE, "too many tokens are being introspected; try again")
        credentials = f"{introspection.client_id}:{introspection.client_secret}"
        basic = base64.b64encode(credentials.encode("utf-8")).decode("ascii")
        self._introspecting += 1
        try:
            answer = await fetch_json(
                self._http,
                self._clock,
                "POST",
                introspection.url,
                headers={
                    "Authorization": f"Basic {basic}",
                    "Content-Type": "application/x-www-form-urlencoded",
                },
                body=urlencode({"token": token, "token_type_hint": "access_token"}).encode(),
            )
        except FetchError as error:
            log.warn("token introspection failed: {error}", error=error)
            return Refusal(UNAVAILABLE, "the token introspection endpoint cannot be had right now")
        finally:
            self._introspecting -= 1
        if not isinstance(answer, dict) or answer.get("active") is not True:
            return Refusal(INVALID_TOKEN, "the access token is not active")
        return self._check_claims(answer, require_exp=False)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _scopes(claims: Mapping[str, Any]) -> tuple[str, ...]:
    """The scopes a token carries: C{scope}, space-separated, or C{scp}, a list or a string."""
    scope = claims.get("scope")
    if isinstance(scope, str):
        return tuple(scope.split())
    scp = claims.get("scp")
    if isinstance(scp, str):
        return tuple(scp.split())
    if isinstance(scp, list):
        return tuple(item for item in scp if isinstance(item, str))
    return ()
