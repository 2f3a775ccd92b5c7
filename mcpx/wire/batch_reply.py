# -*- test-case-name: tests.wire.test_peer -*-
"""
The answer to an incoming JSON-RPC batch, collected part by part.
"""

from __future__ import annotations

from collections.abc import Callable


class BatchReply:
    """
    The answers to one incoming batch, sent together as one array once every request in it
    has been answered or cancelled (JSON-RPC 2.0 section 6).
    """

    __slots__ = ("_parts", "_pending", "_sealed", "_write")

    def __init__(self, write: Callable[[bytes], None]) -> None:
        self._write = write
        self._parts: list[bytes] = []
        self._pending = 0
        self._sealed = False

    def expect(self) -> None:
        self._pending += 1

    def add(self, part: bytes) -> None:
        self._parts.append(part)

    def settle(self, part: bytes | None) -> None:
        self._pending -= 1
        if part is not None:
            self._parts.append(part)
        self._flush()

    def seal(self) -> None:
        self._sealed = True
        self._flush()

    def _flush(self) -> None:
        if self._sealed and not self._pending and self._parts:
            parts, self._parts = self._parts, []
            self._write(b"[" + b",".join(parts) + b"]")
