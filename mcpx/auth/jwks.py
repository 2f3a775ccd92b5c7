# -*- test-case-name: tests.auth.test_resource_server -*-
"""
The issuer's signing keys for L{mcpx.auth.resource_server}: found from its RFC 8414 or
OpenID Connect metadata unless configured, fetched with treq on the reactor, kept, and
fetched again for a key id not among them at most once per L{REFETCH_INTERVAL}.
Every document read is bounded by L{DOCUMENT_LIMIT}; every URL passes
L{mcpx.auth.metadata.check_https} before any connection, and no redirect is followed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import jwt
import treq
from attrs import frozen
from treq.client import HTTPClient
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web.http_headers import Headers

from mcpx.auth.metadata import (
    AuthorizationError,
    authorization_metadata_urls,
    check_https,
    shown_url,
)
from mcpx.spec.revision import Revision

log = Logger()

#: The signature algorithms accepted: asymmetric only.
ALGORITHMS: Final = frozenset({"RS256", "RS384", "RS512", "ES256", "ES384", "PS256"})

#: The largest metadata, JWKS or introspection answer read, in bytes.
DOCUMENT_LIMIT: Final = 64 * 1024

#: The least time between two fetches of the keys, in seconds.
REFETCH_INTERVAL: Final = 60.0

#: How long a request to the authorization server may take, in seconds.
REQUEST_TIMEOUT: Final = 10.0


class FetchError(Exception):
    """The authorization server did not give a usable document."""


async def fetch_json(
    http: HTTPClient,
    clock: IReactorTime,
    method: str,
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
) -> Any:
    """
    A JSON document from C{url}, read up to L{DOCUMENT_LIMIT} bytes.

    @raise FetchError: on a URL L{check_https} refuses (before any connection), any
        network failure, a status other than 200 (a redirect is not followed), an
        answer too large, or one that is not JSON.  The error names only the URL's
        scheme and host, and never quotes the answer.
    """
    try:
        check_https(url, "authorization server's URL")
    except AuthorizationError as refused:
        raise FetchError(str(refused)) from None
    shown = shown_url(url)
    sent = Headers({"Accept": ["application/json"]})
    for name, value in (headers or {}).items():
        sent.setRawHeaders(name, [value])
    chunks: list[bytes] = []
    size = 0

    def collect(data: bytes) -> None:
        nonlocal size
        size += len(data)
        if size > DOCUMENT_LIMIT:
            raise FetchError(f"{shown} answered with more than {DOCUMENT_LIMIT} bytes")
        chunks.append(data)

    async def whole() -> int:
        response = await http.request(method, url, headers=sent, data=body, allow_redirects=False)
        if response.code != 200:
            response.deliverBody(_Discard())
            return int(response.code)
        length = response.length
        if isinstance(length, int) and length > DOCUMENT_LIMIT:
            response.deliverBody(_Discard())
            raise FetchError(f"{shown} answered with more than {DOCUMENT_LIMIT} bytes")
        await treq.collect(response, collect)
        return int(response.code)

    try:
        # The injected clock, not treq's timeout, which would use the global reactor.
        code = await Deferred.fromCoroutine(whole()).addTimeout(REQUEST_TIMEOUT, clock)
    except FetchError:
        raise
    except Exception as error:
        raise FetchError(f"{shown} could not be reached: {type(error).__name__}") from error
    if 300 <= code < 400:
        raise FetchError(f"{shown} answered HTTP {code}, a redirect, which is not followed")
    if code != 200:
        raise FetchError(f"{shown} answered HTTP {code}")
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        raise FetchError(f"{shown} did not answer with JSON") from None


class _Discard:
    """A body consumer that stops the transfer at once."""

    def makeConnection(self, transport: Any) -> None:
        stop = getattr(transport, "stopProducing", None)
        if stop is not None:
            stop()

    def dataReceived(self, data: bytes) -> None:
        pass

    def connectionLost(self, reason: object) -> None:
        pass


@frozen
class SigningKey:
    """
    One of the issuer's keys.

    @ivar declared: the C{alg} its JWK names, if any: then only that algorithm is
        accepted with it.
    """

    jwk: jwt.PyJWK
    declared: str | None

    def fits(self, alg: str) -> bool:
        """Whether a token signed with C{alg} may be checked against this key."""
        if self.declared is not None:
            return alg == self.declared
        if self.jwk.key_type == "RSA":
            return alg[:2] in ("RS", "PS")
        # An EC key's curve decides its one algorithm (P-256: ES256, P-384: ES384).
        return alg == self.jwk.algorithm_name


class KeySet:
    """
    The issuer's signing keys, fetched when first needed and again for an unknown key id.

    @param jwks_uri: where the keys are; C{None} to read C{jwks_uri} from the issuer's
        metadata.
    """

    def __init__(
        self, http: HTTPClient, clock: IReactorTime, issuer: str, jwks_uri: str | None
    ) -> None:
        self._http = http
        self._clock = clock
        self._issuer = issuer
        self._jwks_uri = jwks_uri
        self._keys: dict[str, SigningKey] = {}
        self._unnamed: list[SigningKey] = []
        self._fetched_at: float | None = None
        self._loaded = False
        self._waiters: list[Deferred[None]] | None = None
        self.fetches = 0

    async def key_for(self, kid: str | None) -> SigningKey | None:
        """
        The key a token's header names, or C{None} when the issuer has no such key.

        @raise FetchError: when the keys were never had and cannot be fetched now.
        """
        found = self._find(kid)
        if found is not None:
            return found
        due = (
            self._fetched_at is None or self._clock.seconds() - self._fetched_at >= REFETCH_INTERVAL
        )
        if due or self._waiters is not None:
            # A fetch under way is joined, not refused for coming within the minute.
            await self._refresh()
        elif not self._loaded:
            raise FetchError("the issuer's keys could not be fetched; trying again shortly")
        return self._find(kid)

    def _find(self, kid: str | None) -> SigningKey | None:
        if kid is not None:
            return self._keys.get(kid)
        # A token without a key id is only accepted from an issuer with one key.
        keys = list(self._keys.values()) + self._unnamed
        return keys[0] if len(keys) == 1 else None

    async def _refresh(self) -> None:
        """One fetch, shared by every token waiting for it."""
        if self._waiters is not None:
            waiter: Deferred[None] = Deferred()
            self._waiters.append(waiter)
            await waiter
            if not self._loaded:
                raise FetchError("the issuer's keys could not be fetched")
            return
        self._waiters = []
        self._fetched_at = self._clock.seconds()
        self.fetches += 1
        try:
            await self._fetch()
        except FetchError as error:
            log.warn(
                "could not fetch the keys of {issuer}: {error}", issuer=self._issuer, error=error
            )
            if not self._loaded:
                raise
        finally:
            waiters, self._waiters = self._waiters, None
            for one in waiters:
                one.callback(None)

    async def _fetch(self) -> None:
        uri = self._jwks_uri or await self._discover()
        document = await fetch_json(self._http, self._clock, "GET", uri)
        keys = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(keys, list):
            raise FetchError(f"{shown_url(uri)} is not a JWK set")
        named: dict[str, SigningKey] = {}
        unnamed: list[SigningKey] = []
        for entry in keys:
            key = _usable_key(entry)
            if key is None:
                continue
            kid = entry.get("kid")
            if isinstance(kid, str):
                named[kid] = key
            else:
                unnamed.append(key)
        self._keys, self._unnamed, self._loaded = named, unnamed, True

    async def _discover(self) -> str:
        for url in authorization_metadata_urls(self._issuer, Revision.V2026_07_28):
            try:
                document = await fetch_json(self._http, self._clock, "GET", url)
            except FetchError:
                continue
            if not isinstance(document, dict) or document.get("issuer") != self._issuer:
                # RFC 8414 section 3.3: metadata for another issuer is not this one's.
                continue
            uri = document.get("jwks_uri")
            if isinstance(uri, str) and _allowed(uri):
                self._jwks_uri = uri
                return uri
        raise FetchError(f"no metadata of {self._issuer} names a usable jwks_uri")


def _allowed(url: str) -> bool:
    """Whether L{check_https} lets C{url} be fetched."""
    try:
        check_https(url, "jwks_uri")
    except AuthorizationError:
        return False
    return True


def _usable_key(entry: object) -> SigningKey | None:
    """An asymmetric signing key from a JWKS entry, or C{None} for anything else."""
    if not isinstance(entry, dict) or entry.get("kty") not in ("RSA", "EC"):
        return None
    if entry.get("use", "sig") != "sig":
        return None
    if "alg" in entry and entry["alg"] not in ALGORITHMS:
        return None
    declared = entry.get("alg")
    try:
        return SigningKey(jwt.PyJWK(entry), declared if isinstance(declared, str) else None)
    except Exception:
        return None
