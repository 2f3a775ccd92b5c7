# -*- test-case-name: tests.cli.test_config_commands -*-
"""
C{mcpx add} and C{mcpx remove}: servers added to and removed from the config file without
editing its JSON by hand.

The file is the daemon's (C{$MCPX_CONFIG}, else C{$XDG_CONFIG_HOME/mcpx/config.json}).  Each
edit is checked as the daemon checks the file before anything is written, then written
atomically (L{mcpx.settings.edit}).  A daemon running on this machine from that file is then
reloaded (C{POST /v1/reload}: the added server becomes available, a removed one is stopped,
the others keep running), since that costs one request; C{--no-reload} leaves it to
C{mcpx reload}.  C{mcpx import} (L{mcpx.cli.import_command}) shares what is here.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

from mcpx.cli.client import (
    ApiError,
    BadEndpoint,
    DaemonClient,
    DaemonNotRunning,
    ProtocolError,
    default_socket_name,
)
from mcpx.cli.commands import echo_reloaded
from mcpx.cli.failures import EXIT_NOT_FOUND, EXIT_USAGE, CommandFailed
from mcpx.cli.remote import DAEMON_VARIABLE, endpoint_from_environment
from mcpx.cli.render import error_text
from mcpx.cli.terminal import echo
from mcpx.ops import routes
from mcpx.settings.edit import (
    ConfigDocument,
    check_document,
    open_document,
    with_server,
    without_server,
    write_document,
)
from mcpx.settings.errors import SettingsError
from mcpx.settings.paths import config_location

_Function = TypeVar("_Function", bound=Callable[..., Any])


#: The option of each command that edits the config file: reload a daemon running from it.
reload_option = click.option(
    "--reload/--no-reload",
    default=True,
    help="Reload a daemon running from the config file (the default).",
)


def fails_cleanly(function: _Function) -> _Function:
    """Print a L{CommandFailed} as C{mcpx: ...} and exit with its status."""

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except CommandFailed as e:
            echo(f"mcpx: {e.message}", err=True)
            raise SystemExit(e.exit_code) from None

    run.__name__ = function.__name__
    run.__doc__ = function.__doc__
    return run  # type: ignore[return-value]


def local_only(command: str) -> None:
    """Refuse to edit this machine's file while the commands use a daemon elsewhere."""
    try:
        remote = endpoint_from_environment()
    except BadEndpoint as e:
        raise CommandFailed(str(e), EXIT_USAGE) from None
    if remote is not None:
        raise CommandFailed(
            f"mcpx {command} edits this machine's config file, while {DAEMON_VARIABLE} "
            f"(or --daemon) names the daemon at {remote}; run it there: "
            f"`ssh {remote.host} mcpx {command} ...`",
            EXIT_USAGE,
        )


def open_config() -> ConfigDocument:
    """The config file, read for an edit; a problem with it is exit status 2."""
    try:
        return open_document(os.environ)
    except SettingsError as e:
        raise CommandFailed(f"{e}; fix the file first", EXIT_USAGE) from None


def save(document: ConfigDocument, data: Mapping[str, object]) -> None:
    """
    Check C{data} as the daemon would, then write it in place of C{document}'s file, and
    say what the daemon will need of its environment.
    """
    try:
        unset = check_document(data, document.path, os.environ)
    except SettingsError as e:
        raise CommandFailed(f"{e}\nnothing was written", EXIT_USAGE) from None
    try:
        write_document(document.path, data)
    except OSError as e:
        raise CommandFailed(f"cannot write {document.path}: {e}") from None
    try:
        unset_before = set(check_document(document.data, document.path, os.environ))
    except SettingsError:
        unset_before = set()
    for name in unset:
        if name in unset_before:
            continue
        echo(
            f"mcpx: note: ${{{name}}} is not set here; the daemon fills it in from its own "
            "environment, so set it there",
            err=True,
        )
    if not document.exists and not config_location(os.environ).explicit:
        echo(
            f"mcpx: created {document.path}; the configuration shipped with mcpx (its demo "
            "server) is not used now that this file exists "
            f"(`mcpx add demo -- {sys.executable} -m mcpx.demo` adds the demo back)",
            err=True,
        )


def apply(path: Path, reload: bool) -> None:
    """
    Have the daemon running on this machine apply the file at C{path}: reload it when it
    runs from that file (or from no file, when this edit created the default one).
    """
    if not reload:
        echo("mcpx: not reloaded (--no-reload); `mcpx reload` applies it", err=True)
        return
    client = DaemonClient(default_socket_name())
    try:
        current = client.get(routes.path("get_settings"))
        reads = current.get("config") if isinstance(current, dict) else None
        if reads is not None and os.path.realpath(str(reads)) != str(path):
            echo(
                f"mcpx: the running daemon reads {reads}, not {path}, so it is not reloaded; "
                f"start it with MCPX_CONFIG={path} to use this file",
                err=True,
            )
            return
        answer = client.post(routes.path("reload"), {}, timeout=120.0)
    except DaemonNotRunning:
        echo("mcpx: no daemon is running; it reads the file when it starts", err=True)
        return
    except ApiError as e:
        raise CommandFailed(
            f"the file is written, but the daemon refused to reload it: {error_text(e.body)}"
        ) from None
    except (OSError, ProtocolError, ValueError) as e:
        raise CommandFailed(
            f"the file is written, but reloading the daemon at {client.where} failed: {e}; "
            "`mcpx reload` tries again"
        ) from None
    echo_reloaded(answer)


def parse_pairs(pairs: tuple[str, ...], option: str, separator: str) -> dict[str, str]:
    """C{NAME=VALUE} (or C{NAME: VALUE}) options as a mapping; a malformed one is refused."""
    found: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition(separator)
        key = key.strip()
        if not sep or not key:
            raise click.BadParameter(
                f"{pair!r} is not NAME{separator}VALUE", param_hint=option
            ) from None
        found[key] = value.strip() if separator == ":" else value
    return found


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def describe_entry(entry: Mapping[str, object]) -> str:
    """One line saying what an entry runs or reaches."""
    if "url" in entry:
        return f"remote: {entry['url']}"
    args = entry.get("args")
    words = [str(entry.get("command", ""))]
    words += [str(arg) for arg in args] if isinstance(args, list) else []
    return "stdio: " + " ".join(words)


_ADD_EPILOG = """\
\b
Examples:
  mcpx add fs -- npx -y @modelcontextprotocol/server-filesystem ~/notes
  mcpx add github https://api.githubcopilot.com/mcp/ --header 'Authorization: Bearer ${GH_TOKEN}'
  mcpx add notes --env NOTES_DIR=~/notes -- python3 -m notes_server

\b
Everything from the command on is the command's own: write mcpx's options
before it (or put -- before the command, which always works).
The entry is checked as the daemon checks the file before it is written;
a daemon running from that file is reloaded (--no-reload leaves it).
"""


class _AddCommand(click.Command):
    """
    C{mcpx add}, whose command line may also be written as every server's README writes
    it, without C{--}: C{mcpx add fs npx -y @scope/server}. The first word after NAME that
    is neither one of mcpx's options nor a URL starts the command, and everything from it
    on is the command's own (so C{-y} is npx's, not an unknown option of mcpx's).
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" not in args:
            taking = {
                name
                for param in self.params
                if isinstance(param, click.Option) and not param.is_flag
                for name in param.opts
            }
            positional = 0
            index = 0
            while index < len(args):
                word = args[index]
                if word.startswith("-") and word != "-":
                    # An option of mcpx's: skip it and, unless written NAME=VALUE, its value.
                    if word in taking:
                        index += 1
                    index += 1
                    continue
                positional += 1
                if positional == 2 and "://" not in word:
                    args = [*args[:index], "--", *args[index:]]
                    break
                index += 1
        return super().parse_args(ctx, args)


@click.command("add", cls=_AddCommand, epilog=_ADD_EPILOG)
@click.argument("name")
@click.argument("target", nargs=-1, required=True, metavar="-- COMMAND [ARG]... | URL")
@click.option(
    "--env", "env", multiple=True, metavar="NAME=VALUE", help="Set a variable for the command."
)
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="'NAME: VALUE'",
    help="Send a header to a remote server.",
)
@click.option(
    "--pass-env",
    "pass_env",
    multiple=True,
    metavar="NAME",
    help="Give the command this variable of the daemon's environment (envPassthrough).",
)
@click.option("--cwd", metavar="DIR", help="The directory the command runs in.")
@click.option(
    "--tool-prefix", metavar="PREFIX", help="Put PREFIX before its tools' names (toolPrefix)."
)
@click.option("--replace", is_flag=True, help="Replace a server of the same name.")
@reload_option
@fails_cleanly
def add(
    *,
    name: str,
    target: tuple[str, ...],
    env: tuple[str, ...],
    pass_env: tuple[str, ...],
    headers: tuple[str, ...],
    cwd: str | None,
    tool_prefix: str | None,
    replace: bool,
    reload: bool,
) -> None:
    """
    Add server NAME to the config file: a command it runs (a stdio server), or the URL of
    a remote one (Streamable HTTP).
    """
    local_only("add")
    entry: dict[str, object]
    if len(target) == 1 and _is_url(target[0]):
        if env or pass_env or cwd:
            raise click.UsageError(
                "--env, --pass-env and --cwd are for a command mcpx runs; a remote server at a "
                "URL takes --header"
            )
        entry = {"url": target[0]}
        if headers:
            entry["headers"] = parse_pairs(headers, "--header", ":")
    else:
        if len(target) == 1 and "://" in target[0]:
            raise click.UsageError(
                f"{target[0]!r}: a remote server's URL must start with http:// or https://"
            )
        if _is_url(target[0]):
            raise click.UsageError(
                f"a remote server takes its URL alone; got {' '.join(target[1:])!r} after it"
            )
        if headers:
            raise click.UsageError(
                "--header is for a remote server at a URL; a command takes --env"
            )
        entry = {"command": target[0], "args": list(target[1:])}
        if env:
            entry["env"] = parse_pairs(env, "--env", "=")
        if pass_env:
            entry["envPassthrough"] = list(dict.fromkeys(pass_env))
        if cwd is not None:
            entry["cwd"] = cwd
    if tool_prefix is not None:
        entry["toolPrefix"] = tool_prefix
    document = open_config()
    group = document.group_of(name)
    if group is not None and not replace:
        existing = _group_entry(document, group, name)
        raise CommandFailed(
            f"{document.path} already has a server {name!r} ({existing}); "
            f"add --replace to replace it, or `mcpx remove {name}` first"
        )
    save(document, with_server(document, name, entry))
    verb = "replaced" if group is not None else "added"
    echo(f"{verb} server {name!r} ({describe_entry(entry)}) in {document.path}")
    if "command" in entry and shutil.which(str(entry["command"])) is None:
        echo(
            f"mcpx: note: {entry['command']!r} is not found on this PATH; the daemon must find "
            "it on its own, or give its full path",
            err=True,
        )
    apply(document.path, reload)


def _group_entry(document: ConfigDocument, group: str, name: str) -> str:
    entries = document.data.get(group)
    entry = entries.get(name) if isinstance(entries, dict) else None
    return describe_entry(entry) if isinstance(entry, dict) else "not an object"


@click.command("remove")
@click.argument("name")
@reload_option
@fails_cleanly
def remove(name: str, reload: bool) -> None:
    """Remove server NAME from the config file."""
    local_only("remove")
    document = open_config()
    if document.group_of(name) is None:
        names = ", ".join(document.server_names()) or "none"
        where = document.path if document.exists else f"{document.path} (no such file yet)"
        raise CommandFailed(
            f"{where} has no server {name!r}; the servers it has: {names}", EXIT_NOT_FOUND
        )
    save(document, without_server(document, name))
    echo(f"removed server {name!r} from {document.path}")
    apply(document.path, reload)
