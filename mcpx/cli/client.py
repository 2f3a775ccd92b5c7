# -*- test-case-name: tests.cli.test_commands -*-
"""
The command line's side of the daemon's C{/v1} API: HTTP/1.1 over the private unix socket.

A command is a short-lived process that asks one question and exits, so this is plain
blocking standard-library code (C{http.client} on an C{AF_UNIX} socket) rather than reactor
code: importing Twisted, treq or Klein would cost more than the whole request.  For the same
reason this module avoids attrs; its few records are plain classes.

Every failure to reach the daemon becomes a L{DaemonNotRunning}, and every error the daemon
answers (C{{"error": {"code", "message"}}}) an L{ApiError}, so the commands turn both into a
message and an exit status in one place.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

#: The daemon's socket in its state directory.  C{mcpx.daemon.listeners.SOCKET_NAME} says the
#: same, but importing it would import Twisted; a test keeps the two equal.
SOCKET_NAME = "mcpx.sock"

#: The header that tells the daemon who is calling (it scopes C{scope: client} servers).
CLIENT_HEADER = "Mcpx-Client"
DEFAULT_CLIENT = "cli"

#: Where a daemon started by C{--start} writes what it prints, in the state directory.
DAEMON_LOG_NAME = "daemon.log"

#: Seconds to wait for a question that has no reason to take long (lists, health).
QUICK_TIMEOUT = 30.0


class DaemonNotRunning(Exception):
    """Nothing answers on the daemon's socket: it is missing, or nobody listens on it."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"no mcpx daemon is running ({reason}: {path})")
        self.path = path
        self.reason = reason


class DaemonStartFailed(Exception):
    """C{--start} launched a daemon that did not come up."""


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


class UnixHTTPConnection(http.client.HTTPConnection):
    """An C{HTTPConnection} to a unix socket; the host name only fills the C{Host} header."""

    def __init__(self, path: str, timeout: float | None = QUICK_TIMEOUT) -> None:
        super().__init__("mcpx", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


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


class Response:
    """
    An answer whose body has not been read yet, for the streaming endpoints.

    Close it (or use it as a context manager) to close the connection.
    """

    def __init__(self, connection: UnixHTTPConnection, raw: http.client.HTTPResponse) -> None:
        self._connection = connection
        self.raw = raw
        self.status = raw.status

    @property
    def content_type(self) -> str:
        return (self.raw.getheader("content-type") or "").split(";")[0].strip().lower()

    def lines(self) -> Iterator[bytes]:
        """Each line of the body as it arrives, without its line ending."""
        while True:
            line = self.raw.readline()
            if not line:
                return
            yield line.rstrip(b"\r\n")

    def json(self) -> Any:
        return json.loads(self.raw.read())

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class DaemonClient:
    """
    Asks a running daemon questions over its unix socket, one connection per question.

    @ivar path: the daemon's socket.
    @ivar client: sent as the C{Mcpx-Client} header.
    """

    def __init__(self, path: Path, client: str = DEFAULT_CLIENT) -> None:
        self.path = path
        self.client = client

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

        @param timeout: socket timeout in seconds, C{None} to wait as long as it takes
            (a tool call the daemon times out itself, or an event stream).
        @raise DaemonNotRunning: the socket is missing or refuses connections.
        @raise ApiError: the daemon answered with an error status.
        """
        headers = {CLIENT_HEADER: self.client, "Accept": accept}
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode("utf-8")
            headers["Content-Type"] = "application/json"
        connection = UnixHTTPConnection(str(self.path), timeout=timeout)
        try:
            connection.request(method, target, body=data, headers=headers)
            raw = connection.getresponse()
        except FileNotFoundError:
            connection.close()
            raise DaemonNotRunning(self.path, "no socket") from None
        except ConnectionRefusedError:
            connection.close()
            raise DaemonNotRunning(self.path, "nothing listens on the socket") from None
        except BaseException:
            connection.close()
            raise
        response = Response(connection, raw)
        if raw.status >= 400:
            with response:
                text = raw.read()
            try:
                payload = json.loads(text)
            except ValueError:
                payload = None
            fallback = f"the daemon answered {raw.status} {raw.reason}"
            raise error_from(raw.status, payload, fallback)
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
        answer: dict[str, Any] = self.get("/health", timeout=5.0)
        return answer


def target(path: str, **query: str | None) -> str:
    """C{path} with the query parameters that are not C{None}."""
    given = {key: value for key, value in query.items() if value is not None}
    return f"{path}?{urlencode(given)}" if given else path


def segment(value: str) -> str:
    """C{value} quoted to stand as one path segment."""
    return quote(value, safe="")


def start_daemon(client: DaemonClient, state: Path, *, wait: float = 10.0) -> int:
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
    with open(log_path, "ab") as log:
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
        except (DaemonNotRunning, OSError, http.client.HTTPException):
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
            + _tail(log_path)
            + f"\n(full log: {log_path})"
        )


def _tail(path: Path, lines: int = 10) -> str:
    try:
        text = path.read_text("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def default_state_dir() -> Path:
    """The state directory the environment names (C{$MCPX_STATE_DIR} or the XDG default)."""
    from mcpx.settings.paths import state_dir

    return state_dir(os.environ)
