# -*- test-case-name: tests.daemon.test_bearer -*-
"""
Rule 4 of L{mcpx.daemon.gate} when C{daemon.auth} is the C{oauth} object: a TCP
request's C{Authorization: Bearer} token goes through L{TokenVerifier}; the
protected-resource metadata (RFC 9728) is served, unauthenticated, at
C{/.well-known/oauth-protected-resource} and its path-inserted form.

A refused request gets 401 (no token, or a bad one) or 403 (a scope missing) with the
C{WWW-Authenticate} challenge that points at the metadata, or 503 when the issuer's
keys cannot be had.  With the keys at hand the check finishes synchronously and costs
one signature verification; only a fetch of the keys makes the request wait.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest
from twisted.web.server import NOT_DONE_YET

from mcpx.auth.caller import CALLER_ATTRIBUTE, Refusal, VerifiedToken
from mcpx.auth.protected_resource import challenge, metadata_body, metadata_paths
from mcpx.settings.oauth_resource import OAuthResource

if TYPE_CHECKING:
    from mcpx.auth.resource_server import TokenVerifier
    from mcpx.upstream.endpoints import IReactorHTTP

__all__ = ["OAuthGuard", "verifier_for"]

log = Logger()

#: C{refuse(request, status, code, message, what)} of the gate: writes the JSON answer.
Refuse = Callable[[IRequest, int, str, str, str], bytes]


def verifier_for(
    settings: OAuthResource, reactor: IReactorHTTP, clock: IReactorTime
) -> TokenVerifier:
    """A verifier on an HTTP client of its own (L{mcpx.upstream.http_client.owned_client})."""
    # Here, not at the top: the JOSE library loads cryptography, which a daemon that
    # checks no tokens does without (mcpx.daemon.lean_start).
    from mcpx.auth.resource_server import TokenVerifier
    from mcpx.upstream.http_client import owned_client

    http, _pool = owned_client(reactor, 10.0, keep=2)
    return TokenVerifier(settings, http, clock)


class OAuthGuard:
    """
    Checks bearer tokens for the gate and serves the metadata document.

    @ivar paths: where the metadata document is served.
    """

    def __init__(self, settings: OAuthResource, verifier: TokenVerifier) -> None:
        self.settings = settings
        self.verifier = verifier
        self.paths = metadata_paths(settings.audience)
        self._document = metadata_body(settings)

    def metadata(self, request: IRequest) -> bytes:
        """The RFC 9728 document, to anyone: it only says where to get a token."""
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"cache-control", b"max-age=300")
        return self._document

    def check(self, request: IRequest, proceed: Callable[[], Any], refuse: Refuse) -> Any:
        """
        Render C{request} through C{proceed} once its token is good, else refuse it.

        @return: what C{render} returns: the bytes, or C{NOT_DONE_YET} when the keys
            must be fetched first.
        """
        token = _bearer(request)
        if token is None:
            request.setHeader(b"www-authenticate", challenge(self.settings))
            return refuse(
                request,
                401,
                "unauthorized",
                "this daemon needs an OAuth access token: send Authorization: Bearer <token> "
                f"from {self.settings.issuer}",
                "authorization",
            )
        synchronous = True
        found: list[VerifiedToken | Refusal | Failure] = []
        gone: list[object] = []

        def arrived(result: VerifiedToken | Refusal | Failure) -> None:
            if synchronous:
                found.append(result)
            elif not gone:
                body = self._answer(request, result, proceed, refuse)
                if body is not NOT_DONE_YET:
                    request.write(body)
                    request.finish()

        checked = Deferred.fromCoroutine(self.verifier.verify(token))
        checked.addBoth(arrived).addErrback(
            lambda failure: log.failure("answering a request failed", failure)
        )
        synchronous = False
        if found:
            return self._answer(request, found[0], proceed, refuse)
        cast(Any, request).notifyFinish().addBoth(gone.append)
        return NOT_DONE_YET

    def _answer(
        self,
        request: IRequest,
        outcome: VerifiedToken | Refusal | Failure,
        proceed: Callable[[], Any],
        refuse: Refuse,
    ) -> Any:
        if isinstance(outcome, VerifiedToken):
            setattr(request, CALLER_ATTRIBUTE, outcome)
            return proceed()
        if isinstance(outcome, Failure):
            log.failure("checking an access token failed", outcome)
            outcome = Refusal("invalid_token", "the access token could not be checked")
        if outcome.status != 503:
            request.setHeader(b"www-authenticate", challenge(self.settings, outcome))
        return refuse(request, outcome.status, outcome.error, outcome.message, outcome.error)


def _bearer(request: IRequest) -> bytes | None:
    header = request.getHeader(b"authorization")
    if header is None:
        return None
    scheme, _, credentials = header.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    return credentials.strip() or None
