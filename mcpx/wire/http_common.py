# -*- test-case-name: tests.wire.test_http_common,tests.server.test_param_headers -*-
"""
The rules of MCP over HTTP that both directions keep alike: mcpx writes them as a client
(L{mcpx.upstream.http}) and reads them as a server (L{mcpx.server.http},
L{mcpx.server.param_headers}).

  - The headers' names: the revision a request speaks in (C{MCP-Protocol-Version}, the
    era header), the legacy session (C{Mcp-Session-Id}), and the 2026-07-28
    request-metadata headers (C{Mcp-Method}, C{Mcp-Name}, C{Mcp-Param-*}); mcpx's own
    C{Mcpx-Client}.
  - Which field of a request's params its C{Mcp-Name} mirrors (L{NAME_FIELDS}).
  - The 2026-07-28 "Value Encoding" of C{Mcp-Name} and C{Mcp-Param-*} values: plain
    header-safe ASCII as it is, anything else as C{=?base64?...?=} around the Base64 of
    its UTF-8 (L{encode_header_value}, L{decode_header_value}).
  - Which C{Mcp-Param-*} headers a tool asks for: the C{x-mcp-header} annotations of its
    input schema, checked as the revision says (L{param_header_paths}); a tool whose
    annotations break the rules is left out of a client's view, and its calls are
    checked for none.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any, Final

#: The era header: the revision a request speaks (2025-06-18 on; every 2026-07-28 POST).
PROTOCOL_VERSION_HEADER: Final = "MCP-Protocol-Version"
#: The legacy session a request belongs to (2025-03-26 to 2025-11-25).
SESSION_ID_HEADER: Final = "Mcp-Session-Id"
#: The 2026-07-28 request-metadata headers: the method, its target, the tool's arguments.
METHOD_HEADER: Final = "Mcp-Method"
NAME_HEADER: Final = "Mcp-Name"
PARAM_HEADER_PREFIX: Final = "Mcp-Param-"
#: mcpx's own: who is calling, when no access token's subject says (C{scope: client}).
CLIENT_HEADER: Final = "Mcpx-Client"

#: The methods whose C{Mcp-Name} header mirrors a field of their params (2026-07-28).
NAME_FIELDS: Final[Mapping[str, str]] = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    # The tasks extension.
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}

# Visible ASCII with inner spaces; anything else (non-ASCII, control characters tab
# included, whitespace at either end) travels base64-encoded.
_HEADER_SAFE: Final = re.compile(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?")
_SENTINEL_START: Final = "=?base64?"
_SENTINEL_END: Final = "?="


def _looks_encoded(value: str) -> bool:
    return (
        len(value) >= len(_SENTINEL_START) + len(_SENTINEL_END)
        and value.startswith(_SENTINEL_START)
        and value.endswith(_SENTINEL_END)
    )


def encode_header_value(value: str) -> str:
    """
    A string as an C{Mcp-Name} or C{Mcp-Param-*} header value: as it is when it is
    plain header-safe ASCII, otherwise C{=?base64?...?=} around the Base64 of its UTF-8
    (also for plain values that start and end like that form, C{=?base64?=} among
    them, so that no reader can misread them).
    """
    if value == "" or (
        _HEADER_SAFE.fullmatch(value) is not None
        and not (value.startswith(_SENTINEL_START) and value.endswith(_SENTINEL_END))
    ):
        return value
    encoded = base64.b64encode(value.encode("utf-8", "surrogatepass")).decode("ascii")
    return f"{_SENTINEL_START}{encoded}{_SENTINEL_END}"


def decode_header_value(value: str) -> str:
    """
    What an C{Mcp-Name} or C{Mcp-Param-*} value says: a C{=?base64?...?=} value
    decoded, anything else as it is.

    @raise ValueError: an encoded value that is not valid, padded Base64 of UTF-8 text.
    """
    # A plain value (nearly every one) is told apart without a call: by `in`, which a
    # str answers without parsing arguments (startswith parses its own, in C, each time).
    if _SENTINEL_START in value and _looks_encoded(value):
        encoded = value[len(_SENTINEL_START) : -len(_SENTINEL_END)]
        # binascii.Error and UnicodeDecodeError are both ValueErrors.
        return base64.b64decode(encoded, validate=True).decode("utf-8")
    return value


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
