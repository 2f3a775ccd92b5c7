# -*- test-case-name: tests.settings.test_resolve -*-
"""
The one exception every settings problem is reported as, and the wording of the
"no such name" message shared by the config file, the environment and the flags.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class SettingsError(ValueError):
    """
    A configuration mcpx cannot use.

    The message says where the bad value came from and what would be accepted, so
    the command line can print it as it is and stop.
    """


#: The most valid names an error lists; a longer list is left to the documentation.
MAX_LISTED = 16


def closest(given: str, valid: Iterable[str]) -> str | None:
    """
    The valid name C{given} was most likely meant to be, or C{None}.

    Case is ignored when comparing: C{pool.calltimeout} was meant to be
    C{pool.callTimeout}, not something else.
    """
    by_folded = {name.casefold(): name for name in valid}
    # Deferred for start-up memory: only a misspelt name needs it.
    import difflib

    found = difflib.get_close_matches(given.casefold(), list(by_folded), n=1, cutoff=0.6)
    return by_folded[found[0]] if found else None


def unknown_name(what: str, given: str, valid: Iterable[str]) -> str:
    """
    Say that C{given} is not a valid C{what} and suggest the nearest one; with no near one,
    list them all when they are few, else say where they are listed.

    @param what: the kind of name, e.g. C{"setting"} or C{"environment variable"}.
    """
    names = list(valid)
    guess = closest(given, names)
    if guess is not None:
        return f"unknown {what} {given!r}; did you mean {guess!r}?"
    if len(names) > MAX_LISTED:
        return (
            f"unknown {what} {given!r}; docs/configuration.md lists the {len(names)} valid "
            "names (`mcpx settings` shows every setting)"
        )
    return f"unknown {what} {given!r}; valid names are: {', '.join(names)}"


def refuse_unknown(
    where: str,
    fields: Iterable[str],
    valid: Sequence[str],
    listing: str = "valid",
    prefix: str = "",
) -> None:
    """Refuse the first of an object's C{fields} not C{valid}, naming the nearest valid one."""
    for field in fields:
        if field not in valid:
            guess = closest(field, valid)
            hint = f"did you mean {guess!r}? " if guess is not None else ""
            raise SettingsError(
                f"{where}: field {prefix + field!r}: unknown field; {hint}{listing}: "
                + ", ".join(valid)
            )
