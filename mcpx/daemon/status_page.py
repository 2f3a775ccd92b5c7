# -*- test-case-name: tests.daemon.test_status_page -*-
"""
The status page at C{/}: three static files (C{status/} in this package), served by the
daemon's one Klein app behind the gate like every other route; and C{/login}, the page
that exchanges a one-time link's code for a session cookie (L{mcpx.daemon.browser_login}).

The page is plain HTML, CSS and JavaScript with no build step; its script reads C{/v1}
and C{/v1/events} as the browser it runs in (docs/status-page.md).  Each file is read
once, at its first request, and kept as bytes: the daemon pays nothing for the page
until someone opens it.  Every answer carries a strict Content-Security-Policy (only
this origin's script and style, no inline script, no framing).
"""

from __future__ import annotations

from importlib.resources import files
from typing import Final

from twisted.web.iweb import IRequest

__all__ = ["ASSETS", "CONTENT_SECURITY_POLICY", "LOGIN_PATHS", "PAGE_PATHS", "StatusPage"]

#: The path of each file of the page, its name under C{status/}, and its content type.
ASSETS: Final = {
    "/": ("index.html", b"text/html; charset=utf-8"),
    "/status.js": ("status.js", b"text/javascript; charset=utf-8"),
    "/status.css": ("status.css", b"text/css; charset=utf-8"),
    "/login": ("login.html", b"text/html; charset=utf-8"),
    "/login.js": ("login.js", b"text/javascript; charset=utf-8"),
}

#: The page that signs a browser in, and its script: reached without credentials.
LOGIN_PATHS: Final = frozenset({b"/login", b"/login.js"})

#: The status page's own files, which a signed-in browser's cookie opens.
PAGE_PATHS: Final = frozenset(path.encode() for path in ASSETS) - LOGIN_PATHS

#: Nothing but this origin's own files and requests; no inline script or style, no
#: plugins, no framing by another page, no form posted anywhere.
CONTENT_SECURITY_POLICY: Final = (
    b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    b"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

_HEADERS: Final = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-resource-policy", b"same-origin"),
    # The page is small; a daemon upgraded under an open tab serves its new files.
    (b"cache-control", b"no-cache"),
)


class StatusPage:
    """The page's files, each read at its first request and kept."""

    def __init__(self) -> None:
        self._bytes: dict[str, bytes] = {}

    def render(self, request: IRequest, path: str) -> bytes:
        """Answer C{request} with the file at C{path} (a key of L{ASSETS})."""
        name, content_type = ASSETS[path]
        body = self._bytes.get(name)
        if body is None:
            body = files(__package__ or "mcpx.daemon").joinpath("status", name).read_bytes()
            self._bytes[name] = body
        request.setHeader(b"content-type", content_type)
        for header, value in _HEADERS:
            request.setHeader(header, value)
        return body
