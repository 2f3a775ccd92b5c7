# -*- test-case-name: tests.cli.test_systemd_unit -*-
"""
C{mcpx systemd-unit}: print a systemd unit that runs this mcpx's daemon.

The unit is written for the mcpx that prints it (its absolute path in C{ExecStart=}),
so a virtualenv or a pipx install is run as installed.  The daemon speaks
C{Type=notify} (L{mcpx.daemon.sdnotify}); docs/running.md has the recipe.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import click

_USER_UNIT = """\
# mcpx, the MCP gateway daemon, as a systemd user service.
#   mcpx systemd-unit > ~/.config/systemd/user/mcpx.service
#   systemctl --user daemon-reload && systemctl --user enable --now mcpx
#   journalctl --user -u mcpx
[Unit]
Description=mcpx MCP gateway daemon

[Service]
Type=notify
NotifyAccess=main
ExecStart={exec_start} daemon
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=2
WatchdogSec={watchdog}

[Install]
WantedBy=default.target
"""

_SYSTEM_UNIT = """\
# mcpx, the MCP gateway daemon, as a system service run for one user (a template).
#   mcpx systemd-unit --system | sudo tee /etc/systemd/system/mcpx@.service
#   sudo systemctl daemon-reload && sudo systemctl enable --now mcpx@USER
#   journalctl -u mcpx@USER
# The daemon runs as USER with that user's settings, servers and state directory.
[Unit]
Description=mcpx MCP gateway daemon for %i
After=network-online.target
Wants=network-online.target

[Service]
Type=notify
NotifyAccess=main
User=%i
ExecStart={exec_start} daemon
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=2
WatchdogSec={watchdog}
NoNewPrivileges=yes
ProtectSystem=full
PrivateTmp=yes

[Install]
WantedBy=multi-user.target
"""


def exec_word(word: str) -> str:
    """One C{ExecStart=} word: systemd splits on spaces unless the word is quoted."""
    if any(c.isspace() or c in "\"'\\" for c in word):
        return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return word


def mcpx_command() -> str:
    """This mcpx as an absolute command line: its script beside Python, or C{python -m mcpx}."""
    python = Path(os.path.abspath(sys.executable))
    beside = python.parent / "mcpx"
    if beside.is_file() and os.access(beside, os.X_OK):
        return exec_word(str(beside))
    on_path = shutil.which("mcpx")
    if on_path is not None:
        return exec_word(os.path.abspath(on_path))
    return f"{exec_word(str(python))} -m mcpx"


def unit_text(*, system: bool, watchdog: int, exec_start: str | None = None) -> str:
    """The unit file's text; C{system} for the C{mcpx@.service} template."""
    template = _SYSTEM_UNIT if system else _USER_UNIT
    return template.format(exec_start=exec_start or mcpx_command(), watchdog=f"{watchdog}s")


@click.command("systemd-unit")
@click.option(
    "--system",
    is_flag=True,
    help="A system unit template (mcpx@.service, run as the user named after @).",
)
@click.option(
    "--watchdog",
    type=click.IntRange(min=0),
    default=30,
    show_default=True,
    help="WatchdogSec= in seconds: systemd restarts a daemon silent that long (0: off).",
)
def systemd_unit(system: bool, watchdog: int) -> None:
    """
    Print a systemd unit that runs this mcpx's daemon.

    \b
    mcpx systemd-unit > ~/.config/systemd/user/mcpx.service
    systemctl --user enable --now mcpx
    """
    click.echo(unit_text(system=system, watchdog=watchdog), nl=False)
