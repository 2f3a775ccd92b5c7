# -*- test-case-name: tests.daemon.test_service -*-
"""
Assembly of the daemon's service tree: the one function C{twistd mcpx} and
C{mcpx daemon} share.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attrs import frozen
from twisted.application.service import MultiService
from twisted.internet.interfaces import IReactorCore, IReactorTime
from twisted.logger import Logger
from twisted.web.server import Site

from mcpx.daemon.http import DaemonHTTP
from mcpx.daemon.listeners import ListenerService, exposure, unix_endpoint

_log = Logger()


@frozen
class DaemonConfig:
    """
    What the service tree is built from.

    @ivar state_dir: the private directory holding the socket and durable state.
    @ivar listen: endpoint strings besides the unix socket.
    """

    state_dir: Path
    listen: tuple[str, ...]

    def endpoints(self) -> tuple[str, ...]:
        """Every endpoint the daemon listens on, the unix socket first."""
        return (unix_endpoint(self.state_dir), *self.listen)

    def exposed_endpoints(self) -> tuple[str, ...]:
        return tuple(d for d in self.listen if exposure(d).beyond_loopback)


def prepare_state_dir(state_dir: Path) -> None:
    """
    Create the state directory, readable by its owner only.

    Runs once at start-up, before the reactor serves anyone.
    """
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(state_dir, 0o700)


class DaemonService(MultiService):
    """The root of the daemon's service tree, with its listeners named."""

    def __init__(self, http: DaemonHTTP, listeners: Sequence[ListenerService]) -> None:
        MultiService.__init__(self)
        self.http = http
        self.listeners = tuple(listeners)
        for listener in self.listeners:
            MultiService.addService(self, listener)

    def startService(self) -> None:
        MultiService.startService(self)
        _log.info(
            "mcpx daemon listening on {endpoints}",
            endpoints=[listener.description for listener in self.listeners],
        )


def make_service(config: DaemonConfig, reactor: Any) -> DaemonService:
    """
    Build the daemon's service tree.

    @param reactor: provides C{IReactorTime} and the listening interfaces; taken
        as a parameter so tests build the tree on a memory reactor.
    """
    clock: IReactorTime = reactor
    core: IReactorCore = reactor
    http = DaemonHTTP(clock=clock, pid=os.getpid())
    site = Site(http.resource(), reactor=reactor)
    site.noisy = False
    for description in config.exposed_endpoints():
        _log.warn(
            "listening on {endpoint} beyond loopback: the API is not authenticated",
            endpoint=description,
        )
    listeners = [ListenerService(core, description, site) for description in config.endpoints()]
    return DaemonService(http, listeners)
