"""
A peer that answers every JSON-RPC request at once with the same small result, over stdio or
over HTTP/1.1: the floor of a transport, with no server work behind it.

    python bench/bare_answerer.py stdio          # one message a line on stdin and stdout
    python bench/bare_answerer.py http PORT      # POST with Content-Length, keep-alive

C{bench_gateways.py} times a call to each with the same raw clients it uses elsewhere; the
difference is what speaking HTTP costs over speaking stdio, which it subtracts from what
mcpx's C{/mcp} adds over a direct stdio call.  Requests are not checked beyond finding their
id: this is a measuring device, not a server.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from twisted.internet.protocol import Factory, Protocol
from twisted.internet.stdio import StandardIO

RESULT = b'"result":{"content":[{"type":"text","text":"x"}]}}'


def answer_to(message: bytes) -> bytes:
    request_id = json.loads(message).get("id")
    return b'{"jsonrpc":"2.0","id":' + json.dumps(request_id).encode() + b"," + RESULT


class LineAnswerer(Protocol):
    def __init__(self) -> None:
        self.buffer = b""

    def dataReceived(self, data: bytes) -> None:
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        answers = [answer_to(line) + b"\n" for line in lines if line.strip()]
        if answers and self.transport is not None:
            self.transport.write(b"".join(answers))

    def connectionLost(self, reason: Any = None) -> None:
        from twisted.internet import reactor as running

        reactor: Any = running
        reactor.stop()


class HttpAnswerer(Protocol):
    def __init__(self) -> None:
        self.buffer = b""

    def dataReceived(self, data: bytes) -> None:
        self.buffer += data
        out = []
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                break
            head = self.buffer[:head_end].lower()
            start = head.find(b"content-length:")
            length = int(head[start + 15 : head.find(b"\r\n", start)]) if start >= 0 else 0
            end = head_end + 4 + length
            if len(self.buffer) < end:
                break
            body = answer_to(self.buffer[head_end + 4 : end])
            self.buffer = self.buffer[end:]
            out.append(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
        if out and self.transport is not None:
            self.transport.write(b"".join(out))


def main() -> None:
    from twisted.internet import reactor as running

    reactor: Any = running
    if sys.argv[1:2] == ["stdio"]:
        StandardIO(LineAnswerer())  # type: ignore[no-untyped-call]
    elif sys.argv[1:2] == ["http"] and len(sys.argv) == 3:
        factory: Any = Factory.forProtocol(HttpAnswerer)
        reactor.listenTCP(int(sys.argv[2]), factory, interface="127.0.0.1")
    else:
        raise SystemExit(__doc__)
    reactor.run()


if __name__ == "__main__":
    main()
