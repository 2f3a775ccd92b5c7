# -*- test-case-name: tests.settings.test_edit -*-
"""
Editing the config file from the command line (C{mcpx add}, C{mcpx remove}, C{mcpx import}).

The file is the one the daemon reads (L{mcpx.settings.paths.config_location}).  An edit is
made on its decoded JSON, checked as the daemon checks a file it starts from or reloads
(L{check_document}: every server entry, every setting, the pass-through names), and only
then written, atomically: the new text goes to a temporary file in the same directory,
which takes the old file's mode and then replaces it (L{write_document}).  A reader (the
daemon reloading) sees the old file or the new one, never half of either.  A config file
that is a symbolic link is edited where the link points, so the link stays.

References to environment variables (C{${NAME}}) are checked for their form, but a variable
unset in the command's environment is not an error here: the daemon, which fills them in,
may well run with another environment (under systemd, for one).  L{check_document} names
them, so the command can say so.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from attrs import frozen

from mcpx.settings.config import SERVER_KEYS, decode, parse_config
from mcpx.settings.errors import SettingsError
from mcpx.settings.load import check_passthrough
from mcpx.settings.paths import config_location
from mcpx.settings.resolve import resolve
from mcpx.settings.servers import passthrough_twice

#: The mode of a config file mcpx creates: it may hold tokens.
NEW_FILE_MODE = 0o600


@frozen
class ConfigDocument:
    """
    The config file as read for an edit.

    @ivar path: the file (where a symbolic link points, for one).
    @ivar data: its decoded JSON object; empty when there is no file yet.
    @ivar exists: whether there was a file.
    """

    path: Path
    data: dict[str, object]
    exists: bool

    def server_names(self) -> list[str]:
        """Every server the file configures, under C{servers} or C{mcpServers}."""
        return [name for group in SERVER_KEYS for name in _group(self.data, group)]

    def group_of(self, name: str) -> str | None:
        """The key (C{servers} or C{mcpServers}) that holds server C{name}, or C{None}."""
        for group in SERVER_KEYS:
            if name in _group(self.data, group):
                return group
        return None


def _group(data: Mapping[str, object], group: str) -> dict[str, object]:
    entries = data.get(group, {})
    return entries if isinstance(entries, dict) else {}


def open_document(environ: Mapping[str, str]) -> ConfigDocument:
    """
    Read the config file the daemon would read in C{environ}, for an edit.

    A missing file is an empty document (the edit creates it), wherever it is expected.

    @raise SettingsError: the file cannot be read, is not JSON, or not a JSON object.
    """
    where = config_location(environ).path
    path = Path(os.path.realpath(where))
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ConfigDocument(path=path, data={}, exists=False)
    except (OSError, UnicodeDecodeError) as e:
        raise SettingsError(f"{path}: cannot read the config file: {e}") from None
    data = decode(text, str(path))
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: the config file must hold a JSON object")
    return ConfigDocument(path=path, data=data, exists=True)


def with_server(
    document: ConfigDocument, name: str, entry: Mapping[str, object]
) -> dict[str, object]:
    """
    The document's JSON with server C{name} set to C{entry}: in place of an entry of that
    name, else added to C{servers} (to C{mcpServers} in a file that has only that).
    """
    data = dict(document.data)
    group = document.group_of(name)
    if group is None:
        group = "mcpServers" if "mcpServers" in data and "servers" not in data else "servers"
    entries = dict(_group(data, group))
    entries[name] = dict(entry)
    data[group] = entries
    return data


def without_server(document: ConfigDocument, name: str) -> dict[str, object]:
    """The document's JSON without server C{name} (which it must have)."""
    data = dict(document.data)
    group = document.group_of(name)
    if group is None:
        raise KeyError(name)
    entries = dict(_group(data, group))
    del entries[name]
    data[group] = entries
    return data


class _Permissive(Mapping[str, str]):
    """
    An environment in which every variable is set: those the real one lacks read as a
    placeholder, and are remembered in L{unset}.
    """

    PLACEHOLDER = "unset"

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.unset: dict[str, None] = {}

    def __getitem__(self, name: str) -> str:
        if name in self.environ:
            return self.environ[name]
        self.unset[name] = None
        return self.PLACEHOLDER

    def __iter__(self) -> Iterator[str]:
        return iter(self.environ)

    def __len__(self) -> int:
        return len(self.environ)


def check_document(data: Mapping[str, object], path: Path, environ: Mapping[str, str]) -> list[str]:
    """
    Check C{data} as the daemon checks the config file it starts from or reloads: the
    settings and every server entry, the servers C{mcp.passthrough} names, and that no
    server is passed through twice.

    @param environ: what C{${NAME}} references are checked against: one to a variable it
        does not set is not refused.  Its C{MCPX_} variables are not the daemon's, and are
        left out.
    @return: the variables referenced that C{environ} does not set, by name.
    @raise SettingsError: saying what is wrong, as the daemon would.
    """
    permissive = _Permissive(environ)
    origin = str(path)
    config = parse_config(dict(data), origin=origin, path=origin, environ=permissive)
    # The file's settings alone: the MCPX_ variables of this command's environment are
    # not the daemon's (MCPX_DAEMON, for one, is the command's own).
    settings = resolve(
        config=config,
        environ={k: v for k, v in environ.items() if not k.startswith("MCPX_")},
        flags={},
    )
    check_passthrough(settings, config.servers)
    twice = passthrough_twice(config.servers, settings.strings("mcp.passthrough"))
    if twice is not None:
        raise SettingsError(twice)
    return list(permissive.unset)


def write_document(path: Path, data: Mapping[str, object]) -> None:
    """
    Write C{data} to C{path} atomically, as indented JSON, keeping the file's mode
    (L{NEW_FILE_MODE} for a new file; missing directories are made).

    @raise OSError: the directory cannot be written.
    """
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = NEW_FILE_MODE
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix="~")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
