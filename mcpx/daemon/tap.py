# -*- test-case-name: tests.daemon.test_process -*-
"""
C{twistd mcpx}: the same service tree as C{mcpx daemon}, under twistd.

Every setting is an option here too (C{twistd mcpx --help}); the environment and the
config file are read exactly as the CLI reads them.  What twistd would otherwise do
its own way is brought in line with C{mcpx daemon}: the log is written by mcpx's
observer (its format, its level, credentials masked), a bad setting is one line, a
port that cannot be bound ends the process with status 1, and the pidfile and log
file live in the state directory unless twistd's options name others.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any, cast

from twisted.application.service import IService, MultiService
from twisted.logger import ILogObserver
from twisted.python import usage
from twisted.python.components import Componentized
from twisted.python.failure import Failure

from mcpx.daemon.config import daemon_config
from mcpx.daemon.limits import raise_descriptor_limit
from mcpx.daemon.listeners import cannot_listen, exposure_warning
from mcpx.daemon.logs import log_observer, open_log_stream
from mcpx.daemon.process import reload_on_sighup, settle_memory
from mcpx.daemon.root import DaemonService, IDaemonReactor
from mcpx.daemon.sdnotify import forget_systemd_variables
from mcpx.daemon.service import DaemonConfig, make_service, prepare_state_dir
from mcpx.settings.errors import SettingsError
from mcpx.settings.load import flags_from_usage, load_settings, usage_parameters
from mcpx.settings.resolve import Settings
from mcpx.upstream.lineage import become_subreaper, become_undumpable

#: twistd's own default pidfile name, which it would write into the working directory.
TWISTD_DEFAULT_PIDFILE = "twistd.pid"
#: Where a daemonized twistd logs when neither C{--logfile} nor C{daemon.logFile} says.
TWISTD_LOG_NAME = "twistd.log"


class Options(usage.Options):
    synopsis = "[options]"
    longdesc = (
        "Run the mcpx gateway daemon. Each option sets the setting of the same name; "
        "`mcpx settings` shows every setting and where its value came from."
    )
    optParameters = usage_parameters()

    settings: Settings
    daemon: DaemonConfig

    def postOptions(self) -> None:
        try:
            self.settings, servers = load_settings(os.environ, flags_from_usage(self))
            self.daemon = daemon_config(self.settings, servers, os.environ)
        except SettingsError as e:
            # One line, like `mcpx daemon`: twistd would print its whole usage first.
            print(f"twistd mcpx: {e}", file=sys.stderr)
            raise SystemExit(2) from None
        # Read now; nothing the daemon starts may speak for it to systemd.
        forget_systemd_variables(os.environ)
        parent = self.parent
        if parent is not None and parent.get("pidfile") == TWISTD_DEFAULT_PIDFILE:
            # Not into whatever directory twistd happened to be started from.
            parent["pidfile"] = str(self.daemon.state_dir / TWISTD_DEFAULT_PIDFILE)


class CannotListen(SystemExit, Exception):
    """
    A listener could not be bound while twistd started the application.

    An C{Exception}, so twistd reports it to a daemonizing parent and removes its
    pidfile; a C{SystemExit}, so the process then ends with status 1 and no traceback.
    """

    def __init__(self, message: str) -> None:
        SystemExit.__init__(self, 1)
        self.message = message

    def __str__(self) -> str:
        return self.message


def twistd_log_stream(options: Options) -> IO[Any] | None:
    """
    Where the log goes under twistd: C{daemon.logFile} if set, else twistd's
    C{--logfile} (C{-} is stdout, as twistd means it), else stderr in the foreground
    and C{<state>/twistd.log} once daemonized.  C{None} with C{--syslog}: twistd's own.
    """
    log_file = options.settings.string("daemon.logFile")
    if log_file:
        return open_log_stream(log_file)
    parent = options.parent
    if parent is None:
        return sys.stderr
    if parent.get("syslog"):
        return None
    twistd_file = parent.get("logfile")
    if twistd_file == "-":
        return sys.stdout
    if twistd_file:
        return open_log_stream(os.path.abspath(twistd_file))
    if parent.get("nodaemon") or parent.get("debug"):
        return sys.stderr
    return open_log_stream(str(options.daemon.state_dir / TWISTD_LOG_NAME))


class TwistdRoot(MultiService):
    """
    What twistd is given: the daemon's service tree, plus the two things only twistd
    needs: the log observer, handed to the application as its C{ILogObserver}, and the
    check that every listener was bound once the tree started.
    """

    def __init__(self, daemon: DaemonService, observer: ILogObserver | None) -> None:
        MultiService.__init__(self)
        self.daemon = daemon
        self.observer = observer
        daemon.setServiceParent(self)  # type: ignore[no-untyped-call]

    def setServiceParent(self, parent: Any) -> None:
        if self.observer is not None and isinstance(parent, Componentized):
            parent.setComponent(ILogObserver, self.observer)  # type: ignore[no-untyped-call]
        MultiService.setServiceParent(self, parent)

    def startService(self) -> None:
        MultiService.startService(self)
        failures: list[str] = []

        def failed(failure: Failure, description: str) -> None:
            failures.append(cannot_listen(description, failure))

        for listener in self.daemon.listeners:
            listener.when_listening().addErrback(failed, listener.description)
        # Endpoints bind synchronously, so the failures are known by now.
        if failures:
            message = "\n".join(failures)
            print(message, file=sys.__stderr__)
            # Close what was opened (the sockets' files go); twistd never stops a tree
            # that failed to start.
            self.stopService()  # type: ignore[no-untyped-call]
            raise CannotListen(message)


def makeService(options: Options, reactor: IDaemonReactor | None = None) -> IService:
    """Build the daemon's service tree on C{reactor} (the global one under twistd)."""
    if reactor is None:
        from twisted.internet import reactor as global_reactor

        reactor = cast(IDaemonReactor, global_reactor)
    prepare_state_dir(options.daemon.state_dir)
    raise_descriptor_limit()
    for description in options.daemon.exposed_endpoints():
        print(exposure_warning(description, options.daemon.auth), file=sys.stderr)
    try:
        service = make_service(options.daemon, reactor)
    except SettingsError as e:
        # trace.endpoint without OpenTelemetry: one line, as from postOptions.
        print(f"twistd mcpx: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    reload_on_sighup(service, reactor)
    reactor.callWhenRunning(settle_memory)
    # Once running (twistd forks to daemonize in between): what upstreams fork and leave
    # becomes the daemon's, to be found and ended.
    reactor.callWhenRunning(become_subreaper)
    # Upstreams, running as its user, cannot read its environment or attach to it: at
    # once, and again once running (a change of user on the way would undo it).
    become_undumpable()
    reactor.callWhenRunning(become_undumpable)
    stream = twistd_log_stream(options)
    observer = None
    if stream is not None:
        observer = log_observer(
            stream,
            options.settings.string("daemon.logLevel"),
            options.daemon.masker,
            options.settings.string("daemon.logFormat"),
        )
    return TwistdRoot(service, observer)
