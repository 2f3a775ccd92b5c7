# -*- test-case-name: tests.daemon.test_listeners -*-
"""
Where the daemon listens: the private unix socket and the configured endpoints.

The unix socket lives in the state directory with mode 0600, so only the user who
runs the daemon reaches it.  TCP endpoints are Twisted endpoint strings
(C{tcp:8899:interface=127.0.0.1}); one that binds beyond loopback earns a warning,
because whoever can reach the port and holds the token (or anyone, with C{daemon.auth}
C{none}) can run tools as the daemon's user.
"""

from __future__ import annotations

import errno
import ipaddress
from pathlib import Path

from attrs import frozen
from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import quoteStringArgument, serverFromString
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IListeningPort, IProtocolFactory, IReactorCore
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx.once import Once
from mcpx.settings.endpoints import split_endpoint
from mcpx.wire.twisted_private import plain_unix_reactor

SOCKET_NAME = "mcpx.sock"

#: Connections the kernel queues on the daemon's own unix socket before it accepts them
#: (Twisted's default is 50): a burst of hosts and CLI commands connecting at once, such
#: as 64 agents started together, is queued rather than refused while the daemon is busy
#: between two accepts.  The kernel caps it at C{net.core.somaxconn}.
UNIX_BACKLOG = 1024

_NETWORK_KINDS = frozenset({"tcp", "tcp6", "ssl"})


def unix_endpoint(state_dir: Path) -> str:
    """The endpoint string of the daemon's private unix socket in C{state_dir}."""
    path = quoteStringArgument(str(state_dir / SOCKET_NAME))
    return f"unix:{path}:mode=600:lockfile=1:backlog={UNIX_BACKLOG}"


@frozen
class Exposure:
    """What an endpoint string exposes: a human label and whether it leaves loopback."""

    description: str
    beyond_loopback: bool


def exposure(description: str) -> Exposure:
    """
    Judge whether listening on C{description} lets other machines in.

    A TCP endpoint without C{interface=} binds every interface, so it counts as
    beyond loopback.  Kinds mcpx cannot judge (systemd sockets, plugins) are
    reported as beyond loopback too: the warning is cheaper than the surprise.
    """
    kind, _, rest = description.partition(":")
    kind = kind.strip().lower()
    if kind == "unix":
        return Exposure(description, beyond_loopback=False)
    if kind not in _NETWORK_KINDS:
        return Exposure(description, beyond_loopback=True)
    interface = ""
    for part in split_endpoint(rest):
        key, sep, value = part.partition("=")
        if sep and key == "interface":
            interface = value
    if not interface:
        return Exposure(description, beyond_loopback=True)
    try:
        loopback = ipaddress.ip_address(interface.strip("[]")).is_loopback
    except ValueError:
        loopback = interface == "localhost"
    return Exposure(description, beyond_loopback=not loopback)


def exposure_warning(description: str, auth: str = "peer") -> str:
    """What the daemon says at start-up about a listener beyond loopback, by C{daemon.auth}."""
    if auth == "none":
        who = "daemon.auth is none: anything that can reach this port can run tools as this user"
    elif auth == "oauth":
        who = "every client from the network needs an access token from daemon.auth's issuer"
    else:
        who = (
            "every client from the network needs the token (`mcpx token`); "
            "anyone who has it can run tools as this user"
        )
    return (
        f"WARNING: mcpx is listening on {description}, beyond loopback; {who}. "
        "Bind to 127.0.0.1 unless that is what you want."
    )


def cannot_listen(description: str, failure: Failure) -> str:
    """
    The one line, and what to do, for a listener that could not listen: a port another
    program holds is told apart from an address this machine does not have or a path the
    daemon may not write.
    """
    error = failure.value
    why = failure.getErrorMessage()
    if isinstance(error, CannotListenError) and "lock" in str(error.socketError).lower():
        # A unix socket's lock file: a daemon of this state directory holds it.
        where = split_endpoint(description)[1] if description.startswith("unix:") else description
        return (
            f"mcpx: another mcpx daemon is already running with this state directory (it holds "
            f"the lock of {where}): `mcpx status` says which; stop it with `mcpx stop`, or give "
            "this one another state directory (MCPX_STATE_DIR)."
        )
    if isinstance(error, CannotListenError) and isinstance(error.socketError, OSError):
        code = error.socketError.errno
        if code == errno.EADDRINUSE:
            return (
                f"mcpx: cannot listen on {description}: the address is in use. Another "
                "mcpx daemon (`mcpx status` tells) or another program holds it: stop it, or "
                "set daemon.listen (--daemon-listen) to a free address."
            )
        if code == errno.EADDRNOTAVAIL:
            return (
                f"mcpx: cannot listen on {description}: this machine has no such address. "
                "Set daemon.listen (--daemon-listen) to one of its own, such as 127.0.0.1."
            )
        if code == errno.EACCES:
            return (
                f"mcpx: cannot listen on {description}: permission denied (ports below 1024 "
                "need privileges). Set daemon.listen (--daemon-listen) to a port above 1023."
            )
    return f"mcpx: cannot listen on {description}: {why}. Check daemon.listen (--daemon-listen)."


class ListenerService(Service):
    """
    Listen on one endpoint string while running.

    Unlike C{StreamServerEndpointService}, the outcome of listening is offered to
    anyone who asks (L{when_listening}), so C{mcpx daemon} can report a port that is
    already taken and exit instead of running half-deaf.
    """

    _log = Logger()

    def __init__(
        self,
        reactor: IReactorCore,
        description: str,
        factory: IProtocolFactory,
        *,
        descriptors: bool = False,
    ):
        """
        @param descriptors: whether a unix socket's connections read the descriptors a
            peer passes (Twisted's own C{recvmsg}) while their protocol C{wants_descriptors},
            as the MCP socket's do for the pipes C{mcpx serve} hands over with its first
            line; else, and after, they read with a plain C{recv} (L{plain_unix_reactor}),
            which costs less and closes any passed.
        """
        self._reactor = reactor
        self.description = description
        self._factory = factory
        self._descriptors = descriptors
        self._port: IListeningPort | None = None
        self._listening: Once[IListeningPort] = Once()

    def startService(self) -> None:
        Service.startService(self)
        try:
            reactor = plain_unix_reactor(self._reactor, descriptors_first=self._descriptors)
            endpoint = serverFromString(reactor, self.description)
        except Exception:
            self._settle(Failure())
            return
        listening = endpoint.listen(self._factory)
        listening.addCallbacks(self._settle, self._settle)

    def _settle(self, outcome: IListeningPort | Failure) -> None:
        if isinstance(outcome, Failure):
            # The reason is the whole story (a port taken, a path not writable): no traceback.
            self._log.error(
                "cannot listen on {description}: {why}",
                description=self.description,
                why=outcome.getErrorMessage(),
            )
        else:
            self._port = outcome
        self._listening.fire(outcome)

    def when_listening(self) -> Deferred[IListeningPort]:
        """A fresh Deferred that fires with the port, or fails with why it could not listen."""
        return self._listening.wait()

    def stopService(self) -> Deferred[None] | None:
        Service.stopService(self)
        port, self._port = self._port, None
        if self._listening.done:
            # The next start listens afresh; a waiter still waiting waits for that one.
            self._listening = Once()
        if port is None:
            return None
        stopped = port.stopListening()
        return stopped if isinstance(stopped, Deferred) else None
