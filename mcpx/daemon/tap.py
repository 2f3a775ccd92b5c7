# -*- test-case-name: tests.daemon.test_tap -*-
"""
C{twistd mcpx}: the same service tree as C{mcpx daemon}, under twistd.

Every setting is an option here too (C{twistd mcpx --help}); the environment and the
config file are read exactly as the CLI reads them.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from twisted.application.service import IService
from twisted.python import usage

from mcpx.daemon.config import daemon_config
from mcpx.daemon.limits import raise_descriptor_limit
from mcpx.daemon.listeners import exposure_warning
from mcpx.daemon.service import (
    DaemonConfig,
    make_service,
    prepare_state_dir,
    reload_on_sighup,
    settle_memory,
)
from mcpx.settings.errors import SettingsError
from mcpx.settings.load import flags_from_usage, load_settings, usage_parameters
from mcpx.settings.resolve import Settings


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
            raise usage.UsageError(str(e)) from None


def makeService(options: Options, reactor: Any = None) -> IService:
    """Build the daemon's service tree on C{reactor} (the global one under twistd)."""
    if reactor is None:
        from twisted.internet import reactor as global_reactor

        reactor = global_reactor
    prepare_state_dir(options.daemon.state_dir)
    raise_descriptor_limit()
    for description in options.daemon.exposed_endpoints():
        print(exposure_warning(description, options.daemon.auth), file=sys.stderr)
    service = make_service(options.daemon, reactor)
    reload_on_sighup(service, reactor)
    reactor.callWhenRunning(settle_memory)
    return service
