# -*- test-case-name: tests.spec.test_schemas -*-
"""
The official MCP schemas, bundled, and validators compiled from them.

Each revision's C{schema.json} (and the tasks extension's) ships inside this
package and is read lazily through L{importlib.resources}.  A validator is
compiled once per (source, definition, strictness) and cached, so checking an
instance costs one C{iter_errors} walk and nothing else.

Two strictnesses exist:

  - B{lax} is the schema exactly as published.  Most published object schemas
    say nothing about extra properties, so they accept any.
  - B{strict} is a transformed copy in which every object schema that declares
    C{properties} and says nothing about extra properties is closed.  A field
    that a revision never defined is then refused, which is how a field sent to
    a revision that lacks it gets caught.  The places that must stay open no
    matter what are listed, with their reasons, in L{mcpx.spec.open_places.OPEN_PLACES}.

How closing copes with composition:

  - The draft-07 revisions (2024-11-05 to 2025-06-18) only compose with
    C{anyOf} whose branches are complete alternatives (a content block is a
    text I{or} an image ...), so each branch is closed on its own with
    C{additionalProperties: false}.
  - The 2020-12 documents (2025-11-25, 2026-07-28, ext-tasks) also build one
    object from several C{allOf} branches (C{allOf: [Result, Task]}).  Closing a
    branch would refuse the properties its siblings define, so branches are
    left open as I{fragments} and the object that holds the C{allOf} is closed
    with C{unevaluatedProperties: false}, which sees every property any
    successful branch evaluated, through C{$ref} as well.  A definition reached
    by C{$ref} from a fragment is swapped for an open-at-the-top twin of itself
    (its nested objects are still closed); a twin also drops a top-level
    C{additionalProperties: {}}, because a base such as C{Result} is open only
    so that the types built on it may add their own fields.
  - A property declared by two sibling C{allOf} branches (the tasks extension
    re-declares C{params} of C{JSONRPCRequest}) is evaluated separately by each
    branch, so neither branch can close it: it is left as a fragment too.

One addition goes beyond closing: in the legacy revisions the generated schema
drops the C{_meta} field that the base C{Request}/C{Notification} C{params}
declares whenever a concrete request redefines C{params} (a 2024-11-05
C{tools/call} has no C{_meta} in its C{params}).  Every revision's prose allows
C{_meta} on all params and clients send C{progressToken} there, so strict mode
adds the base's C{_meta} back to each such C{params}.  2026-07-28 is spelled
out in full and is left alone (its input requests have no C{_meta} on purpose).

References never leave the document: the tasks extension carries its own copy
of the 2026-07-28 definitions it uses (its only absolute identifier is its own
C{$id}), and the registry has no way to retrieve anything else.
"""

from __future__ import annotations

import ast
import copy
import enum
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from attrs import frozen

from mcpx.spec.revision import Era, Revision
from mcpx.spec.safe_schema import Dialect, check_schema, dialect
from mcpx.spec.schema_closing import FRAGMENT_PREFIX, Closer, local_target, restore_params_meta

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator
    from referencing import Registry, Resource


class Extension(enum.Enum):
    """An MCP extension whose official schema is bundled."""

    #: C{io.modelcontextprotocol/tasks}, used alongside 2026-07-28.
    TASKS = "ext-tasks"

    def __str__(self) -> str:
        return self.value


#: The tasks extension's schema, as a L{SchemaSource}.
TASKS_EXTENSION: Final = Extension.TASKS

#: Where a bundled schema comes from: a protocol revision or an extension.
SchemaSource: TypeAlias = Revision | Extension

#: Every bundled schema, revisions oldest first, then the extensions.
ALL_SOURCES: Final[tuple[SchemaSource, ...]] = (*Revision, *Extension)


class UnknownDefinition(KeyError):
    """A definition name that the schema of a revision (or extension) does not define."""

    def __init__(self, source: SchemaSource, name: str) -> None:
        super().__init__(name)
        self.source = source
        self.name = name

    def __str__(self) -> str:
        return f"{self.name!r} is not defined in the {self.source} schema"


class SchemaViolation(ValueError):
    """
    An instance that its schema refuses.

    @ivar problems: one line per problem, each starting with the JSON path of
        the offending value.
    """

    def __init__(
        self, source: SchemaSource, definition: str, problems: Sequence[str], strict: bool
    ) -> None:
        self.source = source
        self.definition = definition
        self.problems = tuple(problems)
        self.strict = strict
        mode = "strict" if strict else "lax"
        super().__init__(
            f"not a valid {source} {definition} ({mode}):\n"
            + "\n".join(f"  {line}" for line in self.problems)
        )


_DRAFT_07: Final = "http://json-schema.org/draft-07/schema#"
_DRAFT_2020_12: Final = "https://json-schema.org/draft/2020-12/schema"
#: The dialects the bundled documents are written in (each says so in C{$schema}).
_DIALECT_NAMES: Final[Mapping[str, Dialect]] = {
    _DRAFT_07: "draft-07",
    _DRAFT_2020_12: "2020-12",
}


@cache
def load_schema(source: SchemaSource) -> dict[str, Any]:
    """
    The published schema document of C{source}, read once and cached.

    @return: the shared parsed document; callers must not modify it.
    """
    resource = files("mcpx.spec") / "schemas" / source.value / "schema.json"
    loaded: dict[str, Any] = json.loads(resource.read_text(encoding="utf-8"))
    return loaded


def _definitions_key(document: Mapping[str, Any]) -> str:
    return "$defs" if "$defs" in document else "definitions"


@cache
def definitions(source: SchemaSource) -> frozenset[str]:
    """The names of every definition the published schema of C{source} has."""
    document = load_schema(source)
    return frozenset(document[_definitions_key(document)])


@cache
def strict_schema(source: SchemaSource) -> dict[str, Any]:
    """
    The strict variant of C{source}'s schema document, built once and cached.

    Besides the published definitions it holds the open-at-the-top twins used
    by C{allOf} fragments, named with a C{mcpx-fragment-} prefix.

    @return: the shared document; callers must not modify it.
    """
    document = copy.deepcopy(load_schema(source))
    key = _definitions_key(document)
    published: dict[str, Any] = document[key]
    if isinstance(source, Revision) and source.era is Era.LEGACY:
        restore_params_meta(published)
    # Only 2020-12 has unevaluatedProperties, which sees through composition.
    unevaluated = document.get("$schema") == _DRAFT_2020_12
    closer = Closer(published, unevaluated=unevaluated, key=key)
    document[key] = closer.close_all()
    return document


@frozen
class _Compiled:
    """One schema document made ready for validation, for one strictness."""

    document: dict[str, Any]
    uri: str
    key: str
    validator_class: type[Validator]
    registry: Registry[Any]
    owners: dict[int, str]


def _owners(defs: Mapping[str, Any]) -> dict[int, str]:
    """Map each subschema (by identity) to the definition it belongs to."""
    owners: dict[int, str] = {}

    def walk(node: object, name: str) -> None:
        if isinstance(node, dict):
            owners.setdefault(id(node), name)
            for value in node.values():
                walk(value, name)
        elif isinstance(node, list):
            for value in node:
                walk(value, name)

    for name, schema in defs.items():
        walk(schema, name.removeprefix(FRAGMENT_PREFIX))
    return owners


@cache
def _compiled(source: SchemaSource, strict: bool) -> _Compiled:
    document = strict_schema(source) if strict else load_schema(source)
    # Deferred: jsonschema and referencing (2-3 MB) load at the first document compiled, not
    # in a daemon that has validated nothing yet.
    from referencing import Registry
    from referencing.jsonschema import specification_with

    named = str(document.get("$schema"))
    name = _DIALECT_NAMES.get(named)
    if name is None:
        raise ValueError(f"the {source} schema names an unexpected $schema: {named!r}")
    cls = dialect(name)
    # Checked once per document (which covers every definition in it), never per instance.
    check_schema(cls, document)
    uri = document.get("$id") or f"urn:mcpx:schema:{source.value}"
    resource: Resource[Any] = specification_with(named).create_resource(document)
    # No retrieval function: a reference that is not in this one document
    # raises instead of reaching for the network.
    registry: Registry[Any] = Registry().with_resource(uri, resource)
    key = _definitions_key(document)
    return _Compiled(
        document=document,
        uri=uri,
        key=key,
        validator_class=cls,
        registry=registry,
        owners=_owners(document[key]),
    )


def validator(source: SchemaSource, definition: str, *, strict: bool = True) -> Validator:
    """
    A compiled validator for one named definition of C{source}'s schema.

    It is built the first time it is asked for and cached: asking again with
    the same arguments returns the same object.  The JSON Schema draft is the
    one the document's C{$schema} names.

    @param strict: refuse properties the definition never declared (see
        L{mcpx.spec.open_places.OPEN_PLACES} for what stays open); C{False} gives the schema as
        published.
    @raise UnknownDefinition: C{source} has no definition of that name.
    """
    return _validator(source, definition, strict)


@cache
def _validator(source: SchemaSource, definition: str, strict: bool) -> Validator:
    if definition not in definitions(source):
        raise UnknownDefinition(source, definition)
    compiled = _compiled(source, strict)
    reference = {"$ref": f"{compiled.uri}#/{compiled.key}/{definition}"}
    built: Validator = compiled.validator_class(reference, registry=compiled.registry)
    return built


def violations(
    instance: object, source: SchemaSource, definition: str, *, strict: bool = True
) -> list[str]:
    """
    Every way C{instance} fails C{definition} of C{source}, one line each.

    Each line starts with the JSON path of the offending value, for example
    C{result.structuredContent: additional property not allowed in 2025-03-26
    CallToolResult}.  An empty list means the instance is valid.

    @raise UnknownDefinition: C{source} has no definition of that name.
    """
    checker = _validator(source, definition, strict)
    compiled = _compiled(source, strict)
    problems: list[str] = []
    value: Any = instance
    for error in checker.iter_errors(value):
        problems.extend(_describe(error, compiled, source, definition))
    return problems


def validate(
    instance: object, source: SchemaSource, definition: str, *, strict: bool = True
) -> None:
    """
    Check C{instance} against C{definition} of C{source}.

    @raise SchemaViolation: listing every problem found, with its JSON path.
    @raise UnknownDefinition: C{source} has no definition of that name.
    """
    problems = violations(instance, source, definition, strict=strict)
    if problems:
        raise SchemaViolation(source, definition, problems, strict)


_IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*\Z")
_UNEXPECTED = re.compile(
    r"(?:Additional|Unevaluated) properties are not allowed \((.*) (?:was|were) unexpected\)\Z",
    re.S,
)
_NOT_ALLOWED = "additional property not allowed"
#: Longest single problem line; a huge payload should not make a huge log line.
_LINE_LIMIT = 400


def _json_path(path: Iterable[str | int]) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _IDENTIFIER.match(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part)}]"
    return text or "(root)"


def _unexpected(message: str) -> list[str] | None:
    """The property names an additional/unevaluated-properties error lists."""
    found = _UNEXPECTED.match(message)
    if found is None:
        return None
    try:
        names = ast.literal_eval(f"[{found.group(1)}]")
    except (ValueError, SyntaxError):
        return None
    return [str(name) for name in names]


def _describe(
    error: ValidationError, compiled: _Compiled, source: SchemaSource, definition: str
) -> Iterator[str]:
    schema = error.schema
    owner = compiled.owners.get(id(schema), definition)
    where = f"in {source} {owner}"
    path = list(error.absolute_path)
    if (
        error.validator in ("additionalProperties", "unevaluatedProperties")
        and error.validator_value is False
    ):
        names = _unexpected(error.message)
        if names is not None:
            for name in names:
                yield f"{_json_path([*path, name])}: {_NOT_ALLOWED} {where}"
            return
    if error.validator in ("anyOf", "oneOf") and error.context:
        yield _clip(_describe_alternatives(error, compiled, source, definition, where))
        return
    yield _clip(f"{_json_path(path)}: {error.message} {where}")


def _describe_alternatives(
    error: ValidationError, compiled: _Compiled, source: SchemaSource, definition: str, where: str
) -> str:
    """
    Say why none of the alternatives matched, naming the closest one.

    The closest is the alternative whose discriminator (a C{const} such as
    C{type: "text"}) matches, with the fewest unknown fields (an unknown field
    hints at the wrong alternative more than a missing one does), then the
    fewest problems.
    """
    branches: list[Any] = error.validator_value if isinstance(error.validator_value, list) else []
    failures: dict[int, list[ValidationError]] = {}
    for sub in error.context or ():
        index = sub.relative_schema_path[0] if sub.relative_schema_path else -1
        failures.setdefault(index if isinstance(index, int) else -1, []).append(sub)
    scored = []
    for index, errors in failures.items():
        lines = [line for sub in errors for line in _describe(sub, compiled, source, definition)]
        mismatched = any(sub.validator == "const" for sub in errors)
        unknown = sum(_NOT_ALLOWED in line for line in lines)
        scored.append(((mismatched, unknown, len(lines)), index, lines))
    scored.sort(key=lambda item: item[0])
    path = _json_path(error.absolute_path)
    head = f"{path}: matches none of the {len(branches)} alternatives {where}"
    if not scored:
        return head
    best = [item for item in scored if item[0] == scored[0][0]]
    parts = []
    for _, index, lines in best:
        branch = branches[index] if 0 <= index < len(branches) else None
        target = local_target(branch.get("$ref")) if isinstance(branch, dict) else None
        label = (target or f"alternative {index + 1}").removeprefix(FRAGMENT_PREFIX)
        parts.append(f"as {label}: " + "; ".join(lines))
    return head + "; closest " + " | ".join(parts)


def _clip(line: str) -> str:
    return line if len(line) <= _LINE_LIMIT else line[: _LINE_LIMIT - 3] + "..."
