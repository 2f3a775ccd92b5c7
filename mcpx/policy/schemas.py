# -*- test-case-name: tests.policy.test_schemas -*-
"""
Tool schemas compiled once, checked cheaply, and never trusted.

A tool's C{inputSchema} and C{outputSchema} come from the upstream server, so they are
handled as hostile input: a schema is screened before it is compiled (its size, its
depth, and each regular expression in it, which must compile in RE2 so that it matches
in linear time; see L{mcpx.spec.safe_schema}), its C{$schema} picks draft-07 or
2020-12 (2020-12 when it names none, as MCP says), and its C{$ref}s resolve inside the
document only: the registry retrieves nothing, so a remote C{$ref} is an error, never a
fetch.  A flat object schema gets the fast acceptor the C{/v1} ops use, so a valid call
costs a few microseconds; jsonschema runs only to name what is wrong.  Every check runs
metered (L{mcpx.spec.safe_schema.metered}): one that would cost more than
L{MAX_CHECK_STEPS} stops and fails, so no schema and no value holds the reactor long.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, Final

from attrs import frozen

from mcpx.policy.precheck import fast_acceptor
from mcpx.spec.safe_schema import (
    MAX_CHECK_STEPS,
    Dialect,
    PatternRefused,
    TooCostly,
    check_schema,
    compile_pattern,
    dialect,
    metered,
)

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator
    from referencing import Registry, Resource

#: The most nodes (objects, arrays and scalars) a tool schema may hold.
MAX_SCHEMA_NODES: Final = 20_000
#: The deepest a tool schema may nest.
MAX_SCHEMA_DEPTH: Final = 64
#: The most characters all of a tool schema's regular expressions may hold together
#: (RE2 takes up to about 20 ms to compile, or refuse, one of 1,000).
MAX_SCHEMA_PATTERN_CHARS: Final = 10_000
#: The longest C{$ref} (or C{$dynamicRef}) a tool schema may hold: resolving one costs
#: time in its length, and a pointer into a schema of L{MAX_SCHEMA_DEPTH} levels of
#: ordinary names is far shorter.
MAX_SCHEMA_REF_CHARS: Final = 2_000
#: How many problems a refusal names.
SHOWN_PROBLEMS: Final = 3

#: The dialects a tool schema may name in C{$schema}.
_DIALECT_NAMES: Final[Mapping[str, Dialect]] = {
    "http://json-schema.org/draft-07/schema": "draft-07",
    "https://json-schema.org/draft/2020-12/schema": "2020-12",
}


class HostileSchema(ValueError):
    """A schema the gateway will not compile, with the reason."""


def _refuse_retrieval(uri: str) -> Resource[Any]:
    from referencing.exceptions import NoSuchResource  # deferred with jsonschema (dialect)

    # Nothing is ever fetched: a $ref outside the document is an error.
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


@cache
def _no_retrieval() -> Registry[Any]:
    from referencing import Registry  # deferred with jsonschema (dialect)

    registry: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]
    return registry


def _dialect(schema: Mapping[str, Any]) -> type[Validator]:
    named = schema.get("$schema")
    if named is None:
        return dialect("2020-12")
    if not isinstance(named, str):
        raise HostileSchema("$schema must be a string")
    found = _DIALECT_NAMES.get(named.rstrip("#"))
    if found is None:
        raise HostileSchema(f"$schema {named!r} is not draft-07 or 2020-12")
    return dialect(found)


def _check_pattern(pattern: object, where: str) -> None:
    if not isinstance(pattern, str):
        raise HostileSchema(f"{where}: a pattern must be a string")
    try:
        compile_pattern(pattern)
    except PatternRefused as e:
        raise HostileSchema(f"{where}: pattern {pattern[:80]!r} is refused: {e}") from None


def screen(schema: object) -> None:
    """
    Refuse a schema that is too big or too deep, whose patterns RE2 cannot match, or
    with a C{$ref} longer than L{MAX_SCHEMA_REF_CHARS}.

    @raise HostileSchema: saying what is wrong and where.
    """
    keywords: set[str] = set()
    pattern_chars = 0
    nodes = 0
    stack: list[tuple[object, int, str]] = [(schema, 0, "#")]
    while stack:
        node, depth, where = stack.pop()
        nodes += 1
        if nodes > MAX_SCHEMA_NODES:
            raise HostileSchema(f"more than {MAX_SCHEMA_NODES} nodes")
        if depth > MAX_SCHEMA_DEPTH:
            raise HostileSchema(f"nested deeper than {MAX_SCHEMA_DEPTH} levels at {where}")
        if isinstance(node, dict):
            for key, value in node.items():
                patterns: list[object] = []
                if key == "pattern" and not isinstance(value, dict):
                    patterns = [value]
                elif key == "patternProperties" and isinstance(value, dict):
                    keywords.add(key)
                    patterns = list(value)
                for expression in patterns:
                    pattern_chars += len(expression) if isinstance(expression, str) else 0
                    if pattern_chars > MAX_SCHEMA_PATTERN_CHARS:
                        raise HostileSchema(
                            f"its patterns hold more than {MAX_SCHEMA_PATTERN_CHARS} characters"
                        )
                    _check_pattern(expression, f"{where}/{key}")
                if key == "unevaluatedProperties":
                    keywords.add(key)
                elif (
                    key in ("$ref", "$dynamicRef")
                    and isinstance(value, str)
                    and len(value) > MAX_SCHEMA_REF_CHARS
                ):
                    raise HostileSchema(
                        f"{where}/{key}: a reference longer than {MAX_SCHEMA_REF_CHARS} characters"
                    )
                stack.append((value, depth + 1, f"{where}/{key}"))
        elif isinstance(node, list):
            stack.extend((value, depth + 1, where) for value in node)
    if {"patternProperties", "unevaluatedProperties"} <= keywords:
        # jsonschema finds the properties patternProperties evaluated with Python's re,
        # which can take exponential time; nothing else in a check does.
        raise HostileSchema(
            "patternProperties together with unevaluatedProperties is not supported"
        )


def _path(error: ValidationError) -> str:
    return "/" + "/".join(str(part) for part in error.absolute_path) if error.absolute_path else ""


@frozen(eq=False)
class SchemaCheck:
    """
    One compiled tool schema.

    @ivar accepts: the fast yes for a flat object schema's valid input, or C{None}.
    """

    validator: Validator
    accepts: Callable[[Mapping[str, Any]], bool] | None

    def problems(self, instance: Any) -> list[dict[str, str]]:
        """
        The first few ways C{instance} fails, each as C{{"path", "reason"}} (a JSON
        Pointer into the instance and jsonschema's reason); empty when it fits.
        """
        if self.accepts is not None and type(instance) is dict and self.accepts(instance):
            return []
        from jsonschema.exceptions import relevance  # loaded by compile_schema already
        from referencing.exceptions import Unresolvable

        found: list[ValidationError] = []
        try:
            with metered(MAX_CHECK_STEPS, instance):
                for error in self.validator.iter_errors(instance):
                    found.append(error)
                    if len(found) >= SHOWN_PROBLEMS * 4:
                        break
        except (Unresolvable, RecursionError, TooCostly) as e:
            # A $ref to outside the document (never fetched), a loop of them, or more
            # work than one check may do.
            return [{"path": "", "reason": f"the schema cannot be applied: {e}"}]
        found.sort(key=relevance, reverse=True)
        return [
            {"path": _path(error), "reason": error.message[:300]}
            for error in found[:SHOWN_PROBLEMS]
        ]


def compile_schema(schema: object) -> SchemaCheck:
    """
    Screen and compile one tool schema.

    @raise HostileSchema: for a schema that is not an object, is refused by L{screen},
        names another dialect, or is not valid in its own dialect.
    """
    if not isinstance(schema, dict):
        raise HostileSchema("a schema must be a JSON object")
    screen(schema)
    validator_class = _dialect(schema)
    from jsonschema.exceptions import SchemaError  # loaded by dialect just now

    try:
        check_schema(validator_class, schema)
    except SchemaError as e:
        raise HostileSchema(f"not a valid schema: {e.message[:200]}") from None
    except RecursionError:
        raise HostileSchema("not a valid schema: it refers to itself endlessly") from None
    validator = validator_class(schema, registry=_no_retrieval())
    try:
        accepts = fast_acceptor(schema)
    except PatternRefused:
        accepts = None
    return SchemaCheck(validator, accepts)
