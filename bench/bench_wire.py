"""
Round trips per second through two L{mcpx.wire.peer.RpcPeer}s wired back to back.

Each round trip is a request encoded, framed, split by a L{LineBuffer}, parsed, answered,
and the answer carried back the same way: everything a stdio hop costs except the pipe.

    .venv/bin/python bench/bench_wire.py [round-trips]
"""

from __future__ import annotations

import sys
import time
from typing import Any

from mcpx.wire.framing import LineBuffer, frame
from mcpx.wire.messages import Request
from mcpx.wire.peer import RpcPeer

PARAMS = {"name": "search", "arguments": {"query": "twisted deferred", "limit": 10}}
RESULT = {
    "content": [{"type": "text", "text": "x" * 200}],
    "structuredContent": {"hits": [{"id": i, "score": 1.0 / (i + 1)} for i in range(10)]},
    "isError": False,
}


def build() -> tuple[RpcPeer, list[Any]]:
    to_server: LineBuffer = LineBuffer()
    to_client: LineBuffer = LineBuffer()
    peers: list[RpcPeer] = []

    def client_send(data: bytes) -> None:
        for line in to_server.feed(frame(data)):
            assert isinstance(line, bytes)
            peers[1].receive(line)

    def server_send(data: bytes) -> None:
        for line in to_client.feed(frame(data)):
            assert isinstance(line, bytes)
            peers[0].receive(line)

    def answer(request: Request) -> object:
        return RESULT

    peers.append(RpcPeer(client_send, on_request=answer))
    peers.append(RpcPeer(server_send, on_request=answer, negative_ids=True))
    results: list[Any] = []
    return peers[0], results


def main(count: int) -> None:
    client, results = build()
    for _ in range(1000):
        client.request("tools/call", PARAMS).addCallback(results.append)
    results.clear()
    start = time.perf_counter()
    for _ in range(count):
        client.request("tools/call", PARAMS).addCallback(results.append)
    elapsed = time.perf_counter() - start
    assert len(results) == count
    print(
        f"{count} round trips in {elapsed:.3f}s: {count / elapsed:,.0f}/s, "
        f"{elapsed / count * 1e6:.1f} us each"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
