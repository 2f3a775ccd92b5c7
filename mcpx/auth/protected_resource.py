# -*- test-case-name: tests.auth.test_resource_server -*-
"""
What mcpx, as an OAuth resource server, tells a host that has no good token: the
RFC 9728 protected-resource metadata document, and the C{WWW-Authenticate: Bearer}
challenge (RFC 6750 section 3) that points at it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from mcpx.auth.caller import INSUFFICIENT_SCOPE, Refusal
from mcpx.settings.oauth_resource import OAuthResource

#: Where the document is served: at the root, and with the resource's path inserted.
WELL_KNOWN: Final = "/.well-known/oauth-protected-resource"

_UNQUOTABLE: Final = re.compile(r'["\\\x00-\x1f\x7f-\uffff]')


def metadata_path(audience: str) -> str:
    """The path of the document for C{audience} (RFC 9728 section 3.1 path insertion)."""
    return WELL_KNOWN + urlsplit(audience).path.rstrip("/")


def metadata_url(audience: str) -> str:
    """The URL of the document for C{audience}, on the audience's own origin."""
    parts = urlsplit(audience)
    return urlunsplit((parts.scheme, parts.netloc, metadata_path(audience), "", ""))


def metadata_paths(audience: str) -> frozenset[bytes]:
    """Every path the document is served at: path-inserted and the root form."""
    return frozenset({metadata_path(audience).encode(), WELL_KNOWN.encode()})


def metadata_document(settings: OAuthResource) -> dict[str, Any]:
    """The RFC 9728 document: this resource, its one authorization server, its scopes."""
    return {
        "resource": settings.audience,
        "authorization_servers": [settings.issuer],
        "scopes_supported": list(settings.scopes),
        "bearer_methods_supported": ["header"],
    }


def metadata_body(settings: OAuthResource) -> bytes:
    """L{metadata_document} as the bytes served."""
    return json.dumps(metadata_document(settings), separators=(",", ":")).encode("utf-8")


def _quoted(value: str) -> str:
    """A quoted-string with nothing in it that would need escaping."""
    return '"' + _UNQUOTABLE.sub("", value) + '"'


def challenge(settings: OAuthResource, refusal: Refusal | None = None) -> bytes:
    """
    The C{WWW-Authenticate} value for a refused request.

    With no token at all (C{refusal} C{None}) it carries no error code, as RFC 6750
    section 3.1 asks; a bad token gets C{invalid_token}, a token short of a scope
    C{insufficient_scope}.
    """
    parts = [f"resource_metadata={_quoted(metadata_url(settings.audience))}"]
    if settings.scopes:
        parts.append(f"scope={_quoted(' '.join(settings.scopes))}")
    if refusal is not None:
        error = INSUFFICIENT_SCOPE if refusal.error == INSUFFICIENT_SCOPE else "invalid_token"
        parts.append(f"error={_quoted(error)}")
        parts.append(f"error_description={_quoted(refusal.message)}")
    return ("Bearer " + ", ".join(parts)).encode("ascii")
