# -*- test-case-name: tests.settings.test_paths -*-
"""
Where mcpx looks for its config file and keeps its state.

    - config file: C{$MCPX_CONFIG}, else C{$XDG_CONFIG_HOME/mcpx/config.json}
      (C{XDG_CONFIG_HOME} defaults to C{~/.config});
    - state directory: C{$MCPX_STATE_DIR}, else C{$XDG_STATE_HOME/mcpx}
      (C{XDG_STATE_HOME} defaults to C{~/.local/state}).

Every function takes the environment as a mapping rather than reading
C{os.environ}, so tests can give each case its own.  None of them touches the
file system.
"""

from __future__ import annotations

import os.path

# pathlib is imported where a Path is made, and typing not at all: C{mcpx call} finds its
# socket through L{state_dir_name} alone, and those imports would cost more than its request.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

#: Variables under the C{MCPX_} prefix that locate files rather than name a
#: setting; the check for misspelt setting variables leaves them alone.
CONFIG_ENV = "MCPX_CONFIG"
STATE_DIR_ENV = "MCPX_STATE_DIR"
PATH_ENV: frozenset[str] = frozenset({CONFIG_ENV, STATE_DIR_ENV})


class ConfigLocation:
    """
    Where the config file is expected.

    A plain immutable class, not an attrs one or a C{NamedTuple}: C{mcpx call} finds the
    state directory through this module, and importing attrs, or building a named tuple
    through C{typing}, would take longer than its whole request.

    @ivar path: the file.
    @ivar explicit: whether C{$MCPX_CONFIG} named it; a file someone named must
        exist, while the default location may simply have nothing in it yet.
    """

    __slots__ = ("explicit", "path")

    path: Path
    explicit: bool

    def __init__(self, path: Path, explicit: bool) -> None:
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "explicit", explicit)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConfigLocation):
            return NotImplemented
        return (self.path, self.explicit) == (other.path, other.explicit)

    def __hash__(self) -> int:
        return hash((self.path, self.explicit))

    def __repr__(self) -> str:
        return f"ConfigLocation(path={self.path!r}, explicit={self.explicit!r})"


def _home_name(environ: Mapping[str, str]) -> str:
    return environ.get("HOME") or os.path.expanduser("~")


def home(environ: Mapping[str, str]) -> Path:
    """The user's home directory: C{$HOME}, else what the platform says."""
    from pathlib import Path

    return Path(_home_name(environ))


def _expand(value: str, environ: Mapping[str, str]) -> str:
    """A path with a leading C{~} taken as the home directory C{environ} names."""
    if value == "~" or value.startswith("~/"):
        return os.path.join(_home_name(environ), value[2:])
    return value


def _xdg(environ: Mapping[str, str], variable: str, fallback: tuple[str, ...]) -> str:
    # The XDG spec says a relative path in these variables is invalid and to be
    # ignored, which also keeps a stray "XDG_CONFIG_HOME=." from depending on cwd.
    value = environ.get(variable, "")
    if value and os.path.isabs(value):
        return value
    return os.path.join(_home_name(environ), *fallback)


def config_location(environ: Mapping[str, str]) -> ConfigLocation:
    """Where the config file is, and whether somebody named it explicitly."""
    from pathlib import Path

    named = environ.get(CONFIG_ENV, "")
    if named:
        return ConfigLocation(Path(_expand(named, environ)), explicit=True)
    return ConfigLocation(
        Path(_xdg(environ, "XDG_CONFIG_HOME", (".config",)), "mcpx", "config.json"),
        explicit=False,
    )


def state_dir_name(environ: Mapping[str, str]) -> str:
    """L{state_dir} as a string, without importing pathlib (for C{mcpx call})."""
    named = environ.get(STATE_DIR_ENV, "")
    if named:
        return _expand(named, environ)
    return os.path.join(_xdg(environ, "XDG_STATE_HOME", (".local", "state")), "mcpx")


def state_dir(environ: Mapping[str, str]) -> Path:
    """The directory for the daemon's socket, caches and other state."""
    from pathlib import Path

    return Path(state_dir_name(environ))
