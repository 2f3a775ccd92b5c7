# -*- test-case-name: tests.settings.test_declarations -*-
"""
The closed set of kinds a setting can have, each with its readers and writers.

A value arrives as text (an environment variable or a command-line flag) or as a
JSON value (the config file).  Lists are comma-separated in text and either a JSON
array or the same comma-separated string in the file.  Every reader takes a
C{where}, the place the value came from, and puts it at the front of its error.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Sequence

from mcpx.settings.durations import format_duration, parse_duration
from mcpx.settings.endpoints import split_endpoint
from mcpx.settings.errors import SettingsError
from mcpx.settings.oauth_resource import OAuthResource, parse_oauth_resource
from mcpx.spec.revision import Revision, UnknownRevision

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})

#: An endpoint string starts with its type (C{tcp:}, C{unix:}, C{ssl:}, or one a
#: plugin adds).  The rest is checked by Twisted when the daemon listens: parsing
#: it fully here would mean loading certificate files while reading settings.
_ENDPOINT = re.compile(r"[A-Za-z][A-Za-z0-9+_-]*:\S*")


class Kind(enum.Enum):
    """What a setting holds, which decides how it is read and written."""

    DURATION = "duration"
    INTEGER = "integer"
    BOOLEAN = "boolean"
    STRING = "string"
    STRING_LIST = "string list"
    REVISION = "revision"
    REVISION_LIST = "revision list"
    ENDPOINT_LIST = "endpoint list"
    CHOICE = "choice"
    #: One of the choices, or the object form of L{mcpx.settings.oauth_resource}.
    AUTH = "auth"

    @property
    def metavar(self) -> str:
        """The placeholder shown for the value in C{--help}."""
        return _METAVARS[self]

    def parse_text(
        self, text: str, where: str, *, minimum: int | None = None, choices: Sequence[str] = ()
    ) -> object:
        """
        Read a value written as text.

        @param where: named at the front of any error, e.g. C{MCPX_MCP_SPEC=x}.
        @raise SettingsError: when C{text} is not a value of this kind.
        """
        try:
            return _parse_text(self, text.strip(), minimum, choices)
        except UnknownRevision as e:
            raise SettingsError(f"{where}: {e}") from None
        except SettingsError as e:
            raise SettingsError(f"{where}: {e}") from None

    def parse_json(
        self, value: object, where: str, *, minimum: int | None = None, choices: Sequence[str] = ()
    ) -> object:
        """
        Read a value from the JSON config file.

        Strings go through L{parse_text}, so the file accepts everything a flag
        does; JSON arrays, numbers and booleans are taken where the kind has them.

        @raise SettingsError: when C{value} is not a value of this kind.
        """
        if isinstance(value, str):
            return self.parse_text(value, where, minimum=minimum, choices=choices)
        if self is Kind.AUTH and isinstance(value, dict):
            return parse_oauth_resource(value, where)
        if self is Kind.DURATION and isinstance(value, int | float) and not isinstance(value, bool):
            raise SettingsError(
                f"{where}: a bare number is not a duration (MCP counts milliseconds, most "
                f'tools count seconds); write it as a string with a unit, e.g. "{value}s"'
            )
        if self is Kind.INTEGER and isinstance(value, int) and not isinstance(value, bool):
            return self.parse_text(str(value), where, minimum=minimum)
        if self is Kind.BOOLEAN and isinstance(value, bool):
            return value
        if self is Kind.REVISION and value is None:
            return None
        if self in _LISTS and isinstance(value, list):
            if not all(isinstance(item, str) for item in value):
                raise SettingsError(f"{where}: every item of a {self.value} must be a string")
            return self.parse_text(",".join(value), where)
        raise SettingsError(f"{where}: expected {_EXPECTED[self]}, not {_json_type(value)}")

    def to_text(self, value: object) -> str:
        """
        Write a value as text, as it would be given in a flag or a variable.

        Reading the result with L{parse_text} gives the value back.
        """
        if self is Kind.DURATION:
            assert isinstance(value, float | int)
            return format_duration(value)
        if self is Kind.BOOLEAN:
            return "true" if value else "false"
        if self is Kind.REVISION:
            return "" if value is None else str(value)
        if self in _LISTS:
            assert isinstance(value, tuple)
            return ",".join(str(item) for item in value)
        if isinstance(value, OAuthResource):
            return json.dumps(self.to_json(value), separators=(",", ":"))
        return str(value)

    def to_json(self, value: object) -> object:
        """The value as it would be written in the JSON config file."""
        if self is Kind.DURATION:
            return self.to_text(value)
        if self is Kind.REVISION:
            return None if value is None else str(value)
        if self in _LISTS:
            assert isinstance(value, tuple)
            return [str(item) for item in value]
        if isinstance(value, OAuthResource):
            return _oauth_json(value)
        return value


def _parse_text(kind: Kind, text: str, minimum: int | None, choices: Sequence[str]) -> object:
    if kind is Kind.DURATION:
        return parse_duration(text)
    if kind is Kind.INTEGER:
        try:
            number = int(text)
        except ValueError:
            raise SettingsError(f"invalid integer {text!r}; write a whole number") from None
        if minimum is not None and number < minimum:
            raise SettingsError(f"{number} is too small; the smallest allowed is {minimum}")
        return number
    if kind is Kind.BOOLEAN:
        folded = text.casefold()
        if folded in _TRUE:
            return True
        if folded in _FALSE:
            return False
        raise SettingsError(f"invalid boolean {text!r}; write true or false")
    if kind is Kind.STRING:
        return text
    if kind is Kind.AUTH and text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError:
            raise SettingsError("invalid JSON object for the oauth form") from None
        if not isinstance(value, dict):
            raise SettingsError("expected a JSON object for the oauth form")
        return parse_oauth_resource(value, "the object")
    if kind in (Kind.CHOICE, Kind.AUTH):
        if text not in choices:
            raise SettingsError(f"invalid choice {text!r}; choose one of: {', '.join(choices)}")
        return text
    if kind is Kind.REVISION:
        return Revision.parse(text) if text else None
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    if kind is Kind.REVISION_LIST:
        return Revision.parse_list(items)
    if kind is Kind.ENDPOINT_LIST:
        for item in items:
            if _ENDPOINT.fullmatch(item) is None:
                raise SettingsError(
                    f"invalid endpoint {item!r}; write a Twisted endpoint string such as "
                    "tcp:8899:interface=127.0.0.1 or unix:/path/to/socket"
                )
            _check_port(item)
    return items


def _check_port(item: str) -> None:
    """A C{tcp:} or C{ssl:} endpoint's port, the one part checked before listening."""
    parts = split_endpoint(item)
    if parts[0] not in ("tcp", "tcp6", "ssl"):
        return
    given = [part for part in parts[1:] if "=" not in part]
    given += [part.split("=", 1)[1] for part in parts[1:] if part.startswith("port=")]
    port = given[0] if given else ""
    if not port.isdigit() or int(port) > 65535:
        raise SettingsError(
            f"invalid endpoint {item!r}: the port must be a number from 0 to 65535 "
            f"(0 picks a free one), not {port!r}"
        )


def _oauth_json(value: OAuthResource) -> dict[str, object]:
    """The object form as written, the introspection secret masked: this is shown."""
    written: dict[str, object] = {
        "type": "oauth",
        "issuer": value.issuer,
        "audience": value.audience,
        "scopes": list(value.scopes),
    }
    if value.jwks_uri is not None:
        written["jwksUri"] = value.jwks_uri
    if value.introspection is not None:
        written["introspection"] = {
            "url": value.introspection.url,
            "clientId": value.introspection.client_id,
            "clientSecret": "********",
        }
    return written


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


_LISTS = frozenset({Kind.STRING_LIST, Kind.REVISION_LIST, Kind.ENDPOINT_LIST})

_METAVARS = {
    Kind.DURATION: "DURATION",
    Kind.INTEGER: "INTEGER",
    Kind.BOOLEAN: "BOOLEAN",
    Kind.STRING: "TEXT",
    Kind.STRING_LIST: "NAMES",
    Kind.REVISION: "REVISION",
    Kind.REVISION_LIST: "REVISIONS",
    Kind.ENDPOINT_LIST: "ENDPOINTS",
    Kind.CHOICE: "CHOICE",
    Kind.AUTH: "MODE",
}

_EXPECTED = {
    Kind.DURATION: 'a duration string such as "30s"',
    Kind.INTEGER: "a whole number",
    Kind.BOOLEAN: "true or false",
    Kind.STRING: "a string",
    Kind.STRING_LIST: "an array of strings",
    Kind.REVISION: 'a revision string such as "2025-06-18", or null',
    Kind.REVISION_LIST: "an array of revision strings",
    Kind.ENDPOINT_LIST: "an array of endpoint strings",
    Kind.CHOICE: "a string",
    Kind.AUTH: 'a string or an object with "type": "oauth"',
}
