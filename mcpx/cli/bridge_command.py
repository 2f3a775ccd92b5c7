# -*- test-case-name: tests.cli.test_remote -*-
"""
C{mcpx bridge-api}: the remote end of C{--daemon ssh://host} (L{mcpx.cli.remote}).

Hidden from C{mcpx --help}: ssh runs it, people do not.  It checks that both ends run
the same version of mcpx, makes sure a daemon runs here (starting one in the
background as C{mcpx serve} does), then copies its standard input and output to the
daemon's API socket for one request, or with C{--mcp} to its MCP socket for a whole
C{mcpx serve} session.
"""

from __future__ import annotations

import os
import socket
import sys
from functools import partial
from typing import NoReturn

import click

from mcpx._version import __version__
from mcpx.cli.client import (
    DAEMON_LOG_NAME,
    DaemonClient,
    DaemonNotRunning,
    DaemonStartFailed,
    default_state_dir,
    socket_path,
    start_daemon,
)
from mcpx.cli.remote import EXIT_NO_DAEMON, EXIT_VERSION_MISMATCH, bridge_streams


def _refuse(message: str, status: int) -> NoReturn:
    click.echo(f"mcpx bridge-api: {message}", err=True)
    raise SystemExit(status)


def client_gone(stdin: int) -> bool:
    """
    Whether the other end has closed C{stdin} already, read nothing of it: readable with
    no byte waiting is its end.  ssh may run this command after the client that asked
    for it has ended (a question watch's look, cut off as the command exited); starting
    a daemon for it would leave one running that nobody asked for.
    """
    import fcntl
    import select
    import struct
    import termios

    try:
        readable, _, _ = select.select([stdin], [], [], 0)
        if not readable:
            return False
        waiting = fcntl.ioctl(stdin, termios.FIONREAD, b"\0\0\0\0")
    except (OSError, ValueError):
        return False
    count: int = struct.unpack("i", waiting)[0]
    return count == 0


def read_waiting(stdin: int) -> bytes | None:
    """
    What the client has sent on C{stdin} so far, read without waiting; C{None} when its
    end follows.  The client of one API request never closes its side before the answer
    (that is how it hangs up, L{bridge_streams}), so an end here means it has gone, even
    when the request it sent before going is still waiting to be read.
    """
    import select

    sent = bytearray()
    while select.select([stdin], [], [], 0)[0]:
        data = os.read(stdin, 65536)
        if not data:
            return None
        sent += data
    return bytes(sent)


def _api_socket(stdin: int) -> tuple[socket.socket, bytes]:
    """
    A connection to this host's daemon API socket, starting the daemon if none runs (and
    the client is still there), and what the client sent while it was being made.
    """
    state = default_state_dir()
    path = socket_path(state)
    client = DaemonClient(path)
    sent = b""
    try:
        client.health()
    except (DaemonNotRunning, OSError):
        waiting = read_waiting(stdin)
        if waiting is None:
            raise SystemExit(0) from None
        sent = waiting
        try:
            pid = start_daemon(client, state)
        except DaemonStartFailed as e:
            _refuse(f"could not start a daemon: {e}", EXIT_NO_DAEMON)
        click.echo(
            f"mcpx: started a daemon on {socket.gethostname()} (pid {pid}); its output "
            f"goes to {state / DAEMON_LOG_NAME} there",
            err=True,
        )
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError as e:
        sock.close()
        _refuse(f"cannot connect to the daemon at {path}: {e}", EXIT_NO_DAEMON)
    return sock, sent


@click.command("bridge-api", hidden=True)
@click.option("--client-version", required=True, help="The version of mcpx at the other end.")
@click.option("--mcp", is_flag=True, help="Bridge to the MCP socket, for mcpx serve.")
@click.option("--passthrough", default=None, help="With --mcp: as mcpx serve --passthrough.")
def bridge_api(client_version: str, mcp: bool, passthrough: str | None) -> None:
    """Copy standard input and output to this host's daemon (run by ssh for --daemon)."""
    if client_version != __version__:
        _refuse(
            f"{socket.gethostname()} runs mcpx {__version__} but the client runs mcpx "
            f"{client_version}; install the same version on both ends",
            EXIT_VERSION_MISMATCH,
        )
    if mcp:
        # Deferred for start-up time: only --mcp needs the MCP bridge and its threads.
        from mcpx.cli.serve import serve_host, split_names

        status = serve_host(
            default_state_dir(),
            sys.stdin.fileno(),
            sys.stdout.fileno(),
            passthrough=split_names(passthrough),
            start=not client_gone(sys.stdin.fileno()),
            fail=partial(_refuse, status=EXIT_NO_DAEMON),
        )
        raise SystemExit(status)
    stdin = sys.stdin.fileno()
    sock, sent = _api_socket(stdin)
    raise SystemExit(bridge_streams(sock, stdin, sys.stdout.fileno(), sent=sent))
