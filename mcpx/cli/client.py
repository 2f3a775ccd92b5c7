# -*- test-case-name: tests.cli.test_client -*-
"""
The command line's side of the daemon's C{/v1} API: HTTP/1.1 over the private unix socket.

A command is a short-lived process that asks one question and exits, so this is plain
blocking standard-library code rather than reactor code: importing Twisted, treq or Klein
would cost more than the whole request.  For the same reason it speaks HTTP itself, on a
bare socket, instead of through C{http.client}, which imports the C{email} package and
C{ssl}; and it avoids attrs, its few records being plain classes.  The HTTP it needs is
small: one request per connection (C{Connection: close}), and an answer framed by
C{Content-Length}, by C{Transfer-Encoding: chunked} (which is how the daemon streams
NDJSON and server-sent events) or by the end of the connection.

Every failure to reach the daemon becomes a L{DaemonNotRunning}, every error the daemon
answers (C{{"error": {"code", "message"}}}) an L{ApiError}, and an answer that is not
HTTP as this client reads it a L{ProtocolError}, so the commands turn each into a message
and an exit status in one place.
"""

from __future__ import annotations

# The C half of the socket module: socket.py itself builds enum classes for every
# constant when imported, which takes longer than the whole request.
import _socket
import os
import sys
import time

from mcpx.cli import fastjson
from mcpx.ops import routes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping
    from pathlib import Path
    from typing import Any, Protocol

    class Stream(Protocol):
        """What the HTTP code needs of a connection: the unix socket, or an ssh channel."""

        def settimeout(self, timeout: float | None, /) -> None: ...
        def sendall(self, data: bytes, /) -> None: ...
        def recv(self, size: int, /) -> bytes: ...
        def close(self) -> None: ...


#: The daemon's socket in its state directory.  C{mcpx.daemon.listeners.SOCKET_NAME} says the
#: same, but importing it would import Twisted; a test keeps the two equal.
SOCKET_NAME = "mcpx.sock"

#: The header that tells the daemon who is calling, and the name it assumes without one:
#: C{mcpx.wire.http_common.CLIENT_HEADER} and C{mcpx.ops.host.DEFAULT_CLIENT} say the same,
#: but importing them would import re and typing; a test keeps them equal.
CLIENT_HEADER = "Mcpx-Client"
DEFAULT_CLIENT = "cli"

#: Where a daemon started by C{--start} writes what it prints, in the state directory.
DAEMON_LOG_NAME = "daemon.log"

#: Seconds to wait for a question that has no reason to take long (lists, health).
QUICK_TIMEOUT = 30.0

#: The most bytes a status line with its headers, a chunk-size line or a chunked body's
#: trailers may take; the daemon sends a few hundred, so a peer sending more is not it.
MAX_HEAD = 64 * 1024

_RECEIVE_SIZE = 65536
_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")
#: Statuses whose answers have no body, whatever their headers say.
_NO_BODY = (204, 304)


class DaemonNotRunning(Exception):
    """Nothing answers on the daemon's socket: it is missing, or nobody listens on it."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"no mcpx daemon is running ({reason}: {path})")
        self.path = path
        self.reason = reason


class DaemonStartFailed(Exception):
    """C{--start} launched a daemon that did not come up."""


class DaemonUnreachable(Exception):
    """The way to a remote daemon (ssh, or the mcpx at its end) failed; the message says why."""


class ProtocolError(Exception):
    """The answer is not HTTP/1.1 as this client reads it, or it ended too soon."""


class BadEndpoint(ValueError):
    """A C{--daemon} value mcpx cannot use; the message says what is accepted."""


class ApiError(Exception):
    """
    An error the daemon answered with.

    @ivar status: the HTTP status, or C{None} for an error that arrived inside a stream
        (the status line had already said 200).
    @ivar code: the stable snake_case code.
    @ivar body: the whole C{error} object, for C{--json} and for the C{rpc} details.
    """

    def __init__(self, status: int | None, code: str, message: str, body: Mapping[str, Any]):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.body = dict(body)


def socket_path(state: Path) -> Path:
    """The daemon's unix socket in the state directory C{state}."""
    return state / SOCKET_NAME


def error_from(status: int | None, payload: object, fallback: str) -> ApiError:
    """
    The L{ApiError} a daemon answer describes; C{fallback} is the message when the answer is
    not the agreed C{{"error": {...}}} shape (a proxy, or a daemon of another version).
    """
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        code = error.get("code")
        message = error.get("message")
        return ApiError(
            status,
            code if isinstance(code, str) else "error",
            message if isinstance(message, str) else fallback,
            error,
        )
    return ApiError(status, "http_error", fallback, {"code": "http_error", "message": fallback})


class _Reader:
    """Buffered reads from a connected socket, for parsing an answer as it arrives."""

    def __init__(self, sock: Stream) -> None:
        self._sock = sock
        self._buffer = b""

    def _receive(self) -> bytes:
        return self._sock.recv(_RECEIVE_SIZE)

    def head(self) -> bytes:
        """The status line and headers, up to and without the blank line that ends them."""
        return self._until(
            b"\r\n\r\n",
            f"the answer's headers are longer than {MAX_HEAD} bytes",
            "the daemon closed the connection without answering",
            "the connection closed in the middle of the headers",
        )

    def line(self) -> bytes:
        """One CRLF-ended line (a chunk size or a trailer), without its line ending."""
        closed = "the connection closed in the middle of a chunked body"
        return self._until(
            b"\r\n", f"a line of the chunked body is longer than {MAX_HEAD} bytes", closed, closed
        )

    def _until(self, end_mark: bytes, too_long: str, closed: str, closed_within: str) -> bytes:
        """
        What comes before C{end_mark}, which is consumed too; past C{MAX_HEAD} bytes without
        it, C{too_long}; a close before anything arrived is C{closed}, one after
        C{closed_within}.
        """
        searched = 0
        while True:
            end = self._buffer.find(end_mark, searched)
            if end >= 0:
                found, self._buffer = self._buffer[:end], self._buffer[end + len(end_mark) :]
                return found
            if len(self._buffer) > MAX_HEAD:
                raise ProtocolError(too_long)
            searched = max(0, len(self._buffer) - len(end_mark) + 1)
            data = self._receive()
            if not data:
                raise ProtocolError(closed_within if self._buffer else closed)
            self._buffer += data

    def some(self, limit: int) -> bytes:
        """
        Up to C{limit} bytes: what is buffered, else what one receive brings; C{b""} once
        the peer has closed.  Never waits for more than the next piece to arrive.
        """
        if self._buffer:
            piece, self._buffer = self._buffer[:limit], self._buffer[limit:]
            return piece
        return self._sock.recv(min(limit, _RECEIVE_SIZE))


def _parse_head(head: bytes) -> tuple[int, str, dict[str, str]]:
    """The status, reason phrase and headers (names in lower case) of an answer's head."""
    status_line, *header_lines = head.split(b"\r\n")
    version, _, rest = status_line.decode("latin-1").partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise ProtocolError(f"not an HTTP/1.x status line: {status_line[:100]!r}")
    headers: dict[str, str] = {}
    for raw in header_lines:
        name, colon, value = raw.decode("latin-1").partition(":")
        if not colon or not name or name != name.strip():
            raise ProtocolError(f"not a header line: {raw[:100]!r}")
        name = name.lower()
        value = value.strip()
        # Repeated fields are one comma-separated list (RFC 9110, section 5.3).
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return int(code), reason.strip(), headers


class Response:
    """
    An answer whose body has not been read yet, for the streaming endpoints.

    Its body can be read once: as a whole (L{read}, L{json}) or as it arrives (L{chunks},
    L{lines}).  Close it (or use it as a context manager) to close the connection.

    @ivar status: the HTTP status.
    @ivar reason: the status line's reason phrase.
    @ivar headers: the header fields by lower-case name; a repeated field's values are
        joined with commas.
    """

    def __init__(self, sock: Stream) -> None:
        self._sock = sock
        self._reader = _Reader(sock)
        status, reason, headers = _parse_head(self._reader.head())
        # 1xx answers are interim (the daemon sends none, a proxy might): the real one follows.
        while 100 <= status < 200 and status != 101:
            status, reason, headers = _parse_head(self._reader.head())
        self.status = status
        self.reason = reason
        self.headers = headers

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    def chunks(self) -> Iterator[bytes]:
        """The body's bytes as they arrive, in pieces of whatever size they come in."""
        if self.status in _NO_BODY:
            return iter(())
        codings = self.headers.get("transfer-encoding")
        if codings is not None:
            if codings.rsplit(",", 1)[-1].strip().lower() == "chunked":
                return self._chunked()
            # Another final coding: the body is delimited by the end of the connection.
            return self._until_close()
        length = self.headers.get("content-length")
        if length is not None:
            return self._counted(_content_length(length))
        return self._until_close()

    def _counted(self, length: int) -> Iterator[bytes]:
        remaining = length
        while remaining:
            piece = self._reader.some(remaining)
            if not piece:
                raise ProtocolError(
                    f"the connection closed {remaining} bytes before the end of the answer"
                )
            remaining -= len(piece)
            yield piece

    def _chunked(self) -> Iterator[bytes]:
        while True:
            line = self._reader.line()
            size_text = line.split(b";", 1)[0].strip()
            if not size_text or not _HEX_DIGITS.issuperset(size_text):
                raise ProtocolError(f"not a chunk size: {line[:100]!r}")
            size = int(size_text, 16)
            if size == 0:
                break
            yield from self._counted(size)
            if self._reader.line():
                raise ProtocolError("a chunk is longer than its size says")
        trailers = 0
        while True:
            trailer = self._reader.line()
            if not trailer:
                return
            trailers += len(trailer)
            if trailers > MAX_HEAD:
                raise ProtocolError(f"the trailers are longer than {MAX_HEAD} bytes")

    def _until_close(self) -> Iterator[bytes]:
        while True:
            piece = self._reader.some(_RECEIVE_SIZE)
            if not piece:
                return
            yield piece

    def read(self) -> bytes:
        """The whole body."""
        return b"".join(self.chunks())

    def lines(self) -> Iterator[bytes]:
        """Each line of the body as soon as it has arrived, without its line ending."""
        pending = b""
        for piece in self.chunks():
            pending += piece
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line.rstrip(b"\r")
        if pending:
            yield pending.rstrip(b"\r")

    def json(self) -> Any:
        return fastjson.loads(self.read())

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _content_length(value: str) -> int:
    # A repeated Content-Length is acceptable only when every copy agrees (RFC 9110, 8.6).
    lengths = {part.strip() for part in value.split(",")}
    if len(lengths) != 1:
        raise ProtocolError(f"conflicting Content-Length values: {value!r}")
    [text] = lengths
    if not text.isdigit() or not text.isascii():
        raise ProtocolError(f"not a Content-Length: {value!r}")
    return int(text)


def _request(method: str, target: str, headers: Mapping[str, str], body: bytes | None) -> bytes:
    """
    A request's bytes.

    @raise ValueError: a target or header value that would split the request (a space or
        a control character), as C{http.client} refuses them too.
    """
    if any(c <= " " or c == "\x7f" for c in target):
        raise ValueError(
            f"cannot send a request target with spaces or control characters: {target!r}"
        )
    lines = [f"{method} {target} HTTP/1.1", "Host: mcpx", "Connection: close"]
    for name, value in headers.items():
        if any((c < " " and c != "\t") or c == "\x7f" for c in value):
            raise ValueError(f"cannot send a {name} header with control characters: {value!r}")
        lines.append(f"{name}: {value}")
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body) if body is not None else 0}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body if body else head


class DaemonClient:
    """
    Asks a running daemon questions over its unix socket, one connection per question.

    @ivar path: the daemon's socket (a string on C{mcpx call}'s path, which spares pathlib).
    @ivar client: sent as the C{Mcpx-Client} header.
    """

    #: Whether the daemon is started wherever it runs when none does (a remote one is).
    starts_on_demand = False
    #: Whether the command's exit handlers have work of this client's to do (a remote
    #: one's ssh processes are ended then); if not, a plain call may end its process at
    #: once (L{mcpx.cli.quick.Finished}).
    needs_exit_handlers = False

    def __init__(self, path: Path | str, client: str = DEFAULT_CLIENT) -> None:
        self.path = path
        self.client = client

    @property
    def where(self) -> str:
        """Where the daemon is, for messages."""
        return str(self.path)

    def again(self) -> DaemonClient:
        """Another client of the same daemon, for a second conversation alongside."""
        return DaemonClient(self.path, self.client)

    def _connect(self, timeout: float | None) -> Stream:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(str(self.path))
        except FileNotFoundError:
            sock.close()
            raise DaemonNotRunning(self.path, "no socket") from None
        except ConnectionRefusedError:
            sock.close()
            raise DaemonNotRunning(self.path, "nothing listens on the socket") from None
        except BaseException:
            sock.close()
            raise
        return sock

    def _unanswered(self, sock: Stream, error: ProtocolError) -> Exception:
        """The error to raise when the connection ended without an answer."""
        return error

    def open(
        self,
        method: str,
        target: str,
        body: object = None,
        *,
        timeout: float | None = QUICK_TIMEOUT,
        accept: str = "application/json",
    ) -> Response:
        """
        Send a request and return the answer with its body unread; an error status raises.

        @param timeout: socket timeout in seconds, for connecting and for each send and
            receive, C{None} to wait as long as it takes (a tool call the daemon times out
            itself, or an event stream).
        @raise DaemonNotRunning: the socket is missing or refuses connections.
        @raise ApiError: the daemon answered with an error status.
        @raise ProtocolError: the answer is not HTTP as this client reads it.
        @raise OSError: the connection failed otherwise, or timed out.
        """
        headers = {CLIENT_HEADER: self.client, "Accept": accept}
        data = None
        if body is not None:
            data = fastjson.dumps(body, separators=(",", ":")).encode("utf-8")
        if body is not None or method == "POST":
            # The daemon refuses a POST to /v1 that does not say it is JSON, bodiless or not.
            headers["Content-Type"] = "application/json"
        request = _request(method, target, headers, data)
        sock = self._connect(timeout)
        try:
            sock.sendall(request)
            try:
                response = Response(sock)
            except ProtocolError as e:
                raise self._unanswered(sock, e) from None
        except BaseException:
            sock.close()
            raise
        if response.status >= 400:
            with response:
                text = response.read()
            try:
                payload = fastjson.loads(text)
            except ValueError:
                payload = None
            fallback = f"the daemon answered {response.status} {response.reason}".rstrip()
            raise error_from(response.status, payload, fallback)
        return response

    def get(self, target: str, *, timeout: float | None = QUICK_TIMEOUT) -> Any:
        """GET C{target} and return its JSON."""
        with self.open("GET", target, timeout=timeout) as response:
            return response.json()

    def post(self, target: str, body: object, *, timeout: float | None = QUICK_TIMEOUT) -> Any:
        """POST C{body} as JSON to C{target} and return the answer's JSON."""
        with self.open("POST", target, body, timeout=timeout) as response:
            return response.json()

    def health(self) -> dict[str, Any]:
        answer: dict[str, Any] = self.get(routes.path("health"), timeout=5.0)
        return answer


def target(path: str, **query: str | None) -> str:
    """C{path} with the query parameters that are not C{None}."""
    from urllib.parse import urlencode

    given = {key: value for key, value in query.items() if value is not None}
    return f"{path}?{urlencode(given)}" if given else path


def segment(value: str) -> str:
    """C{value} quoted to stand as one path segment."""
    from urllib.parse import quote

    return quote(value, safe="")


#: Seconds C{--start} waits for a new daemon to answer C{/health}.
START_WAIT = 10.0


def ensure_running(
    client: DaemonClient, echo: Callable[..., object], *, wait: float = START_WAIT
) -> None:
    """
    Start a daemon in the background unless one answers already, and say so with
    C{echo} (C{click.echo}, or one that prints as it does).
    """
    try:
        client.health()
    except DaemonNotRunning:
        pass
    else:
        return
    if client.starts_on_demand:
        return  # a remote daemon is started there, and DaemonNotRunning is not raised
    from pathlib import Path  # deferred for start-up time: only --start needs it

    state = Path(client.path).parent
    pid = start_daemon(client, state, wait=wait)
    echo(
        f"mcpx: started a daemon in the background (pid {pid}); "
        f"its output goes to {state / DAEMON_LOG_NAME}",
        err=True,
    )


def start_daemon(client: DaemonClient, state: Path, *, wait: float = START_WAIT) -> int:
    """
    Start C{mcpx daemon} in the background and wait until it answers C{/health}.

    The daemon gets its own session (no terminal signals from this one), stdin from
    C{/dev/null}, and stdout and stderr appended to C{daemon.log} in the state directory.
    It inherits this process's environment, so it reads the same settings and state
    directory.  The wait doubles as a watch: a daemon that exits early (another one holds
    the socket, a bad setting) is reported with the end of its log instead of a timeout.

    @return: the daemon's process id.
    @raise DaemonStartFailed: it exited, or did not answer within C{wait} seconds.
    """
    # Only --start needs it; every other command is spared the import.
    import subprocess

    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    log_path = state / DAEMON_LOG_NAME
    # The log is the owner's alone (it may quote a server's stderr), like the state directory.
    descriptor = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(descriptor, 0o600)
    with open(descriptor, "ab") as log:
        # What earlier daemons wrote stays in the file, but only this one's lines explain
        # why this one exited.
        start = log.seek(0, os.SEEK_END)
        process = subprocess.Popen(
            [sys.executable, "-m", "mcpx", "daemon"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + wait
    while True:
        try:
            client.health()
        except (DaemonNotRunning, OSError, ProtocolError):
            pass
        else:
            return process.pid
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DaemonStartFailed(
                f"the daemon (pid {process.pid}) did not answer within {wait:g}s; see {log_path}"
            )
        try:
            # Waiting on the child is the pause between attempts, and notices an early exit.
            status = process.wait(timeout=min(0.05, remaining))
        except subprocess.TimeoutExpired:
            continue
        raise DaemonStartFailed(
            f"the daemon exited with status {status} before answering:\n"
            + _tail(log_path, start)
            + f"\n(full log: {log_path})"
        )


def _tail(path: Path, start: int, lines: int = 10) -> str:
    """The last C{lines} lines written to C{path} from byte C{start} on."""
    try:
        with open(path, "rb") as log:
            log.seek(start)
            text = log.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def default_socket_name() -> str:
    """The daemon's socket in the state directory the environment names, as a string."""
    # Deferred for start-up time: a command given its socket never reads the environment's.
    from mcpx.settings.paths import state_dir_name

    return os.path.join(state_dir_name(os.environ), SOCKET_NAME)


def default_state_dir() -> Path:
    """The state directory the environment names (C{$MCPX_STATE_DIR} or the XDG default)."""
    # Deferred for start-up time, as in default_socket_name.
    from mcpx.settings.paths import state_dir

    return state_dir(os.environ)
