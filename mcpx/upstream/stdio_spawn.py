# -*- test-case-name: tests.upstream.test_stdio -*-
"""
What a stdio server is started with: the environment (L{child_environment}: what a
well-kept host gives a program, never the rest of the daemon's), the directory (its
C{cwd}, else the user's home), and the absolute path of its command, looked up as
C{execvp} would; and the L{SpawnFailed} that says why it could not be.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

from mcpx.settings.declarations import ENV_PREFIX
from mcpx.settings.servers import StdioServer
from mcpx.upstream.channel import ChannelClosed


class SpawnFailed(ChannelClosed):
    """
    The server's process could not be started: the command is missing or not
    executable, its directory does not exist, or the spawn itself failed.
    """


def spawn_failed(label: str, why: str) -> SpawnFailed:
    """The error for a server (named by C{label}) that could not be started."""
    return SpawnFailed(f"{label} could not be started: {why}")


#: The daemon's variables every server is given: the MCP SDKs' own list (the Python
#: SDK's C{DEFAULT_INHERITED_ENV_VARS}, the TypeScript SDK's C{getDefaultEnvironment},
#: after sudo's), and where the user keeps temporary files (C{TMPDIR}: on macOS a
#: private directory per user) and per-session sockets (C{XDG_RUNTIME_DIR}), without
#: which a program falls back to the shared C{/tmp}.
INHERITED_VARIABLES: Final = frozenset(
    {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "TMPDIR", "XDG_RUNTIME_DIR"}
)

#: The locale's variables (C{LANG}, C{LANGUAGE}, C{LC_ALL}, C{LC_CTYPE}, ...), which
#: every server is given too: how it decodes file names and formats text.
_LOCALE_VARIABLES: Final = ("LANG", "LANGUAGE", "LC_")


def inherited(name: str) -> bool:
    """Whether every server is given the daemon's variable C{name}."""
    return name in INHERITED_VARIABLES or name.startswith(_LOCALE_VARIABLES)


def child_environment(server: StdioServer, environ: Mapping[str, str]) -> dict[str, str]:
    """
    The server's environment: of the daemon's variables (C{environ}), those every
    server is given (L{inherited}) and those its C{envPassthrough} names; then its own
    C{env} (and C{env} credential) over them.

    Nothing else of the daemon's comes through: not the variables behind another
    server's C{${NAME}} references or a remote server's token, not a database password,
    and never mcpx's own (C{MCPX_*}, the state directory among them).  As the SDKs do,
    a value that is a shell function (C{() {...}}) is not passed by default.
    """
    passed = set(server.env_passthrough)
    env = {
        name: value
        for name, value in environ.items()
        if not name.startswith(ENV_PREFIX)
        and (name in passed or (inherited(name) and not value.startswith("()")))
    }
    env.update(server.child_env())
    return env


def child_directory(label: str, server: StdioServer, env: Mapping[str, str]) -> str:
    """
    The directory the server starts in: its configured C{cwd} (C{~} expanded), or
    the user's home, so that nothing in the daemon's own directory (a folder
    named like a Python package, say) changes what the server runs.
    """
    configured = server.cwd
    if configured is None:
        home = env.get("HOME") or os.path.expanduser("~")
        return home if os.path.isdir(home) else os.sep
    cwd = os.path.abspath(os.path.expanduser(configured))
    if not os.path.isdir(cwd):
        raise spawn_failed(label, f"its directory {configured!r} does not exist")
    return cwd


def child_executable(label: str, server: StdioServer, env: Mapping[str, str], base: str) -> str:
    """
    The absolute path of the command, looked up as C{execvp} would in the child.

    The child starts in C{base}, so a relative command (or a relative C{PATH}
    entry) is taken from there.
    """
    command = server.command
    if os.sep in command:
        path = os.path.abspath(os.path.join(base, command))
        if not os.path.exists(path):
            raise spawn_failed(label, f"command {command!r} does not exist")
        if not _runnable(path):
            raise spawn_failed(label, f"command {command!r} is not an executable file")
        return path
    search = env.get("PATH", os.defpath)
    blocked = None
    for directory in search.split(os.pathsep):
        path = os.path.abspath(os.path.join(base, directory or os.curdir, command))
        if _runnable(path):
            return path
        if blocked is None and os.path.exists(path):
            blocked = path
    if blocked is not None:
        raise spawn_failed(label, f"{blocked!r} was found on PATH but is not executable")
    # A PATH set in the server's config is one of its env values, which may be secret.
    where = "" if "PATH" in server.child_env() else f" ({search})"
    raise spawn_failed(label, f"command {command!r} was not found on PATH{where}")


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)
