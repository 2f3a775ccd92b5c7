# -*- test-case-name: tests.server.test_passthrough -*-
"""
What pass-through routing reads off each server's catalogues, worked out once per
catalogue the pool lists: the names and URIs in it, its templates as patterns, its URI
schemes.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Generic, TypeVar

from mcpx.ops.uris import MAX_TEMPLATE_MATCH_UNITS
from mcpx.spec.safe_schema import PatternRefused, compile_linear, escape

_T = TypeVar("_T")

#: What each RFC 6570 operator's expression matches in a filled URI.  A simple
#: expression fills one segment; the others are matched generously, since routing only
#: has to tell which server's template a URI came from.
_OPERATOR_PATTERNS: Final[Mapping[str, str]] = {
    "": r"[^/?#]+",
    "+": r".+",
    "#": r"(?:#.*)?",
    ".": r"(?:\.[^/?#]*)*",
    "/": r"(?:/[^/?#]*)*",
    ";": r"(?:;[^/?#]*)*",
    "?": r"(?:\?[^#]*)?",
    "&": r"(?:&[^#]*)?",
}

_EXPRESSION: Final = re.compile(r"\{([+#./;?&]?)[^{}]*\}")


@functools.lru_cache(maxsize=1024)
def template_pattern(template: str) -> Any | None:
    """
    A pattern matching every URI filled in from RFC 6570 C{template}: its literal text
    as it is, a simple C{{var}} as one non-empty segment (no C{/}, C{?} or C{#}).

    The template is the upstream's, so the pattern is compiled by RE2
    (L{compile_linear}), which matches in time linear in the URI: Python's C{re} takes
    exponential time on C{{+a}{+b}...!} (one C{.+} after another).  C{None} for a
    template RE2 will not compile (too big): it routes nothing.
    """
    parts: list[str] = []
    position = 0
    for found in _EXPRESSION.finditer(template):
        parts.append(escape(template[position : found.start()]))
        parts.append(_OPERATOR_PATTERNS[found.group(1)])
        position = found.end()
    parts.append(escape(template[position:]))
    try:
        return compile_linear("".join(parts), dot_all=True)
    except PatternRefused:
        return None


def template_routes(templates: tuple[tuple[str, Any], ...], uri: str) -> bool:
    """
    Whether C{uri} is one of C{templates} (template, pattern) or falls under one, trying
    patterns only within L{MAX_TEMPLATE_MATCH_UNITS} (the URI's length times each
    pattern's program size, summed).
    """
    units = MAX_TEMPLATE_MATCH_UNITS
    for template, pattern in templates:
        if template == uri:
            return True
        if pattern is None:
            continue
        cost = len(uri) * pattern.programsize
        if cost > units:
            continue
        units -= cost
        if pattern.fullmatch(uri) is not None:
            return True
    return False


def names_in(items: list[dict[str, Any]], key: str) -> frozenset[str]:
    return frozenset(
        item[key] for item in items if type(item) is dict and isinstance(item.get(key), str)
    )


class Derived(Generic[_T]):
    """
    Something derived from one catalogue of each server, derived again only when the
    pool listed that catalogue anew.

    The pool hands out a fresh list of the same item objects while its cache holds (or
    the cached list itself, L{mcpx.pool.interface.PoolInterface.cached_catalogue}), and new
    objects once it listed again; holding the items keeps their identities from being
    reused, so comparing them by identity is enough to tell.
    """

    def __init__(self, derive: Callable[[list[dict[str, Any]]], _T]) -> None:
        self._derive = derive
        self._held: dict[str, tuple[list[dict[str, Any]], _T]] = {}

    def of(self, server: str, items: list[dict[str, Any]]) -> _T:
        held = self._held.get(server)
        if held is not None and (
            held[0] is items
            or (len(held[0]) == len(items) and all(map(operator.is_, held[0], items)))
        ):
            return held[1]
        derived = self._derive(items)
        self._held[server] = (items, derived)
        return derived


def objects_with(items: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return [item for item in items if type(item) is dict and isinstance(item.get(key), str)]


def scheme_of(uri: str) -> str:
    """The scheme of a URI or URI template, in lower case (empty when it has none)."""
    head, sep, _ = uri.partition(":")
    return head.lower() if sep else ""
