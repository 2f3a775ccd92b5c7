# -*- test-case-name: tests.cli.test_token_command -*-
"""
C{mcpx token}: print the daemon's bearer token, or replace it.

Works whether or not a daemon runs: the token is a file in the state directory
(L{mcpx.daemon.token}), made here if the daemon has not made it yet.  A running daemon
notices a rotation within a second, and the old token stops working.
"""

from __future__ import annotations

import click


@click.command("token")
@click.option(
    "--rotate",
    is_flag=True,
    help="Make a new token; the old one stops working, at once for a running daemon.",
)
def token(rotate: bool) -> None:
    """Print the token HTTP clients send as `Authorization: Bearer <token>`."""
    # Deferred: click imports this module to list the commands, which need neither.
    from mcpx.cli.client import default_state_dir
    from mcpx.daemon.token import read_token, rotate_token

    state = default_state_dir()
    click.echo(rotate_token(state) if rotate else read_token(state))
