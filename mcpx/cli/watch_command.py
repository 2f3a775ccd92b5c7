# -*- test-case-name: tests.cli.test_watch_command -*-
"""
C{mcpx watch URI...}: follow the updates of resources, through C{GET /v1/events?uri=}.

The stream holds a subscription to each resource for as long as the command runs; its
first event says what was subscribed and why anything was not (printed on stderr), and
each update is a line on stdout: the time, the server and the resource's URI.
"""

from __future__ import annotations

import json
import time
from urllib.parse import urlencode

import click

from mcpx.cli.client import DaemonClient
from mcpx.cli.commands import asks_the_daemon, follow_events
from mcpx.cli.failures import EXIT_FAILED, CommandFailed
from mcpx.cli.hints import in_cli_words
from mcpx.cli.render import event_line
from mcpx.cli.terminal import echo


@asks_the_daemon("watch")
@click.argument("uris", nargs=-1, required=True, metavar="URI...")
@click.option(
    "--server", default=None, metavar="SERVER", help="Whose URIs these are, when not mcpx://."
)
def watch(client: DaemonClient, as_json: bool, uris: tuple[str, ...], server: str | None) -> None:
    """
    Follow the updates of resources (mcpx:// URIs, or a server's own with --server)
    until interrupted; the daemon holds their subscriptions meanwhile.
    """
    query = [("uri", uri) for uri in uris] + ([("server", server)] if server else [])
    try:
        for kind, data in follow_events(client, urlencode(query)):
            try:
                event = json.loads(data)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            if as_json:
                echo(json.dumps(event, separators=(",", ":"), ensure_ascii=False))
            if kind == "watching":
                _said_what_is_watched(event, quiet=as_json)
            elif not as_json:
                echo(event_line(kind, event, time.time()))
    except KeyboardInterrupt:
        return
    raise CommandFailed("the daemon closed the event stream")


def _said_what_is_watched(event: dict[str, object], *, quiet: bool) -> None:
    """Say on stderr what is watched and what is not; nothing watched ends the command."""
    subscribed = event.get("subscribed")
    refused = event.get("refused")
    watched = subscribed if isinstance(subscribed, list) else []
    for entry in refused if isinstance(refused, list) else []:
        if isinstance(entry, dict):
            reason = in_cli_words(str(entry.get("reason")))
            echo(f"mcpx: not watching {entry.get('uri')}: {reason}", err=True)
    if not watched:
        raise CommandFailed("none of the resources could be watched", EXIT_FAILED)
    if not quiet:
        for entry in watched:
            if isinstance(entry, dict):
                echo(f"mcpx: watching {entry.get('uri')}", err=True)
