# -*- test-case-name: tests.server.test_list_cache -*-
"""
C{tools/list} answers kept spelled and encoded, so a client listing the same tools again
costs neither the spelling (L{mcpx.server.dispatch.McpServer.spell}) nor the JSON encoding.

An answer is kept per (era, revision, cursor) with the very tool objects its page was
made of: the catalogue version is those objects' identity.  The gateway's own tools are
built once and never change; an upstream's come from the pool's cached catalogue, which
is replaced, never modified, when the server says its list changed.  So a page made of the
same objects, in the same order, with the same next cursor, spells and encodes to the same
bytes, and a page with any other object in it is spelled afresh and replaces the kept one.
The kept answer holds its tools, so none of them can be freed while it is kept and an
identity can never be reused for a different tool.  What is kept is bounded by the bytes
of its encodings (L{MAX_KEPT_BYTES}), not by how many pages there are, so every page of
a long list stays kept and listing it costs the same per tool however long it is.

The answer is an L{EncodedResult}: the spelled result with its encoding, which
L{mcpx.wire.messages.encode} writes as it is.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from attrs import frozen

from mcpx.server.conn import Context
from mcpx.wire.messages import EncodedResult

#: The encoded answers kept, every era, revision and page together, are at most this many
#: bytes: past it the oldest kept go first.  A budget in bytes rather than in answers, so
#: that a list of many pages is kept whole however many pages it has (a count made a
#: listing with more pages than the count spell and encode every page every time).
MAX_KEPT_BYTES: Final = 64 * 1024 * 1024

_Key = tuple[bool, str, object]


@frozen
class _Kept:
    """One kept answer: the tools its page was made of, its next cursor, the answer."""

    tools: tuple[Any, ...]
    following: object
    answer: EncodedResult

    @property
    def size(self) -> int:
        return len(self.answer.json)


class ListCache:
    """The kept C{tools/list} answers of one MCP server."""

    def __init__(self, max_bytes: int = MAX_KEPT_BYTES) -> None:
        #: Oldest first: a page spelled again is kept anew, at the end.
        self._kept: dict[_Key, _Kept] = {}
        self._bytes = 0
        self._max_bytes = max_bytes

    @property
    def kept_bytes(self) -> int:
        """The bytes of the answers kept now."""
        return self._bytes

    def spelled(
        self,
        result: Mapping[str, Any],
        items: str,
        context: Context,
        cursor: object,
        spell: Callable[[Mapping[str, Any]], Any],
    ) -> Any:
        """
        C{spell(result)} encoded, kept from an earlier identical page when there is one.

        @param items: the key of C{result}'s list (C{"tools"}).
        @param cursor: the cursor the page was asked for with.
        @param spell: spells C{result} for C{context}; called only when nothing is kept.
        """
        page = result.get(items)
        # Tested as cheaply as they can be, as this runs for every tools/list: a page is a
        # list (L{mcpx.server.pages.paginate}'s) where it is not another sequence; C{result}
        # has C{items}, as C{page} is one, so no other member means one, or C{nextCursor}.
        if (
            (type(page) is not list and not isinstance(page, Sequence))
            or (cursor is not None and type(cursor) is not str)
            or (len(result) != 1 and (len(result) != 2 or "nextCursor" not in result))
        ):
            return spell(result)
        # The revision's value as the enum keeps it: C{.value} is a property, slower.
        key: _Key = (context.modern, context.revision._value_, cursor)
        following = result.get("nextCursor")
        kept = self._kept.get(key)
        if (
            kept is not None
            and kept.following == following
            and len(kept.tools) == len(page)
            and all(map(operator.is_, kept.tools, page))
        ):
            return kept.answer
        spelled = spell(result)
        try:
            answer = EncodedResult(spelled)
        except (TypeError, ValueError, RecursionError):
            # Not JSON: the transport's own encoding reports it.
            return spelled
        self._keep(key, _Kept(tuple(page), following, answer))
        return answer

    def _keep(self, key: _Key, kept: _Kept) -> None:
        """Keep C{kept} in place of what C{key} held, the oldest going to make room."""
        replaced = self._kept.pop(key, None)
        if replaced is not None:
            self._bytes -= replaced.size
        if kept.size > self._max_bytes:
            return
        while self._kept and self._bytes + kept.size > self._max_bytes:
            self._bytes -= self._kept.pop(next(iter(self._kept))).size
        self._kept[key] = kept
        self._bytes += kept.size
