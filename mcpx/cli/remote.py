# -*- test-case-name: tests.cli.test_remote -*-
"""
A daemon on another machine, reached over ssh: C{--daemon ssh://[user@]host[:port]}
(or C{MCPX_DAEMON}).

Nothing listens on the network for this.  Each request the command line makes runs
C{ssh host mcpx bridge-api}, whose standard input and output are one end of a socket
pair: the HTTP request goes in, the answer comes out, exactly as on the local unix
socket, and the remote C{mcpx bridge-api} copies both to its own daemon's socket
(starting that daemon first when none runs).  C{mcpx serve --daemon ssh://host} does
the same for MCP, with C{mcpx bridge-api --mcp}.  ssh is the only transport and the
only credential: the remote daemon sees a local user on its socket.

ssh runs with C{BatchMode=yes} (its standard input is protocol bytes, so it can never
ask for a password or a host key confirmation) and C{-T}.  C{MCPX_SSH_COMMAND} replaces
C{ssh} (for C{-F config}, C{-i key}, ...; split like a shell would), and
C{MCPX_REMOTE_MCPX} replaces the C{mcpx} run on the remote host (a shell command, as
ssh runs it through the remote user's shell).

When ssh fails, its exit status and what it said on stderr are turned into one message
saying what to do (L{diagnose}): ssh missing, host unreachable, authentication
refused, C{mcpx} missing on the remote host, or two different versions of mcpx.

Like the rest of the client, this is standard-library code that imports no Twisted.
"""

from __future__ import annotations

import _thread
import atexit
import os
import sys

from mcpx._version import __version__
from mcpx.cli.client import (
    DEFAULT_CLIENT,
    BadEndpoint,
    DaemonClient,
    DaemonUnreachable,
    ProtocolError,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    import subprocess
    from collections.abc import Mapping, Sequence
    from typing import IO, Any

    from mcpx.cli.client import Stream

#: The environment variable naming the daemon to use (also C{--daemon}).
DAEMON_VARIABLE = "MCPX_DAEMON"
#: The ssh command line to run instead of C{ssh}.
SSH_COMMAND_VARIABLE = "MCPX_SSH_COMMAND"
#: The command to run on the remote host instead of C{mcpx}.
REMOTE_MCPX_VARIABLE = "MCPX_REMOTE_MCPX"

#: The exit status of C{mcpx bridge-api} when the two ends run different versions.
EXIT_VERSION_MISMATCH = 65
#: ... and when it cannot reach or start the remote daemon.
EXIT_NO_DAEMON = 66

#: Seconds ssh may take to connect before it gives up (C{ConnectTimeout}).
CONNECT_TIMEOUT = 10
#: Seconds to wait for ssh to end once its answer is in or it failed.
_REAP_WAIT = 5.0


class SshEndpoint:
    """
    A remote daemon: C{ssh://[user@]host[:port]}.

    @ivar user: the remote user, or C{None} for ssh's own choice.
    @ivar host: the host name or address (as ssh's configuration may alias it).
    @ivar port: the ssh port, or C{None} for ssh's own choice.
    """

    def __init__(self, host: str, user: str | None = None, port: int | None = None) -> None:
        self.host = host
        self.user = user
        self.port = port

    def __str__(self) -> str:
        user = f"{self.user}@" if self.user else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = f":{self.port}" if self.port is not None else ""
        return f"ssh://{user}{host}{port}"

    def __repr__(self) -> str:
        return f"SshEndpoint({str(self)!r})"

    def argv(self, remote: Sequence[str], environ: Mapping[str, str] | None = None) -> list[str]:
        """
        The ssh command line that runs C{mcpx remote...} on the host.

        The host comes after C{--}, so no name can be read as an ssh option.
        """
        import shlex  # deferred: it imports re, which a plain mcpx call does without

        env = os.environ if environ is None else environ
        ssh = shlex.split(env.get(SSH_COMMAND_VARIABLE) or "ssh")
        if not ssh:
            raise BadEndpoint(f"{SSH_COMMAND_VARIABLE} is set but names no command")
        argv = [*ssh, "-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT}"]
        if self.port is not None:
            argv += ["-p", str(self.port)]
        if self.user is not None:
            argv += ["-l", self.user]
        mcpx = env.get(REMOTE_MCPX_VARIABLE) or "mcpx"
        command = " ".join([mcpx, *(shlex.quote(word) for word in remote)])
        return [*argv, "--", self.host, command]


def parse_endpoint(value: str) -> SshEndpoint | None:
    """
    The daemon C{value} names: C{None} for the local one (an empty value), an
    L{SshEndpoint} for C{ssh://[user@]host[:port]}.

    @raise BadEndpoint: anything else.
    """
    text = value.strip()
    if not text:
        return None
    if not text.lower().startswith("ssh://"):
        raise BadEndpoint(
            f"cannot use {value!r} as a daemon: give ssh://[user@]host[:port] for a daemon "
            "on another machine, or nothing for the local one"
        )
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as e:
        raise BadEndpoint(f"cannot use {value!r} as a daemon: {e}") from None
    host = parts.hostname
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.password:
        raise BadEndpoint(
            f"cannot use {value!r} as a daemon: only ssh://[user@]host[:port] is accepted "
            "(no password, path or query; ssh's own configuration gives the rest)"
        )
    if not host or host.startswith("-") or any(c.isspace() or c in "'\"\\;" for c in host):
        raise BadEndpoint(f"cannot use {value!r} as a daemon: it names no usable host")
    user = parts.username
    if user is not None and (not user or user.startswith("-") or any(c.isspace() for c in user)):
        raise BadEndpoint(f"cannot use {value!r} as a daemon: it names no usable user")
    # urlsplit lower-cases the host; a name in ~/.ssh/config keeps its case.
    netloc_host = parts.netloc.rpartition("@")[2]
    if netloc_host.startswith("["):
        host = netloc_host[1 : netloc_host.index("]")]
    else:
        host = netloc_host.rsplit(":", 1)[0] if port is not None else netloc_host
    return SshEndpoint(host, user, port)


def endpoint_from_environment(environ: Mapping[str, str] | None = None) -> SshEndpoint | None:
    """The daemon C{MCPX_DAEMON} names (see L{parse_endpoint})."""
    env = os.environ if environ is None else environ
    return parse_endpoint(env.get(DAEMON_VARIABLE, ""))


def diagnose(endpoint: SshEndpoint, status: int | None, stderr: str) -> str:
    """
    What to tell the user when ssh to C{endpoint} ended with C{status}, having said
    C{stderr}, without carrying an answer.
    """
    said = stderr.strip()
    last = said.splitlines()[-1] if said else ""
    lowered = said.lower()
    if status == EXIT_VERSION_MISMATCH:
        return last or f"{endpoint.host} runs another version of mcpx than this one"
    if status == EXIT_NO_DAEMON:
        return f"on {endpoint.host}: {last}" if last else f"no daemon could run on {endpoint}"
    if status == 127 or "command not found" in lowered or "no such file" in lowered:
        return (
            f"mcpx is not installed on {endpoint.host} (ssh said: {last or 'command not found'}); "
            f"install mcpx {__version__} there, or set {REMOTE_MCPX_VARIABLE} to the command "
            "that runs it"
        )
    if status == 255:
        if "permission denied" in lowered or "authentication" in lowered:
            port = f"-p {endpoint.port} " if endpoint.port is not None else ""
            user = f"{endpoint.user}@" if endpoint.user else ""
            return (
                f"ssh could not log in to {endpoint} ({last}); mcpx runs ssh without "
                "prompts (BatchMode), so use a key ssh can offer by itself (ssh-agent, "
                f"~/.ssh/config IdentityFile) and check that `ssh {port}{user}{endpoint.host} "
                "true` works without asking anything"
            )
        if "host key verification failed" in lowered:
            return (
                f"ssh does not know the host key of {endpoint.host} ({last}); connect once "
                "with plain ssh to check and accept it"
            )
        if any(
            sign in lowered
            for sign in (
                "could not resolve",
                "connection refused",
                "timed out",
                "no route",
                "network is unreachable",
                "connection closed",
                "connection reset",
            )
        ):
            return f"cannot reach {endpoint} ({last})"
        return f"ssh to {endpoint} failed ({last or 'exit status 255'})"
    if status is None:
        return f"ssh to {endpoint} did not end after the connection closed ({last})"
    if status < 0:
        return (
            f"the ssh connection to {endpoint} was lost before the answer came (ssh was "
            f"killed by signal {-status}); a call it carried is cancelled there"
        )
    return f"ssh to {endpoint} ended with status {status} without an answer ({last})"


class _SshProcesses:
    """
    The ssh processes of this command's channels still running, ended when the command
    exits.  A thread of the command (a call's question watch) may be waiting on one when
    the main thread is done; left running, that ssh would still reach the remote host,
    and its C{bridge-api} start a daemon there for a client long gone.
    """

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._ending = False
        self._hooked = False

    def start(self, argv: list[str], **how: Any) -> subprocess.Popen[bytes]:
        """
        C{subprocess.Popen(argv, **how)}, kept until L{forget}.

        @raise DaemonUnreachable: the command is exiting: no new ssh is started.
        """
        import subprocess

        with self._lock:
            if self._ending:
                raise DaemonUnreachable("mcpx is exiting; no new ssh connection is made")
            if not self._hooked:
                atexit.register(self.end_all)
                self._hooked = True
            process = subprocess.Popen(argv, **how)
            self._running.add(process)
            return process

    def forget(self, process: subprocess.Popen[bytes]) -> None:
        """C{process} has been reaped."""
        with self._lock:
            self._running.discard(process)

    def end_all(self) -> None:
        """Terminate the ssh processes still running (at exit), killing the slow ones."""
        import subprocess

        with self._lock:
            self._ending = True
            running, self._running = self._running, set()
        for process in running:
            process.terminate()
        for process in running:
            try:
                process.wait(timeout=_REAP_WAIT / 10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


_SSH_PROCESSES = _SshProcesses()


class SshChannel:
    """
    One ssh process carrying one request: a socket-like object the client's HTTP code
    reads and writes as it would the unix socket, that reaps ssh when closed.
    """

    def __init__(
        self,
        endpoint: SshEndpoint,
        remote: Sequence[str],
        *,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """
        @raise DaemonUnreachable: ssh cannot be run at all.
        """
        import socket
        import tempfile

        self.endpoint = endpoint
        argv = endpoint.argv(remote, environ)
        ours, theirs = socket.socketpair()
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (kept until close)
        try:
            self._process: subprocess.Popen[bytes] = _SSH_PROCESSES.start(
                argv,
                stdin=theirs.fileno(),
                stdout=theirs.fileno(),
                stderr=self._stderr,
                close_fds=True,
            )
        except DaemonUnreachable:
            ours.close()
            self._stderr.close()
            raise
        except FileNotFoundError:
            ours.close()
            self._stderr.close()
            raise DaemonUnreachable(
                f"cannot reach {endpoint}: {argv[0]!r} is not installed (install the "
                f"OpenSSH client, or set {SSH_COMMAND_VARIABLE})"
            ) from None
        except OSError as e:
            ours.close()
            self._stderr.close()
            raise DaemonUnreachable(f"cannot run {argv[0]!r} for {endpoint}: {e}") from None
        finally:
            theirs.close()
        self._sock: socket.socket = ours
        self._closed = False
        #: Whether what ssh said went into an error already (else it is relayed on close).
        self._said = False

    def settimeout(self, timeout: float | None) -> None:
        self._sock.settimeout(timeout)

    def sendall(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            # ssh ended before taking the request: the reason is in how it ended.
            raise self.failure() from None

    def recv(self, size: int) -> bytes:
        try:
            return self._sock.recv(size)
        except ConnectionResetError:
            # ssh ended with part of the request unread: it never reached the daemon.
            raise self.failure() from None

    def failure(self) -> DaemonUnreachable:
        """Why ssh carried no answer: waits for it to end, and reads what it said."""
        import subprocess

        self._sock.close()
        try:
            status: int | None = self._process.wait(timeout=_REAP_WAIT)
            _SSH_PROCESSES.forget(self._process)
        except subprocess.TimeoutExpired:
            status = None
        self._said = True
        return DaemonUnreachable(diagnose(self.endpoint, status, self.stderr_text()))

    def stderr_text(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    def close(self) -> None:
        """Close the connection and reap ssh, killing it if it does not end by itself."""
        if self._closed:
            return
        self._closed = True
        import subprocess

        self._sock.close()
        try:
            self._process.wait(timeout=_REAP_WAIT)
        except subprocess.TimeoutExpired:
            self._process.terminate()
            try:
                self._process.wait(timeout=_REAP_WAIT)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        finally:
            _SSH_PROCESSES.forget(self._process)
            self._relay_stderr()

    def _relay_stderr(self) -> None:
        """Pass on what the remote end said (a daemon started there, ssh's warnings)."""
        if not self._said:
            said = self.stderr_text()
            if said.strip():
                sys.stderr.write(said if said.endswith("\n") else said + "\n")
                sys.stderr.flush()
        self._stderr.close()


def run_ssh_bridge(endpoint: SshEndpoint, remote: Sequence[str]) -> int:
    """
    Run ssh with this process's standard input and output (for C{mcpx serve}), say what
    went wrong on stderr if it fails, and return the exit status to use.
    """
    import signal
    import subprocess
    import tempfile

    argv = endpoint.argv(remote)
    with tempfile.TemporaryFile() as errors:
        try:
            process = subprocess.Popen(argv, stderr=errors, close_fds=True)
        except FileNotFoundError:
            print(
                f"mcpx serve: cannot reach {endpoint}: {argv[0]!r} is not installed (install "
                f"the OpenSSH client, or set {SSH_COMMAND_VARIABLE})",
                file=sys.stderr,
                flush=True,
            )
            return 1

        def forward(signum: int, frame: object) -> None:
            if process.poll() is None:
                process.terminate()

        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(signum, forward)
        status = process.wait()
        errors.seek(0)
        said = errors.read().decode("utf-8", "replace")
    if said.strip():
        sys.stderr.write(said if said.endswith("\n") else said + "\n")
    if status not in (0, 1):
        print(f"mcpx serve: {diagnose(endpoint, status, said)}", file=sys.stderr, flush=True)
        return 1
    return status


def remote_api_command() -> list[str]:
    """The words run on the remote host for one API request."""
    return ["bridge-api", "--client-version", __version__]


def remote_mcp_command(passthrough: Sequence[str] | None) -> list[str]:
    """The words run on the remote host for C{mcpx serve}."""
    words = ["bridge-api", "--mcp", "--client-version", __version__]
    if passthrough is not None:
        words += ["--passthrough", ",".join(passthrough)]
    return words


def bridge_streams(sock: socket.socket, stdin: int, stdout: int, *, sent: bytes = b"") -> int:
    """
    The remote side of one API request: copy standard input to C{sock} and C{sock} to
    standard output until the daemon closes; the end of standard input (the client or
    its ssh went away) closes the connection at once, so the daemon sees its caller go.

    @param sent: what was read of standard input already, sent first.
    """
    import select

    sock_fd = sock.fileno()
    try:
        if sent:
            sock.sendall(sent)
        while True:
            ready, _, _ = select.select([stdin, sock_fd], [], [])
            if sock_fd in ready:
                data = sock.recv(65536)
                if not data:
                    return 0
                view = memoryview(data)
                while view:
                    view = view[os.write(stdout, view) :]
            if stdin in ready:
                data = os.read(stdin, 65536)
                if not data:
                    return 0
                sock.sendall(data)
    except BrokenPipeError:
        return 0
    except OSError as e:
        print(f"mcpx bridge-api: the connection to the daemon broke: {e}", file=sys.stderr)
        return 1
    finally:
        sock.close()


class SshDaemonClient(DaemonClient):
    """
    Asks a daemon on another machine, each question over its own ssh (the channels of this module).
    """

    starts_on_demand = True
    needs_exit_handlers = True

    def __init__(self, endpoint: SshEndpoint, client: str = DEFAULT_CLIENT) -> None:
        from pathlib import PurePosixPath

        # The remote socket's path is the remote mcpx's business; this names the endpoint.
        super().__init__(PurePosixPath(str(endpoint)), client)  # type: ignore[arg-type]
        self.endpoint = endpoint

    @property
    def where(self) -> str:
        return str(self.endpoint)

    def again(self) -> DaemonClient:
        return SshDaemonClient(self.endpoint, self.client)

    def _connect(self, timeout: float | None) -> Stream:
        channel = SshChannel(self.endpoint, remote_api_command())
        channel.settimeout(timeout)
        return channel

    def _unanswered(self, sock: Stream, error: ProtocolError) -> Exception:
        assert isinstance(sock, SshChannel)
        return sock.failure()
