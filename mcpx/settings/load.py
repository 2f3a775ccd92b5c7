# -*- test-case-name: tests.settings.test_load -*-
"""
Everything start-up needs in one call: find the config file, read it, resolve.

The command line and the twistd plugin both call L{load_settings} once, before
the reactor runs; it reads a file synchronously and must not be called later.
"""

from __future__ import annotations

from collections.abc import Mapping

from mcpx.settings.config import load_config
from mcpx.settings.declarations import SETTINGS
from mcpx.settings.errors import SettingsError
from mcpx.settings.resolve import Settings, resolve
from mcpx.settings.servers import ServersConfig


def load_settings(
    environ: Mapping[str, str], flags: Mapping[str, str]
) -> tuple[Settings, ServersConfig]:
    """
    Read the config file (or the shipped one) and resolve every setting.

    Also checks that C{mcp.passthrough} names only configured servers, since a
    pass-through server nobody configured would silently offer nothing.

    @param environ: the process environment (C{os.environ} in production).
    @param flags: raw flag values by setting name, e.g. from
        L{mcpx.cli.settings_command.flags_from_options}.
    @raise SettingsError: for anything wrong with any layer.
    """
    config = load_config(environ)
    settings = resolve(config=config, environ=environ, flags=flags)
    check_passthrough(settings, config.servers)
    return settings, config.servers


def check_passthrough(settings: Settings, servers: ServersConfig) -> None:
    """
    Refuse a C{mcp.passthrough} that names a server C{servers} does not configure.

    @raise SettingsError: naming the server, where the setting came from, and the servers.
    """
    for name in settings.strings("mcp.passthrough"):
        if name not in servers:
            configured = ", ".join(servers) or "none"
            raise SettingsError(
                f"mcp.passthrough (from {settings.source('mcp.passthrough').describe()}) "
                f"names server {name!r}, which {servers.origin} does not configure; "
                f"configured servers: {configured}"
            )


def usage_parameters() -> list[list[str | None]]:
    """
    One C{optParameters} row per setting, for a C{twisted.python.usage.Options}.

    Each takes its setting's flag without the dashes and defaults to C{None}, so
    L{flags_from_usage} can tell a flag given from one left alone.
    """
    return [[setting.flag[2:], None, None, setting.help] for setting in SETTINGS]


def flags_from_usage(options: Mapping[str, object]) -> dict[str, str]:
    """The flags given to a C{usage.Options} built with L{usage_parameters}."""
    given = {}
    for setting in SETTINGS:
        value = options.get(setting.flag[2:])
        if value is not None:
            given[setting.name] = str(value)
    return given
