# -*- test-case-name: tests.scripts.test_runner -*-
"""
A server's tools as a model reads them best: Python stubs, one C{async def} a tool.

The signature comes from the tool's input schema (keyword-only parameters, required
ones first, JSON types as Python's), the docstring from its description.  A program
asks for one server's stubs at a time (C{await stubs("demo")}), so a model reads only
the servers it needs rather than every tool's JSON Schema.
"""

from __future__ import annotations

import json
import keyword
from collections.abc import Iterable, Mapping
from typing import Any

_PYTHON_TYPES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "list",
    "object": "dict",
    "null": "None",
}

#: The longest description kept in a stub's docstring.
MAX_DOC = 600


def _type_of(schema: Any) -> str:
    if not isinstance(schema, Mapping):
        return "Any"
    kind = schema.get("type")
    if isinstance(kind, str):
        return _PYTHON_TYPES.get(kind, "Any")
    if isinstance(kind, list):
        names = [_PYTHON_TYPES.get(k, "Any") for k in kind if isinstance(k, str)]
        return " | ".join(dict.fromkeys(names)) or "Any"
    if "enum" in schema and isinstance(schema["enum"], list):
        return "Literal[" + ", ".join(json.dumps(v) for v in schema["enum"][:12]) + "]"
    return "Any"


def _doc(text: str, indent: str) -> str:
    text = " ".join(text.split())
    if len(text) > MAX_DOC:
        text = text[: MAX_DOC - 1] + "…"
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return f'{indent}"""{text}"""\n'


def tool_stub(server: str, tool: Mapping[str, Any]) -> str:
    """One tool as an C{async def}, callable as C{await <server>.<name>(...)}."""
    name = str(tool.get("name", ""))
    schema = tool.get("inputSchema")
    properties: Mapping[str, Any] = {}
    required: Iterable[str] = ()
    if isinstance(schema, Mapping):
        found = schema.get("properties")
        properties = found if isinstance(found, Mapping) else {}
        wanted = schema.get("required")
        required = [str(n) for n in wanted] if isinstance(wanted, list) else []
    needed = [n for n in properties if n in required]
    optional = [n for n in properties if n not in required]
    params = []
    usable = all(n.isidentifier() and not keyword.iskeyword(n) for n in properties)
    for n in needed:
        params.append(f"{n}: {_type_of(properties[n])}")
    for n in optional:
        params.append(f"{n}: {_type_of(properties[n])} = ...")
    callable_as = name.isidentifier() and not keyword.iskeyword(name) and usable
    if server.isidentifier() and callable_as:
        head = (
            f"async def {name}(*, {', '.join(params)}) -> Any:"
            if params
            else (f"async def {name}() -> Any:")
        )
    else:
        keys = ", ".join(repr(n) + ": ..." for n in properties)
        head = (
            f"# await call({server!r}, {name!r}, {{{keys}}})\nasync def _(arguments: dict) -> Any:"
        )
    lines = [head + "\n"]
    description = tool.get("description")
    details = []
    if isinstance(description, str) and description.strip():
        details.append(description.strip())
    for n in properties:
        prop = properties[n]
        if isinstance(prop, Mapping) and isinstance(prop.get("description"), str):
            details.append(f"{n}: {prop['description']}")
    if details:
        lines.append(_doc(" ".join(details), "    "))
    lines.append("    ...\n")
    return "".join(lines)


def server_stubs(server: str, tools: Iterable[Mapping[str, Any]]) -> str:
    """Every tool of C{server}, as a stub module a program can read."""
    body = [
        f"# server {server}: call a tool as `await {server}.<tool>(name=value, ...)`\n"
        if server.isidentifier()
        else f"# server {server!r}: call a tool as `await call({server!r}, tool, {{...}})`\n"
    ]
    for tool in tools:
        if isinstance(tool, Mapping) and isinstance(tool.get("name"), str):
            body.append("\n" + tool_stub(server, tool))
    return "".join(body)
