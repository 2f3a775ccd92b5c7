# -*- test-case-name: tests.settings.test_server_policy -*-
"""
A server's policy, as its config entry and the top-level C{"serverDefaults"} give it.

    "notes": {"command": "…",
              "validate": {"input": "enforce", "output": "warn"},
              "tools": {"allow": ["*"], "deny": ["drop_*"], "confirm": ["delete_*"]},
              "confirmDestructive": true,
              "sampling": {"mode": "allow", "maxTokens": 4096, "includeContext": false}}

Each key an entry gives wins over the same key of C{serverDefaults} (per inner key:
an entry's C{"validate": {"output": "enforce"}} keeps the default's C{input}).  The
policy is kept apart from the server itself, so changing it on reload does not
restart the server.
"""

from __future__ import annotations

import enum
import fnmatch
import re
from collections.abc import Mapping
from typing import Any, Final, NoReturn

from attrs import field, frozen

from mcpx.settings.errors import SettingsError, refuse_unknown

#: The keys of a server entry (and of C{serverDefaults}) that are policy.
POLICY_FIELDS: Final = ("validate", "tools", "confirmDestructive", "sampling")
_VALIDATE_FIELDS: Final = ("input", "output")
_TOOLS_FIELDS: Final = ("allow", "deny", "confirm")
_SAMPLING_FIELDS: Final = ("mode", "maxTokens", "includeContext")
#: The most patterns one list may hold: each is tried on every name listed.
MAX_PATTERNS: Final = 256


class Check(enum.Enum):
    """What C{validate.input} / C{validate.output} does with a schema's verdict."""

    ENFORCE = "enforce"
    WARN = "warn"
    OFF = "off"


class SamplingMode(enum.Enum):
    """C{sampling.mode}: what becomes of a server's C{sampling/createMessage}."""

    ALLOW = "allow"
    CONFIRM = "confirm"
    DENY = "deny"


def _glob(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


@frozen
class Patterns:
    """A list of glob patterns (C{*}, C{?}, C{[...]}), matched as one compiled expression."""

    patterns: tuple[str, ...] = ()
    _compiled: re.Pattern[str] | None = field(init=False, eq=False, repr=False, default=None)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_compiled", _glob(self.patterns))

    def match(self, name: str) -> str | None:
        """The first pattern C{name} matches, or C{None}."""
        if self._compiled is None or self._compiled.match(name) is None:
            return None
        return next(p for p in self.patterns if fnmatch.fnmatchcase(name, p))


@frozen
class ServerPolicy:
    """
    What the gateway checks on one server's calls and sampling requests.

    @ivar allow: the tools offered (C{None}: every tool); a name no pattern matches is
        hidden.
    @ivar deny: the tools hidden, whatever C{allow} says.
    @ivar confirm: the tools whose calls wait for the user's confirmation.
    @ivar confirm_destructive: confirm calls of tools whose annotations say
        C{destructiveHint} and not C{readOnlyHint}.
    @ivar sampling_max_tokens: the most C{maxTokens} a sampling request may ask for.
    @ivar sampling_include_context: whether C{includeContext} other than C{"none"} passes.
    """

    validate_input: Check = Check.ENFORCE
    validate_output: Check = Check.WARN
    allow: Patterns | None = None
    deny: Patterns = Patterns()
    confirm: Patterns = Patterns()
    confirm_destructive: bool = False
    sampling_mode: SamplingMode = SamplingMode.ALLOW
    sampling_max_tokens: int | None = None
    sampling_include_context: bool = False
    #: Whether any tool can be hidden (else listing and calling skip the check): told
    #: once, read by every pass-through call twice (its route, its admission).
    hides_any: bool = field(init=False, eq=False, repr=False, default=False)
    #: Whether any call can need confirmation (else L{confirmation_for} is not asked).
    confirms_any: bool = field(init=False, eq=False, repr=False, default=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "hides_any", self.allow is not None or bool(self.deny.patterns))
        object.__setattr__(
            self, "confirms_any", bool(self.confirm.patterns) or self.confirm_destructive
        )

    def hidden_by(self, tool: str) -> str | None:
        """The setting that hides C{tool} (C{tools.deny ["drop_*"]}), or C{None}."""
        denied = self.deny.match(tool)
        if denied is not None:
            return f"tools.deny pattern {denied!r}"
        if self.allow is not None and self.allow.match(tool) is None:
            return f"tools.allow (no pattern of {list(self.allow.patterns)!r} matches)"
        return None

    def confirmation_for(self, tool: str, annotations: object) -> str | None:
        """
        Why a call of C{tool} needs the user's confirmation, or C{None}.  Annotations
        are the upstream's claims: they can only add a confirmation, never remove one.
        """
        pattern = self.confirm.match(tool)
        if pattern is not None:
            return f"tools.confirm pattern {pattern!r}"
        if (
            self.confirm_destructive
            and isinstance(annotations, Mapping)
            and annotations.get("destructiveHint") is True
            and annotations.get("readOnlyHint") is not True
        ):
            return "confirmDestructive (the server marks it destructiveHint)"
        return None

    def to_json(self) -> dict[str, Any]:
        """As config-file JSON, every key given."""
        return {
            "validate": {"input": self.validate_input.value, "output": self.validate_output.value},
            "tools": {
                "allow": list(self.allow.patterns) if self.allow is not None else ["*"],
                "deny": list(self.deny.patterns),
                "confirm": list(self.confirm.patterns),
            },
            "confirmDestructive": self.confirm_destructive,
            "sampling": {
                "mode": self.sampling_mode.value,
                "maxTokens": self.sampling_max_tokens,
                "includeContext": self.sampling_include_context,
            },
        }


DEFAULT_POLICY: Final = ServerPolicy()


class _Reader:
    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, key: str, problem: str) -> NoReturn:
        raise SettingsError(f"{self.where}: field {key!r}: {problem}")

    def block(
        self, entry: Mapping[str, object], key: str, valid: tuple[str, ...]
    ) -> dict[str, Any]:
        value = entry.get(key, {})
        if not isinstance(value, dict):
            self.fail(key, f"must be an object with {', '.join(valid)}")
        refuse_unknown(self.where, value, valid, prefix=f"{key}.")
        return value

    def choice(self, key: str, value: object, kind: type[enum.Enum]) -> Any:
        try:
            return kind(value)
        except ValueError:
            choices = ", ".join(repr(member.value) for member in kind)
            self.fail(key, f"{value!r} is not one of {choices}")

    def patterns(self, key: str, value: object) -> Patterns:
        if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
            self.fail(key, 'must be a list of name patterns, e.g. ["delete_*"]')
        if len(value) > MAX_PATTERNS:
            self.fail(key, f"holds {len(value)} patterns; at most {MAX_PATTERNS} are allowed")
        return Patterns(tuple(value))

    def flag(self, key: str, value: object) -> bool:
        if not isinstance(value, bool):
            self.fail(key, "must be true or false")
        return value


def _merged(defaults: Mapping[str, object], entry: Mapping[str, object]) -> dict[str, object]:
    merged: dict[str, object] = {}
    for key in POLICY_FIELDS:
        given, default = entry.get(key), defaults.get(key)
        if isinstance(given, dict) and isinstance(default, dict):
            merged[key] = {**default, **given}
        elif key in entry:
            merged[key] = given
        elif key in defaults:
            merged[key] = default
    return merged


def parse_policy(
    entry: Mapping[str, object], defaults: Mapping[str, object], *, where: str
) -> ServerPolicy:
    """
    The policy of one server entry over C{serverDefaults}.

    @param where: names the file and server in every error.
    @raise SettingsError: naming the field at fault.
    """
    read = _Reader(where)
    given = _merged(defaults, entry)
    if not given:
        return DEFAULT_POLICY
    validate = read.block(given, "validate", _VALIDATE_FIELDS)
    tools = read.block(given, "tools", _TOOLS_FIELDS)
    sampling = read.block(given, "sampling", _SAMPLING_FIELDS)
    allow = read.patterns("tools.allow", tools["allow"]) if "allow" in tools else None
    if allow is not None and "*" in allow.patterns:
        allow = None
    max_tokens = sampling.get("maxTokens")
    if max_tokens is not None and (
        type(max_tokens) is not int or not 1 <= max_tokens <= 10_000_000
    ):
        read.fail("sampling.maxTokens", "must be a whole number from 1 to 10000000, or null")
    return ServerPolicy(
        validate_input=read.choice("validate.input", validate.get("input", "enforce"), Check),
        validate_output=read.choice("validate.output", validate.get("output", "warn"), Check),
        allow=allow,
        deny=read.patterns("tools.deny", tools.get("deny", [])),
        confirm=read.patterns("tools.confirm", tools.get("confirm", [])),
        confirm_destructive=read.flag("confirmDestructive", given.get("confirmDestructive", False)),
        sampling_mode=read.choice("sampling.mode", sampling.get("mode", "allow"), SamplingMode),
        sampling_max_tokens=max_tokens,
        sampling_include_context=read.flag(
            "sampling.includeContext", sampling.get("includeContext", False)
        ),
    )


def check_defaults(defaults: object, *, origin: str) -> Mapping[str, object]:
    """
    The top-level C{serverDefaults} object, checked on its own.

    @raise SettingsError: for a key that is no policy setting, or a bad value.
    """
    where = f"{origin}: serverDefaults"
    if not isinstance(defaults, dict):
        raise SettingsError(f"{where}: must be an object of {', '.join(POLICY_FIELDS)}")
    refuse_unknown(where, defaults, POLICY_FIELDS)
    parse_policy({}, defaults, where=where)
    return defaults
