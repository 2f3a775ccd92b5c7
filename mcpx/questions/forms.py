# -*- test-case-name: tests.questions.test_forms -*-
"""
Elicitation forms: reading a C{requestedSchema}, and checking what a person answered.

An elicitation in form mode carries a restricted JSON Schema (2025-11-25): a flat object whose
properties are each a string (with optional length bounds and one of four formats), a number
or integer (with optional bounds), a boolean, a single choice (C{enum}, C{oneOf} of C{const}
with titles, or the legacy C{enumNames}) or a multiple choice (an array whose C{items} hold an
C{enum} or an C{anyOf} of C{const}).  L{fields} reads such a schema into L{FormField}s, which
the CLI renders as a form; L{check_content} says whether an answer fits before it goes
upstream; L{coerce} turns what someone typed into the value of one field.

Every reason is one line that starts with the field's name, so it can be shown as it is.
Answering is not a hot path, so each check builds its small validator afresh.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from datetime import date, datetime
from functools import cache
from typing import TYPE_CHECKING, Any, TypeGuard

from attrs import frozen

from mcpx.spec.safe_schema import dialect

if TYPE_CHECKING:
    from jsonschema import FormatChecker, ValidationError

_SCALARS = ("string", "number", "integer", "boolean")

_TYPE_WORDS = {
    "string": "text",
    "number": "a number",
    "integer": "a whole number",
    "boolean": "true or false",
    "array": "a list",
}

_FORMAT_WORDS = {
    "email": "email address",
    "uri": "URI",
    "date": "date (YYYY-MM-DD)",
    "date-time": "date-time (such as 2025-01-31T09:30:00Z)",
}

_TRUE = {"y", "yes", "true", "t", "1", "on"}
_FALSE = {"n", "no", "false", "f", "0", "off"}


@frozen
class FormField:
    """
    One field of an elicitation form.

    @ivar name: the property name the answer uses.
    @ivar type: C{"string"}, C{"number"}, C{"integer"}, C{"boolean"} or C{"array"} (a
        multiple choice; L{multiple} is then true).
    @ivar required: the form cannot be accepted without it.
    @ivar default: the schema's default, as given (C{None} when there is none).
    @ivar choices: C{(value, title)} pairs for a single or multiple choice; empty otherwise.
    @ivar format: C{"email"}, C{"uri"}, C{"date"} or C{"date-time"} for checked text; other
        formats are kept for display but not enforced.
    """

    name: str
    type: str
    required: bool = False
    title: str | None = None
    description: str | None = None
    default: Any = None
    choices: tuple[tuple[str, str], ...] = ()
    multiple: bool = False
    format: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    min_items: int | None = None
    max_items: int | None = None

    @property
    def label(self) -> str:
        """What to call the field in front of a person: its title, else its name."""
        return self.title or self.name

    def json_schema(self) -> dict[str, Any]:
        """A plain JSON Schema for this field's value, with titles and legacy forms gone."""
        values = [value for value, _ in self.choices]
        if self.multiple:
            schema: dict[str, Any] = {
                "type": "array",
                "items": {"type": "string", "enum": values},
            }
            _put(schema, "minItems", self.min_items)
            _put(schema, "maxItems", self.max_items)
            return schema
        schema = {"type": self.type}
        if values:
            schema["enum"] = values
        _put(schema, "format", self.format)
        _put(schema, "minLength", self.min_length)
        _put(schema, "maxLength", self.max_length)
        _put(schema, "minimum", self.minimum)
        _put(schema, "maximum", self.maximum)
        return schema


def fields(schema: Mapping[str, Any]) -> list[FormField]:
    """
    The fields of a C{requestedSchema}, in the order the schema lists them.

    @raise ValueError: the schema is not a valid elicitation form; the message says why.
    """
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise ValueError('the form is not an object schema ("type": "object")')
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        raise ValueError("the form has no properties object")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
        raise ValueError("the form's required is not a list of names")
    for name in required:
        if name not in properties:
            raise ValueError(f"{name}: required, but the form does not define it")
    return [_field(name, spec, name in required) for name, spec in properties.items()]


def check_content(schema: Mapping[str, Any], content: Any) -> str | None:
    """
    Whether C{content} answers the form C{schema}: C{None} when it does, else a reason.

    Beyond JSON Schema, a name the form does not define is refused: it is most likely a typo,
    and the server asked for exactly these fields.
    """
    try:
        form = fields(schema)
    except ValueError as e:
        return f"the requested schema is invalid: {e}"
    if not isinstance(content, Mapping):
        return "the content is not an object of field values"
    known = {field.name for field in form}
    for name in content:
        if name not in known:
            return f"{name}: not a field of this form"
    for field in form:
        if field.name in content:
            reason = _check_value(field, content[field.name])
            if reason is not None:
                return reason
        elif field.required:
            return f"{field.name}: a value is required"
    return None


def coerce(field: FormField, text: str) -> Any:
    """
    The value of C{field} for what a person typed, checked against the field.

    Booleans take yes/no (y/n, true/false, 1/0); choices take the value, its title or its
    number in the list (1-based), several separated by commas for a multiple choice.  Empty
    input is for the caller to read as "use the default" or "leave out" before calling this.

    @raise ValueError: the text does not give a value that fits; the message says why.
    """
    value: Any
    stripped = text.strip()
    if field.multiple:
        value = [_pick(field, part.strip()) for part in stripped.split(",") if part.strip()]
    elif field.choices:
        value = _pick(field, stripped)
    elif field.type == "boolean":
        if stripped.lower() in _TRUE:
            value = True
        elif stripped.lower() in _FALSE:
            value = False
        else:
            raise ValueError(f"{field.name}: answer yes or no")
    elif field.type == "integer":
        try:
            value = int(stripped)
        except ValueError:
            raise ValueError(f"{field.name}: {_show(stripped)} is not a whole number") from None
    elif field.type == "number":
        value = _number(field, stripped)
    else:
        value = text
    reason = _check_value(field, value)
    if reason is not None:
        raise ValueError(reason)
    return value


def _field(name: str, spec: Any, required: bool) -> FormField:
    if not isinstance(spec, Mapping):
        raise ValueError(f"{name}: not a schema object")
    kind = spec.get("type")
    common: dict[str, Any] = {
        "name": name,
        "required": required,
        "title": _text(spec.get("title")),
        "description": _text(spec.get("description")),
        "default": spec.get("default"),
    }
    if kind == "array":
        items = spec.get("items")
        if not isinstance(items, Mapping):
            raise ValueError(f"{name}: a list field needs items with choices")
        return FormField(
            type="array",
            choices=_choices(name, items),
            multiple=True,
            min_items=_count(name, spec, "minItems"),
            max_items=_count(name, spec, "maxItems"),
            **common,
        )
    if kind not in _SCALARS:
        raise ValueError(
            f"{name}: type {json.dumps(kind)} is not allowed in a form "
            "(string, number, integer, boolean, or array of choices)"
        )
    if kind == "string":
        fmt = spec.get("format")
        if fmt is not None and not isinstance(fmt, str):
            raise ValueError(f"{name}: format is not a string")
        return FormField(
            type="string",
            choices=_choices(name, spec),
            format=fmt,
            min_length=_count(name, spec, "minLength"),
            max_length=_count(name, spec, "maxLength"),
            **common,
        )
    if kind in ("number", "integer"):
        return FormField(
            type=kind,
            minimum=_bound(name, spec, "minimum"),
            maximum=_bound(name, spec, "maximum"),
            **common,
        )
    return FormField(type="boolean", **common)


def _choices(name: str, spec: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The C{(value, title)} pairs of a choice, from whichever of its spellings is used."""
    if "enum" in spec:
        values = spec["enum"]
        if not _strings(values) or not values:
            raise ValueError(f"{name}: enum is not a list of strings")
        names = spec.get("enumNames")
        titles: list[str] = names if _strings(names) and len(names) == len(values) else values
        return tuple(zip(values, titles, strict=True))
    options = spec.get("oneOf", spec.get("anyOf"))
    if options is None:
        if spec.get("type") == "string":
            return ()
        raise ValueError(f"{name}: a list field needs items with enum or anyOf choices")
    if not isinstance(options, list) or not options:
        raise ValueError(f"{name}: the choices are not a list")
    pairs = []
    for option in options:
        if not isinstance(option, Mapping) or not isinstance(option.get("const"), str):
            raise ValueError(f"{name}: a choice has no string const")
        pairs.append((option["const"], _text(option.get("title")) or option["const"]))
    return tuple(pairs)


def _check_value(field: FormField, value: Any) -> str | None:
    from jsonschema.exceptions import best_match  # loaded by dialect, just below

    validator = dialect("2020-12")(field.json_schema(), format_checker=_formats())
    error = best_match(validator.iter_errors(value))
    return None if error is None else _reason(field, error)


#: What a value that fails one JSON Schema keyword is told, from (the value as shown,
#: the keyword's limit); the field's name goes first.
_REASONS: Mapping[str, Callable[[str, Any], str]] = {
    "type": lambda shown, limit: f"{shown} is not {_TYPE_WORDS.get(str(limit), str(limit))}",
    "enum": lambda shown, limit: f"{shown} is not one of {_listing(limit)}",
    "minimum": lambda shown, limit: f"{shown} is less than the minimum {_show(limit)}",
    "maximum": lambda shown, limit: f"{shown} is more than the maximum {_show(limit)}",
    "minLength": lambda shown, limit: f"{shown} is shorter than {limit} characters",
    "maxLength": lambda shown, limit: f"{shown} is longer than {limit} characters",
    "minItems": lambda shown, limit: f"choose at least {limit}",
    "maxItems": lambda shown, limit: f"choose at most {limit}",
    "format": lambda shown, limit: f"{shown} is not a valid {_FORMAT_WORDS.get(str(limit), limit)}",
}


def _reason(field: FormField, error: ValidationError) -> str:
    reason = _REASONS.get(str(error.validator))
    if reason is None:
        return f"{field.name}: {error.message}"
    return f"{field.name}: {reason(_show(error.instance), error.validator_value)}"


def _pick(field: FormField, text: str) -> str:
    for value, _ in field.choices:
        if text == value:
            return value
    for value, title in field.choices:
        if text.casefold() == title.casefold():
            return value
    if text.isdigit() and 1 <= int(text) <= len(field.choices):
        return field.choices[int(text) - 1][0]
    return text  # left for the check to refuse, with the list of choices


def _number(field: FormField, text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise ValueError(f"{field.name}: {_show(text)} is not a number")
    return number


def _count(name: str, spec: Mapping[str, Any], key: str) -> int | None:
    count: int | None = _limit(name, spec, key, _is_count, "a whole number of at least 0")
    return count


def _bound(name: str, spec: Mapping[str, Any], key: str) -> float | None:
    bound: float | None = _limit(name, spec, key, _is_number, "a number")
    return bound


def _is_count(value: object) -> bool:
    return isinstance(value, int) and value >= 0


def _is_number(value: object) -> bool:
    return isinstance(value, int | float)


def _limit(
    name: str, spec: Mapping[str, Any], key: str, fits: Callable[[object], bool], what: str
) -> Any:
    """C{spec}'s C{key}, or C{None}: refused unless it C{fits} (a boolean never does)."""
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not fits(value):
        raise ValueError(f"{name}: {key} is not {what}")
    return value


def _put(schema: dict[str, Any], key: str, value: object) -> None:
    if value is not None:
        schema[key] = value


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _strings(value: Any) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _show(value: Any) -> str:
    """A value as JSON on one line, shortened when long."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _listing(values: Any) -> str:
    shown = [_show(value) for value in values]
    return ", ".join(shown) if len(shown) <= 10 else ", ".join(shown[:10]) + ", ..."


_EMAIL = re.compile(r"[^@\s]+@[^@\s.][^@\s]*")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def _is_email(value: object) -> bool:
    return not isinstance(value, str) or _EMAIL.fullmatch(value) is not None


def _is_uri(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if any(c.isspace() for c in value) or ":" not in value:
        return False
    scheme, rest = value.split(":", 1)
    return _SCHEME.fullmatch(scheme) is not None and bool(rest)


def _iso_checker(
    shape: re.Pattern[str], parse: Callable[[str], object]
) -> Callable[[object], bool]:
    """A format check: a string of C{shape} that C{parse} reads is a valid one."""

    def valid(value: object) -> bool:
        if not isinstance(value, str):
            return True
        if shape.fullmatch(value) is None:
            return False
        try:
            parse(value)
        except ValueError:
            return False
        return True

    return valid


_is_date = _iso_checker(_DATE, date.fromisoformat)
_is_date_time = _iso_checker(
    _DATE_TIME, lambda value: datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
)


# Our own checkers for exactly the four formats an elicitation may use: jsonschema's built-in
# ones depend on optional packages and silently pass when those are missing.
@cache
def _formats() -> FormatChecker:
    from jsonschema import FormatChecker  # deferred with jsonschema (_check_value)

    checker = FormatChecker(formats=())
    checker.checks("email")(_is_email)
    checker.checks("uri")(_is_uri)
    checker.checks("date")(_is_date)
    checker.checks("date-time")(_is_date_time)
    return checker
