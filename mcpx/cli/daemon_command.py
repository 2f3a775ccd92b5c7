# -*- test-case-name: tests.daemon.test_process -*-
"""
C{mcpx daemon}: run the daemon in the foreground.

Kept apart from L{mcpx.cli.main} so that the commands that only ask a daemon something do
not import the settings machinery this one needs to build its flags.
"""

from __future__ import annotations

import os
import sys

import click

from mcpx.cli.settings_command import (
    SettingsUsageError,
    flags_from_options,
    load_for_cli,
    setting_options,
)
from mcpx.settings.errors import SettingsError


@click.command()
@setting_options
def daemon(**options: str | None) -> None:
    """Run the daemon in the foreground (Ctrl-C stops it)."""
    # Deferred for start-up time: the daemon's code (and Twisted) is imported only to run it.
    from mcpx.daemon.lean_start import lean_imports

    settings, servers = load_for_cli(flags_from_options(options))
    with lean_imports(settings.strings("daemon.listen")):
        from twisted.internet.task import react

        from mcpx.daemon.config import daemon_config
        from mcpx.daemon.run import run_daemon

    try:
        config = daemon_config(settings, servers, os.environ)
    except SettingsError as e:
        raise SettingsUsageError(str(e)) from None
    react(run_daemon, (settings, config, sys.stderr))
