# -*- test-case-name: tests.auth.test_flow -*-
"""
The HTTP half of signing in to a server: discovery, registration, code exchange and
refresh, on a treq L{HTTPClient} the daemon owns (see L{mcpx.upstream.http_client.owned_client}).

Every document read is limited to L{DOCUMENT_LIMIT} bytes: metadata and token answers
are small, and an authorization server must not be able to make the daemon buffer more.

Every URL requested, wherever it came from (a challenge, a metadata document, the
configuration), passes L{mcpx.auth.metadata.check_https} before any connection, and no
redirect is followed: a 3xx answer is refused unread, as its target was never checked.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol
from urllib.parse import quote, urlencode

from attrs import field, frozen
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ConnectError, DNSLookupError, TimeoutError
from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import Protocol as Unread
from twisted.web.http_headers import Headers

from mcpx.auth.metadata import (
    PKCE_METHOD,
    PRIVATE_KEY_JWT,
    AuthorizationError,
    Challenge,
    ResourceMetadata,
    ServerMetadata,
    accept_resource_metadata,
    accept_server_metadata,
    authorization_metadata_urls,
    check_https,
    check_pkce,
    default_server_metadata,
    resource_metadata_urls,
    shown_url,
    token_auth_method,
)
from mcpx.settings.servers import ClientKey
from mcpx.spec.revision import Revision

if TYPE_CHECKING:
    from treq.response import _Response

#: The largest metadata, registration or token answer read, in bytes.
DOCUMENT_LIMIT: Final = 256 * 1024

#: How long a metadata, registration or token request may take, in seconds.
REQUEST_TIMEOUT: Final = 30.0

CLIENT_NAME: Final = "mcpx"

#: How long a client assertion is valid for, in seconds: it is used once, at once.
ASSERTION_LIFETIME: Final = 60

#: The C{client_assertion_type} of a JWT client assertion (RFC 7523 §2.2).
JWT_BEARER_ASSERTION: Final = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


class NetworkError(Exception):
    """The authorization server could not be reached or did not answer: try again later."""


class GrantRefused(AuthorizationError):
    """
    The token endpoint refused: C{invalid_grant} or C{invalid_client} mean the stored
    tokens or client are no good any more and the user must sign in again.

    @ivar error: the OAuth error code.
    """

    def __init__(self, error: str, description: str = "") -> None:
        shown = f"the authorization server refused the token request: {error}"
        super().__init__(shown + (f" ({description})" if description else ""))
        self.error = error

    @property
    def needs_sign_in(self) -> bool:
        return self.error in ("invalid_grant", "invalid_client", "unauthorized_client")


@frozen
class Discovery:
    """
    Where and how to sign in for one server.

    @ivar resource: the RFC 8707 C{resource} value (C{None} at 2025-03-26, which has none).
    @ivar protected: the protected-resource metadata (C{None} at 2025-03-26).
    """

    server_url: str
    revision: Revision
    resource: str | None
    protected: ResourceMetadata | None
    server: ServerMetadata


@frozen(repr=False)
class Registration:
    """A client mcpx is at one authorization server."""

    issuer: str
    client_id: str
    client_secret: str | None
    auth_method: str
    #: The key C{private_key_jwt} signs with (configured, never stored).
    key: ClientKey | None = field(default=None, eq=False)

    def __repr__(self) -> str:
        return f"Registration({self.issuer!r}, {self.client_id!r}, {self.auth_method!r})"


@frozen(repr=False)
class Tokens:
    """
    An access token and what came with it.

    @ivar expires_at: when the access token expires (the injected clock's time), if said.
    """

    access_token: str
    refresh_token: str | None
    expires_at: float | None
    scopes: tuple[str, ...]
    token_type: str = "Bearer"

    def __repr__(self) -> str:
        return f"Tokens(scopes={self.scopes!r}, expires_at={self.expires_at!r})"


class Requests(Protocol):
    """
    What signing in asks of its HTTP client: treq's C{HTTPClient}, or the daemon's
    L{mcpx.upstream.first_use.ClientOnFirstUse}, which makes one at its first request.
    """

    def request(self, *args: Any, **kwargs: Any) -> Deferred[_Response]:
        """C{HTTPClient.request}."""
        ...

    def post(self, *args: Any, **kwargs: Any) -> Deferred[_Response]:
        """C{HTTPClient.post}."""
        ...


class OAuthClient:
    """
    The HTTP requests of signing in, on one HTTP client.

    @ivar http: the treq client; its agent decides TLS and connection reuse.
    """

    def __init__(self, http: Requests, clock: IReactorTime) -> None:
        self.http = http
        self.clock = clock

    async def _get_json(self, url: str, revision: Revision, what: str) -> tuple[int, Any]:
        headers = {"Accept": "application/json"}
        if revision.index <= Revision.V2025_03_26.index:
            headers["MCP-Protocol-Version"] = revision.value
        return await self._request("GET", url, headers, None, what)

    async def _request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        what: str,
    ) -> tuple[int, Any]:
        """
        The status and JSON answer of one request to C{url} (the C{what} an error names),
        which must pass L{check_https} before any connection is made.  A redirect is
        not followed: wherever it points was never checked, so it is refused, saying
        only the URL's scheme and host and the status, and its body is not read.
        """
        # Deferred for start-up memory: the HTTP client machinery loads with the first
        # sign-in's request (mcpx.upstream.first_use), not with the daemon.
        from twisted.web.client import ResponseFailed, ResponseNeverReceived

        check_https(url, what)

        async def whole() -> tuple[int, bytes]:
            response = await self.http.request(
                method,
                url,
                headers=Headers({k: [v] for k, v in headers.items()}),
                data=body,
                allow_redirects=False,
            )
            if 300 <= response.code < 400:
                # Unread: the connection is let go.
                response.deliverBody(Unread())
                return response.code, b""
            return response.code, await response.content()

        # The clock, not treq's timeout, which would use the global reactor.
        answer = Deferred.fromCoroutine(whole()).addTimeout(REQUEST_TIMEOUT, self.clock)
        try:
            status, raw = await answer
        except (ConnectError, DNSLookupError, TimeoutError, ConnectionError) as error:
            shown = f"the {what} {shown_url(url)}"
            raise NetworkError(f"{shown} could not be reached: {error}") from error
        except (ResponseNeverReceived, ResponseFailed, CancelledError) as error:
            raise NetworkError(f"the {what} {shown_url(url)} did not answer") from error
        if 300 <= status < 400:
            raise AuthorizationError(
                f"the {what} {shown_url(url)} answered HTTP {status}, a redirect; mcpx does "
                "not follow redirects when signing in, so it is refused"
            )
        if len(raw) > DOCUMENT_LIMIT:
            raise AuthorizationError(
                f"the {what} {shown_url(url)} answered with more than {DOCUMENT_LIMIT} bytes"
            )
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:
            decoded = None
        return status, decoded

    async def discover(
        self,
        server_url: str,
        challenge: Challenge | None,
        revision: Revision,
        *,
        pkce: bool = True,
    ) -> Discovery:
        """
        Find the authorization server for C{server_url} by the revision's rules; with
        C{pkce} (a browser sign-in will follow) one that does not advertise S256 is
        refused.
        """
        if revision.index <= Revision.V2025_03_26.index:
            return await self._discover_2025_03_26(server_url, revision, pkce)
        protected = None
        for url in resource_metadata_urls(server_url, challenge):
            code, document = await self._get_json(url, revision, "protected-resource metadata")
            if code == 200:
                protected = accept_resource_metadata(document, server_url)
                break
        if protected is None:
            raise AuthorizationError(
                f"{server_url} publishes no protected-resource metadata; cannot find its "
                "authorization server"
            )
        issuer = protected.authorization_servers[0]
        check_https(issuer, "authorization server")
        metadata = await self._server_metadata(issuer, revision)
        if metadata is None:
            raise AuthorizationError(f"the authorization server {issuer} publishes no metadata")
        if pkce:
            check_pkce(metadata, revision)
        # The identifier exactly as the server published it (RFC 9728 §3.3): it covers
        # this server's URL, but may be shorter (a pathless origin).
        return Discovery(server_url, revision, protected.resource, protected, metadata)

    async def _discover_2025_03_26(
        self, server_url: str, revision: Revision, pkce: bool
    ) -> Discovery:
        check_https(server_url, "authorization server (the server's origin at 2025-03-26)")
        metadata = await self._server_metadata(server_url, revision)
        if metadata is None:
            metadata = default_server_metadata(server_url)
        if pkce:
            check_pkce(metadata, revision)
        return Discovery(server_url, revision, None, None, metadata)

    async def _server_metadata(self, issuer: str, revision: Revision) -> ServerMetadata | None:
        for url in authorization_metadata_urls(issuer, revision):
            code, document = await self._get_json(url, revision, "authorization server metadata")
            if code == 200:
                return accept_server_metadata(document, issuer, revision)
        return None

    async def register(
        self,
        discovery: Discovery,
        redirect_uri: str,
        *,
        client_id: str | None = None,
        client_secret: str | None = None,
        metadata_url: str | None = None,
    ) -> Registration:
        """
        The client to sign in as, in the specification's order: the configured client
        id, the client ID metadata document where the server supports one, dynamic
        registration.
        """
        server = discovery.server
        if client_id:
            method = token_auth_method(server, client_secret is not None)
            return Registration(server.issuer, client_id, client_secret, method)
        if metadata_url and server.cimd_supported:
            return Registration(server.issuer, metadata_url, None, "none")
        if server.registration_endpoint is None:
            raise AuthorizationError(
                f"the authorization server {server.issuer} offers no dynamic registration; "
                'set "clientId" (and "clientSecret") in the server\'s auth block'
            )
        request: dict[str, Any] = {
            "client_name": CLIENT_NAME,
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }
        if discovery.revision.is_modern:
            request["application_type"] = "native"
        code, answer = await self._request(
            "POST",
            server.registration_endpoint,
            {"Content-Type": "application/json", "Accept": "application/json"},
            json.dumps(request).encode(),
            "registration endpoint",
        )
        if code not in (200, 201) or not isinstance(answer, dict):
            raise AuthorizationError(
                f"the authorization server {server.issuer} refused the registration (HTTP {code})"
            )
        got_id = answer.get("client_id")
        if not isinstance(got_id, str) or not got_id:
            raise AuthorizationError("the registration answer has no client_id")
        given_secret = answer.get("client_secret")
        secret = given_secret if isinstance(given_secret, str) and given_secret else None
        given_method = answer.get("token_endpoint_auth_method")
        method = (
            given_method
            if isinstance(given_method, str)
            else token_auth_method(server, secret is not None)
        )
        return Registration(server.issuer, got_id, secret, method)

    def authorization_url(
        self,
        discovery: Discovery,
        client: Registration,
        *,
        redirect_uri: str,
        state: str,
        code_challenge: str,
        scopes: Sequence[str],
    ) -> str:
        """The URL the user's browser opens to sign in."""
        params = {
            "response_type": "code",
            "client_id": client.client_id,
            "redirect_uri": redirect_uri,
            "state": state,
            "code_challenge": code_challenge,
            "code_challenge_method": PKCE_METHOD,
        }
        if scopes:
            params["scope"] = " ".join(scopes)
        if discovery.resource is not None:
            params["resource"] = discovery.resource
        endpoint = discovery.server.authorization_endpoint
        return endpoint + ("&" if "?" in endpoint else "?") + urlencode(params, quote_via=quote)

    async def exchange(
        self,
        discovery: Discovery,
        client: Registration,
        *,
        code: str,
        verifier: str,
        redirect_uri: str,
    ) -> Tokens:
        """Trade an authorization code for tokens."""
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
        }
        return await self._token(discovery, client, form, ())

    async def refresh(self, discovery: Discovery, client: Registration, tokens: Tokens) -> Tokens:
        """
        New tokens from a refresh token, with C{resource} as on the first request.  A
        server that sends no new refresh token leaves the old one in use.
        """
        if tokens.refresh_token is None:
            raise GrantRefused("invalid_grant", "no refresh token")
        form = {"grant_type": "refresh_token", "refresh_token": tokens.refresh_token}
        fresh = await self._token(discovery, client, form, tokens.scopes)
        if fresh.refresh_token is None:
            fresh = Tokens(fresh.access_token, tokens.refresh_token, fresh.expires_at, fresh.scopes)
        return fresh

    async def client_credentials(
        self, discovery: Discovery, client: Registration, scopes: Sequence[str]
    ) -> Tokens:
        """A token for the client itself (RFC 6749 4.4): nobody signs in."""
        form = {"grant_type": "client_credentials"}
        if scopes:
            form["scope"] = " ".join(scopes)
        return await self._token(discovery, client, form, scopes)

    async def revoke(
        self, server: ServerMetadata, client: Registration, token: str, hint: str
    ) -> None:
        """
        Revoke one token at the server's RFC 7009 endpoint, authenticated as at the
        token endpoint; L{AuthorizationError} (or L{NetworkError}) when it was not.
        """
        if server.revocation_endpoint is None:
            raise AuthorizationError(f"{server.issuer} offers no revocation endpoint")
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        form = {"token": token, "token_type_hint": hint}
        _authenticate(client, form, headers, server.issuer, self.clock.seconds())
        code, answer = await self._request(
            "POST",
            server.revocation_endpoint,
            headers,
            urlencode(form).encode(),
            "revocation endpoint",
        )
        if code != 200:
            error = answer.get("error") if isinstance(answer, dict) else None
            reason = f" ({error})" if isinstance(error, str) else ""
            raise AuthorizationError(
                f"the revocation endpoint answered HTTP {code}{reason} for the {hint}"
            )

    async def authorization_server(self, issuer: str) -> ServerMetadata | None:
        """The metadata of an issuer, found by the newest revision's well-knowns."""
        return await self._server_metadata(issuer, Revision.V2026_07_28)

    async def _token(
        self,
        discovery: Discovery,
        client: Registration,
        form: dict[str, str],
        scopes: Sequence[str],
    ) -> Tokens:
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json",
        }
        if discovery.resource is not None:
            form["resource"] = discovery.resource
        started = self.clock.seconds()
        _authenticate(client, form, headers, discovery.server.issuer, started)
        code, answer = await self._request(
            "POST",
            discovery.server.token_endpoint,
            headers,
            urlencode(form).encode(),
            "token endpoint",
        )
        if code != 200 or not isinstance(answer, dict) or "access_token" not in answer:
            if isinstance(answer, dict) and isinstance(answer.get("error"), str):
                described = answer.get("error_description")
                raise GrantRefused(answer["error"], described if isinstance(described, str) else "")
            if code >= 500:
                raise NetworkError(f"the token endpoint answered HTTP {code}")
            raise AuthorizationError(f"the token endpoint answered HTTP {code} without a token")
        access = answer["access_token"]
        if not isinstance(access, str) or not access:
            raise AuthorizationError("the token endpoint answered an empty access_token")
        expires_in = answer.get("expires_in")
        refresh = answer.get("refresh_token")
        scope = answer.get("scope")
        return Tokens(
            access_token=access,
            refresh_token=refresh if isinstance(refresh, str) and refresh else None,
            expires_at=started + expires_in if isinstance(expires_in, (int, float)) else None,
            scopes=tuple(scope.split()) if isinstance(scope, str) else tuple(scopes),
        )


def client_assertion(key: ClientKey, client_id: str, audience: str, now: float) -> str:
    """
    A JWT that authenticates C{client_id} (RFC 7523 §3): issued by and about the
    client, for the authorization server's issuer, short-lived and never reused.
    """
    claims = {
        "iss": client_id,
        "sub": client_id,
        "aud": audience,
        "iat": int(now),
        "exp": int(now) + ASSERTION_LIFETIME,
        "jti": secrets.token_urlsafe(24),
    }
    # Deferred for memory: PyJWT loads cryptography, which only a privateKeyFile needs.
    import jwt

    return jwt.encode(claims, key.pem.reveal(), algorithm=key.algorithm)


def _authenticate(
    client: Registration,
    form: dict[str, str],
    headers: dict[str, str],
    audience: str,
    now: float,
) -> None:
    """
    Add the client's authentication, by its method, to a token or revocation request;
    a client assertion is addressed to C{audience} (the issuer) and dated C{now}.
    """
    if client.auth_method == PRIVATE_KEY_JWT and client.key is not None:
        # The assertion's subject names the client (RFC 7523 §3); no client_id is sent.
        form["client_assertion_type"] = JWT_BEARER_ASSERTION
        form["client_assertion"] = client_assertion(client.key, client.client_id, audience, now)
    elif client.auth_method == "client_secret_basic" and client.client_secret is not None:
        pair = f"{quote(client.client_id, safe='')}:{quote(client.client_secret, safe='')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    else:
        form["client_id"] = client.client_id
        if client.auth_method == "client_secret_post" and client.client_secret is not None:
            form["client_secret"] = client.client_secret
