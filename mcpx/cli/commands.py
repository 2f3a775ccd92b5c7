# -*- test-case-name: tests.cli.test_commands -*-
"""
The commands that ask a running daemon: C{servers}, C{tools}, C{describe}, C{call},
C{restart}, C{events} and C{status}.

Each talks to the daemon's C{/v1} API over the unix socket C{<state>/mcpx.sock} and takes:

  - C{--json}: print the API's answer as JSON (one object per line for C{events}), for
    scripts.  An API error is then printed as C{{"error": {...}}} on stdout as well as
    as a message on stderr.
  - C{--start}: when no daemon answers, start one in the background first (its own
    session, output appended to C{<state>/daemon.log}) and wait up to 10 seconds for it.

Exit status, the same for every command:

  - 0: done;
  - 1: the tool reported an error (C{isError}), no daemon is running, or anything else
    failed;
  - 2: the command line is wrong, or the daemon refused the input as invalid (HTTP 400);
  - 3: the daemon knows no such server, tool or task (HTTP 404);
  - 4: the upstream server failed: it answered with a JSON-RPC error (502), is
    unavailable (503) or did not answer in time (504).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click

from mcpx.cli.arguments import ArgumentError, parse_arguments

# What `mcpx call` does lives in the click-free module that also runs it without click.
from mcpx.cli.calling import call_tool
from mcpx.cli.client import (
    ApiError,
    BadEndpoint,
    DaemonClient,
    DaemonNotRunning,
    ProtocolError,
    ensure_running,
    target,
)
from mcpx.cli.connect import connect
from mcpx.cli.failures import CommandFailed, ask
from mcpx.cli.render import (
    describe_text,
    error_text,
    event_line,
    json_text,
    servers_text,
    tools_text,
)
from mcpx.cli.terminal import echo
from mcpx.ops import routes
from mcpx.ops.reload_summary import reload_summary

_Function = TypeVar("_Function", bound=Callable[..., Any])


def asks_the_daemon(name: str, epilog: str | None = None) -> Callable[[_Function], click.Command]:
    """
    Make a click command of a function that takes a L{DaemonClient} and C{as_json} first.

    Adds C{--json} and C{--start}, and turns every way of failing to get an answer into a
    message and the documented exit status.
    """

    def decorate(function: _Function) -> click.Command:
        @functools.wraps(function)
        def run(*args: Any, as_json: bool, start: bool, **kwargs: Any) -> Any:
            try:
                client = connect()
            except BadEndpoint as e:
                raise click.UsageError(str(e)) from None

            def work() -> Any:
                if start:
                    ensure_running(client, echo)
                return function(client, as_json, *args, **kwargs)

            return ask(client, as_json, work, echo)

        with_options = click.option(
            "--json", "as_json", is_flag=True, help="Print the API's JSON answer, for scripts."
        )(
            click.option(
                "--start",
                is_flag=True,
                help="Start a daemon in the background first if none is running.",
            )(run)
        )
        command: click.Command = click.command(name, epilog=epilog)(with_options)
        return command

    return decorate


def echo_json(value: object) -> None:
    """Print C{value} as C{--json} shows an answer."""
    echo(json_text(value))


def echo_answer(answer: Any, as_json: bool, text: Callable[[Any], str]) -> None:
    """Print C{answer} as C{--json} shows it, else as C{text} writes it."""
    if as_json:
        echo_json(answer)
    else:
        echo(text(answer), nl=False)


@asks_the_daemon("servers")
def servers(client: DaemonClient, as_json: bool) -> None:
    """List the configured servers and their state."""
    answer = client.get(routes.path("list_servers"))
    echo_answer(answer, as_json, servers_text)


@asks_the_daemon("tools")
@click.argument("server", required=False)
@click.option("--search", metavar="TEXT", help="Only tools whose name or description match.")
def tools(client: DaemonClient, as_json: bool, server: str | None, search: str | None) -> None:
    """List the tools of every server, or of SERVER."""
    answer = client.get(
        target(routes.path("list_tools"), server=server, search=search), timeout=120.0
    )
    echo_answer(answer, as_json, tools_text)
    if not as_json:
        say_missing(answer, "tools")


def say_missing(answer: object, kind: str) -> None:
    """
    Name on stderr each server whose C{kind} a listing's C{answer} lacks: one that could not
    be listed is left out of the table, which would otherwise look empty.
    """
    failures = answer.get("errors") if isinstance(answer, dict) else None
    for entry in failures if isinstance(failures, list) else ():
        if isinstance(entry, dict) and isinstance(entry.get("error"), dict):
            echo(
                f"mcpx: the {kind} of {entry.get('server')} are missing: "
                + error_text(entry["error"]),
                err=True,
            )


@asks_the_daemon("describe")
@click.argument("server")
@click.argument("tool")
def describe(client: DaemonClient, as_json: bool, server: str, tool: str) -> None:
    """Show a tool's description and arguments."""
    answer = client.get(routes.path("describe_tool", server=server, tool=tool), timeout=120.0)
    echo_answer(answer, as_json, describe_text)


# Not subscripted: click before 8.2 has no generic ParamType.
class Duration(click.ParamType):  # type: ignore[type-arg]
    """A duration as the settings write one (C{30s}, C{1m30s}, C{250ms}), in seconds."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        # Deferred for start-up time: only a --timeout given as text is parsed.
        from mcpx.settings.durations import parse_duration
        from mcpx.settings.errors import SettingsError

        try:
            return parse_duration(str(value))
        except SettingsError as e:
            self.fail(str(e), param, ctx)


_CALL_EPILOG = """\
\b
Arguments, after SERVER and TOOL:
  key=value ...   values are JSON when they parse as JSON, strings otherwise:
                  n=3 is a number, on=true a boolean, s=hello the string "hello";
                  quote a string that looks like JSON: s='"3"'
  '{"k": 1}'      one JSON object
  -               a JSON object read from standard input

\b
Output: text as text, structured content as JSON, images and audio saved to a
temporary directory (the path is printed), resources summarised.

\b
Exit status: 0 done; 1 the tool reported an error (isError) or no daemon runs;
2 bad arguments (the daemon checks them against the tool's input schema); 3 unknown
server or tool; 4 the upstream refused the call, failed or timed out.
"""


@asks_the_daemon("call", epilog=_CALL_EPILOG)
@click.argument("server")
@click.argument("tool")
@click.argument("arguments", nargs=-1)
@click.option(
    "--timeout",
    type=Duration(),
    metavar="DURATION",
    help="Give up after this long (30s, 2m, ...); the daemon's pool.callTimeout otherwise.",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Show the upstream's progress on stderr (default: when stderr is a terminal).",
)
def call(
    client: DaemonClient,
    as_json: bool,
    *,
    server: str,
    tool: str,
    arguments: tuple[str, ...],
    timeout: float | None,
    progress: bool | None,
) -> None:
    """Call TOOL on SERVER and print its result."""
    try:
        stdin_text = sys.stdin.read() if arguments == ("-",) else None
        parsed = parse_arguments(arguments, stdin_text)
    except ArgumentError as e:
        raise click.UsageError(str(e)) from None
    call_tool(client, as_json, server, tool, parsed, timeout=timeout, progress=progress, echo=echo)


@asks_the_daemon("restart")
@click.argument("server")
def restart(client: DaemonClient, as_json: bool, server: str) -> None:
    """Restart SERVER's processes and connections."""
    answer = client.post(routes.path("restart_server", name=server), None, timeout=120.0)
    if as_json:
        echo_json(answer)
        return
    status = answer.get("server") if isinstance(answer, dict) else None
    status = status if isinstance(status, dict) else {}
    line = f"restarted {status.get('name', server)}: {status.get('state', 'unknown state')}"
    if status.get("revision"):
        line += f" ({status['revision']})"
    echo(line)


#: Where the owner asks for a one-time link into the status page (the unix socket only).
STATUS_LOGIN = "/v1/status/login"


def has_display() -> bool:
    """
    Whether a browser opened now would show on a screen: not on a Linux or BSD session
    without X11 or Wayland, where C{webbrowser} would start a text browser in this
    terminal instead (or nothing).
    """
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def open_status_page(client: DaemonClient, as_json: bool, print_only: bool) -> None:
    """
    Ask the daemon for a one-time link into its status page, print it, and open it in
    the browser unless C{print_only} or there is no display.
    """
    answer = client.post(STATUS_LOGIN, None)
    if as_json:
        echo_json(answer)
        return
    url = str(answer.get("url", "")) if isinstance(answer, dict) else ""
    seconds = answer.get("expires_in") if isinstance(answer, dict) else None
    click.echo(url)
    if isinstance(seconds, (int, float)):
        click.echo(f"(good once, for {seconds:g}s: it signs one browser in)", err=True)
    if print_only or not has_display():
        return
    import webbrowser

    if not webbrowser.open(url):
        click.echo("mcpx: no browser could be started; open the link above", err=True)


@asks_the_daemon("status")
@click.option(
    "--open",
    "open_page",
    is_flag=True,
    help="Sign a browser in to the status page: a one-time link, printed and opened.",
)
@click.option(
    "--print",
    "print_only",
    is_flag=True,
    help="With --open: only print the link (for a browser elsewhere); no browser is started.",
)
def status(client: DaemonClient, as_json: bool, open_page: bool, print_only: bool) -> None:
    """Say whether a daemon is running, and which; --open signs a browser in to its page."""
    if print_only and not open_page:
        raise click.UsageError("--print goes with --open")
    if open_page:
        open_status_page(client, as_json, print_only)
        return
    answer = client.health()
    if as_json:
        echo_json(answer)
        return
    echo(
        f"mcpx {answer.get('version', '?')} daemon is running: pid {answer.get('pid', '?')}, "
        f"up {answer.get('uptime', '?')}s, socket {client.where}"
    )
    last = answer.get("last_reload")
    if isinstance(last, dict) and last.get("error"):
        echo(f"last reload refused (the running configuration is kept): {last['error']}", err=True)


def sse_events(lines: Iterator[bytes]) -> Iterator[tuple[str | None, str]]:
    """
    The events of a C{text/event-stream} body, as (event type, data) pairs.

    Comments (the keep-alives) and events without data are skipped, as the format says.
    """
    kind: str | None = None
    data: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8", "replace")
        if not line:
            if data:
                yield kind, "\n".join(data)
            kind, data = None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            kind = value
        elif field == "data":
            data.append(value)
    if data:
        yield kind, "\n".join(data)


def follow_events(client: DaemonClient, query: str) -> Iterator[tuple[str | None, str]]:
    """
    The events of C{GET /v1/events} with C{query} (url-encoded), as L{sse_events} gives
    them, until the daemon ends the stream; the stream is closed when this ends.
    """
    path = routes.path("events") + (f"?{query}" if query else "")
    with client.open("GET", path, timeout=None, accept="text/event-stream") as response:
        yield from sse_events(response.lines())


@asks_the_daemon("events")
@click.option("--server", "servers_", multiple=True, metavar="SERVER", help="Only this server.")
@click.option("--kind", "kinds", multiple=True, metavar="KIND", help="Only this kind of event.")
def events(
    client: DaemonClient, as_json: bool, servers_: tuple[str, ...], kinds: tuple[str, ...]
) -> None:
    """
    Follow the daemon's events, one line each, until interrupted.

    Kinds include server.starting, server.started, server.exited, server.failed,
    server.log, progress and warning.  --server and --kind may be repeated.
    """
    from urllib.parse import urlencode

    query = urlencode([("server", s) for s in servers_] + [("kind", k) for k in kinds])
    try:
        for kind, data in follow_events(client, query):
            try:
                event = json.loads(data)
            except ValueError:
                event = {"data": data}
            if not isinstance(event, dict):
                event = {"data": event}
            if kind and kind != "message":
                event.setdefault("kind", kind)
            if as_json:
                echo(json.dumps(event, separators=(",", ":"), ensure_ascii=False))
            else:
                echo(event_line(kind, event, time.time()))
    except KeyboardInterrupt:
        return
    raise CommandFailed("the daemon closed the event stream")


#: Every command here, for the group in L{mcpx.cli.main}.
#: How long C{mcpx stop} waits for the daemon to go before saying it did not.
STOP_WAIT = 30.0


@asks_the_daemon("stop")
@click.option(
    "--wait",
    type=float,
    default=STOP_WAIT,
    show_default=True,
    metavar="SECONDS",
    help="How long to wait for the daemon to finish stopping.",
)
def stop(client: DaemonClient, as_json: bool, wait: float) -> None:
    """Stop the running daemon (SIGTERM: calls in flight end, upstreams are stopped)."""
    import os
    import signal

    try:
        answer = client.health()
    except DaemonNotRunning:
        # Stopping what is stopped is done, as scripts want it.
        if as_json:
            echo_json({"stopped": False, "running": False})
        else:
            echo("no mcpx daemon is running")
        return
    pid = answer.get("pid")
    if not isinstance(pid, int) or pid <= 1:
        raise CommandFailed(f"the daemon at {client.path} reported no usable pid: {pid!r}")
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    except PermissionError:
        raise CommandFailed(
            f"the daemon (pid {pid}) belongs to another user; stop it as that user"
        ) from None
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            client.health()
        except (DaemonNotRunning, ProtocolError, OSError):
            # Refused, or accepted by a daemon closing its doors: either way, going.
            break
        except ApiError as e:
            if e.code != "shutting_down":
                raise
            # Still answering, to say it is stopping: wait for it to be gone.
        time.sleep(0.1)
    else:
        raise CommandFailed(
            f"the daemon (pid {pid}) is still running after {wait:g}s; "
            f"`kill -KILL {pid}` ends it at once"
        )
    if as_json:
        echo_json({"stopped": True, "pid": pid})
    else:
        echo(f"stopped the mcpx daemon (pid {pid})")


@asks_the_daemon("reload")
def reload(client: DaemonClient, as_json: bool) -> None:
    """
    Re-read the config file and apply it: servers at once, and the settings that can be.

    A missing or invalid file is refused and the running configuration kept.
    """
    answer = client.post(routes.path("reload"), {}, timeout=120.0)
    if as_json:
        echo_json(answer)
        return
    echo_reloaded(answer)


def echo_reloaded(answer: object) -> None:
    """Print what a reload changed (C{POST /v1/reload}'s answer), and what waits for a restart."""
    answer = answer if isinstance(answer, dict) else {}
    echo("reloaded: " + reload_summary(answer))
    misconfigured = answer.get("misconfigured")
    for name, why in (misconfigured if isinstance(misconfigured, dict) else {}).items():
        echo(f"mcpx: warning: server {name!r} cannot start: {why}", err=True)
    settings = answer.get("settings")
    later = settings.get("restart_needed") if isinstance(settings, dict) else None
    if later:
        echo(
            f"these settings take effect when the daemon is restarted: {', '.join(later)} "
            "(`mcpx stop`, then start it again)",
            err=True,
        )


COMMANDS: tuple[click.Command, ...] = (
    servers,
    tools,
    describe,
    call,
    restart,
    reload,
    stop,
    events,
    status,
)
