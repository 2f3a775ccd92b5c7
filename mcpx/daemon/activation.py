# -*- test-case-name: tests.daemon.test_sdnotify -*-
"""
Socket activation: listening on the sockets systemd passed (C{LISTEN_FDS}).

When C{LISTEN_PID} names this process, descriptors 3 to 3+C{LISTEN_FDS}-1 are
listening sockets a C{.socket} unit bound (named by C{LISTEN_FDNAMES}, which systemd
227 and later always sets).  Twisted reads, and removes, those variables when
C{twisted.internet.endpoints} is first imported, so the descriptors are asked of the
parser of its C{systemd:} endpoints, the one that will adopt them.

The passed sockets take the place of C{daemon.listen}'s endpoints (the socket unit
owns the addresses), unless C{daemon.listen} already names C{systemd:} endpoints
itself.  The private unix sockets in the state directory stay.
"""

from __future__ import annotations

import socket

from mcpx.wire.twisted_private import systemd_descriptors

_DOMAINS = {socket.AF_INET: "INET", socket.AF_INET6: "INET6", socket.AF_UNIX: "UNIX"}


def _domain(descriptor: int) -> str | None:
    """The Twisted C{domain=} of the stream socket at C{descriptor}, or C{None}."""
    try:
        probe = socket.socket(fileno=descriptor)
    except OSError:
        return None
    try:
        if probe.type != socket.SOCK_STREAM:
            return None
        return _DOMAINS.get(probe.family)
    finally:
        # The descriptor stays open: it is the listener's, not the probe's.
        probe.detach()


def inherited_descriptors() -> list[int]:
    """The descriptors Twisted's C{systemd:} endpoints found passed to this process."""
    # Private to Twisted, but the only record left once it has cleaned the environment.
    descriptors = systemd_descriptors()
    return [] if descriptors is None else descriptors


def activated_endpoints(descriptors: list[int]) -> tuple[str, ...]:
    """C{systemd:} endpoint strings for the stream sockets among C{descriptors}."""
    found = []
    for index, descriptor in enumerate(descriptors):
        domain = _domain(descriptor)
        if domain is not None:
            found.append(f"systemd:domain={domain}:index={index}")
    return tuple(found)


def listen_with_activation(listen: tuple[str, ...], activated: tuple[str, ...]) -> tuple[str, ...]:
    """What the daemon listens on besides its unix socket, given the passed sockets."""
    if not activated or any(d.strip().lower().startswith("systemd:") for d in listen):
        return listen
    return activated
