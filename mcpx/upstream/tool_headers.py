# -*- test-case-name: tests.upstream.test_session -*-
"""
The C{Mcp-Param-*} headers a 2026-07-28 tool asks for: the C{x-mcp-header}
annotations of its input schema, checked as the revision says (a tool whose
annotations break the rules is left out of the client's view).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


class InvalidParamHeader(ValueError):
    """A tool's C{x-mcp-header} annotations break the 2026-07-28 rules for them."""


#: RFC 9110 C{tchar}: what an C{x-mcp-header} name may be made of (C{1*tchar}).
_HEADER_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: The property types an C{x-mcp-header} may annotate (C{number} is excluded).
_HEADER_TYPES = frozenset({"string", "integer", "boolean"})
#: Keywords whose value is a subschema, or a list or map of them: an annotation under
#: one of these is not reachable through C{properties} alone, and so invalid.
_SUBSCHEMA_KEYWORDS = frozenset(
    {
        "items",
        "prefixItems",
        "contains",
        "additionalItems",
        "unevaluatedItems",
        "additionalProperties",
        "unevaluatedProperties",
        "patternProperties",
        "propertyNames",
        "dependentSchemas",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "$defs",
        "definitions",
    }
)


def param_header_paths(tool: Mapping[str, Any]) -> dict[tuple[str, ...], str]:
    """
    The C{Mcp-Param-*} headers a tool's input schema asks for, as argument path →
    header suffix (2026-07-28: a property annotated C{x-mcp-header}, reached from the
    schema root through C{properties} alone).

    @raise InvalidParamHeader: if an annotation is empty, not an RFC 9110 token, on a
        property that is not a string, integer or boolean, repeated (ignoring case), or
        somewhere other than a chain of C{properties}; the revision tells a client to
        leave such a tool out of its C{tools/list} view.
    """
    schema = tool.get("inputSchema")
    found: dict[tuple[str, ...], str] = {}
    if isinstance(schema, Mapping):
        _collect_headers(schema, (), found)
    seen: set[str] = set()
    for header in found.values():
        folded = header.lower()
        if folded in seen:
            raise InvalidParamHeader(f"x-mcp-header {header!r} is used twice (ignoring case)")
        seen.add(folded)
    return found


def _collect_headers(
    schema: Mapping[str, Any], path: tuple[str, ...], found: dict[tuple[str, ...], str]
) -> None:
    if "x-mcp-header" in schema:
        if not path:
            raise InvalidParamHeader("the x-mcp-header is on the schema root, not a property")
        found[path] = _checked_header(schema)
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for name, definition in properties.items():
            if isinstance(definition, Mapping):
                _collect_headers(definition, (*path, name), found)
    for keyword in _SUBSCHEMA_KEYWORDS.intersection(schema):
        if _annotated_anywhere(schema[keyword]):
            raise InvalidParamHeader(f"an x-mcp-header sits under {keyword!r}")


def _checked_header(definition: Mapping[str, Any]) -> str:
    header = definition["x-mcp-header"]
    if not isinstance(header, str) or _HEADER_TOKEN.fullmatch(header) is None:
        raise InvalidParamHeader(f"x-mcp-header {header!r} is not an HTTP header name token")
    kind = definition.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    primitive = [k for k in kinds if k != "null"]
    if not primitive or not all(k in _HEADER_TYPES for k in primitive):
        raise InvalidParamHeader(
            f"x-mcp-header {header!r} is on a property of type {kind!r}, "
            "not a string, integer or boolean"
        )
    return header


def _annotated_anywhere(value: Any) -> bool:
    if isinstance(value, Mapping):
        return "x-mcp-header" in value or any(_annotated_anywhere(v) for v in value.values())
    if isinstance(value, list):
        return any(_annotated_anywhere(v) for v in value)
    return False
