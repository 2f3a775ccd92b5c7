# -*- test-case-name: tests.daemon.test_lean_start -*-
"""
Start the daemon without the TLS machinery when none of its listeners needs TLS.

Twisted's reactor, its endpoints and its web client each try to import pyOpenSSL when
they are first imported, to offer C{listenSSL}, C{startTLS} and TLS endpoints; with
service-identity installed that brings cryptography along: about 13 MB of an idle
daemon's 65 MB and a fifth of its start-up, for a daemon that usually listens on a unix
socket and talks to stdio servers.  So C{mcpx daemon} imports its modules with pyOpenSSL
hidden (L{lean_imports}) unless a listener of its configuration is not plain TCP or unix,
and pyOpenSSL imports as usual afterwards.

What that gives up is what those modules decided while it was hidden: the reactor's
C{listenSSL}, C{startTLS} on its TCP connections, and Twisted's standard TLS client
endpoints.  mcpx uses none of them once started: C{https} servers are reached through
L{mcpx.upstream.endpoints}, which imports the TLS machinery at the first C{https}
connection, and a TLS listener is known at start, when the hiding is skipped.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

#: Listener kinds that never need TLS; any other kind (C{ssl}, plugins) might.
_PLAIN_KINDS = frozenset({"tcp", "tcp6", "unix"})

#: The module that Twisted probes for at import to decide whether it offers TLS.
_PYOPENSSL = "OpenSSL"


def needs_tls(listen: Iterable[str]) -> bool:
    """Whether any of the endpoint strings in C{listen} may need the TLS machinery."""
    kinds = (d.partition(":")[0].strip().lower() for d in listen if d.strip())
    return any(kind not in _PLAIN_KINDS for kind in kinds)


@contextmanager
def without_pyopenssl() -> Iterator[None]:
    """
    Within the block, C{import OpenSSL} fails as it does where pyOpenSSL is not installed
    (a C{None} in C{sys.modules} stops an import); after it, the import works again.
    Nothing is hidden if pyOpenSSL was imported before.
    """
    if _PYOPENSSL in sys.modules:
        yield
        return
    sys.modules[_PYOPENSSL] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if sys.modules.get(_PYOPENSSL, False) is None:
            del sys.modules[_PYOPENSSL]


@contextmanager
def lean_imports(listen: Iterable[str]) -> Iterator[None]:
    """Import the daemon's modules within the block, pyOpenSSL hidden unless C{listen} needs it."""
    if needs_tls(listen):
        yield
        return
    with without_pyopenssl():
        yield
