# -*- test-case-name: tests.daemon.test_ops -*-
"""
A quick yes for the common, valid input of a flat object schema.

Compiled once per schema, it keeps jsonschema off the per-call path: for the inputs of
the daemon's own operations (L{mcpx.ops.op.Op}) and for the tools' input schemas the
policy compiles (L{mcpx.policy.schemas}).  It only ever says yes where jsonschema would.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from mcpx.spec.safe_schema import compile_pattern

#: The most characters times pattern instructions the quick yes matches (about 10 ms of
#: RE2 at its slowest); a longer text is left to the full check, which is metered.
_QUICK_MATCH_UNITS: Final = 5_000_000

_JSON_TYPES: Mapping[str, tuple[type, ...]] = {
    "string": (str,),
    "object": (dict,),
    "array": (list,),
    "boolean": (bool,),
    "number": (int, float),
    "integer": (int,),
}
#: The keywords a fast acceptor understands; a schema using any other is left to jsonschema.
_FAST_KEYWORDS = frozenset(
    {"type", "minLength", "exclusiveMinimum", "minimum", "description", "pattern"}
)


def _matcher(pattern: str) -> Callable[[str], bool]:
    """
    Whether a text matches C{pattern}: in RE2, as in the full check, so both say the same
    and neither takes more than linear time; a text too long for a quick answer is no.

    @raise mcpx.spec.safe_schema.PatternRefused: RE2 cannot match C{pattern}.
    """
    compiled = compile_pattern(pattern)
    longest = _QUICK_MATCH_UNITS // max(compiled.programsize, 1)

    def matches(text: str) -> bool:
        return len(text) <= longest and compiled.search(text) is not None

    return matches


def _fast_property(schema: Mapping[str, Any]) -> Callable[[Any], bool] | None:
    if not set(schema) <= _FAST_KEYWORDS or not isinstance(schema.get("type"), str):
        return None
    kind = schema["type"]
    types = _JSON_TYPES.get(kind)
    if types is None:
        return None
    min_length = schema.get("minLength")
    above = schema.get("exclusiveMinimum")
    at_least = schema.get("minimum")
    if "pattern" in schema and kind != "string":
        return None
    # search, not fullmatch: the pattern keyword is unanchored, and jsonschema searches too.
    pattern = _matcher(schema["pattern"]) if "pattern" in schema else None

    def accepts(value: Any) -> bool:
        # Exact types: decoded JSON has no subclasses, and it keeps True from passing as 1.
        if type(value) not in types:
            return False
        if min_length is not None and len(value) < min_length:
            return False
        if pattern is not None and not pattern(value):
            return False
        if above is not None and not value > above:
            return False
        return at_least is None or value >= at_least

    return accepts


def fast_acceptor(schema: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], bool] | None:
    """
    A quick yes for the common, valid input of a flat object schema, compiled from
    the schema itself; C{None} when the schema is beyond it.

    It only ever says "valid" for input the full validator accepts: on C{False} the
    caller runs jsonschema, which finds and names the fault.  A pattern RE2 refuses
    raises L{mcpx.spec.safe_schema.PatternRefused}.  This keeps jsonschema
    off the per-call path (it was about a tenth of a /v1/call) without a second,
    hand-written statement of any op's input.
    """
    if schema.get("type") != "object" or not set(schema) <= {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "description",
        "not",
    }:
        return None
    exclusive = _exclusive_flags(schema["not"]) if "not" in schema else ()
    if exclusive is None:
        return None
    if schema.get("additionalProperties", True) not in (True, False):
        return None
    closed = schema.get("additionalProperties") is False
    checks: dict[str, Callable[[Any], bool]] = {}
    for name, prop in schema.get("properties", {}).items():
        check = _fast_property(prop)
        if check is None:
            return None
        checks[name] = check
    required = tuple(schema.get("required", ()))

    def accepts(args: Mapping[str, Any]) -> bool:
        for name in required:
            if name not in args:
                return False
        if exclusive and all(args.get(name) is True for name in exclusive):
            return False
        for name, value in args.items():
            check = checks.get(name)
            if check is None:
                if closed:
                    return False
            elif not check(value):
                return False
        return True

    return accepts


def _exclusive_flags(schema: Mapping[str, Any]) -> tuple[str, ...] | None:
    """
    The flags of a C{not} schema that forbids them all being true together (see
    L{exclusive_flags}); C{None} for any other C{not}.
    """
    names = tuple(schema.get("required", ()))
    props = schema.get("properties", {})
    allowed = {"required", "properties", "description"}
    if not names or set(props) != set(names) or not set(schema) <= allowed:
        return None
    if any(props[name] != {"const": True} for name in names):
        return None
    return names


def exclusive_flags(*names: str, why: str) -> dict[str, Any]:
    """
    A C{not} schema refusing input where the boolean fields C{names} are all true; C{why} is
    the message the refusal gives, naming the last of them as the field at fault.
    """
    return {
        "properties": {name: {"const": True} for name in names},
        "required": list(names),
        "description": why,
    }
