# -*- test-case-name: tests.server.test_surface -*-
"""
Lists handed out a page at a time, with cursors opaque to the host.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any, Final

from mcpx.settings.declarations import BY_NAME
from mcpx.wire.errors import RpcError


def _declared_page_size() -> int:
    declared = BY_NAME["mcp.pageSize"].default
    assert isinstance(declared, int)
    return declared


#: Items per page of every list when there are no settings: C{mcp.pageSize}'s default.
PAGE_SIZE: Final = _declared_page_size()


def encode_cursor(kind: str, offset: int) -> str:
    raw = json.dumps([kind, offset], separators=(",", ":")).encode("ascii")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(kind: str, cursor: object) -> int:
    """
    The offset a cursor of L{encode_cursor} stands for.  No cursor (or an empty one)
    is the first page.

    @raise RpcError: -32602 for anything mcpx did not hand out for this list.
    """
    if cursor is None or cursor == "":
        return 0
    if not isinstance(cursor, str):
        raise RpcError.invalid_params("Invalid cursor: a cursor is a string")
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        decoded = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError):
        raise RpcError.invalid_params(f"Invalid cursor: {cursor!r}") from None
    if (
        type(decoded) is not list
        or len(decoded) != 2
        or decoded[0] != kind
        or type(decoded[1]) is not int
        or decoded[1] < 0
    ):
        raise RpcError.invalid_params(f"Invalid cursor: {cursor!r}")
    return int(decoded[1])


def paginate(
    kind: str, items: Sequence[Any], cursor: object, page_size: int = PAGE_SIZE
) -> tuple[list[Any], str | None]:
    """
    One page of C{items} and the cursor of the next, if any.

    @raise RpcError: -32602 for an invalid cursor, or one past the end of the list.
    """
    offset = decode_cursor(kind, cursor)
    if offset > len(items) or (offset and offset == len(items)):
        raise RpcError.invalid_params(f"Invalid cursor: {cursor!r} is past the end of the list")
    end = offset + page_size
    following = encode_cursor(kind, end) if end < len(items) else None
    return list(items[offset:end]), following
