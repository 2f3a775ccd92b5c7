# -*- test-case-name: tests.spec.test_schemas -*-
"""
How strict mode closes a published schema: every object that declares its
properties refuses others, except the L{mcpx.spec.open_places.OPEN_PLACES}, with
C{allOf} fragments kept open at the top so that the object holding them closes
them; and the C{_meta} the legacy schema generator dropped from concrete params is
given back.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Mapping
from typing import Any, Final

from mcpx.spec.open_places import OPEN_DEFINITION_PROPERTIES, OPEN_DEFINITIONS, OPEN_PROPERTIES

#: Generic bases whose C{params} is a catch-all, not a concrete request's params.
_GENERIC_MESSAGES: Final = frozenset(
    {"Request", "Notification", "JSONRPCRequest", "JSONRPCNotification"}
)

#: Prefix of the open-at-the-top twin of a definition, used by C{allOf} fragments.
#: No published definition name contains a hyphen, so it cannot collide.
FRAGMENT_PREFIX: Final = "mcpx-fragment-"

_COMPOSITION: Final = ("allOf", "anyOf", "oneOf")


def _base_meta(defs: Mapping[str, Any], base: str, params: str) -> Any:
    """The C{_meta} schema a base message type gives its params, if it gives one."""
    declared = defs.get(base, {}).get("properties", {}).get("params", {}).get("properties", {})
    if "_meta" in declared:
        return declared["_meta"]
    declared = defs.get(params, {}).get("properties", {})
    return declared.get("_meta")


def restore_params_meta(defs: dict[str, Any]) -> None:
    """Give back C{_meta} to legacy params that the schema generator dropped it from."""
    bases = {
        False: _base_meta(defs, "Request", "RequestParams"),
        True: _base_meta(defs, "Notification", "NotificationParams"),
    }
    for name, schema in defs.items():
        declared = schema.get("properties", {})
        if name in _GENERIC_MESSAGES or "method" not in declared or "params" not in declared:
            continue
        params = declared["params"]
        target = local_target(params.get("$ref")) if isinstance(params, dict) else None
        if target is not None:
            params = defs.get(target)
        if (
            not isinstance(params, dict)
            or "properties" not in params
            or "_meta" in params["properties"]
            or "additionalProperties" in params
        ):
            continue
        meta = bases[name.endswith("Notification")]
        if meta is not None:
            params["properties"] = {**params["properties"], "_meta": copy.deepcopy(meta)}


def local_target(ref: object) -> str | None:
    """The definition name a local C{$ref} points at, or C{None}."""
    if not isinstance(ref, str):
        return None
    for prefix in ("#/$defs/", "#/definitions/"):
        if ref.startswith(prefix) and "/" not in ref[len(prefix) :]:
            return ref[len(prefix) :]
    return None


class _Mode(enum.Enum):
    #: A schema that describes a whole value: close it.
    CLOSE = "close"
    #: One part of a value that sibling C{allOf} branches also describe: the
    #: object holding the C{allOf} closes it; this part must stay open.
    FRAGMENT = "fragment"


class Closer:
    """Builds the strict definitions from the published ones (already copied)."""

    def __init__(self, published: dict[str, Any], *, unevaluated: bool, key: str) -> None:
        self._published = published
        self._unevaluated = unevaluated
        self._key = key
        self._result: dict[str, Any] = {}

    def close_all(self) -> dict[str, Any]:
        for name, schema in self._published.items():
            if name in OPEN_DEFINITIONS:
                self._result[name] = schema
            else:
                self._result[name] = self._schema(schema, _Mode.CLOSE, name, top=True)
        return self._result

    def _fragment_ref(self, name: str) -> str:
        """A C{$ref} to the open-at-the-top twin of definition C{name}."""
        if name in OPEN_DEFINITIONS or name not in self._published:
            return f"#/{self._key}/{name}"
        twin = FRAGMENT_PREFIX + name
        if twin not in self._result:
            self._result[twin] = {}  # a placeholder stops reference cycles
            self._result[twin] = self._schema(self._published[name], _Mode.FRAGMENT, name, top=True)
        return f"#/{self._key}/{twin}"

    def _declared(self, schema: object, seen: frozenset[str] = frozenset()) -> set[str]:
        """Property names a schema (with its references and branches) declares."""
        if not isinstance(schema, dict):
            return set()
        names = set(schema.get("properties", {}))
        target = local_target(schema.get("$ref"))
        if target is not None and target not in seen and target in self._published:
            names |= self._declared(self._published[target], seen | {target})
        for keyword in _COMPOSITION:
            for branch in schema.get(keyword, ()):
                names |= self._declared(branch, seen)
        return names

    def _schema(
        self,
        schema: object,
        mode: _Mode,
        definition: str,
        *,
        top: bool = False,
        shared: frozenset[str] = frozenset(),
    ) -> Any:
        if not isinstance(schema, dict):
            return schema
        out = dict(schema)
        declares = "properties" in schema
        composed = any(k in schema for k in _COMPOSITION) or (declares and "$ref" in schema)

        if "properties" in schema:
            properties = {}
            for name, sub in schema["properties"].items():
                if name in OPEN_PROPERTIES or (
                    top and (definition, name) in OPEN_DEFINITION_PROPERTIES
                ):
                    properties[name] = sub
                elif name in shared:
                    properties[name] = self._schema(sub, _Mode.FRAGMENT, definition)
                else:
                    properties[name] = self._schema(sub, _Mode.CLOSE, definition)
            out["properties"] = properties
        if isinstance(schema.get("patternProperties"), dict):
            out["patternProperties"] = {
                pattern: self._schema(sub, _Mode.CLOSE, definition)
                for pattern, sub in schema["patternProperties"].items()
            }
        # A value below these keywords is a whole value of its own.  (C{not},
        # C{if}, C{contains} and C{propertyNames} are left alone: closing a
        # schema there would make it match less, which widens what they allow.)
        for keyword in (
            "additionalProperties",
            "unevaluatedProperties",
            "items",
            "unevaluatedItems",
            "additionalItems",
        ):
            value = schema.get(keyword)
            if isinstance(value, dict):
                out[keyword] = self._schema(value, _Mode.CLOSE, definition)
            elif isinstance(value, list):
                out[keyword] = [self._schema(v, _Mode.CLOSE, definition) for v in value]
        if isinstance(schema.get("prefixItems"), list):
            out["prefixItems"] = [
                self._schema(v, _Mode.CLOSE, definition) for v in schema["prefixItems"]
            ]

        if "allOf" in schema:
            branches = schema["allOf"]
            seen: set[str] = set()
            overlap: set[str] = set()
            for branch in branches:
                names = self._declared(branch)
                overlap |= seen & names
                seen |= names
            out["allOf"] = [
                self._schema(b, _Mode.FRAGMENT, definition, shared=frozenset(overlap))
                for b in branches
            ]
        for keyword in ("anyOf", "oneOf"):
            if keyword in schema:
                # Alternatives standing alone are complete values; beside
                # properties or inside a fragment they are parts of one.
                whole = mode is _Mode.CLOSE and not declares and "allOf" not in schema
                branch_mode = _Mode.CLOSE if whole else _Mode.FRAGMENT
                out[keyword] = [
                    self._schema(b, branch_mode, definition, shared=shared) for b in schema[keyword]
                ]
        target = local_target(schema.get("$ref"))
        if target is not None and (mode is _Mode.FRAGMENT or declares):
            out["$ref"] = self._fragment_ref(target)

        says = "additionalProperties" in schema or "unevaluatedProperties" in schema
        if mode is _Mode.FRAGMENT:
            # An empty schema here marks the other properties as evaluated and
            # would defeat the closing done by the object holding the allOf.
            for keyword in ("additionalProperties", "unevaluatedProperties"):
                if schema.get(keyword) in ({}, True):
                    del out[keyword]
        elif not says:
            if declares and not composed:
                out["additionalProperties"] = False
            elif self._unevaluated and (declares or ("allOf" in schema and self._declared(schema))):
                out["unevaluatedProperties"] = False
            # A draft-07 object that mixes properties with composition cannot
            # be closed without refusing a branch's properties; none exists in
            # the published documents, and such an object would stay open.
        return out
