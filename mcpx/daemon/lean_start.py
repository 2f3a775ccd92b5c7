# -*- test-case-name: tests.daemon.test_lean_start -*-
"""
Start the daemon without the TLS machinery when none of its listeners needs TLS.

Twisted's reactor, its endpoints and its web client each try to import pyOpenSSL when
they are first imported, to offer C{listenSSL}, C{startTLS} and TLS endpoints; with
service-identity installed that brings cryptography along: about 13 MB of an idle
daemon's 65 MB and a fifth of its start-up, for a daemon that usually listens on a unix
socket and talks to stdio servers.  The standard library does the same on a smaller
scale: C{asyncio} (imported by C{twisted.internet.defer}), C{http.client} and
C{urllib.request} (through C{twisted.python.compat}) try C{import ssl}, and C{hashlib}
and C{hmac} try C{_hashlib}; either loads the system's libcrypto (and C{ssl} libssl),
together about 5 MB of an idle daemon.  So C{mcpx daemon} imports its modules with all
three hidden (L{lean_imports}) unless a listener of its configuration is not plain TCP
or unix, and each imports as usual afterwards.

What that gives up is what those modules decided while they were hidden: the reactor's
C{listenSSL}, C{startTLS} on its TCP connections, Twisted's standard TLS client
endpoints, the TLS of asyncio, C{http.client} and C{urllib.request} (the daemon runs
none of them), and hashlib's OpenSSL implementations: C{hashlib.sha256} and the other
guaranteed algorithms come from CPython's own modules (the same digests), and the
OpenSSL-only extras (C{scrypt}, the names in C{algorithms_available} beyond the
guaranteed ones) are absent.  mcpx uses none of them once started: C{https} servers are
reached through L{mcpx.upstream.endpoints}, which imports the TLS machinery at the
first C{https} connection; C{/metrics} is written by L{mcpx.daemon.exposition} rather
than the Prometheus client, which imports C{ssl} unconditionally; and a TLS listener is
known at start, when nothing is hidden.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

#: Listener kinds that never need TLS; any other kind (C{ssl}, plugins) might.
_PLAIN_KINDS = frozenset({"tcp", "tcp6", "unix"})

#: The modules probed for at import to decide whether TLS (or OpenSSL's hashes) is on
#: offer: pyOpenSSL (Twisted), the standard library's C{ssl} (asyncio, C{http.client},
#: C{urllib.request}) and C{_hashlib} (C{hashlib}, C{hmac}).
_HIDDEN = ("OpenSSL", "ssl", "_hashlib")


def needs_tls(listen: Iterable[str]) -> bool:
    """Whether any of the endpoint strings in C{listen} may need the TLS machinery."""
    kinds = (d.partition(":")[0].strip().lower() for d in listen if d.strip())
    return any(kind not in _PLAIN_KINDS for kind in kinds)


@contextmanager
def without_tls_modules() -> Iterator[None]:
    """
    Within the block, importing any of L{_HIDDEN} fails as it does where the module is not
    installed (a C{None} in C{sys.modules} stops an import); after it, the imports work
    again.  A module imported before the block is not hidden.
    """
    hidden = [name for name in _HIDDEN if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in hidden:
            if sys.modules.get(name, False) is None:
                del sys.modules[name]


@contextmanager
def lean_imports(listen: Iterable[str]) -> Iterator[None]:
    """Import the daemon's modules in the block, L{_HIDDEN} hidden unless C{listen} needs TLS."""
    if needs_tls(listen):
        yield
        return
    with without_tls_modules():
        yield
