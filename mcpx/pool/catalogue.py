# -*- test-case-name: tests.pool.test_pool -*-
"""
The catalogue of one upstream instance: its tools, prompts, resources and resource
templates, each listed once (however many ask while it is listed) and kept until the
server says that list changed.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeAlias

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from mcpx.once import Once
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
    "notifications/tools/list_changed": ("tools",),
    "notifications/prompts/list_changed": ("prompts",),
    "notifications/resources/list_changed": ("resources", "templates"),
}

#: Sends one listing upstream, as a counted and bounded request of the pool's.
Fetch: TypeAlias = Callable[[Catalogue], Deferred[Items]]


class Listings:
    """
    The cached catalogue of one instance, and the listings under way for it.
    """

    __slots__ = ("_cached", "_listing", "_versions")

    def __init__(self) -> None:
        self._cached: dict[str, Items] = {}
        self._listing: dict[str, Once[Items]] = {}
        #: Bumped by each list_changed, so a listing that raced one is not cached.
        self._versions: dict[str, int] = {}

    def heard(self, method: str) -> bool:
        """
        Forget the lists a C{list_changed} notification makes stale.

        @return: whether C{method} was such a notification.
        """
        stale = STALE_AFTER.get(method)
        if stale is None:
            return False
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
