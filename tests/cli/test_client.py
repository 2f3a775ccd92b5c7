"""
Tests for L{mcpx.cli.client}: the command line's HTTP/1.1 client on the daemon's unix socket.

Each test serves one connection from a small blocking server on a thread, which reads one
request and then sends scripted bytes, so the tests control exactly how an answer is
framed and when each piece of it arrives.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from mcpx.cli.client import (
    MAX_HEAD,
    ApiError,
    DaemonClient,
    DaemonNotRunning,
    ProtocolError,
)

#: Seconds any side of a test waits for the other before it counts as stuck.
PATIENCE = 10.0


class Wait:
    """A step of a script: wait until the test says go on (or give up, noting it)."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.gave_up = False


class ScriptedServer:
    """
    Serves one connection on a unix socket: reads a request, then sends C{script}, whose
    bytes are sent as they are and whose L{Wait} steps pause until the test releases them.

    @ivar request: the request's bytes, head and body, once it has been read.
    """

    def __init__(self, path: str, script: list[bytes | Wait]) -> None:
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(1)
        self._listener.settimeout(PATIENCE)
        self._script = script
        self.request = b""
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            connection, _ = self._listener.accept()
        except OSError:
            return
        with connection:
            connection.settimeout(PATIENCE)
            try:
                self.request = self._read_request(connection)
                for step in self._script:
                    if isinstance(step, Wait):
                        step.gave_up = not step.go.wait(PATIENCE)
                    else:
                        connection.sendall(step)
            except OSError:
                # The client hung up first, as it does on an answer it refuses.
                pass

    @staticmethod
    def _read_request(connection: socket.socket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            piece = connection.recv(65536)
            if not piece:
                return data
            data += piece
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            body += connection.recv(65536)
        return head + b"\r\n\r\n" + body

    def stop(self) -> None:
        self._thread.join(PATIENCE)
        self._listener.close()

    def request_lines(self) -> list[bytes]:
        return self.request.partition(b"\r\n\r\n")[0].split(b"\r\n")


class ClientTestCase(SynchronousTestCase):
    """A socket path in a temporary directory of the test's own."""

    def setUp(self) -> None:
        directory = tempfile.mkdtemp(prefix="mcpx-client-")
        self.addCleanup(shutil.rmtree, directory, True)
        self.path = Path(directory) / "mcpx.sock"
        self.client = DaemonClient(self.path)

    def serve(self, *script: bytes | Wait) -> ScriptedServer:
        server = ScriptedServer(str(self.path), list(script))
        self.addCleanup(server.stop)
        return server


def head(*lines: str) -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class RequestTests(ClientTestCase):
    """What the client sends."""

    def test_get(self) -> None:
        """A GET names the target, the caller (C{Mcpx-Client}), what it accepts, and that
        the connection ends with the answer; it has no body."""
        server = self.serve(head("HTTP/1.1 200 OK", "Content-Length: 2"), b"{}")
        self.assertEqual(self.client.get("/v1/servers"), {})
        server.stop()
        lines = server.request_lines()
        self.assertEqual(lines[0], b"GET /v1/servers HTTP/1.1")
        self.assertIn(b"Host: mcpx", lines)
        self.assertIn(b"Mcpx-Client: cli", lines)
        self.assertIn(b"Accept: application/json", lines)
        self.assertIn(b"Connection: close", lines)
        self.assertFalse([line for line in lines if line.lower().startswith(b"content-")])

    def test_post(self) -> None:
        """A POST sends its body as compact JSON, with its type and length."""
        server = self.serve(head("HTTP/1.1 200 OK", "Content-Length: 11"), b'{"ok":true}')
        body = {"server": "demo", "text": "h\u00e9"}
        self.assertEqual(self.client.post("/v1/call", body), {"ok": True})
        server.stop()
        sent = b'{"server":"demo","text":"h\\u00e9"}'
        self.assertIn(b"Content-Type: application/json", server.request_lines())
        self.assertIn(f"Content-Length: {len(sent)}".encode(), server.request_lines())
        self.assertTrue(server.request.endswith(b"\r\n\r\n" + sent))

    def test_post_without_body(self) -> None:
        """A POST without a body says its length is 0, and that it is JSON (the daemon's 415)."""
        server = self.serve(head("HTTP/1.1 200 OK", "Content-Length: 2"), b"{}")
        self.client.post("/v1/servers/demo/restart", None)
        server.stop()
        self.assertEqual(server.request_lines()[0], b"POST /v1/servers/demo/restart HTTP/1.1")
        self.assertIn(b"Content-Length: 0", server.request_lines())
        self.assertIn(b"Content-Type: application/json", server.request_lines())

    def test_no_header_injection(self) -> None:
        """A header value or target with a line break is refused before anything is sent."""
        client = DaemonClient(self.path, client="cli\r\nX-Evil: 1")
        self.assertRaises(ValueError, client.get, "/health")
        self.assertRaises(ValueError, self.client.get, "/health HTTP/1.0\r\nX: y")


class FramingTests(ClientTestCase):
    """The three ways an answer's body can be delimited."""

    def test_content_length(self) -> None:
        """A body is read to its C{Content-Length}, even when it arrives in pieces, and
        bytes after it are ignored."""
        self.serve(
            head("HTTP/1.1 200 OK", "Content-Type: application/json", "Content-Length: 13"),
            b'{"a": ',
            b"[1, 2]}",
            b"garbage",
        )
        with self.client.open("GET", "/x") as response:
            self.assertEqual((response.status, response.reason), (200, "OK"))
            self.assertEqual(response.content_type, "application/json")
            self.assertEqual(response.json(), {"a": [1, 2]})

    def test_chunked(self) -> None:
        """A chunked body is the concatenation of its chunks; chunk extensions and
        trailers are skipped."""
        self.serve(
            head("HTTP/1.1 200 OK", "Transfer-Encoding: chunked"),
            chunk(b'{"text": "'),
            b"5;name=value\r\nhello\r\n",
            chunk(b'"}'),
            b"0\r\nExpires: never\r\n\r\n",
        )
        self.assertEqual(self.client.get("/x"), {"text": "hello"})

    def test_chunked_lines_as_they_arrive(self) -> None:
        """Lines of a chunked stream are handed over as soon as each is complete, while the
        rest has not been sent yet; a line split across chunks comes out whole."""
        first_seen = Wait()
        second_seen = Wait()
        self.serve(
            head(
                "HTTP/1.1 200 OK",
                "Content-Type: application/x-ndjson",
                "Transfer-Encoding: chunked",
            ),
            chunk(b'{"progress": 1}\r\n{"pro'),
            first_seen,
            chunk(b'gress": 2}\n'),
            second_seen,
            chunk(b'{"result": 3}'),
            b"0\r\n\r\n",
        )
        with self.client.open("POST", "/v1/call", {}) as response:
            self.assertEqual(response.content_type, "application/x-ndjson")
            lines = response.lines()
            self.assertEqual(next(lines), b'{"progress": 1}')
            first_seen.go.set()
            self.assertEqual(next(lines), b'{"progress": 2}')
            second_seen.go.set()
            self.assertEqual(list(lines), [b'{"result": 3}'])
        self.assertEqual((first_seen.gave_up, second_seen.gave_up), (False, False))

    def test_until_close(self) -> None:
        """Without a length or chunking, the body runs until the connection closes."""
        self.serve(head("HTTP/1.0 200 OK"), b"one\ntwo", b"\nthree")
        with self.client.open("GET", "/x") as response:
            self.assertEqual(list(response.lines()), [b"one", b"two", b"three"])

    def test_interim_answer(self) -> None:
        """A C{100 Continue} before the answer is skipped."""
        self.serve(
            head("HTTP/1.1 100 Continue"), head("HTTP/1.1 200 OK", "Content-Length: 1"), b"7"
        )
        self.assertEqual(self.client.get("/x"), 7)

    def test_no_body(self) -> None:
        """A 204 has no body, whatever else its headers say."""
        self.serve(head("HTTP/1.1 204 No Content", "Transfer-Encoding: chunked"))
        with self.client.open("GET", "/x") as response:
            self.assertEqual(response.read(), b"")


class ErrorTests(ClientTestCase):
    """Answers that are errors, and answers that are not HTTP."""

    def test_api_error(self) -> None:
        """An error status with the agreed body raises L{ApiError} with its code, message
        and whole error object."""
        body = b'{"error": {"code": "unknown_server", "message": "no server named \'x\'"}}'
        self.serve(
            head("HTTP/1.1 404 Not Found", f"Content-Length: {len(body)}"),
            body,
        )
        error = self.assertRaises(ApiError, self.client.get, "/v1/tools/x/y")
        self.assertEqual((error.status, error.code), (404, "unknown_server"))
        self.assertEqual(error.message, "no server named 'x'")
        self.assertEqual(error.body["code"], "unknown_server")

    def test_other_error(self) -> None:
        """An error status without the agreed body (a chunked HTML page here) raises
        L{ApiError} saying what the status line said."""
        self.serve(
            head("HTTP/1.1 500 Internal Server Error", "Transfer-Encoding: chunked"),
            chunk(b"<html>oops</html>"),
            b"0\r\n\r\n",
        )
        error = self.assertRaises(ApiError, self.client.get, "/x")
        self.assertEqual((error.status, error.code), (500, "http_error"))
        self.assertEqual(error.message, "the daemon answered 500 Internal Server Error")

    def test_no_socket(self) -> None:
        """Without a socket file, no daemon is running."""
        error = self.assertRaises(DaemonNotRunning, self.client.get, "/health")
        self.assertEqual((error.reason, error.path), ("no socket", self.path))

    def test_refused(self) -> None:
        """A socket file nobody listens on (a daemon that died) is no daemon either."""
        stale = socket.socket(socket.AF_UNIX)
        stale.bind(str(self.path))
        stale.close()
        error = self.assertRaises(DaemonNotRunning, self.client.health)
        self.assertEqual(error.reason, "nothing listens on the socket")

    def test_closed_without_answer(self) -> None:
        """A daemon that hangs up without answering is a protocol error."""
        self.serve()
        error = self.assertRaises(ProtocolError, self.client.get, "/x")
        self.assertIn("without answering", str(error))

    def test_not_http(self) -> None:
        """An answer that does not start with an HTTP/1.x status line is refused."""
        self.serve(b"SSH-2.0-OpenSSH\r\n\r\n")
        self.assertRaises(ProtocolError, self.client.get, "/x")

    def test_bad_header(self) -> None:
        """A header line without a colon is refused."""
        self.serve(head("HTTP/1.1 200 OK", "no colon here"))
        self.assertRaises(ProtocolError, self.client.get, "/x")

    def test_headers_too_long(self) -> None:
        """Headers that never end are refused once they pass the limit, rather than read
        for ever."""
        self.serve(b"HTTP/1.1 200 OK\r\n", b"X-Filler: " + b"x" * (2 * MAX_HEAD))
        error = self.assertRaises(ProtocolError, self.client.get, "/x")
        self.assertIn("longer than", str(error))

    def test_truncated(self) -> None:
        """A body that ends before its C{Content-Length} is a protocol error, not a short
        answer."""
        self.serve(head("HTTP/1.1 200 OK", "Content-Length: 10"), b"{}")
        error = self.assertRaises(ProtocolError, self.client.get, "/x")
        self.assertIn("8 bytes before the end", str(error))

    def test_bad_content_length(self) -> None:
        """A C{Content-Length} that is not a number, or copies that disagree, are refused."""
        self.serve(head("HTTP/1.1 200 OK", "Content-Length: -1"), b"{}")
        self.assertRaises(ProtocolError, self.client.get, "/x")

    def test_bad_chunk_size(self) -> None:
        """A chunk size that is not hexadecimal is refused."""
        self.serve(head("HTTP/1.1 200 OK", "Transfer-Encoding: chunked"), b"0x2\r\n{}\r\n")
        self.assertRaises(ProtocolError, self.client.get, "/x")

    def test_truncated_chunked(self) -> None:
        """A chunked body whose connection closes before the last chunk is refused."""
        self.serve(head("HTTP/1.1 200 OK", "Transfer-Encoding: chunked"), chunk(b"{}"))
        error = self.assertRaises(ProtocolError, self.client.get, "/x")
        self.assertIn("chunked body", str(error))

    def test_timeout(self) -> None:
        """A daemon that does not answer within the timeout raises C{TimeoutError} (an
        C{OSError}, which the commands report)."""
        hold = Wait()
        self.serve(hold)
        self.addCleanup(hold.go.set)
        self.assertRaises(TimeoutError, self.client.get, "/x", timeout=0.2)
