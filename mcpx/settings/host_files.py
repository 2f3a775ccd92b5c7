# -*- test-case-name: tests.settings.test_host_files -*-
"""
The MCP server entries of the hosts' own config files, as mcpx entries (C{mcpx import}).

The files read:

  - Claude Desktop's C{claude_desktop_config.json}: C{{"mcpServers": {...}}} beside the
    app's own keys (C{globalShortcut}, C{preferences}, ...);
  - Claude Code's C{~/.claude.json}: C{mcpServers} at the top (the user's servers) and in
    each of C{projects.<directory>}; its project files C{.mcp.json} are C{{"mcpServers"}};
  - Cursor's C{.cursor/mcp.json} (and C{~/.cursor/mcp.json}): C{{"mcpServers": {...}}};
  - VS Code's C{.vscode/mcp.json}: C{{"servers": {...}, "inputs": [...]}}, each entry with a
    C{type} of C{stdio}, C{http} or C{sse}.

The keys of an entry mcpx has too (C{command}, C{args}, C{env}, C{cwd}, C{url},
C{headers}) are kept; the others are left out with a note.  The hosts' variables are not
environment variables, and are never read as such:

  - C{${env:NAME}} (Cursor, VS Code) is the environment variable C{NAME}: it becomes mcpx's
    C{${NAME}}; Claude Code's C{${NAME:-default}} becomes C{${NAME}}, with a note that the
    default is lost;
  - C{${userHome}} is the home directory; C{${workspaceFolder}} (and
    C{${workspaceFolderBasename}}) the folder that holds C{.cursor} or C{.vscode}, or the
    project's directory in C{~/.claude.json}; C{${pathSeparator}} and C{${/}} are C{/};
    each is filled in, with a note;
  - C{${input:ID}} is a value VS Code asks its user for; mcpx cannot ask, so it becomes the
    environment variable C{${ID}} (upper-cased, other characters as C{_}), with a note that
    says what VS Code would have asked;
  - any other (C{${command:...}}, C{${config:...}}, a workspace no file tells) cannot be
    filled in: the entry is left out, saying why.

Nothing here reads a file; L{host_servers} takes the decoded JSON.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import PurePosixPath

from attrs import define, field

from mcpx.settings.server_entry import (
    ENV_NAME_PATTERN,
    REMOTE_FIELDS,
    SERVER_NAME_PATTERN,
    STDIO_FIELDS,
)

#: An entry's keys mcpx keeps as they are.
KEPT_FIELDS = ("command", "args", "env", "cwd", "url", "headers")
#: The top-level keys that hold servers, in any of the files.
HOST_SERVER_KEYS = ("mcpServers", "servers")

_VARIABLE = re.compile(r"\$\{([^}]*)\}")
#: The host variables that stand for a workspace folder (Cursor, VS Code).
_WORKSPACE = ("workspaceFolder", "workspaceRoot")


@define
class HostServers:
    """
    What a host's file configures, as mcpx entries.

    @ivar kind: which host's file it looks like.
    @ivar entries: mcpx's entry for each server, by name.
    @ivar notes: what was changed or left out, one line each, naming the server.
    @ivar skipped: why each server left out was, by its name in the file.
    """

    kind: str
    entries: dict[str, dict[str, object]] = field(factory=dict)
    notes: list[str] = field(factory=list)
    skipped: dict[str, str] = field(factory=dict)


class _Unusable(Exception):
    """An entry that cannot be imported; the message says why."""


def host_kind(data: Mapping[str, object], path: PurePosixPath) -> str:
    """Which host's file C{data} (read from C{path}) looks like."""
    parent = path.parent.name
    if isinstance(data.get("projects"), dict):
        return "Claude Code"
    if parent == ".vscode" or "inputs" in data or ("servers" in data and "mcpServers" not in data):
        return "VS Code"
    if parent == ".cursor":
        return "Cursor"
    if path.name == ".mcp.json":
        return "Claude Code"
    return "Claude Desktop"


def workspace_of(path: PurePosixPath, home: PurePosixPath) -> PurePosixPath | None:
    """
    The workspace folder of a file in a C{.cursor} or C{.vscode} directory: the directory
    that holds that one, unless it is the home directory (C{~/.cursor/mcp.json} is
    Cursor's file for every workspace).
    """
    if path.parent.name in (".cursor", ".vscode") and path.parent.parent != home:
        return path.parent.parent
    return None


def env_name_for(identifier: str) -> str:
    """The environment variable a VS Code input becomes: C{github-token} is C{GITHUB_TOKEN}."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", identifier).upper()
    return name if ENV_NAME_PATTERN.fullmatch(name) else f"INPUT_{name}"


def _inputs(data: Mapping[str, object]) -> dict[str, str]:
    """VS Code's inputs: what each asks, by id."""
    found: dict[str, str] = {}
    inputs = data.get("inputs")
    for item in inputs if isinstance(inputs, list) else ():
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            found[item["id"]] = str(item.get("description") or item["id"])
    return found


class _EntryReader:
    """Turns one host entry into an mcpx entry, collecting notes."""

    def __init__(
        self,
        name: str,
        home: PurePosixPath,
        workspace: PurePosixPath | None,
        inputs: Mapping[str, str],
    ) -> None:
        self.name = name
        self.home = home
        self.workspace = workspace
        self.inputs = inputs
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(f"server {self.name!r}: {text}")

    def read(self, entry: object) -> dict[str, object]:
        if not isinstance(entry, dict):
            raise _Unusable("not a JSON object")
        if entry.get("disabled") is True:
            raise _Unusable("disabled in the host's file")
        if "command" not in entry and "url" not in entry:
            raise _Unusable('it has neither "command" nor "url"')
        ignored = [key for key in entry if key not in KEPT_FIELDS and key != "type"]
        # mcpx's own fields (its policy, scope, warm, ...) are not taken from a host's file,
        # whose meaning for them, if any, is the host's: said apart from those it lacks.
        own = [key for key in ignored if key in STDIO_FIELDS or key in REMOTE_FIELDS]
        unknown = [key for key in ignored if key not in own]
        if own:
            self.note(
                f"left out {', '.join(map(repr, own))}: mcpx has such fields, but does not take "
                "them from a host's file; set them in mcpx's own file if you want them "
                "(docs/configuration.md, docs/policy.md)"
            )
        if unknown:
            self.note(f"left out {', '.join(map(repr, unknown))} (mcpx has no such field)")
        kept: dict[str, object] = {}
        for key in KEPT_FIELDS:
            if key in entry:
                kept[key] = self.value(key, entry[key])
        return kept

    def value(self, key: str, value: object) -> object:
        if isinstance(value, str):
            return self.text(key, value)
        if isinstance(value, list):
            return [self.value(f"{key}[{i}]", item) for i, item in enumerate(value)]
        if isinstance(value, dict):
            return {k: self.value(f"{key}.{k}", v) for k, v in value.items()}
        return value

    def text(self, where: str, text: str) -> str:
        return _VARIABLE.sub(lambda match: self.variable(where, match.group(1)), text)

    def variable(self, where: str, inner: str) -> str:
        if ENV_NAME_PATTERN.fullmatch(inner):
            if inner in _WORKSPACE or inner in ("userHome", "workspaceFolderBasename"):
                return self.host_value(where, inner)
            if inner == "pathSeparator":
                return "/"
            return "${" + inner + "}"
        if inner == "/":
            return "/"
        scheme, colon, rest = inner.partition(":")
        if colon and scheme == "env" and ENV_NAME_PATTERN.fullmatch(rest):
            return "${" + rest + "}"
        if colon and ENV_NAME_PATTERN.fullmatch(scheme) and rest.startswith("-"):
            self.note(
                f"{where}: ${{{inner}}} has a default, which mcpx does not take: it reads "
                f"${{{scheme}}}, so set {scheme} in the daemon's environment"
            )
            return "${" + scheme + "}"
        if colon and scheme == "input" and rest:
            variable = env_name_for(rest)
            asked = self.inputs.get(rest, rest)
            self.note(
                f"{where}: ${{input:{rest}}} is a value VS Code asks for ({asked!r}); mcpx "
                f"cannot ask, so it reads the environment variable {variable}: set it in the "
                "daemon's environment"
            )
            return "${" + variable + "}"
        raise _Unusable(
            f"{where}: ${{{inner}}} is a variable of the host, which mcpx cannot fill in; "
            "write the value in its place"
        )

    def host_value(self, where: str, name: str) -> str:
        if name == "userHome":
            value = str(self.home)
        elif self.workspace is None:
            raise _Unusable(
                f"{where}: ${{{name}}} is the host's workspace folder, which this file does "
                "not tell; give it with --workspace DIR"
            )
        else:
            value = self.workspace.name if name.endswith("Basename") else str(self.workspace)
        self.note(f"{where}: ${{{name}}} filled in as {value}")
        return value


def _mcpx_name(name: str) -> str:
    """A name mcpx accepts for a server named C{name} in a host's file."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name.strip()).strip("-._")
    return cleaned or "server"


def host_servers(
    data: object,
    path: PurePosixPath,
    *,
    home: PurePosixPath,
    workspace: PurePosixPath | None = None,
) -> HostServers:
    """
    The servers of a host's config file, as mcpx entries, with notes on what changed.

    @param data: the file's decoded JSON.
    @param path: where it was read from (which host's it is, and its workspace).
    @param home: what C{${userHome}} is.
    @param workspace: what C{${workspaceFolder}} is, when not the folder that holds the
        file's C{.cursor} or C{.vscode} directory.
    @raise ValueError: C{data} is not a JSON object or holds no servers at all.
    """
    if not isinstance(data, dict):
        raise ValueError("the file must hold a JSON object")
    found = HostServers(kind=host_kind(data, path))
    groups: list[tuple[str, object, PurePosixPath | None]] = []
    default_workspace = workspace or workspace_of(path, home)
    for key in HOST_SERVER_KEYS:
        if key in data:
            groups.append((key, data[key], default_workspace))
    projects = data.get("projects")
    if isinstance(projects, dict):
        for directory, project in projects.items():
            if isinstance(project, dict) and project.get("mcpServers"):
                groups.append(
                    (
                        f"projects[{directory!r}].mcpServers",
                        project["mcpServers"],
                        workspace or PurePosixPath(directory),
                    )
                )
    if not groups:
        raise ValueError(
            "it holds no MCP servers: no 'mcpServers' or 'servers', nor projects that have some"
        )
    ignored = [key for key in data if key not in (*HOST_SERVER_KEYS, "inputs", "projects")]
    if ignored:
        shown = ", ".join(map(repr, ignored[:8]))
        more = f" and {len(ignored) - 8} more" if len(ignored) > 8 else ""
        found.notes.append(f"ignored {shown}{more}: not about MCP servers")
    inputs = _inputs(data)
    for where, entries, folder in groups:
        if not isinstance(entries, dict):
            found.notes.append(f"ignored {where}: not an object of servers")
            continue
        for given, entry in entries.items():
            name = _mcpx_name(given) if SERVER_NAME_PATTERN.fullmatch(given) is None else given
            reader = _EntryReader(name, home, folder, inputs)
            try:
                converted = reader.read(entry)
            except _Unusable as e:
                found.skipped[given] = str(e)
                continue
            if name in found.entries:
                if found.entries[name] != converted:
                    found.skipped[f"{given} of {where}"] = (
                        f"another {name!r} is imported already; this one differs"
                    )
                continue
            if name != given:
                found.notes.append(f"server {given!r} is imported as {name!r}, a name mcpx takes")
            found.notes.extend(reader.notes)
            found.entries[name] = converted
    return found
