# -*- test-case-name: tests.daemon.test_process -*-
"""
C{mcpx daemon}: run the daemon in the foreground.

Kept apart from L{mcpx.cli.main} so that the commands that only ask a daemon something do
not import the settings machinery this one needs to build its flags.  Its work is
L{mcpx.cli.daemon_start}'s, which also runs a line of setting flags alone, without click.
"""

from __future__ import annotations

import click

from mcpx.cli.daemon_start import prepare, run
from mcpx.cli.settings_command import SettingsUsageError, flags_from_options, setting_options
from mcpx.settings.errors import SettingsError


@click.command()
@setting_options
def daemon(**options: str | None) -> None:
    """Run the daemon in the foreground (Ctrl-C stops it)."""
    try:
        settings, config = prepare(flags_from_options(options))
    except SettingsError as e:
        raise SettingsUsageError(str(e)) from None
    run(settings, config)
