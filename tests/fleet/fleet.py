"""
A fleet on this machine, as docs/fleet.md deploys one: a throw-away PostgreSQL cluster
(L{tests.support.postgres}), three real daemons (C{mcpx daemon}, the command
C{deploy/mcpx@.service} runs, with the environment that unit gives each instance: its
own state directory and loopback port, the shared store and settings) and a real HAProxy
from Debian's package running C{deploy/haproxy.cfg}, with only its addresses, ports and
process lines changed for the test (L{render_haproxy}).

Every daemon serves one real upstream, the Python SDK fixture (C{tests/fixtures/
sdk_server.py}) over stdio, passed through as C{fixture}, and asks callers for OAuth access
tokens from a stand-in authorization server (L{Issuer}) served on a loopback port from a
thread, so tokens of several principals (C{alice}, C{bob}) can be minted.

L{FleetTestCase} starts one fleet per test class, at its first test, shared by all its
tests and stopped after the last; a test that breaks part of it (kills a daemon, stops
PostgreSQL) puts it back before it ends. The tests are synchronous: every client here
(urllib, the SDK host on its own event loop in a worker thread) blocks the test's thread,
and the fleet is other processes.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, ClassVar, TypeVar

import anyio
import httpx2
from attrs import define, field
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from twisted.trial.unittest import SynchronousTestCase

from tests.auth.standin_issuer import StandInIssuer, public_jwk
from tests.support.peers import FIXTURES, node22
from tests.support.postgres import PASSWORD, PostgresCluster
from tests.support.processes import REPO, free_tcp_port
from tests.support.real_servers import in_worker, wire_env

T = TypeVar("T")

DEPLOY = REPO / "deploy"
HAPROXY_CFG = DEPLOY / "haproxy.cfg"
UNIT = DEPLOY / "mcpx@.service"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
#: The upstream every daemon passes through.
UPSTREAM = "fixture"
#: A second upstream every daemon passes through, the demo (C{python -m mcpx.demo}), its
#: tools offered as C{added_echo}...: what a test removes from the fleet's configuration
#: and adds again (L{FleetTestCase.added}).
ADDED = "added"
ADDED_PREFIX = "added_"
ADDED_COMMAND = [sys.executable, "-m", "mcpx.demo"]
#: The name clients reach the fleet by, besides the balancer's loopback address.
PUBLIC_NAME = "mcp.fleet.test"
SCOPES = ["mcp:tools"]
#: How long a fleet's part gets to start, or a waited-for state to come.
PATIENCE = 40.0
MODERN = "2026-07-28"
#: The TypeScript SDK 1.x host that drives 2025-11-25 tasks (L{TaskHost}).
TASK_HOST = REPO / "tests" / "peers" / "tasks1-host.mjs"
#: How long one of its commands may take (a tasks/result waits for its task's end).
COMMAND_TIMEOUT = 60.0
TOOLS_CHANGED = "notifications/tools/list_changed"
#: The SDK's events of a subscriptions/listen stream, as the notifications they stand for.
LISTEN_EVENTS = {
    "ToolsListChanged": TOOLS_CHANGED,
    "PromptsListChanged": "notifications/prompts/list_changed",
    "ResourcesListChanged": "notifications/resources/list_changed",
}


def wait_until(condition: Callable[[], T | None], what: str, timeout: float = PATIENCE) -> T:
    """Poll C{condition} until it returns something true, and return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened within {timeout}s: {what}")
        time.sleep(0.05)


class Issuer:
    """
    The stand-in authorization server (L{StandInIssuer}'s keys and metadata) served by a
    standard-library HTTP server on a thread: the daemons fetch its metadata and keys.
    """

    def __init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{port}/realms/fleet"
        self.standin = StandInIssuer(self.url, "/realms/fleet")
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                standin = issuer.standin
                if self.path == "/.well-known/oauth-authorization-server/realms/fleet":
                    body = standin.metadata
                elif self.path == "/realms/fleet/certs":
                    body = {"keys": [public_jwk(key, kid) for kid, key in standin.keys.items()]}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def mint(self, audience: str, subject: str) -> str:
        return self.standin.mint(
            time.time(), aud=audience, sub=subject, exp=int(time.time()) + 3600
        )

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def unit_environment(port: int, state_root: Path, credentials: Path) -> dict[str, str]:
    """
    The C{Environment=} lines of C{deploy/mcpx@.service} for instance C{port}, with the
    unit's specifiers (C{%i}, C{%S}, C{%d}) filled in as systemd would.
    """
    found: dict[str, str] = {}
    for line in UNIT.read_text().splitlines():
        if line.startswith("Environment="):
            name, _, value = line[len("Environment=") :].partition("=")
            value = value.replace("%i", str(port)).replace("%S", str(state_root))
            found[name] = value.replace("%d", str(credentials))
    return found


def render_haproxy(text: str, *, bind: int, servers: Mapping[str, int], directory: Path) -> str:
    """
    C{deploy/haproxy.cfg} for this machine's test: the frontend on C{127.0.0.1:bind}, the
    servers on their ports, and in C{global} the process lines (syslog, chroot, user,
    background) replaced by a log on standard error and a stats socket in C{directory}.
    Every other line runs as shipped; a line this expects and does not find fails.
    """

    def once(pattern: str, replacement: str, source: str) -> str:
        changed, count = re.subn(pattern, replacement, source, flags=re.MULTILINE)
        if count != 1:
            raise AssertionError(f"deploy/haproxy.cfg: expected one line matching {pattern!r}")
        return changed

    text = once(r"^    log /dev/log local0$", "    log stderr format short local0 info", text)
    text = once(r"^    chroot .*\n", "", text)
    text = once(r"^    user haproxy\n", "", text)
    text = once(r"^    group haproxy\n", "", text)
    text = once(r"^    daemon\n", "", text)
    text = once(
        r"^    stats socket /run/haproxy/admin.sock mode 660 level admin$",
        f"    stats socket {directory}/admin.sock mode 600 level admin",
        text,
    )
    text = once(r"^    bind :8080$", f"    bind 127.0.0.1:{bind}", text)
    for name, port in servers.items():
        text = once(
            rf"^    server {name} 127\.0\.0\.1:\d+$", f"    server {name} 127.0.0.1:{port}", text
        )
    return text


def principal_affinity(text: str) -> str:
    """C{deploy/haproxy.cfg} with its documented option taken: C{balance hdr(Authorization)}."""
    for before, after in (
        ("    balance roundrobin\n", ""),
        ("    # balance hdr(Authorization)\n", "    balance hdr(Authorization)\n"),
        ("    # hash-type consistent\n", "    hash-type consistent\n"),
    ):
        if text.count(before) != 1:
            raise AssertionError(f"deploy/haproxy.cfg: expected one line {before.strip()!r}")
        text = text.replace(before, after)
    return text


@define
class Answer:
    """An HTTP answer: its status, headers (lowercased names) and body (JSON when it is)."""

    status: int
    headers: dict[str, str]
    body: Any

    def json(self) -> Any:
        return self.body


def http(
    method: str,
    url: str,
    *,
    token: str | None = None,
    body: Any = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 60,
) -> Answer:
    """One request, on a connection of its own."""
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        sent.setdefault("Content-Type", "application/json")
    request = urllib.request.Request(url, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw, status, got = response.read(), response.status, response.headers
    except urllib.error.HTTPError as e:
        raw, status, got = e.read(), e.code, e.headers
    text = raw.decode("utf-8", "replace")
    try:
        parsed: Any = json.loads(text) if text.strip() else None
    except ValueError:
        parsed = text
    return Answer(status, {k.lower(): v for k, v in got.items()}, parsed)


@define
class FleetDaemon:
    """One daemon of the fleet: its loopback port, state directory and process."""

    name: str
    port: int
    state: Path
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    mark: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.starts += 1
        out = self.log.open("ab")
        out.write(f"--- start {self.starts}\n".encode())
        out.flush()
        self.mark = self.log.stat().st_size
        with out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mcpx", "daemon"],
                env=self.env,
                cwd=str(REPO),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def wait_started(self) -> None:
        def running() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited: {self.text()}")
            return b"daemon is running" in self.log.read_bytes()[self.mark :]

        wait_until(running, f"{self.name} starts")

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """C{kill -9}: no goodbye, no heartbeat removed."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=20)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@define
class Fleet:
    """
    The running fleet.

    @ivar balancer: the HAProxy frontend's base URL (C{http://127.0.0.1:PORT}).
    @ivar audience: the resource the tokens are for: the fleet's C{/mcp} at the balancer.
    """

    root: Path
    postgres: PostgresCluster
    issuer: Issuer
    daemons: list[FleetDaemon]
    balancer_port: int
    haproxy: subprocess.Popen[bytes] | None = None
    #: Daemons made by L{lone_daemon}, stopped with the fleet.
    others: list[FleetDaemon] = field(factory=list)
    haproxy_log: Path = field(init=False)
    _tokens: dict[str, str] = field(factory=dict)

    def __attrs_post_init__(self) -> None:
        self.haproxy_log = self.root / "haproxy.log"

    @property
    def balancer(self) -> str:
        return f"http://127.0.0.1:{self.balancer_port}"

    @property
    def audience(self) -> str:
        return f"{self.balancer}/mcp"

    def token(self, subject: str) -> str:
        """A bearer token of the principal C{subject} (the same one each time)."""
        if subject not in self._tokens:
            self._tokens[subject] = self.issuer.mint(self.audience, subject)
        return self._tokens[subject]

    # Starting and stopping.

    @classmethod
    def start(cls, count: int = 3) -> Fleet:
        root = Path(tempfile.mkdtemp(prefix="mcpx-fleet-"))
        postgres = PostgresCluster()
        issuer = Issuer()
        fleet = cls(root, postgres, issuer, [], free_tcp_port())
        try:
            postgres.start()
            fleet._make_daemons(count)
            for daemon in fleet.daemons:
                daemon.start()
            for daemon in fleet.daemons:
                daemon.wait_started()
            fleet._start_haproxy()
        except BaseException:
            fleet.stop()
            raise
        return fleet

    def _make_daemons(self, count: int) -> None:
        database = self.postgres.database()
        credentials = self.root / "credentials"
        credentials.mkdir(mode=0o700)
        (credentials / "pg-password").write_text(PASSWORD + "\n")
        config = self.root / "config.json"
        # /etc/mcpx/state-keys in the unit: the one key ring every daemon signs and
        # checks requestState with.
        keys = self.root / "state-keys"
        keys.write_text(f"k1 0 {secrets.token_urlsafe(32)}\n")
        keys.chmod(0o600)
        upstream = [str(FIXTURES / "sdk_server.py"), "--transport", "stdio", "--era", "both"]
        servers = {
            UPSTREAM: {"command": sys.executable, "args": upstream},
            ADDED: {
                "command": ADDED_COMMAND[0],
                "args": ADDED_COMMAND[1:],
                "toolPrefix": ADDED_PREFIX,
            },
        }
        config.write_text(json.dumps({"servers": servers}))
        # What /etc/mcpx/fleet.env holds: the settings every instance shares.
        shared = {
            "MCPX_STORE_URL": self.postgres.url(database),
            "MCPX_DAEMON_AUTH": json.dumps(
                {
                    "type": "oauth",
                    "issuer": self.issuer.url,
                    "audience": self.audience,
                    "scopes": SCOPES,
                }
            ),
            "MCPX_TRANSPORT_ALLOWED_HOSTS": PUBLIC_NAME,
            "MCPX_MCP_PASSTHROUGH": f"{UPSTREAM},{ADDED}",
        }
        for index in range(1, count + 1):
            port = free_tcp_port()
            env = wire_env(os.environ)
            env.update(shared)
            env.update(unit_environment(port, self.root / "state", credentials))
            # /etc/mcpx/config.json in the unit.
            env["MCPX_CONFIG"] = str(config)
            env["MCPX_PROTO_STATE_KEY_FILE"] = str(keys)
            env["XDG_CONFIG_HOME"] = str(self.root / "xdg")
            state = Path(env["MCPX_STATE_DIR"])
            state.mkdir(parents=True, mode=0o700)
            self.daemons.append(
                FleetDaemon(f"mcpx{index}", port, state, env, self.root / f"mcpx{index}.log")
            )

    def lone_daemon(self, name: str) -> FleetDaemon:
        """
        A daemon set up as the fleet's are but outside it: not behind the balancer, and
        with the default store (SQLite in its own state directory); not started.
        """
        model = self.daemons[0]
        port = free_tcp_port()
        env = dict(model.env)
        env.pop("MCPX_STORE_URL")
        env.pop("MCPX_STORE_PASSWORD_FILE")
        state = self.root / "lone" / name
        state.mkdir(parents=True, mode=0o700)
        env["MCPX_STATE_DIR"] = str(state)
        env["MCPX_DAEMON_LISTEN"] = f"tcp:{port}:interface=127.0.0.1"
        daemon = FleetDaemon(name, port, state, env, self.root / f"{name}.log")
        self.others.append(daemon)
        return daemon

    def _start_haproxy(self) -> None:
        self.haproxy = self.start_balancer(self.root, self.balancer_port)

    def start_balancer(
        self, directory: Path, port: int, change: Callable[[str], str] = lambda text: text
    ) -> subprocess.Popen[bytes]:
        """
        An HAProxy running C{deploy/haproxy.cfg} (after C{change}) in front of the daemons,
        listening on C{port}, its stats socket and log in C{directory}; once it sees every
        daemon up. The caller stops it (the fleet's own is L{haproxy}).
        """
        directory.mkdir(exist_ok=True)
        config = directory / "haproxy.cfg"
        config.write_text(
            render_haproxy(
                change(HAPROXY_CFG.read_text()),
                bind=port,
                servers={d.name: d.port for d in self.daemons},
                directory=directory,
            )
        )
        log = directory / "haproxy.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [HAPROXY, "-db", "-f", str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        try:
            self.wait_servers_up(directory=directory, process=process)
        except BaseException:
            process.kill()
            process.wait()
            raise
        return process

    def stats_command(self, command: str, directory: Path | None = None) -> str:
        """
        A command to an HAProxy's stats socket (C{disable server mcpx/mcpx2}...), the
        fleet's own unless C{directory} names another's; its answer.
        """
        with socket.socket(socket.AF_UNIX) as stats:
            stats.connect(str((directory or self.root) / "admin.sock"))
            stats.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := stats.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def server_states(self, directory: Path | None = None) -> dict[str, str]:
        """What an HAProxy's stats socket says of each daemon: C{UP}, C{DOWN}..."""
        lines = self.stats_command("show stat", directory).splitlines()
        header = lines[0].lstrip("# ").split(",")
        states = {}
        for line in lines[1:]:
            row = dict(zip(header, line.split(","), strict=False))
            if row.get("pxname") == "mcpx" and row.get("svname", "").startswith("mcpx"):
                states[row["svname"]] = row["status"]
        return states

    def wait_servers_up(
        self,
        names: list[str] | None = None,
        directory: Path | None = None,
        process: subprocess.Popen[bytes] | None = None,
    ) -> None:
        wanted = names or [d.name for d in self.daemons]
        watched = process or self.haproxy

        def up() -> bool:
            if watched is not None and watched.poll() is not None:
                log = (directory or self.root) / "haproxy.log"
                raise AssertionError(f"haproxy exited: {log.read_text()}")
            try:
                states = self.server_states(directory)
            except OSError:
                return False
            return all(states.get(name) == "UP" for name in wanted)

        wait_until(up, f"HAProxy sees {', '.join(wanted)} up")

    def restart_daemon(self, daemon: FleetDaemon) -> None:
        """Start a stopped or killed daemon again, on its port and state directory."""
        daemon.start()
        daemon.wait_started()
        self.wait_servers_up([daemon.name])

    def stop(self) -> None:
        if self.haproxy is not None and self.haproxy.poll() is None:
            self.haproxy.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.haproxy.wait(timeout=10)
            if self.haproxy.poll() is None:
                self.haproxy.kill()
        for daemon in self.daemons + self.others:
            daemon.stop()
        self.issuer.stop()
        self.postgres.remove()
        shutil.rmtree(self.root, ignore_errors=True)

    # Talking to it.

    def v1(
        self, daemon: FleetDaemon | None, method: str, path: str, subject: str = "alice", **kw: Any
    ) -> Answer:
        """A C{/v1} request as C{subject} to C{daemon} directly, or through the balancer."""
        base = self.balancer if daemon is None else daemon.url
        return http(method, base + path, token=self.token(subject), **kw)

    def calls_since(self, since: float, tool: str, subject: str = "alice") -> dict[str, int]:
        """How many calls of C{tool} each daemon ended since C{since} (its C{/v1/calls})."""
        counts = {}
        for daemon in self.daemons:
            if not daemon.alive:
                continue
            answer = self.v1(daemon, "GET", f"/v1/calls?server={UPSTREAM}", subject)
            assert answer.status == 200, answer
            counts[daemon.name] = sum(
                1
                for call in answer.body["calls"]
                if call["tool"] == tool and call["finished"] >= since
            )
        return counts

    def logs(self) -> str:
        parts = [f"== {d.name}\n{d.text()[-4000:]}" for d in self.daemons]
        parts.append(f"== haproxy\n{self.haproxy_log.read_text(errors='replace')[-4000:]}")
        parts.append(f"== postgres\n{self.postgres.log.read_text(errors='replace')[-2000:]}")
        return "\n".join(parts)

    @contextlib.contextmanager
    def postgres_stopped(self) -> Iterator[None]:
        """PostgreSQL stopped inside the block (every connection dropped), started after."""
        self.postgres.stop()
        try:
            yield
        finally:
            self.postgres.resume()


class Recorded:
    """The HTTP exchanges of one SDK host: (method, status, Mcp-Session-Id sent) each."""

    def __init__(self) -> None:
        self.exchanges: list[tuple[str, int, str | None]] = []

    async def response(self, response: httpx2.Response) -> None:
        request = response.request
        self.exchanges.append(
            (request.method, response.status_code, request.headers.get("mcp-session-id"))
        )


class Background:
    """A blocking call run on a thread of its own; L{result} waits for it."""

    def __init__(self, work: Callable[[], Answer]) -> None:
        self._answer: list[Answer] = []
        self._error: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(work,), daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], Answer]) -> None:
        try:
            self._answer.append(work())
        except BaseException as e:
            self._error.append(e)

    def result(self, timeout: float = 60) -> Answer:
        self._thread.join(timeout)
        if self._error:
            raise self._error[0]
        if not self._answer:
            raise AssertionError("the call did not end")
        return self._answer[0]


class Listeners:
    """
    Two SDK hosts of one principal on one daemon's C{/mcp}, each on its own event loop in a
    thread of its own, until L{close}: a 2026-07-28 C{subscriptions/listen} asking for the
    three lists' changes, and a legacy session, which hears them on its GET stream. What
    each heard is in L{heard}, under C{"listen"} and C{"legacy"}.
    """

    def __init__(self, url: str, token: str) -> None:
        self.heard: dict[str, list[str]] = {"listen": [], "legacy": []}
        self._ready = {name: threading.Event() for name in self.heard}
        self._done = threading.Event()
        self._errors: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._run, args=(name, url, token), daemon=True)
            for name in self.heard
        ]
        for thread in self._threads:
            thread.start()

    def _run(self, name: str, url: str, token: str) -> None:
        async def live() -> None:
            async with httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {token}"},
                timeout=httpx2.Timeout(30, read=None),
            ) as client:
                transport = streamable_http_client(url, http_client=client)
                if name == "legacy":
                    await self._legacy(transport)
                else:
                    await self._listen(transport)

        try:
            anyio.run(live)
        except BaseException as e:
            self._errors.append(e)
            self._ready[name].set()

    async def _legacy(self, transport: Any) -> None:
        async def noted(message: Any) -> None:
            method = getattr(message, "method", None)
            if isinstance(method, str) and method.endswith("list_changed"):
                self.heard["legacy"].append(method)

        async with Client(transport, mode="legacy", message_handler=noted, cache=None) as host:
            await host.list_tools()
            self._ready["legacy"].set()
            await self._until_done()

    async def _listen(self, transport: Any) -> None:
        async with Client(transport, mode=MODERN, cache=None) as host:
            listening = host.listen(
                tools_list_changed=True, prompts_list_changed=True, resources_list_changed=True
            )
            async with listening as subscription, anyio.create_task_group() as group:

                async def hear() -> None:
                    async for event in subscription:
                        self.heard["listen"].append(LISTEN_EVENTS.get(type(event).__name__, "?"))

                group.start_soon(hear)
                self._ready["listen"].set()
                await self._until_done()
                group.cancel_scope.cancel()

    async def _until_done(self) -> None:
        while not self._done.is_set():
            await anyio.sleep(0.05)

    def wait_ready(self) -> None:
        for name, ready in self._ready.items():
            if not ready.wait(PATIENCE):
                raise AssertionError(f"the {name} host never connected")
        if self._errors:
            raise self._errors[0]

    def close(self) -> None:
        self._done.set()
        for thread in self._threads:
            thread.join(20)


class TaskHost:
    """
    A host on the TypeScript SDK 1.x client (C{tests/peers/tasks1-host.mjs}): one
    2025-11-25 session, taking one command at a time (start a task of a tool, get,
    result, cancel, list, session), each sent through the SDK's C{Client.request}.
    """

    def __init__(self, url: str, token: str, session: str, log: IO[bytes]) -> None:
        self.process = subprocess.Popen(
            [node22(), str(TASK_HOST), "--url", url, "--token", token, "--session", session],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=str(TASK_HOST.parent),
        )
        self._lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(b"")

    def send(self, **command: Any) -> None:
        """Send one command; L{reply} reads its answer."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command).encode() + b"\n")
        self.process.stdin.flush()

    def reply(self, timeout: float = COMMAND_TIMEOUT) -> dict[str, Any]:
        line = self._lines.get(timeout=timeout)
        if not line:
            raise AssertionError(f"the host exited ({self.process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def __call__(self, **command: Any) -> dict[str, Any]:
        """One command and its answer: C{{"ok": result}} or C{{"error": ...}}."""
        self.send(**command)
        return self.reply()

    def ok(self, **command: Any) -> dict[str, Any]:
        answer = self(**command)
        if "ok" not in answer:
            raise AssertionError(f"{command} was refused: {answer}")
        result: dict[str, Any] = answer["ok"]
        return result

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def slow(seconds: float) -> dict[str, Any]:
    """The arguments of an C{mcpx_call} of the fixture's C{slow} tool."""
    return {
        "server": UPSTREAM,
        "tool": "slow",
        "arguments": {"seconds": seconds, "steps": 1},
    }


def texts(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


class FleetTestCase(SynchronousTestCase):
    """
    Tests of one fleet: C{self.fleet} is started at the class's first test and stopped
    after its last (or when the test process ends, if only some of its tests run).

    A test that kills a daemon or stops PostgreSQL must leave the fleet as it found it
    (L{Fleet.restart_daemon}, L{Fleet.postgres_stopped}); L{setUp} starts again any
    daemon that is not running.

    New scenarios are test methods on a subclass (one fleet per subclass), with what
    the scenarios here use: L{host} (the SDK host through the balancer), L{ask} (a call
    whose upstream asks a question, running), L{question} and L{answer}, and on
    L{fleet} the daemons, the balancer, PostgreSQL and the principals' tokens; for
    tasks, L{task_host} (a TypeScript SDK host making 2025-11-25 tasks), L{started},
    L{daemon_id} and L{slow_calls}; for one daemon directly, L{sdk} (a 2026-07-28 SDK
    host's conversation), L{tool_names} and L{Listeners}; for the shared configuration,
    L{mcpx} (the command against one daemon) and L{added} (L{ADDED} put back).
    """

    fleet: Fleet
    _fleets: ClassVar[dict[type, Fleet]] = {}
    _ran: ClassVar[dict[type, int]] = {}

    def setUp(self) -> None:
        kind = type(self)
        if kind not in self._fleets:
            fleet = Fleet.start()
            self._fleets[kind] = fleet
            atexit.register(fleet.stop)
        self.fleet = self._fleets[kind]
        for daemon in self.fleet.daemons:
            if not daemon.alive:
                self.fleet.restart_daemon(daemon)
        self.addCleanup(self._count_done)

    def _count_done(self) -> None:
        kind = type(self)
        self._ran[kind] = self._ran.get(kind, 0) + 1
        names = [name for name in dir(kind) if name.startswith("test")]
        if self._ran[kind] >= len(names):
            fleet = self._fleets.pop(kind)
            atexit.unregister(fleet.stop)
            fleet.stop()

    def dump(self) -> str:
        """The fleet's logs, for a failure's message."""
        return self.fleet.logs()

    # What the scenarios do: a host through the balancer, a call that asks, its question.

    def host(
        self,
        mode: str,
        calls: int,
        subject: str = "alice",
        recorded: Recorded | None = None,
        between: Callable[[int], None] | None = None,
        url: str | None = None,
    ) -> list[str]:
        """
        An SDK host session through the balancer (or C{url}) in C{mode} making C{calls}
        calls of the upstream's C{echo}; what each answered. C{between(i)} runs (on the
        host's thread) after call C{i}.
        """
        token = self.fleet.token(subject)
        hooks = {"response": [recorded.response]} if recorded is not None else {}

        async def converse() -> list[str]:
            answers = []
            async with httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {token}"},
                timeout=httpx2.Timeout(30, read=60),
                event_hooks=hooks,
            ) as client:
                transport = streamable_http_client(url or self.fleet.audience, http_client=client)
                async with Client(transport, mode=mode, cache=None) as host:
                    for i in range(calls):
                        answers.append(texts(await host.call_tool("echo", {"text": f"{mode} {i}"})))
                        if between is not None:
                            between(i)
            return answers

        return in_worker(converse)

    def sdk(
        self,
        daemon: FleetDaemon,
        conversation: Callable[[Client], Awaitable[T]],
        subject: str = "alice",
        **options: Any,
    ) -> T:
        """
        C{conversation} of a 2026-07-28 SDK host of C{subject} with C{daemon}'s C{/mcp}
        directly (the host's C{Client}, made with C{options}), and what it came to.
        """
        token = self.fleet.token(subject)

        async def converse() -> T:
            async with httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=60)
            ) as client:
                transport = streamable_http_client(f"{daemon.url}/mcp", http_client=client)
                async with Client(transport, mode=MODERN, cache=None, **options) as host:
                    return await conversation(host)

        return in_worker(converse)

    def tool_names(self, daemon: FleetDaemon) -> set[str]:
        """The names of every tool C{daemon}'s C{tools/list} offers a 2026-07-28 host."""

        async def listed(host: Client) -> set[str]:
            names: set[str] = set()
            cursor: str | None = None
            while True:
                page = await host.list_tools(cursor=cursor)
                names.update(tool.name for tool in page.tools)
                cursor = page.next_cursor
                if not cursor:
                    return names

        return self.sdk(daemon, listed)

    def added(self, daemon: FleetDaemon, *options: str) -> subprocess.CompletedProcess[str]:
        """C{mcpx add} of L{ADDED} against C{daemon}, as the fleet's configuration has it."""
        return self.mcpx(
            daemon, "add", ADDED, "--tool-prefix", ADDED_PREFIX, *options, "--", *ADDED_COMMAND
        )

    def mcpx(self, daemon: FleetDaemon, *arguments: str) -> subprocess.CompletedProcess[str]:
        """The C{mcpx} command run against C{daemon} (its state directory, so its socket)."""
        return subprocess.run(
            [sys.executable, "-m", "mcpx", *arguments],
            env=daemon.env,
            cwd=str(REPO),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def ask(self, daemon: FleetDaemon, subject: str = "alice") -> tuple[Background, str]:
        """
        C{subject}'s C{/v1/call} of the upstream's C{ask_name} on C{daemon}, running, and
        the id of the question it asked (once C{daemon} lists it).
        """
        before = {q["id"] for q in self.questions(daemon, subject)}
        body = {"server": UPSTREAM, "tool": "ask_name", "arguments": {}}
        call = Background(lambda: self.fleet.v1(daemon, "POST", "/v1/call", subject, body=body))

        def asked() -> str | None:
            new = [q["id"] for q in self.questions(daemon, subject) if q["id"] not in before]
            return new[0] if new else None

        return call, wait_until(asked, f"the call on {daemon.name} asks")

    def questions(self, daemon: FleetDaemon, subject: str = "alice") -> list[dict[str, Any]]:
        """Every question C{daemon} lists for C{subject}, pending or ended."""
        answer = self.fleet.v1(daemon, "GET", "/v1/questions?all=true", subject)
        self.assertEqual(answer.status, 200, answer)
        listed: list[dict[str, Any]] = answer.body["questions"]
        return listed

    def question(self, daemon: FleetDaemon, id: str, state: str = "pending") -> dict[str, Any]:
        """Question C{id} as C{daemon} lists it, once it lists it in C{state}."""

        def listed() -> dict[str, Any] | None:
            found = [q for q in self.questions(daemon) if q["id"] == id and q["state"] == state]
            return found[0] if found else None

        return wait_until(listed, f"{daemon.name} lists {id} as {state}")

    def answer(self, daemon: FleetDaemon, question: dict[str, Any], name: str) -> Answer:
        body = {"action": "accept", "content": {"name": name}}
        return self.fleet.v1(daemon, "POST", f"/v1/questions/{question['id']}/answer", body=body)

    def task_host(
        self, daemon: FleetDaemon | None, session: str, subject: str = "alice"
    ) -> TaskHost:
        """
        A TypeScript SDK host (L{TaskHost}) of C{subject} on C{daemon} (through the
        balancer for C{None}) naming C{session} in every request's
        C{_meta["dev.mcpx/session"]}, so that its hosts on several daemons are one
        caller; closed after the test.
        """
        name = daemon.name if daemon is not None else "balancer"
        log = (self.fleet.root / f"host-{name}-{subject}.log").open("ab")
        self.addCleanup(log.close)
        url = self.fleet.audience if daemon is None else f"{daemon.url}/mcp"
        host = TaskHost(url, self.fleet.token(subject), session, log)
        self.addCleanup(host.close)
        return host

    def daemon_id(self, daemon: FleetDaemon) -> str:
        """C{daemon}'s id: what the session ids it mints start with (C{d_...}, a dot)."""
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "fleet-test", "version": "1"},
            },
        }
        headers = {"Accept": "application/json, text/event-stream"}
        answer = self.fleet.v1(daemon, "POST", "/mcp", body=body, headers=headers)
        self.assertEqual(answer.status, 200, answer)
        session = answer.headers["mcp-session-id"]
        self.fleet.v1(daemon, "DELETE", "/mcp", headers={"Mcp-Session-Id": session})
        return session.partition(".")[0]

    def started(self, host: TaskHost, seconds: float) -> str:
        """The id of a task C{host} starts: an C{mcpx_call} of C{slow} for C{seconds}."""
        created = host.ok(op="start", name="mcpx_call", arguments=slow(seconds))
        self.assertEqual(created["task"]["status"], "working", created)
        task_id: str = created["task"]["taskId"]
        return task_id

    def slow_calls(self, daemon: FleetDaemon, since: float) -> list[dict[str, Any]]:
        """The calls of C{slow} C{daemon} ended since C{since} (its C{/v1/calls})."""
        answer = self.fleet.v1(daemon, "GET", f"/v1/calls?server={UPSTREAM}")
        self.assertEqual(answer.status, 200, answer)
        return [
            call
            for call in answer.body["calls"]
            if call["tool"] == "slow" and call["finished"] >= since
        ]
