# -*- test-case-name: tests.daemon.test_browser_login -*-
"""
The owner's way into the status page from a browser where the page needs the token
(C{daemon.auth} C{token} or C{oauth}, or a browser on another machine): a one-time code
the owner asks for over the unix socket (C{mcpx status --open}), which the page's
C{/login} exchanges for a session cookie.

  - A code is 32 random bytes (URL-safe base64), good once, for L{CODE_LIFETIME}
    seconds; it travels in the link's fragment, which a browser never sends, so it
    reaches no server log, proxy or C{Referer}, and the login page sends it once, in a
    C{POST} body.
  - A session is 32 random bytes in an C{HttpOnly}, C{SameSite=Strict} cookie
    (C{Secure} over TLS), good for L{SESSION_LIFETIME} seconds.  The gate accepts it
    for the status page and C{/v1} only, only from the daemon's own origin, and only
    on a TLS connection or from loopback by the daemon's own user: another local user,
    whose web server on another port of the host got the cookie from the owner's
    browser, or a peer over plain HTTP, cannot replay it (L{mcpx.daemon.gate}).
  - At most L{MAX_CODES} codes and L{MAX_SESSIONS} sessions are held; the oldest gives
    way.  Codes and sessions are kept as SHA-256 digests, looked up by digest, and live
    in memory only: a restart signs every browser out.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Final

from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IListeningPort, IReactorTime

#: How long a one-time code may wait for its browser, in seconds.
CODE_LIFETIME: Final = 60.0

#: How many codes may wait at once; a new one past that ends the oldest.
MAX_CODES: Final = 8

#: How long a browser stays signed in to the status page, in seconds.
SESSION_LIFETIME: Final = 12 * 3600.0

#: How many browsers may be signed in at once; a new one past that ends the oldest.
MAX_SESSIONS: Final = 16

#: The session cookie's name.
COOKIE: Final = b"mcpx_session"

#: The longest code or cookie value looked at (longer ones are refused unread).
_LONGEST: Final = 128


def _digest(value: str | bytes) -> bytes:
    raw = value.encode("ascii", "replace") if isinstance(value, str) else value
    return hashlib.sha256(raw).digest()


class BrowserLogins:
    """The one-time codes waiting for a browser, and the browsers signed in."""

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        #: Digest of a code or session, to when it expires; oldest first.
        self._codes: dict[bytes, float] = {}
        self._sessions: dict[bytes, float] = {}

    def new_code(self) -> str:
        """A new one-time code, good for L{CODE_LIFETIME} seconds."""
        code = secrets.token_urlsafe(32)
        _add(self._codes, _digest(code), self._clock.seconds() + CODE_LIFETIME, MAX_CODES)
        return code

    def exchange(self, code: str) -> str | None:
        """
        A new session for a code that is waiting and not expired (it is used up,
        whatever comes of it), else C{None}.
        """
        if not code or len(code) > _LONGEST:
            return None
        expires = self._codes.pop(_digest(code), None)
        if expires is None or expires <= self._clock.seconds():
            return None
        session = secrets.token_urlsafe(32)
        _add(
            self._sessions,
            _digest(session),
            self._clock.seconds() + SESSION_LIFETIME,
            MAX_SESSIONS,
        )
        return session

    def signed_in(self, session: bytes | None) -> bool:
        """Whether C{session} (a cookie's value) is a session that has not expired."""
        if not session or len(session) > _LONGEST:
            return False
        key = _digest(session)
        expires = self._sessions.get(key)
        if expires is None:
            return False
        if expires <= self._clock.seconds():
            del self._sessions[key]
            return False
        return True


def _add(held: dict[bytes, float], key: bytes, expires: float, most: int) -> None:
    """Hold C{key} until C{expires}, first letting the oldest go past C{most} - 1."""
    while len(held) >= most:
        del held[next(iter(held))]
    held[key] = expires


def page_url(description: str, port: IListeningPort) -> str | None:
    """
    Where a browser on this machine finds the page on the listener C{description}
    bound to C{port}: its address (loopback for one bound to every address), C{https}
    for a TLS one; C{None} for a unix socket.
    """
    host = port.getHost()
    if not isinstance(host, (IPv4Address, IPv6Address)):
        return None
    address = host.host.split("%", 1)[0]
    if address in ("0.0.0.0", "::"):
        address = "127.0.0.1" if address == "0.0.0.0" else "::1"
    if ":" in address:
        address = f"[{address}]"
    scheme = "https" if description.startswith(("ssl:", "tls:")) else "http"
    return f"{scheme}://{address}:{host.port}"
