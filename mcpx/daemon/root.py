# -*- test-case-name: tests.daemon.test_shutdown,tests.daemon.test_lifecycle -*-
"""
The root of the daemon's service tree (L{DaemonService}) and the small services under
it: what starts first, what stops first, and how a stop is told to systemd and hurried.
L{mcpx.daemon.service.make_service} builds the tree.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from twisted.application.service import MultiService, Service
from twisted.internet.defer import Deferred, ensureDeferred, gatherResults, succeed
from twisted.internet.interfaces import (
    IListeningPort,
    IReactorCore,
    IReactorFromThreads,
    IReactorProcess,
    IReactorTime,
)
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThread
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx import tracing
from mcpx.daemon.browser_login import page_url
from mcpx.daemon.http import DaemonHTTP
from mcpx.daemon.listeners import ListenerService
from mcpx.daemon.sdnotify import Notifier
from mcpx.ops.errors import OpError
from mcpx.ops.host import Invocation
from mcpx.ops.servers import reload
from mcpx.ops.shutdown import Shutdown
from mcpx.pool.pool import Pool
from mcpx.questions.broker import Broker
from mcpx.scripts.runner import Scripts, ScriptsService
from mcpx.tasks.journal import TaskJournal
from mcpx.upstream.connect import IReactorUpstream
from mcpx.upstream.groups import ProcessGroups
from mcpx.upstream.lineage import REAP_INTERVAL, reap_adopted

_log = Logger()


class IDaemonReactor(IReactorUpstream, IReactorCore, IReactorProcess, IReactorFromThreads):
    """
    What the daemon needs of its reactor: time, processes, TCP and names for the
    upstreams, its own listeners, and signals delivered from another thread.
    """


class DaemonService(MultiService):
    """
    The root of the daemon's service tree: the pool first, the listeners after it,
    so that stopping (in reverse) closes the doors before the upstreams go.
    """

    def __init__(
        self,
        http: DaemonHTTP,
        listeners: Sequence[ListenerService],
        pool: Pool | None,
        broker: Broker | None = None,
        groups: ProcessGroups | None = None,
        *,
        scripts: Scripts | None = None,
        shutdown: Shutdown | None = None,
        journal: TaskJournal | None = None,
        notifier: Notifier | None = None,
        clock: IReactorTime | None = None,
        config_notes: tuple[str, ...] = (),
        fleet: FleetService | None = None,
    ) -> None:
        """
        @param journal: the running tasks' journal (L{mcpx.tasks.journal}): read at
            start, the tasks a previous daemon left running reported failed, then kept
            in step with the host's tasks; closed first at stop.
        @param notifier: tells systemd the daemon's state (L{mcpx.daemon.sdnotify}).
        @param clock: times the systemd watchdog and the wait for adopted processes.
        @param config_notes: what the config file had that was ignored (a host's keys),
            logged at start.
        @param fleet: the fleet's parts on a shared store (L{FleetService}), stopped
            before the broker closes the store.
        """
        MultiService.__init__(self)
        self.http = http
        self.shutdown = shutdown
        self.journal = journal
        self.pool = pool
        self.listeners = tuple(listeners)
        self.broker = broker
        self.notifier = notifier
        self.clock = clock
        self.config_notes = config_notes
        self.groups = groups
        if tracing.on():
            # First, so that it stops last: the spans of the last requests are sent.
            MultiService.addService(self, TracingService())
        if groups is not None:
            # First, so that what a killed daemon left is gone before anything starts.
            MultiService.addService(self, StrayReaper(groups, clock))
        if pool is not None:
            MultiService.addService(self, pool)
        if scripts is not None:
            # After the pool, so it stops first: runs end before the servers they call.
            MultiService.addService(self, ScriptsService(scripts))
        if broker is not None:
            # After the pool, so it stops first: questions still pending when the
            # upstreams go stay pending on disk, for the next daemon to list.
            MultiService.addService(self, BrokerService(broker))
        for listener in self.listeners:
            MultiService.addService(self, listener)
        if fleet is not None:
            # Added last, so it stops first: before the broker closes the store.
            MultiService.addService(self, fleet)

    def startService(self) -> None:
        # Now, not when the tree was built: twistd forks to daemonize in between.
        self.http.host.pid = os.getpid()
        for note in self.config_notes:
            _log.info("config file: {note}", note=note)
        if self.journal is not None:
            # Before anything serves: tasks a previous daemon left running are reported
            # failed, not unknown.
            self.journal.restore(self.http.host.tasks)
            self.journal.watch(self.http.host.tasks)
        if self.notifier is not None and self.clock is not None:
            self.notifier.start_watchdog(self.clock)
        MultiService.startService(self)
        listening = gatherResults(
            [listener.when_listening() for listener in self.listeners], consumeErrors=True
        )
        # Said once every listener is bound; each one that is not logs why itself.
        listening.addCallbacks(self._listening, lambda failure: None)

    def _listening(self, ports: Sequence[IListeningPort]) -> None:
        pairs = zip(self.listeners, ports, strict=True)
        urls = (page_url(listener.description, port) for listener, port in pairs)
        self.http.page_urls = [url for url in urls if url is not None]
        _log.info(
            "mcpx daemon listening on {endpoints}",
            endpoints=[listener.description for listener in self.listeners],
        )
        if self.notifier is not None:
            self.notifier.ready(readiness(ports))

    def stopService(self) -> Deferred[None]:
        shutdown = self.shutdown
        if self.notifier is not None and not (shutdown is not None and shutdown.begun):
            self.notifier.stopping()
        if shutdown is not None:
            # Before anything is closed: nothing new starts while the rest ends.
            shutdown.begin()
        if self.broker is not None:
            # Before the connections close and cancel the calls that asked.
            self.broker.closing()
        if self.journal is not None:
            # Before the store forgets them: the tasks cut short stay named on disk.
            self.journal.close()
        self.http.close()
        stopped: Deferred[None] = MultiService.stopService(self)
        groups = self.groups
        if groups is not None:
            # The servers are stopped, and with them what each started: what is left
            # was started by one and shed its mark.
            def end_adopted(result: None) -> None:
                groups.end_adopted()

            stopped.addCallback(end_adopted)
        if shutdown is None:
            return stopped
        # The callers answered, the connections are closed once their last bytes left.
        stopped.addCallback(lambda _: shutdown.drain())
        return race_hurry(stopped, shutdown)

    def reload(self) -> Deferred[Any]:
        """
        Re-read the config file and apply it (C{SIGHUP}).  A refused reload is logged
        and published with its reason by L{mcpx.ops.reloading}; nothing else is.
        A stopping daemon reloads nothing.
        """
        if self.shutdown is not None and self.shutdown.begun:
            _log.info("not reloading the configuration: the daemon is stopping")
            return succeed(None)
        notifier = self.notifier
        if notifier is not None:
            notifier.reloading()
        outcome: Deferred[Any] = ensureDeferred(reload(self.http.host, Invocation({})))

        def failed(failure: Any) -> None:
            if not failure.check(OpError):
                _log.failure("configuration reload failed", failure)

        def settled(result: object) -> object:
            # Ready again whether or not the new configuration was taken.
            if notifier is not None:
                notifier.ready("serving; configuration reloaded")
            return result

        return outcome.addErrback(failed).addBoth(settled)


def readiness(ports: Sequence[IListeningPort]) -> str:
    """The daemon's C{STATUS=} for systemd once it serves: its TCP addresses, if any."""
    places = []
    for port in ports:
        host = port.getHost()
        if hasattr(host, "host") and hasattr(host, "port"):
            address = f"[{host.host}]" if ":" in host.host else host.host
            places.append(f"{address}:{host.port}")
    return "serving on " + (", ".join(places) if places else "its unix socket")


def race_hurry(stopped: Deferred[None], shutdown: Shutdown) -> Deferred[None]:
    """
    C{stopped}, or sooner when the stop is hurried (L{Shutdown.hurry}): what was
    still being waited for is then left to the reactor's end.
    """
    done: Deferred[None] = Deferred()

    def settle(outcome: object) -> None:
        if not done.called:
            done.callback(None)

    def failed(failure: Failure) -> None:
        _log.failure("stopping the daemon", failure)

    stopped.addErrback(failed).addBoth(settle)
    shutdown.hurried.addCallback(settle)
    return done


class StrayReaper(Service):
    """
    Ends, when the daemon starts, the upstream processes a previous daemon of this state
    directory left running when it was killed (L{ProcessGroups.reap_strays}); and,
    the daemon being its descendants' subreaper, waits every L{REAP_INTERVAL} seconds
    for the processes it adopted that have ended (L{reap_adopted}), which Twisted does
    not wait for.

    @ivar clock: what the waits are timed by, the daemon's; without one there are none.
    """

    def __init__(self, groups: ProcessGroups, clock: IReactorTime | None = None) -> None:
        self.groups = groups
        self.clock = clock
        self._reaping: LoopingCall | None = None

    def startService(self) -> None:
        Service.startService(self)
        self.groups.reap_strays()
        clock = self.clock
        if clock is not None:
            self._reaping = LoopingCall(reap_adopted)
            self._reaping.clock = clock
            self._reaping.start(REAP_INTERVAL, now=False).addErrback(
                lambda failure: _log.failure("waiting for adopted processes", failure)
            )

    def stopService(self) -> None:
        Service.stopService(self)
        if self._reaping is not None and self._reaping.running:
            self._reaping.stop()
        self._reaping = None


class TracingService(Service):
    """Sends the spans still queued as the daemon stops, in a thread (L{tracing.stop})."""

    def stopService(self) -> Deferred[None]:
        Service.stopService(self)
        stopped: Deferred[None] = deferToThread(tracing.stop)
        stopped.addErrback(lambda failure: _log.failure("tracing did not stop cleanly", failure))
        return stopped


class BrokerService(Service):
    """Opens the question store when the daemon starts, and closes it when it stops."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._started: Deferred[None] | None = None

    def startService(self) -> None:
        Service.startService(self)
        self._started = self.broker.start()
        self._started.addErrback(
            lambda failure: _log.failure("the question store could not be opened", failure)
        )

    def stopService(self) -> Deferred[None]:
        Service.stopService(self)
        return self.broker.stop()


class FleetService(Service):
    """
    Starts the fleet's parts of a daemon on a shared store (hearing what the other
    daemons write: tasks, configuration notices) when the daemon starts, and ends them
    (relayed retries, configuration notices) when it stops, before the store is closed.
    """

    def __init__(
        self,
        starts: Sequence[Callable[[], object]],
        stops: Sequence[Callable[[], Deferred[None]]],
    ) -> None:
        self._starts = tuple(starts)
        self._stops = tuple(stops)

    def startService(self) -> None:
        Service.startService(self)
        for start in self._starts:
            start()

    def stopService(self) -> Deferred[None]:
        Service.stopService(self)
        return gatherResults([stop() for stop in self._stops], consumeErrors=True).addCallback(
            lambda _: None
        )
