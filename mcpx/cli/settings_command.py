# -*- test-case-name: tests.settings.test_render -*-
"""
C{mcpx settings}: every setting, its value and where the value came from.

Also home to what every command that takes settings shares: L{setting_options}
adds one flag per setting to a click command, L{flags_from_options} collects the
ones given, and L{load_for_cli} turns a L{SettingsError} into a usage error.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import IO, Any, TypeVar

import click

from mcpx.settings.declarations import SETTINGS
from mcpx.settings.errors import SettingsError
from mcpx.settings.load import load_settings
from mcpx.settings.paths import config_location, state_dir
from mcpx.settings.render import render_json, render_table, shown_value
from mcpx.settings.resolve import Settings
from mcpx.settings.servers import ServersConfig

_Command = TypeVar("_Command", bound=Callable[..., Any])


class SettingsUsageError(click.ClickException):
    """
    A settings problem, printed to stderr as every command's errors are (C{mcpx: ...});
    the command exits with status 2.
    """

    exit_code = 2

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"mcpx: {self.format_message()}", file=file, err=True)


def setting_options(command: _Command) -> _Command:
    """
    Give a click command one C{--flag} per setting.

    Each takes a string, left unparsed until L{load_for_cli} resolves it, so an
    error names the flag along with what is wrong.  The environment is read by the
    settings themselves, never by click, so each value's source stays exact.
    """
    for setting in reversed(SETTINGS):
        # Spaces after the commas let click wrap a long list default.
        default = shown_value(setting, setting.default).replace(",", ", ")
        command = click.option(
            setting.flag,
            setting.param,
            type=str,
            default=None,
            metavar=setting.kind.metavar,
            help=f"{setting.help} [{setting.env}; default: {default}]",
        )(command)
    return command


def flags_from_options(kwargs: Mapping[str, object]) -> dict[str, str]:
    """
    The settings given as flags, by setting name, from a command's keyword arguments.

    Keys that are not setting flags are ignored, so a command can pass all of its
    arguments.
    """
    given = {}
    for setting in SETTINGS:
        value = kwargs.get(setting.param)
        if value is not None:
            given[setting.name] = str(value)
    return given


def load_for_cli(
    flags: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> tuple[Settings, ServersConfig]:
    """
    L{load_settings} for a command: a settings problem becomes a usage error.

    @param environ: the environment, C{os.environ} when not given.
    @raise SettingsUsageError: carrying the L{SettingsError}'s message.
    """
    try:
        return load_settings(os.environ if environ is None else environ, flags)
    except SettingsError as e:
        raise SettingsUsageError(str(e)) from None


@click.command("settings")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for a program to read.")
@setting_options
def settings_command(as_json: bool, **options: str | None) -> None:
    """Show every setting, its value and where the value came from."""
    environ = os.environ
    settings, servers = load_for_cli(flags_from_options(options), environ)
    state = str(state_dir(environ))
    if as_json:
        click.echo(json.dumps(render_json(settings, servers, state_dir=state), indent=2))
    else:
        looked_at = str(config_location(environ).path)
        click.echo(render_table(settings, servers, state_dir=state, looked_at=looked_at), nl=False)
