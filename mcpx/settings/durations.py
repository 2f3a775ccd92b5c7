# -*- test-case-name: tests.settings.test_durations -*-
"""
Durations as people write them: C{250ms}, C{30s}, C{10m}, C{1h}, C{1m30s}.

A duration is one or more C{<number><unit>} parts added together, with the units
C{ms}, C{s}, C{m} and C{h}; a number may have a decimal fraction (C{1.5s}).  A
lone C{0} is accepted, since zero is zero in every unit.

A bare number is I{not} a duration, in a flag, a variable or the JSON config file
alike.  MCP itself counts time in milliseconds (C{ttlMs}, C{pollIntervalMs}) while
most tools count seconds, so C{30} on its own could mean either, and guessing wrong
is a factor of a thousand.  The unit costs one character and removes the doubt.
"""

from __future__ import annotations

import math
import re

from mcpx.settings.errors import SettingsError

ACCEPTED_FORMS = "a number followed by a unit (ms, s, m or h), e.g. 250ms, 30s, 10m, 1h or 1m30s"

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_MICROS_PER_SECOND = 1_000_000


def parse_duration(text: str) -> float:
    """
    Read a duration and return it in seconds.

    @raise SettingsError: when C{text} is not a duration; the message shows the
        accepted forms.
    """
    spelled = text.strip()
    if spelled == "0":
        return 0.0
    total = 0.0
    position = 0
    while position < len(spelled):
        part = _PART.match(spelled, position)
        if part is None:
            break
        total += float(part.group(1)) * _UNIT_SECONDS[part.group(2)]
        position = part.end()
    if not spelled or position != len(spelled):
        raise SettingsError(f"invalid duration {text!r}; write {ACCEPTED_FORMS}")
    return total


def format_duration(seconds: float) -> str:
    """
    The canonical spelling of a duration: largest units first, zero parts left out.

    C{600} is C{10m}, C{90} is C{1m30s}, C{1.5} is C{1.5s}, C{0.25} is C{250ms}
    and C{0} is C{0s}.  Precision stops at the microsecond.  The result always
    reads back to the same value through L{parse_duration}.

    @raise ValueError: for a negative or non-finite number of seconds.
    """
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a duration is a finite number of seconds, not {seconds!r}")
    micros = round(seconds * _MICROS_PER_SECOND)
    if micros == 0:
        return "0s"
    hours, micros = divmod(micros, 3600 * _MICROS_PER_SECOND)
    minutes, micros = divmod(micros, 60 * _MICROS_PER_SECOND)
    parts = []
    if hours:
        parts.append(f"{hours}h")
    if minutes:
        parts.append(f"{minutes}m")
    if micros:
        if hours or minutes or micros >= _MICROS_PER_SECOND:
            parts.append(_decimal(micros, _MICROS_PER_SECOND) + "s")
        else:
            parts.append(_decimal(micros, 1000) + "ms")
    return "".join(parts)


def _decimal(amount: int, scale: int) -> str:
    """C{amount / scale} written exactly, without trailing zeros."""
    whole, fraction = divmod(amount, scale)
    if not fraction:
        return str(whole)
    digits = len(str(scale)) - 1
    return f"{whole}.{fraction:0{digits}d}".rstrip("0")
