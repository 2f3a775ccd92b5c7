# -*- test-case-name: tests.server.test_uris -*-
"""
The C{mcpx://} names of upstream resources and resource templates.

A host sees every upstream resource as C{mcpx://<server>/<encoded upstream URI>} and
reads it back through mcpx, which must recover the upstream URI exactly, whatever it
holds: another scheme's separators, C{?} and C{#}, spaces, non-ASCII text, percent
escapes of its own, or nothing but an absolute path (C{/abs/doc}).

Concrete URIs
=============

The upstream URI is percent-encoded as UTF-8, keeping only the unreserved characters,
C{/} and C{:} as they are (so C{file:///a.txt} stays readable as
C{mcpx://files/file:///a.txt}).  C{%} itself is encoded, so decoding is one
percent-decode and any string round-trips.  Three further rules keep the result one
path that URI libraries leave alone:

  - a leading C{/} is written C{%2F} (C{/abs/doc} is C{mcpx://docs/%2Fabs/doc}), so the
    path never starts with an empty segment;
  - when the URI has a C{.} or C{..} segment, every C{/} is written C{%2F}, so that no
    library removes dot segments from the mcpx path;
  - the server name is percent-encoded too (it normally needs nothing).

Apps' resources
===============

An app's C{ui://} resource (MCP Apps, L{mcpx.spec.apps}) keeps its scheme, since hosts
render only a C{ui://} URI: C{ui://X} of server C{s} is C{ui://mcpx/<s>/<X encoded as
above>}, and C{_meta.ui.resourceUri} is rewritten to the same name wherever mcpx shows
it.  C{ui://mcpx/} is therefore mcpx's own, as C{mcpx://} is.

Templates
=========

A template is C{mcpx://<server>/!<literal parts encoded as above><expressions as they
were>}: the C{!} (which the concrete encoding always escapes, so no concrete URI can
start with it) says the URI came from a template.  The client fills the expressions
with RFC 6570 rules, which produce text already escaped for the upstream's URI; so
decoding a filled template does not percent-decode it as a whole.  It matches the filled
URI against the server's templates instead (the one with the most fixed text wins when
several match), decodes only the literal parts, and keeps what the expressions expanded
to byte for byte.  The upstream URI obtained is exactly
the one the upstream's own expansion of the same values would give.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import quote, unquote

from attrs import frozen

from mcpx.spec.apps import LEGACY_RESOURCE_URI_KEY, UI_SCHEME
from mcpx.spec.safe_schema import PatternRefused, compile_linear, escape

PREFIX: Final = "mcpx://"
#: Starts the gateway's name of an upstream app's C{ui://} resource.
UI_PREFIX: Final = UI_SCHEME + "mcpx/"
#: Starts the path of a URI that came from a resource template.
TEMPLATE_MARK: Final = "!"

#: The work reading one URI against a server's templates may spend: the URI's length
#: times each template's RE2 program size (times its expressions and one, when what each
#: expanded to is taken out), summed.  RE2 at its slowest goes through about one unit a
#: nanosecond or two, so this keeps one read to about 50 ms; a template that would go
#: past what is left is not tried.  Pass-through routing (L{mcpx.server.derived})
#: spends as much.
MAX_TEMPLATE_MATCH_UNITS: Final = 25_000_000

_SAFE_PATH: Final = "/:"
_SAFE_NAME: Final = ""
_EXPRESSION: Final = re.compile(r"{[^{}]*}")


class NotAnMcpxUri(ValueError):
    """A URI that does not name a resource through mcpx."""

    def __init__(self, uri: str, why: str) -> None:
        super().__init__(f"{uri!r} is not an mcpx:// resource URI: {why}")
        self.uri = uri


@frozen
class McpxUri:
    """
    An C{mcpx://} URI taken apart.

    @ivar server: the configured server that owns the resource.
    @ivar inner: the rest: an encoded upstream URI, or a filled template (after the
        C{!}, which is not part of it).
    @ivar from_template: whether the path started with L{TEMPLATE_MARK}.
    """

    server: str
    inner: str
    from_template: bool

    def upstream(self, templates: Iterable[str] = ()) -> str | None:
        """
        The upstream URI this names.

        @param templates: the server's upstream URI templates, needed to read a URI
            that came from one.
        @return: the upstream URI, or C{None} for a template URI that none of
            C{templates} produces.
        """
        if not self.from_template:
            return unquote(self.inner)
        best: tuple[int, str] | None = None
        units = MAX_TEMPLATE_MATCH_UNITS
        for template in templates:
            pattern = _template_pattern(template)
            cost = pattern.cost(self.inner)
            if cost > units:
                continue
            units -= cost
            found = pattern.fill(self.inner)
            # Several templates may produce one URI ({+uri} produces any): the one whose
            # fixed text covers most of it is taken to be the one the client filled.
            if found is not None and (best is None or pattern.fixed > best[0]):
                best = (pattern.fixed, found)
        return None if best is None else best[1]

    def template(self, templates: Iterable[str]) -> str | None:
        """The upstream template whose mcpx form this is, or C{None}."""
        if not self.from_template:
            return None
        for template in templates:
            if _template_pattern(template).encoded == self.inner:
                return template
        return None


def _encode_path(uri: str) -> str:
    segments = uri.split("/")
    if "." in segments or ".." in segments:
        whole = quote(uri, safe=":")
        return whole.replace(".", "%2E") if whole in (".", "..") else whole
    encoded = quote(uri, safe=_SAFE_PATH)
    if encoded.startswith("/"):
        encoded = "%2F" + encoded[1:]
    return encoded


def _encode_server(server: str) -> str:
    return quote(server, safe=_SAFE_NAME + "-._~")


def to_mcpx(server: str, uri: str) -> str:
    """
    The C{mcpx://} URI of upstream resource C{uri} of C{server}; for an app's C{ui://}
    resource, its C{ui://mcpx/} name (see the module).
    """
    if uri.startswith(UI_SCHEME):
        return f"{UI_PREFIX}{_encode_server(server)}/{_encode_path(uri[len(UI_SCHEME) :])}"
    return f"{PREFIX}{_encode_server(server)}/{_encode_path(uri)}"


def ui_meta_renamed(server: str, meta: Mapping[str, Any]) -> dict[str, Any]:
    """
    A tool's (or result's) C{_meta} with the app resource it names (C{ui.resourceUri}
    and the older C{ui/resourceUri}) under its gateway name, L{to_mcpx}: the URI a host
    reads is the one it was shown.  Everything else, C{csp} and C{permissions} with it,
    is kept as the server gave it.
    """
    renamed = dict(meta)
    ui = meta.get("ui")
    if type(ui) is dict:
        uri = ui.get("resourceUri")
        if isinstance(uri, str) and uri.startswith(UI_SCHEME):
            renamed["ui"] = {**ui, "resourceUri": to_mcpx(server, uri)}
    legacy = meta.get(LEGACY_RESOURCE_URI_KEY)
    if isinstance(legacy, str) and legacy.startswith(UI_SCHEME):
        renamed[LEGACY_RESOURCE_URI_KEY] = to_mcpx(server, legacy)
    return renamed


def template_to_mcpx(server: str, template: str) -> str:
    """The C{mcpx://} form of C{server}'s URI template C{template} (see the module)."""
    return f"{PREFIX}{_encode_server(server)}/{TEMPLATE_MARK}{_template_pattern(template).encoded}"


def parse(uri: str) -> McpxUri:
    """
    Take an C{mcpx://} URI apart.  Liberal: the scheme's case is ignored and
    characters a client left unescaped are taken as they are.

    @raise NotAnMcpxUri: for any other URI, or one without a server.
    """
    if uri.startswith(UI_PREFIX):
        server, slash, inner = uri[len(UI_PREFIX) :].partition("/")
        if not server or not slash:
            raise NotAnMcpxUri(uri, "it names no server and resource")
        return McpxUri(unquote(server), quote(UI_SCHEME, safe=_SAFE_PATH) + inner, False)
    if uri[: len(PREFIX)].lower() != PREFIX:
        raise NotAnMcpxUri(uri, f"it does not start with {PREFIX}")
    rest = uri[len(PREFIX) :]
    server, slash, inner = rest.partition("/")
    if not server:
        raise NotAnMcpxUri(uri, "it names no server")
    if not slash:
        inner = ""
    name = unquote(server)
    if inner.startswith(TEMPLATE_MARK):
        return McpxUri(name, inner[len(TEMPLATE_MARK) :], True)
    return McpxUri(name, inner, False)


def is_mcpx(uri: object) -> bool:
    """Whether C{uri} is one of mcpx's names: C{mcpx://}, or an app's C{ui://mcpx/}."""
    return isinstance(uri, str) and (
        uri[: len(PREFIX)].lower() == PREFIX or uri.startswith(UI_PREFIX)
    )


@frozen
class _TemplatePattern:
    """
    One upstream template, prepared: its literal parts, their encodings, and a
    pattern matching every URI filled from its mcpx form.
    """

    literals: tuple[str, ...]
    encoded: str
    #: Matches every URI filled from the mcpx form; in RE2, since the template is the
    #: upstream's and backtracking over its C{(.*?)}s takes time exponential in their number.
    pattern: str

    @property
    def fixed(self) -> int:
        """How many characters of a filled URI the template fixes."""
        return sum(len(literal) for literal in self.literals)

    def cost(self, filled: str) -> int:
        """
        The units of L{MAX_TEMPLATE_MATCH_UNITS} L{fill} spends on C{filled}: RE2 takes
        the expansions out in time its length times the program's size times the groups.
        """
        try:
            regex = compile_linear(self.pattern, dot_all=True)
        except PatternRefused:
            return 0
        cost: int = len(filled) * regex.programsize * (regex.groups + 1)
        return cost

    def fill(self, filled: str) -> str | None:
        """The upstream URI for C{filled} (the mcpx form, filled), or C{None}."""
        try:
            regex = compile_linear(self.pattern, dot_all=True)
        except PatternRefused:
            return None
        match = regex.fullmatch(filled)
        if match is None:
            return None
        parts: list[str] = []
        for literal, expansion in zip(self.literals, (*match.groups(), ""), strict=True):
            parts.append(literal)
            parts.append(expansion)
        return "".join(parts)


@functools.lru_cache(maxsize=1024)
def _template_pattern(template: str) -> _TemplatePattern:
    literals: list[str] = []
    expressions: list[str] = []
    position = 0
    for found in _EXPRESSION.finditer(template):
        literals.append(template[position : found.start()])
        expressions.append(found.group())
        position = found.end()
    literals.append(template[position:])
    encoded_literals = [
        _encode_literal(literal, first=index == 0) for index, literal in enumerate(literals)
    ]
    encoded = encoded_literals[0] + "".join(
        expression + literal
        for expression, literal in zip(expressions, encoded_literals[1:], strict=True)
    )
    pattern = "(.*?)".join(escape(literal) for literal in encoded_literals)
    return _TemplatePattern(tuple(literals), encoded, pattern)


def _encode_literal(literal: str, *, first: bool) -> str:
    # Dot segments cannot be recognised inside a template, whose expressions may add
    # to a segment, so a template's literals keep "/" and only the leading one is escaped.
    encoded = quote(literal, safe=_SAFE_PATH)
    if first and encoded.startswith("/"):
        encoded = "%2F" + encoded[1:]
    return encoded
