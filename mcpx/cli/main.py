# -*- test-case-name: tests.cli.test_main -*-
"""
The C{mcpx} command.

Commands parse their arguments, then hand over to the reactor through C{react};
nothing here imports the reactor at module level.
"""

from __future__ import annotations

import os
import sys

import click

from mcpx._version import __version__
from mcpx.cli.settings_command import (
    flags_from_options,
    load_for_cli,
    setting_options,
    settings_command,
)


@click.group()
@click.version_option(__version__, prog_name="mcpx")
def main() -> None:
    """mcpx: one daemon between MCP hosts and the MCP servers they use."""


main.add_command(settings_command)


@main.command()
@setting_options
def daemon(**options: str | None) -> None:
    """Run the daemon in the foreground (Ctrl-C stops it)."""
    from twisted.internet.task import react

    from mcpx.daemon.config import daemon_config
    from mcpx.daemon.run import run_daemon

    settings, _servers = load_for_cli(flags_from_options(options))
    react(run_daemon, (settings, daemon_config(settings, os.environ), sys.stderr))
