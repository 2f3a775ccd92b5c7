# -*- test-case-name: tests.spec.test_safe_schema -*-
"""
The JSON Schema validators mcpx builds, each safe to run on the reactor.

Every validator mcpx makes (tool schemas in L{mcpx.policy.schemas}, the bundled MCP
schemas in L{mcpx.spec.schemas}, the inputs of the daemon's own operations in
L{mcpx.ops.op}, elicitation answers in L{mcpx.questions.forms}) is a jsonschema class
from L{dialect}: the draft-07 or 2020-12 validator
with the keywords that match regular expressions (C{pattern}, C{patternProperties},
C{additionalProperties} beside C{patternProperties}) evaluated by RE2, which matches in
time linear in the text, never by Python's C{re}, which backtracks and can take
exponential time (C{^(a|a)*$} on thirty characters takes minutes).  L{compile_pattern} is
the one way a pattern is compiled, for the quick paths too (L{mcpx.policy.precheck}).

A pattern RE2 cannot compile (lookarounds, backreferences, C{\\k<name>}, C{\\cX}) is
refused, never handed to C{re} instead.  ECMA-262, which JSON Schema's patterns are
written in, and RE2 differ in a few places; the common ones are made to agree:

  - C{\\uXXXX} (and a surrogate pair of them) and C{\\u{X...}} become RE2's C{\\x{...}};
  - C{\\d}, C{\\w} and C{\\s} are ASCII in RE2, as in ECMA-262 without the C{u} flag
    (C{\\s} leaves out the Unicode spaces and C{\\v});
  - C{$} matches at the very end only, as in ECMA-262 (Python's C{re} also matches
    before a final newline);
  - C{\\p{L}}, C{\\p{Greek}} and their C{\\P} work (RE2 knows general categories and
    scripts by their short names); C{\\p{Letter}} and C{\\p{Script=Greek}} are refused.

Linear is not yet cheap: matching costs about the text's length times the compiled
program's size, and a schema's other keywords cost work too (an C{enum} compares
against every entry, C{uniqueItems} compares items, C{anyOf} tries every branch, a
C{$ref} can lead back to branches already tried, an error message repeats the value at
fault).  So a check of an upstream's schema runs under L{metered}: the value is weighed
first, then each keyword charges steps (one, more for a C{$ref} and its length; its own
size for C{enum}, C{const} and C{required}, a long string by its length; the instance's
size for those that walk it; a match's length times its program size; each error the
weight of the value and the length of the message it repeats), and a check
that would spend more than its budget stops with L{TooCostly}, which the caller counts
as a failed check.  C{uniqueItems} is replaced by a linear one (jsonschema's compares
every pair of unsortable items).  Counting work rather than time gives the same answer
on a loaded machine as on an idle one; a step is about a microsecond of CPU, so the
budget (L{MAX_CHECK_STEPS}) keeps a check to about 50 ms: the costliest schemas we
measured (a C{$ref} chain fanning out through C{anyOf}, 20,000 pattern matches, a
300,000-value object against many branches, 20,000 items C{contains} through an C{anyOf}
of 100 C{const}s, C{uniqueItems} over 60,000 objects) stop at 15 to 55 ms of CPU, and
1,000 objects of ten properties pass in about 50.  Each branch of an C{anyOf},
C{oneOf} or C{allOf} costs steps of its own, as does weighing the instance.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

#: The longest regular expression compiled.
MAX_PATTERN_LENGTH: Final = 1_000
#: The largest RE2 program a pattern may compile to (C{a{1000}} is about 1,000).
MAX_PROGRAM_SIZE: Final = 5_000
#: RE2's memory for one pattern (its program and its DFA cache), in bytes: small, so that
#: a pattern too big is refused while it is being compiled, not after.
_RE2_MEMORY: Final = 256 << 10
#: The most steps one metered check may take (see L{metered}); a step is about a
#: microsecond of jsonschema's work.
MAX_CHECK_STEPS: Final = 50_000
#: Steps of a match before its length is counted (RE2 from Python costs a few
#: microseconds a call), of an error (jsonschema builds its message), and of a C{$ref}
#: (looked up in the registry).
_MATCH_STEPS: Final = 8
_ERROR_STEPS: Final = 3
_REF_STEPS: Final = 16
#: Characters of a C{$ref} resolved per step (on top of L{_REF_STEPS}): resolving one
#: walks and unquotes its pointer, about 3 ns a character.
_REF_CHARS_PER_STEP: Final = 250
#: Characters of an error message per step: building one repeats the values at fault
#: (the instance, an C{enum}'s entries, a C{required} name), about 1 to 2 ns a character.
_MESSAGE_CHARS_PER_STEP: Final = 400
#: Characters times program instructions matched per step: RE2 at its slowest (the
#: DFA out of memory, falling back to the NFA) goes through about 1 per 2 ns.  Most
#: patterns run 20 to 1,000 times faster, but a check must hold for the slowest.
_MATCH_UNITS_PER_STEP: Final = 500
#: Values of an instance weighed per step: a metered check walks its instance once to
#: weigh it, and each error message repeats the value at fault, which costs its weight.
_VALUES_PER_STEP: Final = 4
#: Values an instance's weighing walks through per step (it notes each container's weight
#: too: 60,000 objects took 30 ms of CPU to weigh).
_WEIGHED_PER_STEP: Final = 2
#: Characters of a string that weigh as much as one value.
_CHARS_PER_VALUE: Final = 100

Dialect = Literal["draft-07", "2020-12"]


class PatternRefused(ValueError):
    """A regular expression mcpx will not compile, with the reason."""


class TooCostly(Exception):
    """A metered check ran out of steps; the check has failed."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"checking it would take more than {limit} steps (a schema or value this "
            "costly is not checked)"
        )


_HEX = "0123456789abcdefABCDEF"


def _ecma_to_re2(pattern: str) -> str:
    """C{pattern} with ECMA-262's C{\\u} escapes spelled as RE2's C{\\x{...}}."""
    if "\\u" not in pattern:
        return pattern
    out: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        following = pattern[i + 1]
        if following != "u":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        braced = re.match(r"\{([0-9a-fA-F]{1,6})\}", pattern[i + 2 :])
        if braced is not None:
            out.append(f"\\x{{{braced.group(1)}}}")
            i += 2 + braced.end()
            continue
        digits = pattern[i + 2 : i + 6]
        if len(digits) != 4 or any(d not in _HEX for d in digits):
            raise PatternRefused("\\u must be followed by four hexadecimal digits")
        code = int(digits, 16)
        low = pattern[i + 8 : i + 12] if pattern[i + 6 : i + 8] == "\\u" else ""
        if 0xD800 <= code < 0xDC00 and len(low) == 4 and all(d in _HEX for d in low):
            second = int(low, 16)
            if 0xDC00 <= second < 0xE000:
                code = 0x10000 + ((code - 0xD800) << 10) + (second - 0xDC00)
                i += 6
        out.append(f"\\x{{{code:X}}}")
        i += 6
    return "".join(out)


@lru_cache(maxsize=2048)
def compile_pattern(pattern: str) -> Any:
    """
    C{pattern} (ECMA-262, as JSON Schema writes it) compiled by RE2; cached.

    @raise PatternRefused: it is too long, RE2 cannot compile it (lookarounds and
        backreferences among others), or it compiles to more than L{MAX_PROGRAM_SIZE}.
    """
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise PatternRefused(f"a pattern longer than {MAX_PATTERN_LENGTH} characters")
    compiled = compile_linear(_ecma_to_re2(pattern))
    if compiled.programsize > MAX_PROGRAM_SIZE:
        raise PatternRefused(
            f"it compiles to {compiled.programsize} instructions, more than {MAX_PROGRAM_SIZE}"
        )
    return compiled


@lru_cache(maxsize=1024)
def compile_linear(pattern: str, *, dot_all: bool = False) -> Any:
    """
    C{pattern}, in RE2's own syntax, compiled by RE2 (which matches in linear time);
    cached.  Every regular expression made from text a peer sends is compiled here.

    @param dot_all: C{.} matches a newline too.
    @raise PatternRefused: RE2 cannot compile it, or not within its memory.
    """
    import re2  # type: ignore[import-untyped]  # deferred: loaded at the first pattern

    options = re2.Options()
    options.log_errors = False
    options.max_mem = _RE2_MEMORY
    options.dot_nl = dot_all
    try:
        return re2.compile(pattern, options)
    except re2.error as e:
        reason = e.args[0].decode("utf-8", "replace") if e.args else str(e)
        raise PatternRefused(
            f"not a pattern mcpx can match in linear time (RE2 refuses it: {reason[:120]}); "
            "lookarounds and backreferences are not supported"
        ) from None


def escape(text: str) -> str:
    """C{text} as an RE2 pattern matching exactly it."""
    import re2  # deferred, as in compile_linear

    escaped: str = re2.escape(text)
    return escaped


class _Meter:
    """The steps one check has left, and the weight of each value of its instance."""

    __slots__ = ("left", "limit", "weights")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit
        self.weights: dict[int, int] = {}

    def charge(self, steps: int) -> None:
        self.left -= steps
        if self.left < 0:
            raise TooCostly(self.limit)

    def weigh(self, instance: object) -> None:
        """
        Note the weight of every array and object in C{instance} (its values, and its
        strings' characters per L{_CHARS_PER_VALUE}), charging the walk as it goes.
        """
        containers: list[dict[str, Any] | list[Any]] = []
        stack = [instance]
        seen = 0
        while stack:
            node = stack.pop()
            seen += 1
            if seen % _WEIGHED_PER_STEP == 0:
                self.charge(1)
            if isinstance(node, dict):
                containers.append(node)
                stack.extend(node.values())
            elif isinstance(node, list):
                containers.append(node)
                stack.extend(node)
        weights = self.weights
        for container in reversed(containers):
            items: Iterable[Any] = container.values() if isinstance(container, dict) else container
            weights[id(container)] = 1 + sum(self.weight(item) for item in items)

    def weight(self, value: object) -> int:
        """The weight of C{value}: 1, or more for a long string, or as L{weigh} found."""
        if isinstance(value, str):
            return 1 + len(value) // _CHARS_PER_VALUE
        if isinstance(value, dict | list):
            return self.weights.get(id(value), 1 + len(value))
        return 1


_meter: ContextVar[_Meter | None] = ContextVar("mcpx_schema_meter", default=None)


@contextmanager
def metered(limit: int = MAX_CHECK_STEPS, instance: object = None) -> Iterator[None]:
    """
    Meter every validator of L{dialect} used inside: past C{limit} steps the keyword at
    work raises L{TooCostly}.  Consume C{iter_errors} inside the block.

    @param instance: the value about to be checked, weighed first (which may raise
        L{TooCostly} too), so that an error repeating a big part of it is charged for it.
    """
    meter = _Meter(limit)
    meter.weigh(instance)
    token = _meter.set(meter)
    try:
        yield
    finally:
        _meter.reset(token)


def _charge(steps: int) -> None:
    meter = _meter.get()
    if meter is not None:
        meter.charge(steps)


def search(pattern: str, text: str) -> bool:
    """Whether C{pattern} matches somewhere in C{text} (JSON Schema's C{pattern}), metered."""
    compiled = compile_pattern(pattern)
    _charge(_MATCH_STEPS + len(text) * compiled.programsize // _MATCH_UNITS_PER_STEP)
    return compiled.search(text) is not None


def _size(value: object) -> int:
    """
    How many values C{value} holds, itself included, a string weighing one value per
    L{_CHARS_PER_VALUE} of its characters.
    """
    count = 0
    stack = [value]
    while stack:
        node = stack.pop()
        count += 1
        if isinstance(node, str):
            count += len(node) // _CHARS_PER_VALUE
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


def _unique_key(value: object) -> object:
    """A hashable key equal for values JSON Schema counts equal (C{1 == 1.0}, not C{True})."""
    _charge(1)
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, dict):
        return ("o", frozenset((k, _unique_key(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("a", tuple(_unique_key(v) for v in value))
    return ("s", value)


# The keywords that match patterns, each as jsonschema's own but through search().


def _pattern(validator: Validator, patrn: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not search(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in patterns.items():
        for k, v in instance.items():
            if search(patrn, k):
                yield from validator.descend(v, subschema, path=k, schema_path=patrn)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> Iterator[str]:
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    for name in instance:
        if name not in properties and not any(search(p, name) for p in patterns):
            yield name


def _additional_properties(
    validator: Any, aP: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[Any]:
    from jsonschema._utils import extras_msg
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    extras = set(_additional(instance, schema))
    if validator.is_type(aP, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], aP, path=extra)
    elif not aP and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {patterns}")
        else:
            error = "Additional properties are not allowed (%s %s unexpected)"
            yield ValidationError(error % extras_msg(sorted(extras, key=str)))


def _unique_items(validator: Validator, uI: Any, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not uI or not validator.is_type(instance, "array"):
        return
    seen: set[object] = set()
    for item in instance:
        key = _unique_key(item)
        if key in seen:
            yield ValidationError(f"{instance!r} has non-unique elements")
            return
        seen.add(key)


#: The keywords replaced, the same in both dialects.
_REPLACED: Final[Mapping[str, Callable[..., Iterator[Any]]]] = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "uniqueItems": _unique_items,
}

#: Keywords whose value is compared whole against the instance.
_COMPARED: Final = frozenset({"enum", "const"})
#: Keywords that try each of a list of subschemas, and the steps each is charged on top
#: of its own keywords' (setting up a subschema's check costs several microseconds: 20,000
#: items C{contains} through an C{anyOf} of 100 C{const}s took 113 ms of CPU in 50,000
#: steps when each branch cost nothing of its own).
_BRANCHING: Final = frozenset({"anyOf", "oneOf", "allOf"})
_BRANCH_STEPS: Final = 4
#: Keywords that look a schema up.
_REFERENCES: Final = frozenset({"$ref", "$dynamicRef"})
#: Keywords that go through every property or item of the instance themselves, not
#: only through a check of each (which is charged on its own).
_WALKING: Final = frozenset(
    {"additionalProperties", "unevaluatedProperties", "unevaluatedItems", "dependentRequired"}
)


def _metering(
    keyword: str, check: Callable[..., Iterable[ValidationError] | None]
) -> Callable[..., Iterable[ValidationError] | None]:
    """C{check}, charging its steps and its errors' to the meter of L{metered}, if any."""
    compared = keyword in _COMPARED
    walking = keyword in _WALKING
    reference = keyword in _REFERENCES
    branching = keyword in _BRANCHING
    base = _REF_STEPS if reference else 1

    def metered_check(
        validator: Validator, value: Any, instance: Any, schema: Any
    ) -> Iterable[ValidationError] | None:
        meter = _meter.get()
        if meter is None:
            return check(validator, value, instance, schema)
        steps = base
        # An error message repeats the instance, and an enum's entries or a required
        # name: its errors are charged when what it repeats is big.
        heavy = False
        if compared or keyword == "required":
            size = _size(value)
            steps += size
            heavy = size > 1 + len(value) if isinstance(value, list) else size > 1
        elif reference and isinstance(value, str):
            steps += len(value) // _REF_CHARS_PER_STEP
        elif isinstance(value, list | dict):
            steps += len(value) * (1 + _BRANCH_STEPS if branching else 1)
        if isinstance(instance, list | dict):
            if walking:
                steps += len(instance)
            big = True
        else:
            big = heavy or (isinstance(instance, str) and len(instance) > _CHARS_PER_VALUE)
        meter.left -= steps
        if meter.left < 0:
            raise TooCostly(meter.limit)
        errors = check(validator, value, instance, schema)
        return _charged(meter, errors, instance) if big and errors is not None else errors

    return metered_check


def _charged(
    meter: _Meter, errors: Iterable[ValidationError], instance: object
) -> Iterator[ValidationError]:
    steps = _ERROR_STEPS + meter.weight(instance) // _VALUES_PER_STEP
    for error in errors:
        # Only an error this keyword made repeats this instance; one from a keyword
        # below it (its schema path already started) was charged where it was made.
        if not error.relative_schema_path:
            meter.charge(steps + len(error.message) // _MESSAGE_CHARS_PER_STEP)
        yield error


_CLASS_NAMES: Final[Mapping[Dialect, str]] = {
    "draft-07": "Draft7Validator",
    "2020-12": "Draft202012Validator",
}


@cache
def dialect(name: Dialect) -> type[Validator]:
    """
    The jsonschema validator class of C{name} that mcpx uses: patterns matched by RE2,
    every keyword metered inside L{metered}.
    """
    # Deferred: jsonschema and referencing (2-3 MB) load at the first schema compiled.
    import jsonschema
    from jsonschema.validators import extend

    base: type[Validator] = getattr(jsonschema, _CLASS_NAMES[name])
    keywords = {**base.VALIDATORS, **_REPLACED}
    made: type[Validator] = extend(  # type: ignore[no-untyped-call]
        base, {keyword: _metering(keyword, check) for keyword, check in keywords.items()}
    )
    return made


def _regex_format(instance: object) -> bool:
    if isinstance(instance, str):
        compile_pattern(instance)
    return True


def check_schema(validator_class: type[Validator], schema: Mapping[str, Any]) -> None:
    """
    Check C{schema} against its dialect's meta-schema, with each C{pattern} (format
    C{regex}) compiled by L{compile_pattern} rather than by Python's C{re}.

    @raise jsonschema.exceptions.SchemaError: it is not a valid schema.
    """
    checking: Any = validator_class  # jsonschema's protocol leaves out format_checker
    checking.check_schema(schema, format_checker=_meta_formats())


@cache
def _meta_formats() -> Any:
    from jsonschema import FormatChecker

    checker = FormatChecker()
    checker.checks("regex", raises=PatternRefused)(_regex_format)
    return checker
