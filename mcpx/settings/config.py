# -*- test-case-name: tests.settings.test_config -*-
"""
The JSON config file: servers, and settings given by file.

    {
      "servers": {"demo": {"command": "python3", "args": ["-m", "mcpx.demo"]}},
      "pool": {"callTimeout": "30s"},
      "daemon.logLevel": "debug"
    }

C{servers} maps a name to a server (L{mcpx.settings.servers}).  C{mcpServers} is
read the same way, so a host's own config file can be pointed at as it is; the
two are merged, and a name in both is refused.  A setting is given either nested
under its section or by its dotted name at the top level, not both.  Any other key
is refused with the list of valid ones; C{$schema} is allowed for editors.

A file with C{mcpServers} or C{inputs} is taken for a host's own (Claude Desktop's,
Cursor's, VS Code's): there a key mcpx does not know (C{globalShortcut}, VS Code's
C{inputs}) is the host's business, so it is ignored, and said so in L{ConfigFile.notes}
(the daemon logs them) rather than refused.  The hosts' variables in its entries
(C{${workspaceFolder}}, C{${input:ID}}) are refused by name, never looked up in the
environment (L{mcpx.settings.server_entry}); C{mcpx import} rewrites such a file.

Reading the file is synchronous.  It happens once, when the command line or the
twistd plugin starts, before the reactor runs anything; nothing here is called on
the reactor's hot path, and nothing reads a file when this module is imported.

When there is no file at the default location, the configuration shipped with
mcpx (C{default-config.json} in this package) is used instead.  Its one server,
C{demo}, runs C{python -m mcpx.demo}; since the interpreter's path cannot be known
when that file is written, a C{command} of exactly C{"python"} there is replaced by
the running interpreter (C{sys.executable}).  That substitution is made for the
shipped file only: in a user's file, C{"python"} means whatever C{python} is on
the C{PATH}.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from attrs import frozen

from mcpx.settings.declarations import BY_NAME, SECTIONS
from mcpx.settings.errors import SettingsError, unknown_name
from mcpx.settings.paths import config_location
from mcpx.settings.server_entry import ENV_PASSTHROUGH, env_passthrough_default, parse_server
from mcpx.settings.server_policy import ServerPolicy, check_defaults, parse_policy
from mcpx.settings.servers import Server, ServersConfig

#: How the configuration shipped with mcpx is named wherever a source is shown.
DEFAULT_CONFIG_ORIGIN = "default config"

SERVER_KEYS = ("servers", "mcpServers")
_IGNORED_KEYS = ("$schema",)
#: Keys that make a file a host's own (L{parse_config} then ignores the keys it does not know).
_HOST_KEYS = ("mcpServers", "inputs")
#: The policy keys every server entry takes unless it gives its own
#: (L{mcpx.settings.server_policy}), and the C{envPassthrough} of every stdio server
#: that gives none.
_DEFAULTS_KEY = "serverDefaults"


@frozen
class ConfigFile:
    """
    A config file, read and checked.

    @ivar origin: its path, or C{"default config"} for the shipped configuration.
    @ivar path: its path, or C{None} for the shipped configuration.
    @ivar settings: the settings it gives, by dotted name, already parsed.
    @ivar notes: what was ignored in a host's file, one line each, its origin first.
    """

    origin: str
    path: str | None
    settings: Mapping[str, object]
    servers: ServersConfig
    notes: tuple[str, ...] = ()


def _refuse_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # json.loads would keep the last of two equal keys without a word, and the
    # first one is usually the one somebody is editing.
    found: dict[str, object] = {}
    for key, value in pairs:
        if key in found:
            raise _DuplicateKey(key)
        found[key] = value
    return found


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def parse_config(
    data: object,
    *,
    origin: str,
    path: str | None,
    environ: Mapping[str, str],
    interpreter: str | None = None,
) -> ConfigFile:
    """
    Check a decoded config file and read its settings and servers.

    @param origin: named at the front of every error.
    @param environ: what C{${NAME}} references in server entries are filled from.
    @param interpreter: replaces a C{"python"} command (the shipped file only).
    @raise SettingsError: for anything the file gets wrong.
    """
    if not isinstance(data, dict):
        raise SettingsError(f"{origin}: the config file must hold a JSON object")
    settings: dict[str, object] = {}
    notes: list[str] = []
    host_file = any(key in data for key in _HOST_KEYS)

    def take(name: str, value: object) -> None:
        setting = BY_NAME.get(name)
        if setting is None:
            raise SettingsError(f"{origin}: {unknown_name('setting', name, BY_NAME)}")
        if name in settings:
            raise SettingsError(
                f"{origin}: setting {name!r} is given both nested and dotted; keep one"
            )
        settings[name] = setting.parse_json(value, f"{origin}: setting {name!r}")

    for key, value in data.items():
        if key in SERVER_KEYS or key in _IGNORED_KEYS or key == _DEFAULTS_KEY:
            continue
        if key in SECTIONS:
            if not isinstance(value, dict):
                raise SettingsError(
                    f"{origin}: {key!r} must be an object of settings, e.g. "
                    f'{{"{key}": {{...}}}}, or give them dotted at the top level'
                )
            for inner, inner_value in value.items():
                take(f"{key}.{inner}", inner_value)
        elif key in BY_NAME:
            take(key, value)
        elif host_file:
            notes.append(
                f"{origin}: ignored {key!r}, which is the host's (mcpx reads this file's "
                "servers and its own settings)"
            )
        else:
            valid = [*SERVER_KEYS, _DEFAULTS_KEY, *SECTIONS, *BY_NAME]
            raise SettingsError(f"{origin}: {unknown_name('key', key, valid)}")

    servers: dict[str, Server] = {}
    policies: dict[str, ServerPolicy] = {}
    given_defaults = data.get(_DEFAULTS_KEY, {})
    env_passthrough = env_passthrough_default(given_defaults, origin=origin)
    defaults = check_defaults(_policy_of(given_defaults), origin=origin)
    for group in SERVER_KEYS:
        entries = data.get(group, {})
        if not isinstance(entries, dict):
            raise SettingsError(f"{origin}: {group!r} must be an object mapping names to servers")
        for name, entry in entries.items():
            if name in servers:
                raise SettingsError(
                    f"{origin}: server {name!r} is named in both 'servers' and 'mcpServers'; "
                    "keep one"
                )
            servers[name] = parse_server(
                name,
                entry,
                origin=origin,
                environ=environ,
                interpreter=interpreter,
                env_passthrough=env_passthrough,
            )
            policies[name] = parse_policy(entry, defaults, where=f"{origin}: server {name!r}")
    return ConfigFile(
        origin=origin,
        path=path,
        settings=settings,
        servers=ServersConfig(
            servers=servers, origin=origin, path=path, policies=policies, notes=tuple(notes)
        ),
        notes=tuple(notes),
    )


def _policy_of(defaults: object) -> object:
    """C{serverDefaults} without its C{envPassthrough}, which is no policy."""
    if not isinstance(defaults, dict):
        return defaults
    return {key: value for key, value in defaults.items() if key != ENV_PASSTHROUGH}


def decode(text: str, origin: str) -> object:
    """
    Decode a config file's JSON, refusing a key given twice in one object.

    @raise SettingsError: naming the line and column of a syntax error.
    """
    try:
        return json.loads(text, object_pairs_hook=_refuse_duplicates)
    except json.JSONDecodeError as e:
        raise SettingsError(
            f"{origin}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    except _DuplicateKey as e:
        raise SettingsError(
            f"{origin}: key {e.key!r} appears twice in the same object; keep one"
        ) from None


def read_config(path: Path, environ: Mapping[str, str]) -> ConfigFile:
    """
    Read and check the config file at C{path}.

    @raise FileNotFoundError: when there is no such file.
    @raise SettingsError: when it cannot be read or is not a valid config.
    """
    origin = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as e:
        raise SettingsError(f"{origin}: cannot read the config file: {e}") from None
    return parse_config(decode(text, origin), origin=origin, path=origin, environ=environ)


def embedded_config(environ: Mapping[str, str]) -> ConfigFile:
    """The configuration shipped with mcpx, with C{"python"} as this interpreter."""
    text = resources.files("mcpx.settings").joinpath("default-config.json").read_text("utf-8")
    return parse_config(
        decode(text, DEFAULT_CONFIG_ORIGIN),
        origin=DEFAULT_CONFIG_ORIGIN,
        path=None,
        environ=environ,
        interpreter=sys.executable,
    )


def load_config(environ: Mapping[str, str]) -> ConfigFile:
    """
    Find and read the config file, falling back to the shipped configuration.

    A missing file at the default location means "nothing configured yet"; a
    missing file that C{$MCPX_CONFIG} names is a mistake and is refused.

    @raise SettingsError: for a missing named file or an invalid one.
    """
    location = config_location(environ)
    try:
        return read_config(location.path, environ)
    except FileNotFoundError:
        if location.explicit:
            raise SettingsError(
                f"MCPX_CONFIG={location.path}: no such file; create it or unset MCPX_CONFIG "
                "to use the default location"
            ) from None
    return embedded_config(environ)


def reread_config(path: str | None, environ: Mapping[str, str]) -> ConfigFile:
    """
    Read again the config file a running daemon started with (for a reload).

    A daemon that started from a file reads that file and nothing else: when it is gone
    or unreadable the reload is refused, and the shipped configuration never takes its
    place.  Only a daemon started without a file looks again as it did at start-up, so a
    file created since is found.

    @param path: the file the daemon started with, or C{None} for the shipped one.
    @raise SettingsError: when the file is missing, unreadable or invalid.
    """
    if path is None:
        return load_config(environ)
    try:
        return read_config(Path(path), environ)
    except FileNotFoundError:
        raise SettingsError(
            f"{path}: no such file (the daemon was started with it); "
            "the running configuration is kept"
        ) from None
