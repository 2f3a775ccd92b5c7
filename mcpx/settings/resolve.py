# -*- test-case-name: tests.settings.test_resolve -*-
"""
Settings resolved in layers, each value remembering where it came from.

From weakest to strongest: the built-in default, the config file, the
environment (C{MCPX_...}), a command-line flag.  The strongest layer that gives a
setting decides it, and L{Settings.source} says which one that was, so
C{mcpx settings} can answer "why is this the value?".
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import TypeVar

from attrs import frozen

from mcpx.settings.config import ConfigFile
from mcpx.settings.declarations import BY_FLAG, BY_NAME, ENV_PREFIX, SETTINGS, Setting
from mcpx.settings.errors import SettingsError, unknown_name
from mcpx.settings.paths import PATH_ENV
from mcpx.spec.policy import ConflictPolicy, PolicyError
from mcpx.spec.revision import Revision

_T = TypeVar("_T")


class SourceKind(enum.Enum):
    """The layers, weakest first."""

    DEFAULT = "default"
    FILE = "file"
    ENV = "env"
    FLAG = "flag"


@frozen
class Source:
    """
    Where a value came from.

    @ivar detail: the config file's path (or C{"default config"}), the
        environment variable's name, or the flag; empty for a built-in default.
    """

    kind: SourceKind
    detail: str = ""

    def describe(self) -> str:
        """A short phrase for a person: C{default}, C{env MCPX_MCP_SPEC}, ..."""
        if self.kind is SourceKind.DEFAULT:
            return "default"
        if self.kind is SourceKind.FILE:
            return self.detail
        return f"{self.kind.value} {self.detail}"

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "detail": self.detail}


DEFAULT_SOURCE = Source(SourceKind.DEFAULT)


@frozen
class Resolved:
    """One setting's value and where it came from."""

    setting: Setting
    value: object
    source: Source


@frozen(repr=False)
class Settings:
    """
    Every setting, resolved.

    C{settings["pool.callTimeout"]} and C{settings.value("pool.callTimeout")} give
    the value in its kind's Python type (seconds as a C{float} for a duration, a
    tuple for a list, a L{Revision} or C{None} for a revision).  The typed readers
    (L{duration}, L{integer}, ...) also check the setting is of that kind.
    """

    _resolved: Mapping[str, Resolved]
    _policy: ConflictPolicy

    def _get(self, name: str) -> Resolved:
        found = self._resolved.get(name)
        if found is None:
            raise SettingsError(unknown_name("setting", name, BY_NAME))
        return found

    def value(self, name: str) -> object:
        """
        The value of setting C{name}.

        @raise SettingsError: when no setting has that name.
        """
        return self._get(name).value

    __getitem__ = value

    def source(self, name: str) -> Source:
        """Where the value of setting C{name} came from."""
        return self._get(name).source

    def __iter__(self) -> Iterator[Resolved]:
        """Every setting in declaration order."""
        return iter(self._resolved.values())

    def policy(self) -> ConflictPolicy:
        """C{spec.precedence} completed, with C{spec.first} and C{spec.lenient} applied."""
        return self._policy

    def _typed(self, name: str, kind: type[_T]) -> _T:
        value = self.value(name)
        if not isinstance(value, kind):
            raise TypeError(f"setting {name!r} is a {BY_NAME[name].kind.value}")
        return value

    def duration(self, name: str) -> float:
        """A duration setting, in seconds."""
        return self._typed(name, float)

    def integer(self, name: str) -> int:
        return self._typed(name, int)

    def boolean(self, name: str) -> bool:
        return self._typed(name, bool)

    def string(self, name: str) -> str:
        """A string or choice setting."""
        return self._typed(name, str)

    def strings(self, name: str) -> tuple[str, ...]:
        """A string-list or endpoint-list setting."""
        return tuple(str(item) for item in self._typed(name, tuple))

    def with_file(self, config: ConfigFile) -> Settings:
        """
        These settings as they would resolve with C{config} in place of the file they
        were resolved with: what the environment or a flag decided stays; every other
        setting takes the new file's value, or its default when the file gives none.

        @raise SettingsError: when the result is not a valid policy.
        """
        resolved: dict[str, Resolved] = {}
        for name, current in self._resolved.items():
            if current.source.kind in (SourceKind.ENV, SourceKind.FLAG):
                resolved[name] = current
            elif name in config.settings:
                source = Source(SourceKind.FILE, config.origin)
                resolved[name] = Resolved(current.setting, config.settings[name], source)
            else:
                resolved[name] = Resolved(current.setting, current.setting.default, DEFAULT_SOURCE)
        return Settings(resolved, _policy(resolved))

    def taking(self, other: Settings, names: Iterator[str] | tuple[str, ...]) -> Settings:
        """These settings with the values (and sources) of C{names} taken from C{other}."""
        resolved = dict(self._resolved)
        for name in names:
            resolved[name] = other._get(name)
        return Settings(resolved, _policy(resolved))

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{r.setting.name}={r.setting.to_text(r.value)!r}" for r in self._resolved.values()
        )
        return f"Settings({shown})"


def _where(setting: Setting, source: Source, raw: str | None) -> str:
    """The prefix for an error about a value from C{source}."""
    if source.kind is SourceKind.ENV:
        return f"{setting.env}={raw}"
    if source.kind is SourceKind.FLAG:
        return f"{setting.flag}={raw}"
    if source.kind is SourceKind.FILE:
        return f"{source.detail}: setting {setting.name!r}"
    return f"default of {setting.name}"


def _flag_setting(key: str) -> Setting:
    setting = BY_FLAG.get(key) if key.startswith("--") else BY_NAME.get(key)
    if setting is None:
        raise SettingsError(unknown_name("setting", key, BY_NAME))
    return setting


def check_environ(environ: Mapping[str, str]) -> None:
    """
    Refuse an C{MCPX_} variable that names no setting: most likely a misspelling.

    @raise SettingsError: naming the variable, its likely intended name and the
        valid ones.
    """
    valid = [setting.env for setting in SETTINGS]
    for key in sorted(environ):
        if key.startswith(ENV_PREFIX) and key not in PATH_ENV and key not in valid:
            raise SettingsError(unknown_name("environment variable", key, [*valid, *PATH_ENV]))


def resolve(
    *,
    config: ConfigFile | None,
    environ: Mapping[str, str],
    flags: Mapping[str, str],
) -> Settings:
    """
    Layer the defaults, the config file, the environment and the flags.

    @param config: the config file, already read, or C{None} for none.
    @param environ: the environment; every C{MCPX_} variable in it must name a
        setting (or be C{MCPX_CONFIG}/C{MCPX_STATE_DIR}).
    @param flags: raw flag values, keyed by setting name (C{"pool.callTimeout"})
        or by the flag itself (C{"--pool-call-timeout"}).
    @raise SettingsError: for an unknown name or a value that does not parse,
        saying where it came from.
    """
    check_environ(environ)
    flag_values = {_flag_setting(key).name: raw for key, raw in flags.items()}
    resolved: dict[str, Resolved] = {}
    for setting in SETTINGS:
        value, source, raw = setting.default, DEFAULT_SOURCE, None
        if config is not None and setting.name in config.settings:
            value, source = config.settings[setting.name], Source(SourceKind.FILE, config.origin)
        if setting.env in environ:
            raw = environ[setting.env]
            source = Source(SourceKind.ENV, setting.env)
            value = setting.parse_text(raw, _where(setting, source, raw))
        if setting.name in flag_values:
            raw = flag_values[setting.name]
            source = Source(SourceKind.FLAG, setting.flag)
            value = setting.parse_text(raw, _where(setting, source, raw))
        resolved[setting.name] = Resolved(setting, value, source)
    return Settings(resolved, _policy(resolved))


def _policy(resolved: Mapping[str, Resolved]) -> ConflictPolicy:
    precedence = resolved["spec.precedence"]
    first = resolved["spec.first"].value
    assert isinstance(precedence.value, tuple)
    assert first is None or isinstance(first, Revision)
    lenient = resolved["spec.lenient"].value
    assert isinstance(lenient, tuple)
    try:
        return ConflictPolicy.build(precedence.value, lenient, first)
    except PolicyError as e:
        raw = precedence.setting.to_text(precedence.value)
        raise SettingsError(f"{_where(precedence.setting, precedence.source, raw)}: {e}") from None
