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
identity can never be reused for a different tool.

The answer is an L{EncodedResult}: the spelled result with its encoding, which
L{mcpx.wire.messages.encode} writes as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from mcpx.server.conn import Context
from mcpx.wire.messages import EncodedResult

#: At most this many answers are kept (each era and revision, times the pages listed).
MAX_KEPT: Final = 64

_Key = tuple[bool, str, object]


class ListCache:
    """The kept C{tools/list} answers of one MCP server."""

    def __init__(self) -> None:
        self._kept: dict[_Key, tuple[tuple[Any, ...], object, EncodedResult]] = {}

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
        if (
            not isinstance(page, Sequence)
            or not isinstance(cursor, str | None)
            or any(name not in (items, "nextCursor") for name in result)
        ):
            return spell(result)
        key: _Key = (context.modern, context.revision.value, cursor)
        following = result.get("nextCursor")
        kept = self._kept.get(key)
        if kept is not None:
            tools, kept_following, answer = kept
            if (
                kept_following == following
                and len(tools) == len(page)
                and all(a is b for a, b in zip(tools, page, strict=True))
            ):
                return answer
        spelled = spell(result)
        try:
            answer = EncodedResult(spelled)
        except (TypeError, ValueError, RecursionError):
            # Not JSON: the transport's own encoding reports it.
            return spelled
        if len(self._kept) >= MAX_KEPT and key not in self._kept:
            self._kept.clear()
        self._kept[key] = (tuple(page), following, answer)
        return answer
