"""
A Streamable HTTP relay that records every JSON-RPC frame passing, so a test can validate
what mcpx sent an HTTP upstream: C{python relay.py FOLDER UPSTREAM_URL}. It listens on a
free loopback port, prints C{relay listening on http://127.0.0.1:PORT/mcp} and forwards
each request to C{UPSTREAM_URL}, streaming the answer back as it comes (SSE included).

Frames are written to C{FOLDER/SESSION.tap}, one file per MCP session (C{none.tap} for
exchanges without one), in the format of C{tap.py}: C{> JSON} from mcpx to the upstream,
C{< JSON} from the upstream to mcpx. Only the standard library: it runs under whichever
interpreter the caller has.
"""

from __future__ import annotations

import http.client
import json
import re
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

#: Headers that describe one hop, not the message: never forwarded.
_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length", "te"}
_SESSION = re.compile(r"[^A-Za-z0-9._-]")


class EventStream:
    """
    Server-sent events, fed in pieces as they arrive; yields the C{data} of each event
    (events without data, such as a stream's priming event, yield nothing).
    """

    def __init__(self) -> None:
        self._pending = b""
        self._data: list[bytes] = []

    def feed(self, piece: bytes) -> Iterator[bytes]:
        self._pending += piece
        while True:
            match = re.search(rb"\r\n|\r|\n", self._pending)
            # A lone CR at the end may be the first half of a CRLF still to come.
            if match is None or (match.group() == b"\r" and match.end() == len(self._pending)):
                return
            line, self._pending = self._pending[: match.start()], self._pending[match.end() :]
            if not line:
                data = b"\n".join(self._data)
                if data:
                    yield data
                self._data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)


def frames_of(body: bytes) -> list[Any]:
    """The JSON-RPC frames of one JSON body (a batch gives each of its members)."""
    if not body.strip():
        return []
    try:
        parsed = json.loads(body)
    except ValueError:
        return [body.decode("utf-8", "replace")]
    return parsed if isinstance(parsed, list) else [parsed]


class Log:
    """Where the frames of each session are written."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._lock = threading.Lock()

    def write(self, session: str | None, mark: bytes, frames: list[Any]) -> None:
        name = _SESSION.sub("_", session) if session else "none"
        with self._lock, open(self._folder / f"{name}.tap", "ab") as log:
            for frame in frames:
                text = frame if isinstance(frame, str) else json.dumps(frame)
                log.write(mark + text.replace("\n", " ").encode() + b"\n")


class Relay(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream: Any = urlsplit("http://127.0.0.1/")
    log: Log

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the relay's output is its banner."""

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                body += self.rfile.read(size)
                self.rfile.readline()
                if size == 0:
                    return body
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _relay(self) -> None:
        body = self._body()
        session = self.headers.get("Mcp-Session-Id")
        connection = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        headers["Host"] = self.upstream.netloc
        path = self.upstream.path + (f"?{self.upstream.query}" if self.upstream.query else "")
        try:
            connection.request(self.command, path, body=body or None, headers=headers)
            response = connection.getresponse()
        except OSError as e:
            self.send_error(502, f"upstream unreachable: {e}")
            return
        # An initialize request carries no session; its answer names the one it began.
        session = session or response.getheader("Mcp-Session-Id")
        self.log.write(session, b"> ", frames_of(body))
        self.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in _HOP:
                self.send_header(key, value)
        if response.status in (204, 304):
            self.end_headers()
            connection.close()
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        streaming = (response.getheader("Content-Type") or "").startswith("text/event-stream")
        events = EventStream()
        whole = b""
        try:
            while piece := response.read1(65536):
                if streaming:
                    for data in events.feed(piece):
                        self.log.write(session, b"< ", frames_of(data))
                else:
                    whole += piece
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            # mcpx closed its end (a stream it no longer wants): so do we.
            self.close_connection = True
        finally:
            connection.close()
            if not streaming:
                self.log.write(session, b"< ", frames_of(whole))

    do_GET = do_POST = do_DELETE = _relay


def main() -> int:
    folder, upstream = Path(sys.argv[1]), sys.argv[2]
    folder.mkdir(parents=True, exist_ok=True)
    Relay.upstream = urlsplit(upstream)
    Relay.log = Log(folder)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Relay)
    server.daemon_threads = True
    print(f"relay listening on http://127.0.0.1:{server.server_port}/mcp", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
