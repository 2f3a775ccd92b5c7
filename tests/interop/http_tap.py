"""
What the Python SDK host and mcpx say to each other over C{/mcp}, recorded on the host's
side: an C{httpx2} transport that writes every frame of every request body and every
answer (JSON or server-sent events, read as they stream) to a log in C{tap.py}'s format,
C{> JSON} from the host and C{< JSON} from mcpx.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2

from tests.interop.relay import EventStream, frames_of


class _Tee(httpx2.AsyncByteStream):
    """A response body passed on unchanged, each piece shown to C{seen} first."""

    def __init__(
        self,
        inner: httpx2.AsyncByteStream,
        seen: Callable[[bytes], None],
        ended: Callable[[], None],
    ) -> None:
        self._inner = inner
        self._seen = seen
        self._ended = ended

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self._inner:
            self._seen(piece)
            yield piece
        self._ended()

    async def aclose(self) -> None:
        await self._inner.aclose()


class RecordingTransport(httpx2.AsyncBaseTransport):
    """Sends through a plain C{httpx2} transport and records both directions in C{log}."""

    def __init__(self, log: Path) -> None:
        self._log = log
        self._inner = httpx2.AsyncHTTPTransport()

    def _write(self, mark: bytes, frames: list[Any]) -> None:
        with open(self._log, "ab") as log:
            for frame in frames:
                text = frame if isinstance(frame, str) else json.dumps(frame)
                log.write(mark + text.replace("\n", " ").encode() + b"\n")

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self._write(b"> ", frames_of(await request.aread()))
        response = await self._inner.handle_async_request(request)
        streaming = response.headers.get("content-type", "").startswith("text/event-stream")
        events = EventStream()
        whole = bytearray()

        def seen(piece: bytes) -> None:
            if streaming:
                for data in events.feed(piece):
                    self._write(b"< ", frames_of(data))
            else:
                whole.extend(piece)

        def ended() -> None:
            if not streaming:
                self._write(b"< ", frames_of(bytes(whole)))

        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = _Tee(response.stream, seen, ended)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()
