# -*- test-case-name: tests.cli.test_hints -*-
"""
The daemon's hints in CLI words: a message that says C{GET /v1/servers lists them}
reads C{`mcpx servers` lists them} when a command prints it.

The daemon's errors name the routes that help (its callers are HTTP clients); a person at
the terminal wants the command to type instead.  L{COMMANDS} says which command does what
each op of L{mcpx.ops.routes} does, and L{in_cli_words} rewrites every route of a known op
found in a message, its path and query parameters carried over.  A route with no command
is left as it is.

Light on purpose (only C{re}, loaded when a message is rewritten): the plain
C{mcpx call} of L{mcpx.cli.quick} prints errors through it.
"""

from __future__ import annotations

from mcpx.ops import routes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from re import Match, Pattern

#: The command that does what an op does: path parameters in braces, as the route names
#: them; C{None} for an op no command stands for.
COMMANDS: Mapping[str, str] = {
    "list_servers": "mcpx servers",
    "list_tools": "mcpx tools",
    "describe_tool": "mcpx describe {server} {tool}",
    "call_tool": "mcpx call",
    "get_task": "mcpx tasks show {id}",
    "list_tasks": "mcpx tasks list",
    "cancel_task": "mcpx tasks cancel {id}",
    "exec": "mcpx exec",
    "list_artifacts": "mcpx artifacts list",
    "list_questions": "mcpx elicit",
    "get_question": "mcpx elicit {id}",
    "answer_question": "mcpx elicit {id}",
    "restart_server": "mcpx restart {server}",
    "auth_status": "mcpx auth status",
    "auth_begin": "mcpx auth login {name}",
    "auth_logout": "mcpx auth logout {name}",
    "reload": "mcpx reload",
    "health": "mcpx status",
    "events": "mcpx events",
}

#: Query parameters a command takes as options, by op: parameter → option.
OPTIONS: Mapping[str, Mapping[str, str]] = {
    "events": {"server": "--server", "kind": "--kind"},
    "list_questions": {"all": "--all"},
}

#: Advice in the API's words that has a command's words: the body field or query
#: parameter a caller of the API would set, as the option a command takes instead.
PHRASES: Mapping[str, str] = {
    '; or pass "task": true to collect the result later': (
        "; give it longer with --timeout, or run it as a task through the API "
        '("task": true in the body of /v1/call) to collect the result later'
    ),
    "needs exactly one server= to say whose it is": (
        "needs exactly one --server to say whose it is"
    ),
}

#: A route's parameter name → the one the command's template uses.
_RENAMED: Mapping[tuple[str, str], str] = {("restart_server", "name"): "server"}

_compiled: list[tuple[str, Pattern[str]]] = []


def _patterns() -> list[tuple[str, Pattern[str]]]:
    """One pattern per op with a command, longest route first (built once, when needed)."""
    if not _compiled:
        import re

        ops = sorted(
            (op for op in COMMANDS if op in routes.ROUTES),
            key=lambda op: -len(routes.ROUTES[op][1]),
        )
        for op in ops:
            method, template = routes.ROUTES[op]
            parts = re.split(r"\{(\w+)\}", template)
            pattern = re.escape(method) + " " + re.escape(parts[0])
            for index in range(1, len(parts), 2):
                pattern += rf"(?P<{parts[index]}>[^\s/?;,)]+)" + re.escape(parts[index + 1])
            # Not a prefix of a longer path; an optional query string after it.
            pattern += r"(?![\w/{])(?:\?(?P<query>[^\s;,)]*))?"
            _compiled.append((op, re.compile(pattern)))
    return _compiled


def _command(op: str, match: Match[str]) -> str:
    values = {
        _RENAMED.get((op, name), name): _placeholder(value)
        for name, value in match.groupdict().items()
        if name != "query" and value is not None
    }
    command = COMMANDS[op].format_map(values)
    query = match.group("query")
    if query:
        from urllib.parse import parse_qsl

        options = OPTIONS.get(op, {})
        for key, value in parse_qsl(query, keep_blank_values=True):
            option = options.get(key)
            if option is None:
                continue
            if value in ("true", ""):
                command += f" {option}"
            else:
                command += f" {option} {_placeholder(value)}"
    return f"`{command}`"


def _placeholder(value: str) -> str:
    """A route's C{{id}} or C{<run>} is the command's C{ID} or C{RUN}; a value as it is."""
    from urllib.parse import unquote

    if value[:1] in "{<" and value[-1:] in "}>":
        return value[1:-1].upper()
    return unquote(value)


def in_cli_words(message: str) -> str:
    """
    C{message} with each route of an op that has a command replaced by the command, and
    each of L{PHRASES} said as a command would.
    """
    for api, cli in PHRASES.items():
        if api in message:
            message = message.replace(api, cli)
    if "/v1/" not in message and "/health" not in message:
        return message
    for op, pattern in _patterns():

        def command(found: Match[str], op: str = op) -> str:
            return _command(op, found)

        message = pattern.sub(command, message)
    return message
