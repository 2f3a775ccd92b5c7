# -*- test-case-name: tests.auth.test_metadata -*-
"""
The pure rules of MCP authorization, per revision: no I/O here.

Which revision's rules apply is the revision the upstream speaks:

  - 2025-03-26: the authorization server lives at the MCP server's origin; its RFC 8414
    metadata is at C{/.well-known/oauth-authorization-server} there, and without it the
    endpoints default to C{/authorize}, C{/token} and C{/register}.
  - 2025-06-18: RFC 9728 protected-resource metadata names the authorization servers;
    RFC 8707 C{resource} goes on the authorization and token requests.
  - 2025-11-25: the protected-resource document is found from the challenge, else at the
    path-inserted well-known, else at the root; authorization-server metadata is RFC 8414
    or OpenID Connect discovery, in a fixed order; scopes come from the challenge, else
    from C{scopes_supported}, else none are asked for.
  - 2026-07-28: RFC 9207 C{iss} in the authorization response, the metadata's C{issuer}
    must equal the issuer it was fetched for, C{application_type} in registration, and
    C{offline_access} only when the server lists it.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from attrs import frozen

from mcpx.settings.oauth_resource import secure_url
from mcpx.spec.revision import Revision

#: The PKCE method mcpx uses; a server that does not advertise it is refused.
PKCE_METHOD: Final = "S256"

#: Token endpoint authentication methods mcpx can use, most preferred first.
AUTH_METHODS: Final = ("client_secret_basic", "client_secret_post", "none")

#: The token endpoint method of a client that signs a JWT with its own key (RFC 7523).
PRIVATE_KEY_JWT: Final = "private_key_jwt"

OFFLINE_ACCESS: Final = "offline_access"


class AuthorizationError(Exception):
    """Signing in to a server cannot go on: the message says why, for the user."""


@frozen
class Challenge:
    """
    What a C{WWW-Authenticate: Bearer ...} header says.

    @ivar resource_metadata: the protected-resource metadata URL, if given.
    @ivar scope: the scopes the server asks for, if given.
    @ivar error: C{invalid_token}, C{insufficient_scope}, ... if given.
    """

    resource_metadata: str | None = None
    scope: tuple[str, ...] | None = None
    error: str | None = None


#: The longest C{WWW-Authenticate} value whose parameters are read.  A longer one (Twisted
#: joins a header's folded lines, so a server can send any length) is taken as a Bearer
#: challenge with no parameters: nothing of it is read, or repeated.
MAX_CHALLENGE_LENGTH: Final = 8 << 10

_NAME_START: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME: Final = _NAME_START | frozenset("0123456789-")
_SPACE: Final = frozenset(" \t\r\n\f\v")
_BEARER: Final = re.compile(r"(?:^|[\s,])Bearer(?:\s+|$)", re.IGNORECASE)


def _challenge_params(text: str) -> dict[str, str]:
    """
    The C{name=value} and C{name="quoted value"} parameters in C{text}, the first of each
    name (in lower case) kept: one pass over it, in time linear in its length.
    """
    params: dict[str, str] = {}
    n = len(text)
    i = 0
    # Past this index no unescaped quote closes a quoted value (found once, not per value).
    unclosed = n + 1
    while i < n:
        if text[i] not in _NAME_START:
            i += 1
            continue
        start = i
        while i < n and text[i] in _NAME:
            i += 1
        name = text[start:i].lower()
        j = i
        while j < n and text[j] in _SPACE:
            j += 1
        if j >= n or text[j] != "=":
            continue
        j += 1
        while j < n and text[j] in _SPACE:
            j += 1
        value: str | None = None
        if j < n and text[j] == '"' and j < unclosed:
            chars: list[str] = []
            k = j + 1
            while k < n and text[k] != '"':
                if text[k] == "\\" and k + 1 < n:
                    k += 1
                chars.append(text[k])
                k += 1
            if k < n:
                value = "".join(chars)
                i = k + 1
            else:
                unclosed = j
        if value is None:
            k = j
            while k < n and text[k] not in _SPACE and text[k] != ",":
                k += 1
            value = text[j:k]
            i = k
        params.setdefault(name, value)
    return params


def parse_challenge(values: Sequence[str]) -> Challenge | None:
    """
    The Bearer challenge among C{WWW-Authenticate} header values, or C{None}.

    The parameters after C{Bearer} are read (by a scanner linear in the value's length;
    a regular expression took quadratic time on a long run of letters), from a value of
    at most L{MAX_CHALLENGE_LENGTH} characters; a longer one has none.
    """
    for value in values:
        found = _BEARER.search(value)
        if found is None:
            continue
        if len(value) > MAX_CHALLENGE_LENGTH:
            return Challenge()
        params = _challenge_params(value[found.end() :])
        scope = params.get("scope")
        return Challenge(
            resource_metadata=params.get("resource_metadata") or None,
            scope=tuple(scope.split()) if scope else None,
            error=params.get("error") or None,
        )
    return None


def check_https(url: str, what: str) -> None:
    """
    The one rule every URL signing in or checking a token reaches must pass, checked
    before any connection is made (L{mcpx.auth.flow}, L{mcpx.auth.jwks}): C{https}
    (2025-06-18 on, every authorization server endpoint MUST be), or plain C{http} to a
    loopback address, and no fragment (L{secure_url}, which the configuration's URLs
    pass too).  Whatever named the URL (a configuration, a C{WWW-Authenticate}
    challenge, a metadata document) it is refused otherwise; the refusal shows only its
    scheme and host, never more of what a server sent.
    """
    if secure_url(url):
        return
    raise AuthorizationError(
        f"the {what} {shown_url(url)} is not served over https; refusing to use it (plain "
        "http is allowed on loopback addresses only, and a fragment nowhere)"
    )


def shown_url(url: str) -> str:
    """
    What an error says of a URL a server named: its scheme and host (and port), so
    nothing else a hostile server put in it reaches a log or a caller.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = parts.port
    except ValueError:
        return "(an unreadable URL)"
    scheme = "".join(c for c in parts.scheme[:10] if c.isalnum() or c in "+-.") or "?"
    host = "".join(c for c in host[:100] if c.isalnum() or c in ".-:_")
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}" + (f":{port}" if port is not None else "")


def canonical_resource(server_url: str) -> str:
    """
    The canonical URI of an MCP server (RFC 8707 C{resource}): scheme and host in lower
    case, no fragment, no query, no trailing slash on the path.
    """
    parts = urlsplit(server_url)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, "", ""))


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def _well_known(url: str, name: str, *, keep_path: bool = True) -> str:
    """RFC 8615 path insertion: C{origin/.well-known/NAME/PATH}."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/") if keep_path else ""
    return urlunsplit((parts.scheme, parts.netloc, f"/.well-known/{name}{path}", "", ""))


def resource_metadata_urls(server_url: str, challenge: Challenge | None) -> list[str]:
    """Where protected-resource metadata is looked for, in order (2025-11-25 and later)."""
    if challenge is not None and challenge.resource_metadata:
        return [challenge.resource_metadata]
    path_form = _well_known(server_url, "oauth-protected-resource")
    root_form = _well_known(server_url, "oauth-protected-resource", keep_path=False)
    return [path_form] if path_form == root_form else [path_form, root_form]


def authorization_metadata_urls(issuer: str, revision: Revision) -> list[str]:
    """
    Where an authorization server's metadata is looked for, in order.

    For an issuer with a path the order is RFC 8414 with path insertion, OpenID
    Connect with path insertion, then OpenID Connect appended to the path; for one
    without, RFC 8414 then OpenID Connect at the root.  At 2025-03-26 only RFC 8414 at
    the origin is defined.
    """
    if revision.index <= Revision.V2025_03_26.index:
        return [_well_known(_origin(issuer), "oauth-authorization-server", keep_path=False)]
    path = urlsplit(issuer).path.rstrip("/")
    if not path:
        return [
            _well_known(issuer, "oauth-authorization-server"),
            _well_known(issuer, "openid-configuration"),
        ]
    return [
        _well_known(issuer, "oauth-authorization-server"),
        _well_known(issuer, "openid-configuration"),
        issuer.rstrip("/") + "/.well-known/openid-configuration",
    ]


@frozen
class ResourceMetadata:
    """An accepted RFC 9728 document: the resource and its authorization servers."""

    resource: str
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...] | None


def accept_resource_metadata(document: Any, server_url: str) -> ResourceMetadata:
    """
    The protected-resource document, if it is about this server.

    A document whose C{resource} is another server is refused: following it would hand
    a token for this server's user to whoever wrote it.
    """
    if not isinstance(document, dict):
        raise AuthorizationError("the protected-resource metadata is not a JSON object")
    resource = document.get("resource")
    servers = document.get("authorization_servers")
    if not isinstance(resource, str) or not resource:
        raise AuthorizationError("the protected-resource metadata has no resource")
    if not resource_covers(resource, server_url):
        raise AuthorizationError(
            f"the protected-resource metadata is for {resource}, not for {server_url}; "
            "refusing to sign in"
        )
    if (
        not isinstance(servers, list)
        or not servers
        or not all(isinstance(s, str) and s for s in servers)
    ):
        raise AuthorizationError("the protected-resource metadata names no authorization_servers")
    scopes = document.get("scopes_supported")
    return ResourceMetadata(
        resource=resource,
        authorization_servers=tuple(servers),
        scopes_supported=_strings(scopes),
    )


def resource_covers(resource: str, server_url: str) -> bool:
    """
    Whether a protected resource identifier covers the server: same origin, and the
    server's path is the resource's path or below it.
    """
    wanted = urlsplit(canonical_resource(server_url))
    given = urlsplit(canonical_resource(resource))
    if (wanted.scheme, wanted.netloc) != (given.scheme, given.netloc):
        return False
    base = given.path.rstrip("/")
    return wanted.path == base or wanted.path.startswith(base + "/") or not base


def _strings(value: object) -> tuple[str, ...] | None:
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    return None


@frozen
class ServerMetadata:
    """
    What mcpx uses of an authorization server's metadata.

    @ivar iss_supported: C{authorization_response_iss_parameter_supported} (RFC 9207).
    """

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    registration_endpoint: str | None
    revocation_endpoint: str | None
    code_challenge_methods: tuple[str, ...] | None
    token_auth_methods: tuple[str, ...] | None
    scopes_supported: tuple[str, ...] | None
    grant_types: tuple[str, ...] | None
    cimd_supported: bool
    iss_supported: bool
    #: C{token_endpoint_auth_signing_alg_values_supported}: what a client assertion
    #: may be signed with, where said.
    signing_algorithms: tuple[str, ...] | None = None


def accept_server_metadata(document: Any, issuer: str, revision: Revision) -> ServerMetadata:
    """
    An authorization server's metadata, checked.

    At 2026-07-28 its C{issuer} must equal the issuer it was looked up for (RFC 8414
    §3.3), compared as strings.
    """
    if not isinstance(document, dict):
        raise AuthorizationError("the authorization server metadata is not a JSON object")
    given = document.get("issuer")
    if revision.is_modern and given != issuer:
        raise AuthorizationError(
            f"the authorization server metadata names issuer {given!r}, not {issuer!r}; "
            "refusing to sign in"
        )
    endpoints = {}
    for key in ("authorization_endpoint", "token_endpoint"):
        value = document.get(key)
        if not isinstance(value, str) or not value:
            raise AuthorizationError(f"the authorization server metadata has no {key}")
        endpoints[key] = value
    for key in ("authorization_endpoint", "token_endpoint", "registration_endpoint"):
        value = document.get(key)
        if isinstance(value, str) and value:
            check_https(value, key.replace("_", " "))
    revocation = document.get("revocation_endpoint")
    if isinstance(revocation, str) and revocation:
        check_https(revocation, "revocation endpoint")
    return ServerMetadata(
        issuer=given if isinstance(given, str) else issuer,
        authorization_endpoint=endpoints["authorization_endpoint"],
        token_endpoint=endpoints["token_endpoint"],
        registration_endpoint=_optional_url(document, "registration_endpoint"),
        revocation_endpoint=_optional_url(document, "revocation_endpoint"),
        code_challenge_methods=_strings(document.get("code_challenge_methods_supported")),
        token_auth_methods=_strings(document.get("token_endpoint_auth_methods_supported")),
        scopes_supported=_strings(document.get("scopes_supported")),
        grant_types=_strings(document.get("grant_types_supported")),
        cimd_supported=document.get("client_id_metadata_document_supported") is True,
        iss_supported=document.get("authorization_response_iss_parameter_supported") is True,
        signing_algorithms=_strings(
            document.get("token_endpoint_auth_signing_alg_values_supported")
        ),
    )


def default_server_metadata(server_url: str) -> ServerMetadata:
    """The 2025-03-26 fallback: default endpoints at the MCP server's origin."""
    origin = _origin(server_url)
    return ServerMetadata(
        issuer=origin,
        authorization_endpoint=origin + "/authorize",
        token_endpoint=origin + "/token",
        registration_endpoint=origin + "/register",
        revocation_endpoint=None,
        code_challenge_methods=(PKCE_METHOD,),
        token_auth_methods=None,
        scopes_supported=None,
        grant_types=None,
        cimd_supported=False,
        iss_supported=False,
    )


def _optional_url(document: Mapping[str, Any], key: str) -> str | None:
    value = document.get(key)
    return value if isinstance(value, str) and value else None


def check_pkce(server: ServerMetadata, revision: Revision) -> None:
    """
    Refuse a server that does not advertise S256 (2025-11-25 and later: a server that
    advertises no methods at all is refused too; earlier revisions assume support).
    """
    methods = server.code_challenge_methods
    if methods is None and revision.index < Revision.V2025_11_25.index:
        return
    if methods is None or PKCE_METHOD not in methods:
        raise AuthorizationError(
            f"the authorization server {server.issuer} does not advertise PKCE with S256; "
            "refusing to sign in without it"
        )


def select_scopes(
    challenge: Challenge | None,
    resource: ResourceMetadata | None,
    server: ServerMetadata,
    *,
    configured: Sequence[str] | None = None,
    previous: Sequence[str] = (),
    required: Sequence[str] = (),
    revision: Revision,
) -> tuple[str, ...]:
    """
    The scopes to ask for: the C{required} ones of a step-up (already the union with
    the held ones where the revision says so) win, then configured ones, then the
    challenge's, then the resource's C{scopes_supported}, else none.  At 2026-07-28 a
    re-authorization asks for the union of the previous scopes and the new ones, and
    C{offline_access} is added only when the authorization server lists it.
    """
    if required:
        chosen: tuple[str, ...] = tuple(required)
        previous = ()
    elif configured:
        chosen = tuple(configured)
    elif challenge is not None and challenge.scope:
        chosen = challenge.scope
    elif resource is not None and resource.scopes_supported:
        chosen = resource.scopes_supported
    else:
        chosen = ()
    if revision.is_modern:
        chosen = tuple(dict.fromkeys((*previous, *chosen)))
        offered = server.scopes_supported or ()
        chosen = tuple(s for s in chosen if s != OFFLINE_ACCESS)
        if OFFLINE_ACCESS in offered:
            chosen = (*chosen, OFFLINE_ACCESS)
    return chosen


def check_assertion_method(server: ServerMetadata, algorithm: str) -> None:
    """
    Refuse, saying why, an authorization server that advertises token endpoint
    methods without C{private_key_jwt}, or signing algorithms without C{algorithm}.
    """
    methods = server.token_auth_methods
    _refuse_without(
        server,
        methods,
        PRIVATE_KEY_JWT,
        refused=f"{PRIVATE_KEY_JWT} at its token endpoint",
        advertised=f"it offers {', '.join(methods or ()) or 'nothing'}",
        fix='use "clientSecret" instead of "privateKeyFile"',
    )
    algorithms = server.signing_algorithms
    _refuse_without(
        server,
        algorithms,
        algorithm,
        refused=f"client assertions signed with {algorithm}",
        advertised=f"it accepts {', '.join(algorithms or ()) or 'none'}",
        fix='set "signingAlgorithm" and a key of that type',
    )


def _refuse_without(
    server: ServerMetadata,
    listed: Sequence[str] | None,
    wanted: str,
    *,
    refused: str,
    advertised: str,
    fix: str,
) -> None:
    """
    Refuse C{server} if it lists what it supports (C{listed}) without C{wanted}; one
    that lists nothing may still accept it.
    """
    if listed is not None and wanted not in listed:
        raise AuthorizationError(
            f"the authorization server {server.issuer} does not accept {refused} "
            f"({advertised}); {fix}"
        )


def token_auth_method(server: ServerMetadata, has_secret: bool) -> str:
    """
    How mcpx authenticates at the token endpoint: by what the server advertises
    (RFC 8414 defaults to C{client_secret_basic}), C{none} for a public client.
    """
    if not has_secret:
        return "none"
    advertised = server.token_auth_methods or ("client_secret_basic",)
    for method in AUTH_METHODS:
        if method in advertised:
            return method
    raise AuthorizationError(
        f"the authorization server {server.issuer} offers no token endpoint "
        f"authentication mcpx supports (it offers {', '.join(advertised)})"
    )


@frozen
class Pkce:
    """A PKCE verifier and its S256 challenge."""

    verifier: str
    challenge: str


def new_pkce() -> Pkce:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return Pkce(verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii"))


def check_callback(
    params: Mapping[str, str], *, state: str, server: ServerMetadata, revision: Revision
) -> str:
    """
    The authorization code from the redirect's query, after checking C{state} and, at
    2026-07-28, RFC 9207 C{iss} (exact string equality with the issuer; required when
    the server advertises it).  An error response is read only after the same checks,
    so an error from the wrong issuer is never acted on or shown.
    """
    if params.get("state") != state:
        raise AuthorizationError("the redirect's state does not match this sign-in; start again")
    if revision.is_modern:
        iss = params.get("iss")
        if iss is None and server.iss_supported:
            raise AuthorizationError(
                "the authorization server advertises iss but the redirect has none; "
                "refusing the code"
            )
        if iss is not None and iss != server.issuer:
            raise AuthorizationError(
                f"the redirect comes from issuer {iss!r}, not {server.issuer!r}; refusing the code"
            )
    # Only once the issuer is the expected one: an error from another is not shown.
    error = params.get("error")
    if error:
        described = params.get("error_description", "")
        raise AuthorizationError(
            f"the authorization server refused: {error}" + (f" ({described})" if described else "")
        )
    code = params.get("code")
    if not code:
        raise AuthorizationError("the redirect carries no authorization code")
    return code
