# -*- test-case-name: tests.cli.test_arguments -*-
"""
A tool's arguments as people type them after C{mcpx call SERVER TOOL}.

Three spellings:

  - one JSON object: C{mcpx call demo add '{"a": 2, "b": 3}'};
  - C{-}: the JSON object is read from standard input;
  - C{key=value} pairs: C{mcpx call demo add a=2 b=3}.  Each value is read as JSON when it
    is valid JSON, and as a plain string otherwise: C{n=3} is the number 3, C{on=true} a
    boolean, C{tags=["x","y"]} a list, C{s=hello} the string C{"hello"}.  To pass text that
    happens to be valid JSON as a string, quote it as JSON: C{s='"3"'}.
"""

from __future__ import annotations

from mcpx.cli import fastjson

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


class ArgumentError(ValueError):
    """Arguments that cannot be read; the message says how to write them."""


def parse_value(text: str) -> Any:
    """C{text} as JSON when it is valid JSON, else the text itself."""
    value = fastjson.try_loads(text)
    return text if value is fastjson.NOT_JSON else value


def _json_object(text: str, where: str) -> dict[str, Any]:
    try:
        value = fastjson.loads(text)
    except ValueError as e:
        raise ArgumentError(f"{where} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ArgumentError(f'{where} must be a JSON object, like \'{{"key": "value"}}\'')
    return value


def parse_arguments(words: Sequence[str], stdin_text: str | None = None) -> dict[str, Any]:
    """
    The arguments object that C{words} spell.

    @param stdin_text: standard input, read by the caller only when C{words} is C{["-"]}.
    @raise ArgumentError: invalid JSON, a word without C{=}, or a key given twice.
    """
    if len(words) == 1 and words[0] == "-":
        return _json_object(stdin_text or "", "standard input")
    if len(words) == 1 and words[0].lstrip().startswith("{"):
        return _json_object(words[0], "the arguments")
    arguments: dict[str, Any] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise ArgumentError(
                f"cannot read argument {word!r}: write key=value pairs (values are JSON when "
                "they parse as JSON, strings otherwise), or one JSON object"
            )
        if key in arguments:
            raise ArgumentError(f"argument {key!r} is given twice")
        arguments[key] = parse_value(value)
    return arguments
