# -*- test-case-name: tests.settings.test_auth_setting -*-
"""
The object form of C{daemon.auth}: mcpx as an OAuth resource server.

::

    "daemon": {"auth": {
        "type": "oauth",
        "issuer": "https://sso.example.com/realms/tools",
        "audience": "https://mcp.example.com/mcp",
        "scopes": ["mcp:tools"],
        "jwksUri": "https://sso.example.com/realms/tools/protocol/openid-connect/certs",
        "introspection": {"url": "...", "clientId": "mcpx", "clientSecret": "..."}
    }}

Only reading and checking here; L{mcpx.auth.resource_server} does the work.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

from attrs import frozen

from mcpx.settings.errors import SettingsError

#: The C{type} of the object form.
OAUTH: Final = "oauth"

_KEYS: Final = frozenset({"type", "issuer", "audience", "scopes", "jwksUri", "introspection"})
_INTROSPECTION_KEYS: Final = frozenset({"url", "clientId", "clientSecret"})


@frozen(repr=False)
class Introspection:
    """
    Where and as whom opaque tokens are checked (RFC 7662).

    @ivar url: the introspection endpoint.
    @ivar client_id: the client mcpx authenticates as (HTTP Basic).
    @ivar client_secret: its secret; never shown by C{repr}.
    """

    url: str
    client_id: str
    client_secret: str

    def __repr__(self) -> str:
        return f"Introspection(url={self.url!r}, client_id={self.client_id!r})"


@frozen
class OAuthResource:
    """
    The resource server's settings.

    @ivar issuer: the authorization server's issuer identifier, exactly as its tokens say.
    @ivar audience: this resource's identifier, which tokens must name in C{aud}; also
        the C{resource} of the protected-resource metadata.
    @ivar scopes: the scopes every request's token must carry.
    @ivar jwks_uri: where the signing keys are, or C{None} to find them from the
        issuer's metadata.
    """

    issuer: str
    audience: str
    scopes: tuple[str, ...]
    jwks_uri: str | None = None
    introspection: Introspection | None = None


def is_loopback(host: str) -> bool:
    """Whether C{host} is this machine: C{localhost}, 127.0.0.0/8 or ::1."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def secure_url(url: str) -> bool:
    """
    Whether C{url} is https, or http to this machine (a local identity provider), and
    has no fragment: the one rule for every URL of an authorization server, configured
    here or named at run time (L{mcpx.auth.metadata.check_https}).
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return False
    if not host or parts.fragment:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and is_loopback(host))


def _url(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(f"{where}: expected a URL string")
    if not secure_url(value):
        raise SettingsError(
            f"{where}: {value[:200]!r} must be an https URL (http only to localhost), "
            "without a fragment"
        )
    return value


def parse_oauth_resource(value: Mapping[str, object], where: str) -> OAuthResource:
    """
    Read the object form of C{daemon.auth}.

    @raise SettingsError: naming the key that is missing, unknown or of the wrong kind.
    """
    unknown = sorted(set(value) - _KEYS)
    if unknown:
        raise SettingsError(
            f"{where}: unknown key {unknown[0]!r}; the keys are {', '.join(sorted(_KEYS))}"
        )
    if value.get("type") != OAUTH:
        raise SettingsError(f'{where}: an object needs "type": "oauth"')
    for required in ("issuer", "audience", "scopes"):
        if required not in value:
            raise SettingsError(f"{where}: {required!r} is required with type oauth")
    scopes = value["scopes"]
    if not isinstance(scopes, list) or not all(
        isinstance(scope, str) and scope and " " not in scope for scope in scopes
    ):
        raise SettingsError(
            f'{where}.scopes: expected an array of scope names (no spaces), e.g. ["mcp:tools"]'
        )
    jwks_uri = value.get("jwksUri")
    return OAuthResource(
        issuer=_url(value["issuer"], f"{where}.issuer"),
        audience=_url(value["audience"], f"{where}.audience"),
        scopes=tuple(scopes),
        jwks_uri=None if jwks_uri is None else _url(jwks_uri, f"{where}.jwksUri"),
        introspection=_introspection(value.get("introspection"), f"{where}.introspection"),
    )


def _introspection(value: object, where: str) -> Introspection | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SettingsError(f"{where}: expected an object with url, clientId and clientSecret")
    unknown = sorted(set(value) - _INTROSPECTION_KEYS)
    if unknown:
        raise SettingsError(
            f"{where}: unknown key {unknown[0]!r}; the keys are url, clientId, clientSecret"
        )
    for key in ("clientId", "clientSecret"):
        if not isinstance(value.get(key), str) or not value[key]:
            raise SettingsError(f"{where}.{key}: expected a non-empty string")
    return Introspection(
        url=_url(value.get("url"), f"{where}.url"),
        client_id=value["clientId"],
        client_secret=value["clientSecret"],
    )
