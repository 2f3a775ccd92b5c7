# -*- test-case-name: tests.cli.test_commands -*-
"""
The C{mcpx} command: the click group behind everything but a plain C{mcpx call}
(L{mcpx.cli.quick}).

Commands other than C{daemon} ask the running daemon one question over HTTP, with no
reactor; C{mcpx daemon} alone imports Twisted, once it runs.

Start-up time matters for the commands that ask a running daemon (C{mcpx call} is meant
to be much faster than starting an MCP server), so this module imports only click and the
light L{mcpx.cli.commands}.  C{daemon} and C{settings} build one flag per setting, which
needs the settings machinery, and C{elicit} checks forms with jsonschema; L{CommandGroup}
imports them only when they are named (or when C{mcpx --help} lists every command).
"""

from __future__ import annotations

import importlib

import click

from mcpx._version import __version__
from mcpx.cli.commands import COMMANDS


class CommandGroup(click.Group):
    """A click group whose heavier commands are imported on first use."""

    #: Command name to C{module:attribute}.
    lazy = {
        "add": "mcpx.cli.config_commands:add",
        "import": "mcpx.cli.import_command:import_command",
        "remove": "mcpx.cli.config_commands:remove",
        "artifacts": "mcpx.cli.exec_command:artifacts",
        "auth": "mcpx.cli.auth_command:auth",
        "bridge-api": "mcpx.cli.bridge_command:bridge_api",
        "daemon": "mcpx.cli.daemon_command:daemon",
        "elicit": "mcpx.cli.elicit:elicit",
        "prompt": "mcpx.cli.content_commands:prompt",
        "prompts": "mcpx.cli.content_commands:prompts",
        "resources": "mcpx.cli.content_commands:resources",
        "read": "mcpx.cli.content_commands:read",
        "exec": "mcpx.cli.exec_command:exec_command",
        "serve": "mcpx.cli.serve:serve",
        "settings": "mcpx.cli.settings_command:settings_command",
        "systemd-unit": "mcpx.cli.systemd_unit:systemd_unit",
        "tasks": "mcpx.cli.tasks_command:tasks",
        "token": "mcpx.cli.token_command:token",
        "watch": "mcpx.cli.watch_command:watch",
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            module, _, attribute = self.lazy[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=CommandGroup)
@click.version_option(__version__, prog_name="mcpx")
@click.option(
    "--daemon",
    "daemon_endpoint",
    default=None,
    metavar="ssh://[user@]host[:port]",
    help="Use the daemon on another machine, over ssh (also MCPX_DAEMON); see docs/remote.md.",
)
def main(daemon_endpoint: str | None) -> None:
    """mcpx: one daemon between MCP hosts and the MCP servers they use."""
    if daemon_endpoint is not None:
        import os

        # Deferred for start-up time: only --daemon is an endpoint to check.
        from mcpx.cli.client import BadEndpoint
        from mcpx.cli.remote import DAEMON_VARIABLE, parse_endpoint

        try:
            parse_endpoint(daemon_endpoint)
        except BadEndpoint as e:
            raise click.BadParameter(str(e), param_hint="--daemon") from None
        # Every command, the lazily imported ones too, finds it where it looks.
        os.environ[DAEMON_VARIABLE] = daemon_endpoint


for _command in COMMANDS:
    main.add_command(_command)
