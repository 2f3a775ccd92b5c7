# -*- test-case-name: tests.server.test_mcp_socket -*-
"""
C{mcpx serve}: MCP on stdin and stdout, for a host that starts its servers as processes.

The bridge is thin on purpose.  It connects to the daemon's MCP socket
C{<state>/mcpx-mcp.sock} (starting a daemon in the background when none runs) and sends
one hello line naming the host process.  When its stdin and stdout are pipes or sockets
(as a host spawns it), it hands them to the daemon with that hello (L{hand_over}), which
then reads and writes them itself: no process copies a line on its way, and the bridge
only waits for the daemon to say how the session ended.  Otherwise (a terminal, a file,
or a daemon that does not take them) it copies bytes both ways until the daemon closes
the connection (L{bridge}): stdin to the socket, the socket to stdout.  The daemon runs
the MCP server; the tool calls, questions and subscriptions belong to it.

  - Only protocol bytes go to stdout; every message of the bridge's own goes to stderr.
  - When stdin ends, the bridge half-closes the socket and keeps copying (or the daemon
    reads the end itself): the daemon lets the requests still running answer
    (C{transport.stdioDrain}), then closes, and the bridge exits 0.
  - If no daemon can be reached, the reason goes to stderr and the exit status is 1.
  - C{--passthrough a,b} (or C{MCPX_MCP_PASSTHROUGH}) goes in the hello: the daemon
    offers those servers under their own names on this connection alone.

Start-up time is part of every host's start-up, so this module imports the standard
library and L{mcpx.cli.client} only: no Twisted, treq, Klein or jsonschema.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, NoReturn

import click

from mcpx._version import __version__
from mcpx.cli.client import (
    DAEMON_LOG_NAME,
    START_WAIT,
    BadEndpoint,
    DaemonClient,
    DaemonStartFailed,
    default_state_dir,
    socket_path,
    start_daemon,
)
from mcpx.cli.remote import parse_endpoint, remote_mcp_command, run_ssh_bridge
from mcpx.settings.endpoints import split_endpoint
from mcpx.wire.handed import handable

#: The daemon's MCP socket in its state directory.  C{mcpx.server.mcp_socket.SOCKET_NAME}
#: says the same, but importing it would import Twisted; a test keeps the two equal.
MCP_SOCKET_NAME: Final = "mcpx-mcp.sock"

#: How much is copied at a time, each way.
CHUNK: Final = 64 * 1024

#: The hello's C{mcpx} value when the host's stdin and stdout are handed over with it;
#: C{mcpx.server.mcp_socket.HELLO_HANDING} says the same (a test keeps them equal), as do
#: the daemon's two answers below (C{PIPES_TAKEN}, C{PIPES_ENDED}).
HELLO_HANDING: Final = "serve-pipes"
#: The daemon holds the host's pipes now.
PIPES_TAKEN: Final = b'{"mcpx":"pipes"}\n'
#: The host's input ended and the daemon closed the session after it.
PIPES_ENDED: Final = b'{"mcpx":"ended"}\n'

#: What the bridge says when the daemon ends a session the host still uses.
_DAEMON_ENDED: Final = (
    "mcpx serve: the daemon ended this connection while the host was still using it "
    "(the daemon stopped or restarted); reconnect the host to start a new session"
)


class BridgeFailed(Exception):
    """The bridge cannot connect the host to a daemon; the message says why."""


def mcp_socket_path(state: Path) -> Path:
    """The daemon's MCP socket in the state directory C{state}."""
    return state / MCP_SOCKET_NAME


def split_names(value: str | None) -> list[str] | None:
    """
    The server names of a comma-separated C{--passthrough} value; C{None} when the
    option was not given at all.  An empty value is an empty list: nothing passed
    through on this connection, whatever the daemon's C{mcp.passthrough} says.
    """
    if value is None:
        return None
    return [name for name in (part.strip() for part in value.split(",")) if name]


def hello_line(passthrough: Sequence[str] | None = None, *, handing: bool = False) -> bytes:
    """
    The first line the daemon reads: who the host is (the bridge's parent process,
    which spawned it), where it runs, the bridge's version, and the servers this
    connection wants passed through (C{passthrough}; left out when C{None}, so the
    daemon's own list applies, and sent even when empty).  C{handing}: the line goes
    with the host's stdin and stdout (L{hand_over}).
    """
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = ""
    hello: dict[str, object] = {
        "mcpx": HELLO_HANDING if handing else "serve",
        "pid": os.getppid(),
        "cwd": cwd,
        "version": __version__,
    }
    if passthrough is not None:
        hello["passthrough"] = list(passthrough)
    return json.dumps(hello, separators=(",", ":")).encode("utf-8") + b"\n"


def _connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except BaseException:
        sock.close()
        raise
    return sock


def open_stream(state: Path, *, start: bool = True) -> socket.socket:
    """
    A connection to the daemon's MCP socket, starting a daemon first if none runs.

    @raise BridgeFailed: no daemon could be reached or started.
    """
    path = mcp_socket_path(state)
    try:
        return _connect(path)
    except (FileNotFoundError, ConnectionRefusedError):
        pass
    except OSError as e:
        raise BridgeFailed(f"cannot connect to {path}: {e}") from None
    client = DaemonClient(socket_path(state))
    try:
        client.health()
    except Exception:
        # Not running, or not answering sensibly: either way, not a daemon to use.
        if not start:
            raise BridgeFailed(f"no mcpx daemon is running (no socket at {path})") from None
        try:
            pid = start_daemon(client, state, wait=START_WAIT)
        except DaemonStartFailed as e:
            raise BridgeFailed(f"could not start a daemon: {e}") from None
        print(
            f"mcpx serve: started a daemon in the background (pid {pid}); "
            f"its output goes to {state / DAEMON_LOG_NAME}",
            file=sys.stderr,
            flush=True,
        )
    else:
        # A daemon answers on its API socket but not on the MCP one: an older daemon.
        try:
            return _connect(path)
        except OSError:
            raise BridgeFailed(
                f"the running mcpx daemon does not serve MCP on {path}; restart it "
                "(it may be older than this mcpx)"
            ) from None
    try:
        return _connect(path)
    except OSError as e:
        raise BridgeFailed(f"the daemon started, but {path} refuses connections: {e}") from None


def hand_over(
    sock: socket.socket, stdin: int, stdout: int, *, passthrough: Sequence[str] | None = None
) -> int | None:
    """
    Hand the host's C{stdin} and C{stdout} to the daemon with the hello, then wait until
    it closes the session.

    @return: the exit status as L{bridge} gives it (0 when the daemon said the host's
        input ended, else 1, said on stderr), or C{None} when the daemon did not take
        them (one older than this bridge, or one that cannot): C{sock} is closed, and the
        caller connects again and copies.
    """
    received = b""
    try:
        socket.send_fds(sock, [hello_line(passthrough, handing=True)], [stdin, stdout])
        while b"\n" not in received:
            data = sock.recv(CHUNK)
            if not data:
                break
            received += data
    except OSError:
        received = b""
    line, newline, rest = received.partition(b"\n")
    if line + newline != PIPES_TAKEN:
        sock.close()
        return None
    # The daemon reads and writes them now; the bridge lets go of its own ends, so that
    # the host reads the end of its stdout when the daemon closes it.
    null = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(null, stdin)
        os.dup2(null, stdout)
    finally:
        os.close(null)
    try:
        while data := sock.recv(CHUNK):
            rest += data
    except OSError as e:
        print(f"mcpx serve: the connection to the daemon broke: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        sock.close()
    if rest == PIPES_ENDED:
        return 0
    print(_DAEMON_ENDED, file=sys.stderr, flush=True)
    return 1


def serve_host(
    state: Path,
    stdin: int,
    stdout: int,
    *,
    passthrough: Sequence[str] | None,
    start: bool,
    fail: Callable[[str], NoReturn],
) -> int:
    """
    Serve the host on C{stdin} and C{stdout} through the daemon of C{state} (started
    first when none runs and C{start}): handed over when they are pipes or sockets and
    the daemon takes them, else copied (through a second connection, when the daemon
    did not take them).

    @param fail: called with why when no daemon can be reached.
    @return: the exit status.
    """

    def connected(start: bool) -> socket.socket:
        try:
            return open_stream(state, start=start)
        except BridgeFailed as e:
            fail(str(e))

    sock = connected(start)
    if handable(stdin) and handable(stdout):
        status = hand_over(sock, stdin, stdout, passthrough=passthrough)
        if status is not None:
            return status
        sock = connected(False)
    return bridge(sock, stdin, stdout, passthrough=passthrough)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _copy_in(stdin: int, sock: socket.socket, ended: threading.Event) -> None:
    """stdin to the socket; at end of input, half-close so the daemon drains."""
    try:
        while True:
            data = os.read(stdin, CHUNK)
            if not data:
                break
            sock.sendall(data)
        # Set before the half-close: the daemon closes only after it sees it.
        ended.set()
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        # The daemon went away; the other direction notices and reports it.
        pass


def bridge(
    sock: socket.socket, stdin: int, stdout: int, *, passthrough: Sequence[str] | None = None
) -> int:
    """
    Copy both ways until the daemon closes the connection.

    @param passthrough: the servers the hello asks to have passed through.
    @return: the exit status: 0 when the daemon closed the stream after the host's
        input ended, 1 when it broke or the daemon ended it while the host was still
        there (it stopped or restarted), which is said on stderr.
    """
    sock.sendall(hello_line(passthrough))
    input_ended = threading.Event()
    feeder = threading.Thread(
        target=_copy_in, args=(stdin, sock, input_ended), name="stdin", daemon=True
    )
    feeder.start()
    try:
        while True:
            data = sock.recv(CHUNK)
            if not data:
                break
            _write_all(stdout, data)
    except BrokenPipeError:
        print("mcpx serve: the host closed stdout", file=sys.stderr, flush=True)
        return 1
    except OSError as e:
        print(f"mcpx serve: the connection to the daemon broke: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        sock.close()
    if input_ended.is_set():
        return 0
    print(_DAEMON_ENDED, file=sys.stderr, flush=True)
    return 1


def mcp_url(description: str) -> str | None:
    """
    Where C{/mcp} is reached through the endpoint C{description} of C{daemon.listen}, or
    C{None} for an endpoint that is not TCP.
    """
    kind, *arguments = split_endpoint(description.strip())
    kind = kind.lower()
    if kind not in ("tcp", "tcp6", "ssl"):
        return None
    port = ""
    interface = ""
    for argument in arguments:
        key, sep, value = argument.partition("=")
        if not sep and not port:
            port = argument
        elif key == "port":
            port = value
        elif key == "interface":
            interface = value
    if not port:
        return None
    if interface in ("", "0.0.0.0"):
        interface = "127.0.0.1"
    elif interface == "::":
        interface = "::1"
    host = f"[{interface}]" if ":" in interface else interface
    scheme = "https" if kind == "ssl" else "http"
    return f"{scheme}://{host}:{port}/mcp"


def http_instead(listen: Sequence[str], state: Path) -> str:
    """What C{mcpx serve --transport http} says: where the daemon serves C{/mcp}."""
    urls = [url for url in (mcp_url(d) for d in listen) if url is not None]
    lines = ["mcpx serve speaks stdio only; the daemon serves MCP over Streamable HTTP itself."]
    if urls:
        lines.append("Point the host at " + " or ".join(urls))
    else:
        lines.append(
            "daemon.listen has no TCP endpoint; add one (e.g. tcp:8899:interface=127.0.0.1)."
        )
    lines.append(f"(and on the unix socket {socket_path(state)}, path /mcp)")
    return "\n".join(lines)


@click.command("serve")
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    # Hidden: stdio is all it speaks; `http` is kept only to say where the daemon's /mcp is.
    hidden=True,
)
@click.option(
    "--passthrough",
    envvar="MCPX_MCP_PASSTHROUGH",
    default=None,
    metavar="NAMES",
    help="Servers (comma-separated) offered under their own names on this connection, "
    "instead of the daemon's mcp.passthrough.",
)
@click.option(
    "--daemon",
    "daemon_endpoint",
    envvar="MCPX_DAEMON",
    default=None,
    metavar="ssh://[user@]host[:port]",
    help="Be served by the daemon on another machine, over ssh (see docs/remote.md).",
)
def serve(transport: str, passthrough: str | None, daemon_endpoint: str | None) -> None:
    """
    Be an MCP server on stdin and stdout, served by the daemon (started if none runs).

    A host's entry: {"command": "mcpx", "args": ["serve"]}; with a daemon on another
    machine: {"command": "mcpx", "args": ["serve", "--daemon", "ssh://host"]}.
    """

    try:
        endpoint = parse_endpoint(daemon_endpoint or "")
    except BadEndpoint as e:
        click.echo(f"mcpx serve: {e}", err=True)
        raise SystemExit(2) from None

    state = default_state_dir()
    if transport == "http":
        # Only this answer needs the settings machinery (still no Twisted).
        from mcpx.settings.errors import SettingsError
        from mcpx.settings.load import load_settings

        try:
            settings, _ = load_settings(os.environ, {})
            listen = settings.strings("daemon.listen")
        except SettingsError as e:
            click.echo(f"mcpx serve: {e}", err=True)
            listen = ()
        click.echo(http_instead(listen, state), err=True)
        raise SystemExit(2)
    if endpoint is not None:
        raise SystemExit(run_ssh_bridge(endpoint, remote_mcp_command(split_names(passthrough))))

    def unreachable(why: str) -> NoReturn:
        click.echo(f"mcpx serve: {why}", err=True)
        raise SystemExit(1)

    status = serve_host(
        state,
        sys.stdin.fileno(),
        sys.stdout.fileno(),
        passthrough=split_names(passthrough),
        start=True,
        fail=unreachable,
    )
    raise SystemExit(status)
