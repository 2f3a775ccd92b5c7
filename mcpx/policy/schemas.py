# -*- test-case-name: tests.policy.test_schemas -*-
"""
Tool schemas compiled once, checked cheaply, and never trusted.

A tool's C{inputSchema} and C{outputSchema} come from the upstream server, so they are
handled as hostile input: a schema is screened before it is compiled (its size, its
depth, and each regular expression in it, since Python's C{re} has no time limit and a
catastrophic pattern would stall the reactor), its C{$schema} picks draft-07 or
2020-12 (2020-12 when it names none, as MCP says), and its C{$ref}s resolve inside the
document only: the registry retrieves nothing, so a remote C{$ref} is an error, never a
fetch.  A flat object schema gets the fast acceptor the C{/v1} ops use, so a valid call
costs a few microseconds; jsonschema runs only to name what is wrong.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, Final

from attrs import frozen

from mcpx.policy.precheck import fast_acceptor

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator
    from referencing import Registry, Resource

#: The most nodes (objects, arrays and scalars) a tool schema may hold.
MAX_SCHEMA_NODES: Final = 20_000
#: The deepest a tool schema may nest.
MAX_SCHEMA_DEPTH: Final = 64
#: The longest regular expression a schema may hold.
MAX_PATTERN_LENGTH: Final = 1_000
#: How many problems a refusal names.
SHOWN_PROBLEMS: Final = 3

#: The dialects a tool schema may name in C{$schema}, and jsonschema's class of each.
_DIALECT_NAMES: Final[Mapping[str, str]] = {
    "http://json-schema.org/draft-07/schema": "Draft7Validator",
    "https://json-schema.org/draft/2020-12/schema": "Draft202012Validator",
}


class HostileSchema(ValueError):
    """A schema the gateway will not compile, with the reason."""


def _refuse_retrieval(uri: str) -> Resource[Any]:
    from referencing.exceptions import NoSuchResource  # deferred with jsonschema (_dialect)

    # Nothing is ever fetched: a $ref outside the document is an error.
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


@cache
def _no_retrieval() -> Registry[Any]:
    from referencing import Registry  # deferred with jsonschema (_dialect)

    registry: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]
    return registry


def _dialect(schema: Mapping[str, Any]) -> type[Validator]:
    # Deferred: jsonschema and referencing (2-3 MB) load at the first tool schema compiled,
    # not in a daemon that has not listed a server yet.
    import jsonschema

    named = schema.get("$schema")
    if named is None:
        return jsonschema.Draft202012Validator
    if not isinstance(named, str):
        raise HostileSchema("$schema must be a string")
    found = _DIALECT_NAMES.get(named.rstrip("#"))
    if found is None:
        raise HostileSchema(f"$schema {named!r} is not draft-07 or 2020-12")
    dialect: type[Validator] = getattr(jsonschema, found)
    return dialect


def _nested_quantifier(pattern: str) -> bool:
    """Whether a quantified part of C{pattern} holds another unbounded quantifier."""
    # The standard library's own parser of patterns (it has no stubs).
    parser: Any = importlib.import_module("re._parser")

    repeats = {parser.MAX_REPEAT, parser.MIN_REPEAT, parser.POSSESSIVE_REPEAT}

    def walk(items: Any, inside: bool) -> bool:
        for op, arg in items:
            if op in repeats:
                _, high, body = arg
                many = high is parser.MAXREPEAT or high > 1
                if many and inside:
                    return True
                if walk(body, inside or many):
                    return True
            elif op is parser.SUBPATTERN:
                if walk(arg[-1], inside):
                    return True
            elif op is parser.BRANCH:
                if any(walk(branch, inside) for branch in arg[1]):
                    return True
            elif op in (parser.GROUPREF, parser.GROUPREF_EXISTS):
                return True  # backreferences can take exponential time too
            elif op in (parser.ASSERT, parser.ASSERT_NOT) and walk(arg[1], inside):
                return True
        return False

    return walk(parser.parse(pattern), False)


def _check_pattern(pattern: object, where: str) -> None:
    if not isinstance(pattern, str):
        raise HostileSchema(f"{where}: a pattern must be a string")
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise HostileSchema(f"{where}: a pattern longer than {MAX_PATTERN_LENGTH} characters")
    try:
        re.compile(pattern)
        nested = _nested_quantifier(pattern)
    except (re.error, RecursionError, OverflowError) as e:
        raise HostileSchema(f"{where}: pattern {pattern[:80]!r} is not valid: {e}") from None
    if nested:
        raise HostileSchema(
            f"{where}: pattern {pattern[:80]!r} nests repetitions (or refers back), which "
            "can take exponential time to match"
        )


def screen(schema: object) -> None:
    """
    Refuse a schema that is too big or too deep, or whose patterns could stall.

    @raise HostileSchema: saying what is wrong and where.
    """
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
                if key == "pattern" and not isinstance(value, dict):
                    _check_pattern(value, f"{where}/pattern")
                elif key == "patternProperties" and isinstance(value, dict):
                    for expression in value:
                        _check_pattern(expression, f"{where}/patternProperties")
                stack.append((value, depth + 1, f"{where}/{key}"))
        elif isinstance(node, list):
            stack.extend((value, depth + 1, where) for value in node)


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
            for error in self.validator.iter_errors(instance):
                found.append(error)
                if len(found) >= SHOWN_PROBLEMS * 4:
                    break
        except (Unresolvable, RecursionError) as e:
            # A $ref to outside the document (never fetched), or a loop of them.
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
    dialect = _dialect(schema)
    from jsonschema.exceptions import SchemaError  # loaded by _dialect just now

    try:
        dialect.check_schema(schema)
    except SchemaError as e:
        raise HostileSchema(f"not a valid schema: {e.message[:200]}") from None
    except RecursionError:
        raise HostileSchema("not a valid schema: it refers to itself endlessly") from None
    validator = dialect(schema, registry=_no_retrieval())
    try:
        accepts = fast_acceptor(schema)
    except re.error:
        accepts = None
    return SchemaCheck(validator, accepts)
