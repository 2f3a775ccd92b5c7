# -*- test-case-name: tests.pool.test_pool -*-
"""
The catalogue of one upstream instance: its tools, prompts, resources and resource
templates, each listed once (however many ask while it is listed) and kept until the
server says that list changed; and the MCP Apps resources (C{ui://}) read from it, kept
as L{AppReads} says, since hosts read an app's HTML each time they render it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final, TypeAlias

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from mcpx.once import Once
from mcpx.spec.apps import UI_SCHEME
from mcpx.spec.methods import PROMPTS_CHANGED, RESOURCE_UPDATED, RESOURCES_CHANGED, TOOLS_CHANGED
from mcpx.upstream.session import UpstreamSession

Items: TypeAlias = list[dict[str, Any]]


@frozen
class Catalogue:
    """One of the lists a server offers, and how to fetch it."""

    kind: str
    method: str
    capability: str
    fetch: Callable[[UpstreamSession], Coroutine[Any, Any, Items]]


CATALOGUES: Mapping[str, Catalogue] = {
    c.kind: c
    for c in (
        Catalogue("tools", "tools/list", "tools", lambda s: s.list_tools()),
        Catalogue("prompts", "prompts/list", "prompts", lambda s: s.list_prompts()),
        Catalogue("resources", "resources/list", "resources", lambda s: s.list_resources()),
        Catalogue(
            "templates",
            "resources/templates/list",
            "resources",
            lambda s: s.list_resource_templates(),
        ),
    )
}

#: The catalogues each list_changed notification makes stale.
STALE_AFTER: Mapping[str, tuple[str, ...]] = {
    TOOLS_CHANGED: ("tools",),
    PROMPTS_CHANGED: ("prompts",),
    RESOURCES_CHANGED: ("resources", "templates"),
}

#: Sends one listing upstream, as a counted and bounded request of the pool's.
Fetch: TypeAlias = Callable[[Catalogue], Deferred[Items]]


#: The most app resources (C{ui://}) one instance's catalogue keeps.
MAX_APP_READS: Final = 32
#: The most characters those kept reads hold together, per instance: every string in
#: them (text, blobs, C{_meta}, keys) and one for each other value.
MAX_APP_READ_CHARS: Final = 16 * 1024 * 1024
#: Seconds a read of an app's resource is kept when its result gives no cache hint
#: (C{ttlMs}, 2026-07-28): the revisions before have none, and an app changes rarely.
APP_READ_TTL: Final = 300.0


def is_app_read(method: str, params: Mapping[str, Any] | None) -> str | None:
    """The C{ui://} URI a C{resources/read} reads, or C{None} for any other request."""
    if method != "resources/read" or params is None:
        return None
    uri = params.get("uri")
    return uri if isinstance(uri, str) and uri.startswith(UI_SCHEME) else None


def _ttl_ms(result: Mapping[str, Any]) -> float | None:
    """A read's C{ttlMs} cache hint (2026-07-28), or C{None} when it gives none."""
    ttl = result.get("ttlMs")
    if isinstance(ttl, int | float) and not isinstance(ttl, bool):
        return ttl
    return None


def _size(result: Mapping[str, Any]) -> int:
    """
    What a read holds, in characters: every string in it, keys too, and one for each
    other value, so that nothing a server puts beside the text (C{_meta}, say) is free.
    """
    chars = 0
    pending: list[Any] = [result]
    while pending:
        value = pending.pop()
        if type(value) is dict:
            chars += 1 + sum(len(key) for key in value)
            pending.extend(value.values())
        elif type(value) is list:
            chars += 1
            pending.extend(value)
        elif isinstance(value, str):
            chars += len(value)
        else:
            chars += 1
    return chars


def copied(value: Any) -> Any:
    """A copy of a JSON value down to its innermost object and list (strings shared)."""
    if type(value) is dict:
        return {key: copied(item) for key, item in value.items()}
    if type(value) is list:
        return [copied(item) for item in value]
    return value


class AppReads:
    """
    The C{resources/read} results of an instance's app resources, kept so repeated
    reads do not reach the server: for the result's C{ttlMs} when it gives one with
    C{cacheScope: "public"} (not at all for C{0}, or for another scope or none, whose
    answer may be its caller's alone,
    or for a read during which the server asked a question, whose answer may depend on
    whoever answered it: L{asked}), else L{APP_READ_TTL}; answered from the catalogue
    with the C{ttlMs} that remains (a host caching it keeps it no longer than the
    server allowed); forgotten when the server says its resources changed
    (C{list_changed}) or that one did (C{resources/updated}), and with the instance.
    """

    __slots__ = ("_chars", "_kept", "version")

    def __init__(self) -> None:
        self._kept: dict[str, tuple[dict[str, Any], float, int]] = {}
        self._chars = 0
        #: Bumped by each change the server tells of, so a read that raced one is not kept.
        self.version = 0

    def get(self, uri: str, now: float) -> dict[str, Any] | None:
        """A copy of the kept read of C{uri}, or C{None} (none, or it expired)."""
        kept = self._kept.get(uri)
        if kept is None:
            return None
        result, until, _chars = kept
        if now >= until:
            self._drop(uri)
            return None
        found: dict[str, Any] = copied(result)
        if _ttl_ms(found) is not None:
            # The time the server allowed that remains, not the whole of it again: a
            # host that caches the answer keeps it no longer than the server said.
            found["ttlMs"] = math.floor((until - now) * 1000.0)
        return found

    def keep(self, uri: str, result: Mapping[str, Any], now: float, version: int) -> None:
        """Keep C{result}, read of C{uri} when the reads' version was C{version}."""
        if version != self.version or not isinstance(result, dict):
            return
        # A plain dict of its members (a ReadResult, L{mcpx.wire.messages}, is a dict
        # kept with its text): weighed and copied as any other.
        result = dict(result)
        ttl = _ttl_ms(result)
        if result.get("cacheScope") == "private" or (
            ttl is not None and result.get("cacheScope") != "public"
        ):
            # A 2026-07-28 answer is shared only when the server said it may be
            # (caching.mdx: a private one is never shared across authorisations).
            return
        lasts = APP_READ_TTL if ttl is None else ttl / 1000.0
        chars = _size(result)
        if lasts <= 0 or chars > MAX_APP_READ_CHARS:
            return
        self._drop(uri)
        while self._kept and (
            len(self._kept) >= MAX_APP_READS or self._chars + chars > MAX_APP_READ_CHARS
        ):
            self._drop(next(iter(self._kept)))
        self._kept[uri] = (copied(result), now + lasts, chars)
        self._chars += chars

    def asked(self) -> None:
        """
        The server asked a question (elicitation, sampling, roots, or an
        C{input_required} round): a read in flight may depend on whoever answered it,
        so none in flight now is kept (what is kept stays).
        """
        self.version += 1

    def forget(self, uri: str | None = None) -> None:
        """Forget the read of C{uri}, or every read (C{None})."""
        self.version += 1
        if uri is None:
            self._kept.clear()
            self._chars = 0
        else:
            self._drop(uri)

    def _drop(self, uri: str) -> None:
        kept = self._kept.pop(uri, None)
        if kept is not None:
            self._chars -= kept[2]


class Listings:
    """
    The cached catalogue of one instance, and the listings under way for it.
    """

    __slots__ = ("_cached", "_listing", "_versions", "app_reads")

    def __init__(self) -> None:
        self._cached: dict[str, Items] = {}
        self._listing: dict[str, Once[Items]] = {}
        #: Bumped by each list_changed, so a listing that raced one is not cached.
        self._versions: dict[str, int] = {}
        self.app_reads = AppReads()

    def heard(self, method: str, params: Mapping[str, Any] | None = None) -> bool:
        """
        Forget the lists a C{list_changed} notification makes stale, and the app reads
        it or a C{resources/updated} does.

        @return: whether C{method} was a C{list_changed} notification.
        """
        if method == RESOURCE_UPDATED:
            uri = params.get("uri") if params is not None else None
            if isinstance(uri, str):
                self.app_reads.forget(uri)
            return False
        stale = STALE_AFTER.get(method)
        if stale is None:
            return False
        if "resources" in stale:
            self.app_reads.forget()
        for kind in stale:
            self._cached.pop(kind, None)
            self._versions[kind] = self._versions.get(kind, 0) + 1
        return True

    def cached(self, kind: str) -> Items | None:
        """
        The list of C{kind} as cached now, else C{None}: the cache's own list, not a
        copy (a caller must not change it), so that one who derives something from it
        can tell it is the same list without comparing its items.
        """
        return self._cached.get(kind)

    async def get(
        self, kind: str, session: UpstreamSession, fetch: Fetch, alive: Callable[[], bool]
    ) -> Items:
        """
        The list of C{kind}: the cached one, else one listing shared by everyone who
        asks while it runs (empty when the server did not declare the capability).

        @param alive: whether the instance may still be used, for caching what it lists.
        """
        cached = self._cached.get(kind)
        if cached is not None:
            return list(cached)
        catalogue = CATALOGUES[kind]
        declaration = session.declaration
        if declaration is not None and not declaration.declares(catalogue.capability):
            return []
        listing = self._listing.get(kind)
        if listing is None:
            listing = self._list(catalogue, fetch, alive)
        return list(await listing.wait())

    def _list(self, catalogue: Catalogue, fetch: Fetch, alive: Callable[[], bool]) -> Once[Items]:
        """List one catalogue for everyone who asks while it is listed."""
        kind = catalogue.kind
        version = self._versions.get(kind, 0)
        listing: Once[Items] = Once()
        self._listing[kind] = listing

        def listed(items: Items) -> Items:
            if self._listing.get(kind) is listing:
                del self._listing[kind]
            if alive() and self._versions.get(kind, 0) == version:
                self._cached[kind] = items
            return items

        def unlisted(failure: Failure) -> Failure:
            if self._listing.get(kind) is listing:
                del self._listing[kind]
            return failure

        work = fetch(catalogue)
        work.addCallbacks(listed, unlisted)
        listing.feed(work)
        return listing
