# -*- test-case-name: tests.cli.test_quick,tests.daemon.test_lean_start -*-
"""
C{mcpx daemon}'s work, shared by its click command (L{mcpx.cli.daemon_command}) and the
line L{mcpx.cli.quick} runs without click.

click and the one option per setting it builds are about 1.4 MB of an idle daemon, held
for the daemon's whole life to read its command line once at start.  So when that line
is only setting flags, each once, with a value (L{daemon_flags}), L{main} reads it here;
anything else (C{--help}, a flag twice or without its value, a word that is no flag) is
the click command's, which says what click says.  A settings problem is printed as click
prints the click command's (C{mcpx: ...} on stderr, status 2).

Nothing imported here at module level may import click or Twisted.
"""

from __future__ import annotations

import os
import sys

from mcpx.cli.terminal import echo
from mcpx.settings.declarations import BY_FLAG, SETTINGS
from mcpx.settings.errors import SettingsError
from mcpx.settings.load import load_settings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import NoReturn

    from mcpx.daemon.service import DaemonConfig
    from mcpx.settings.resolve import Settings

#: The status click exits with on a settings problem (C{SettingsUsageError}).
EXIT_SETTINGS = 2

#: The status click exits with on ^C or end of input before the daemon runs.
EXIT_ABORTED = 1


def daemon_flags(words: Sequence[str]) -> dict[str, str] | None:
    """
    The raw setting values by setting name that C{words} (the command line after
    C{mcpx daemon}) give, in the order of L{SETTINGS} as the click command collects them,
    when every word is a setting's flag with its value (C{--flag VALUE} or
    C{--flag=VALUE}) and no flag comes twice.  C{None} for anything else, the click
    command's to run (a value that starts with C{-} included, which click may read
    otherwise).
    """
    given: dict[str, str] = {}
    rest = iter(words)
    for word in rest:
        flag, equals, value = word.partition("=")
        setting = BY_FLAG.get(flag)
        if setting is None or setting.name in given:
            return None
        if not equals:
            following = next(rest, None)
            if following is None or following.startswith("-"):
                return None
            value = following
        given[setting.name] = value
    return {s.name: given[s.name] for s in SETTINGS if s.name in given}


def prepare(flags: Mapping[str, str]) -> tuple[Settings, DaemonConfig]:
    """
    The settings and the daemon's configuration from C{flags} (raw values by setting
    name) and the environment, the daemon's modules imported lean
    (L{mcpx.daemon.lean_start}).

    @raise SettingsError: for anything wrong with the settings.
    """
    # Deferred for start-up memory: the daemon's code (and Twisted) is imported only to
    # run it, and only after the settings say which listeners need TLS.
    from mcpx.daemon.lean_start import lean_imports

    settings, servers = load_settings(os.environ, flags)
    with lean_imports(settings.strings("daemon.listen")):
        from twisted.internet.task import react  # noqa: F401 (imported lean for run)

        from mcpx.daemon.config import daemon_config
        from mcpx.daemon.run import run_daemon  # noqa: F401 (imported lean for run)
    return settings, daemon_config(settings, servers, os.environ)


def run(settings: Settings, config: DaemonConfig) -> NoReturn:
    """Run the daemon until it stops; exit with its status."""
    # Deferred for start-up memory: Twisted and the daemon, imported lean by prepare.
    from twisted.internet.task import react

    from mcpx.daemon.run import run_daemon

    react(run_daemon, (settings, config, sys.stderr))
    raise SystemExit(0)  # react exits itself; this is for the type checker


def main(flags: Mapping[str, str]) -> NoReturn:
    """
    C{mcpx daemon} with the setting flags C{flags} (L{daemon_flags}), without click,
    printing and exiting as the click command does.
    """
    try:
        try:
            settings, config = prepare(flags)
        except SettingsError as e:
            echo(f"mcpx: {e}", err=True)
            raise SystemExit(EXIT_SETTINGS) from None
        run(settings, config)
    except (KeyboardInterrupt, EOFError):
        # What click does on ^C: close the terminal's echo of it, say so, exit 1.
        echo("", err=True)
        echo("Aborted!", err=True)
        raise SystemExit(EXIT_ABORTED) from None
