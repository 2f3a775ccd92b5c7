# -*- test-case-name: tests.cli.test_import_command -*-
"""
C{mcpx import FILE}: the MCP servers of a host's config file (Claude Desktop, Claude Code,
Cursor, VS Code) merged into mcpx's, as C{mcpx add} would add each
(L{mcpx.cli.config_commands}); what is read and how is L{mcpx.settings.host_files}.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import click
from attrs import evolve

from mcpx.cli.config_commands import (
    apply,
    describe_entry,
    fails_cleanly,
    local_only,
    open_config,
    reload_option,
    save,
)
from mcpx.cli.failures import EXIT_FAILED, EXIT_USAGE, CommandFailed
from mcpx.settings.config import decode
from mcpx.settings.edit import check_document, with_server
from mcpx.settings.errors import SettingsError
from mcpx.settings.host_files import host_servers
from mcpx.settings.paths import home

_IMPORT_EPILOG = """\
\b
Files it reads:
  Claude Desktop  claude_desktop_config.json ({"mcpServers": ...})
  Claude Code     ~/.claude.json (the user's and each project's mcpServers), .mcp.json
  Cursor          .cursor/mcp.json, ~/.cursor/mcp.json
  VS Code         .vscode/mcp.json ({"servers": ..., "inputs": ...})

\b
${workspaceFolder} is the folder holding .cursor or .vscode (or --workspace),
${userHome} your home; ${env:NAME} and ${input:ID} become environment variables
the daemon reads.  Every change is noted on stderr.
"""


@click.command("import", epilog=_IMPORT_EPILOG)
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--only", multiple=True, metavar="NAME", help="Import only this server (repeatable).")
@click.option("--replace", is_flag=True, help="Replace servers of the same name.")
@click.option(
    "--workspace",
    type=click.Path(file_okay=False),
    help="What ${workspaceFolder} stands for.",
)
@click.option("--dry-run", is_flag=True, help="Say what would change; write nothing.")
@reload_option
@fails_cleanly
def import_command(
    *,
    file: str,
    only: tuple[str, ...],
    replace: bool,
    workspace: str | None,
    dry_run: bool,
    reload: bool,
) -> None:
    """Add the MCP servers of a host's config FILE to mcpx's config file."""
    local_only("import")
    path = Path(os.path.realpath(file))
    try:
        data = decode(path.read_text(encoding="utf-8"), str(path))
    except SettingsError as e:
        raise CommandFailed(str(e), EXIT_USAGE) from None
    except (OSError, UnicodeDecodeError) as e:
        raise CommandFailed(f"cannot read {path}: {e}") from None
    try:
        found = host_servers(
            data,
            PurePosixPath(path),
            home=PurePosixPath(home(os.environ)),
            workspace=PurePosixPath(os.path.abspath(workspace)) if workspace else None,
        )
    except ValueError as e:
        raise CommandFailed(f"{path}: {e}", EXIT_USAGE) from None
    document = open_config()
    if document.path == path:
        raise CommandFailed(f"{path} is mcpx's own config file already", EXIT_USAGE)
    missing = [name for name in only if name not in found.entries and name not in found.skipped]
    if missing:
        raise CommandFailed(
            f"{path} has no server {', '.join(map(repr, missing))}; it has: "
            + (", ".join([*found.entries, *found.skipped]) or "none"),
            EXIT_USAGE,
        )
    for note in found.notes:
        click.echo(f"mcpx: note: {note}", err=True)
    left_out = dict(found.skipped)
    added: list[str] = []
    replaced: list[str] = []
    already: list[str] = []
    edited = document
    for name, entry in found.entries.items():
        if only and name not in only:
            continue
        group = document.group_of(name)
        existing = document.data[group][name] if group is not None else None  # type: ignore[index]
        if existing == entry:
            already.append(name)
            continue
        if existing is not None and not replace:
            left_out[name] = (
                f"{document.path} has a server of that name already "
                f"({describe_entry(existing) if isinstance(existing, dict) else existing}); "
                "--replace replaces it"
            )
            continue
        try:
            check_document({"servers": {name: entry}}, path, os.environ)
        except SettingsError as e:
            left_out[name] = str(e).removeprefix(f"{path}: ")
            continue
        (replaced if existing is not None else added).append(name)
        edited = evolve(edited, data=with_server(edited, name, entry))
    for name, why in left_out.items():
        if not only or name in only:
            click.echo(f"mcpx: left out {name!r}: {why}", err=True)
    parts = [
        f"{verb} {', '.join(names)}"
        for verb, names in (("added", added), ("replaced", replaced), ("already there", already))
        if names
    ]
    summary = "; ".join(parts) or "nothing"
    if dry_run:
        click.echo(f"would import from {path} ({found.kind}) into {document.path}: {summary}")
    elif added or replaced:
        save(document, edited.data)
        click.echo(f"imported from {path} ({found.kind}) into {document.path}: {summary}")
        apply(document.path, reload)
    else:
        click.echo(f"nothing imported from {path} ({found.kind}): {summary}")
    if any(not only or name in only for name in left_out):
        raise SystemExit(EXIT_FAILED)
