# -*- test-case-name: tests.auth.test_resource_server -*-
"""
Who a request was let in as when C{daemon.auth} is C{oauth}, and why one was not:
the outcomes of L{mcpx.auth.resource_server.TokenVerifier}, kept apart from it so the
routes can read them without loading the JOSE library (and cryptography) in a daemon
that does not check tokens.
"""

from __future__ import annotations

import json
from typing import Final

from attrs import field, frozen

from mcpx.settings.servers import AuthType, RemoteServer

INVALID_TOKEN: Final = "invalid_token"
INSUFFICIENT_SCOPE: Final = "insufficient_scope"
UNAVAILABLE: Final = "temporarily_unavailable"

_STATUS: Final = {INVALID_TOKEN: 401, INSUFFICIENT_SCOPE: 403, UNAVAILABLE: 503}


@frozen
class VerifiedToken:
    """
    Who a good token speaks for.

    @ivar subject: the token's C{sub}.
    @ivar scopes: every scope it carries (the required ones among them).
    @ivar expires_at: its C{exp}, when it has one; not part of equality.
    """

    subject: str
    scopes: tuple[str, ...]
    expires_at: float | None = field(default=None, eq=False)


@frozen
class Refusal:
    """
    Why a token is not accepted.

    @ivar error: L{INVALID_TOKEN}, L{INSUFFICIENT_SCOPE} or L{UNAVAILABLE} (the keys
        or the introspection endpoint could not be had).
    @ivar message: for the caller and the log; never quotes the token.
    """

    error: str
    message: str

    @property
    def status(self) -> int:
        """The HTTP status it is answered with: 401, 403 or 503."""
        return _STATUS[self.error]


#: Where the gate leaves the accepted L{VerifiedToken} on the request, for the routes.
CALLER_ATTRIBUTE: Final = "mcpx_caller"


def request_subject(request: object) -> str | None:
    """
    The subject of the access token a request was let in with, or C{None} when it came
    in without one (C{daemon.auth} is not C{oauth}, or the owner's unix socket).
    """
    caller = getattr(request, CALLER_ATTRIBUTE, None)
    return caller.subject if isinstance(caller, VerifiedToken) else None


def subject_identity(subject: str) -> str:
    """
    The caller identity of a request let in with C{subject}'s token: the client its
    C{/v1} calls, tasks and questions belong to, and the identity of its C{/mcp}
    requests outside a session.  The subject is quoted as JSON, so no subject spells
    another's identity, nor the default C{cli} or C{http}.
    """
    return f"subject:{json.dumps(subject)}"


#: The principal of the daemon's owner (L{principal_of}).
OWNER: Final = ""

_SUBJECT_PREFIX: Final = "subject:"
_JSON = json.JSONDecoder()


def principal_of(client: str) -> str:
    """
    Whose upstream sign-ins a caller identity's requests use: the access token's
    subject's identity (L{subject_identity}) for every identity a subject's requests
    have (its own, and the sessions and request scopes under it), L{OWNER} for any
    other (the owner's sockets; every caller of a daemon without C{oauth}).
    """
    if not client.startswith(_SUBJECT_PREFIX + '"'):
        return OWNER
    try:
        _, end = _JSON.raw_decode(client, len(_SUBJECT_PREFIX))
    except ValueError:
        return OWNER
    return client[:end]


def per_person(server: object) -> bool:
    """
    Whether each principal reaches C{server} with its own sign-in: an OAuth server
    someone signs in to, whose C{auth} does not say C{"shared": true}.  A
    client-credentials server is reached with the daemon's own client, for everyone.
    """
    if not isinstance(server, RemoteServer) or server.auth is None:
        return False
    oauth = server.auth.oauth
    if server.auth.type is not AuthType.OAUTH:
        return False
    return oauth is None or not (oauth.client_credentials or oauth.shared)


def attributed_to(principal: str | None) -> dict[str, str]:
    """
    The keyword an event is published with to say whose call it came from
    (L{mcpx.ops.events.EventBus.publish}'s C{principal}, a subject's L{principal_of}):
    nothing when it is the owner's or nobody's (L{OWNER}, or C{None}), so publishers
    that keep every event's fields see no change.
    """
    return {"principal": principal} if principal else {}
