"""
The TypeScript upstream fixtures of C{tests/peers} and a real daemon passing one through.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Literal

from attrs import frozen
from twisted.trial.unittest import TestCase

from tests.conformance.test_passthrough_leg import daemon_environ
from tests.support.peers import START_TIMEOUT, PeerStartFailed, in_private_netns, node22
from tests.support.processes import REPO, free_tcp_port, kill_on_cleanup, reactor, spawn

Transport = Literal["stdio", "http"]
PEERS = REPO / "tests" / "peers"
#: The TypeScript SDK 1.x fixture (@modelcontextprotocol/sdk).
SDK1_SERVER = PEERS / "sdk1-server.mjs"
#: The TypeScript SDK v2 fixture (@modelcontextprotocol/server).
SDK2_SERVER = PEERS / "sdk2-server.mjs"
UPSTREAM = "conformance"
_BANNER = rb"fixture listening on http://127\.0\.0\.1:(\d+)/mcp"
#: The recording relay put between mcpx and an HTTP upstream.
RELAY = Path(__file__).resolve().parent / "relay.py"
_RELAY_BANNER = rb"relay listening on http://127\.0\.0\.1:(\d+)/mcp"


def fixture_argv(script: Path, transport: Transport) -> list[str]:
    argv = [node22(), str(script), "--transport", transport]
    return argv + (["--port", "0"] if transport == "http" else [])


async def start_fixture(test: TestCase, script: Path) -> str:
    """Start C{script} over Streamable HTTP on a free loopback port; its URL."""
    child = spawn(fixture_argv(script, "http"), cwd=str(PEERS), process_reactor=reactor)
    test.addCleanup(kill_on_cleanup, child)

    async def stop() -> None:
        child.signal("TERM")
        await child.ended()

    test.addCleanup(stop)
    try:
        banner = await child.wait_for(_BANNER, timeout=START_TIMEOUT)
    except BaseException:
        raise PeerStartFailed(f"{script.name} did not start; output:\n{child.text()}") from None
    match = re.search(_BANNER, banner)
    assert match is not None
    return f"http://127.0.0.1:{int(match.group(1))}/mcp"


async def start_relay(test: TestCase, upstream: str, folder: Path) -> str:
    """
    Put C{tests/interop/relay.py} in front of the upstream at URL C{upstream}, recording
    every frame into C{folder}; the URL to reach the upstream through it.
    """
    child = spawn([sys.executable, str(RELAY), str(folder), upstream], process_reactor=reactor)
    test.addCleanup(kill_on_cleanup, child)

    async def stop() -> None:
        child.signal("TERM")
        await child.ended()

    test.addCleanup(stop)
    try:
        banner = await child.wait_for(_RELAY_BANNER, fd=1, timeout=START_TIMEOUT)
    except BaseException:
        raise PeerStartFailed(f"the relay did not start; output:\n{child.text()}") from None
    match = re.search(_RELAY_BANNER, banner)
    assert match is not None
    return f"http://127.0.0.1:{int(match.group(1))}/mcp"


@frozen
class Daemon:
    """A running daemon: its C{/mcp} URL and the environment C{mcpx serve} reaches it with."""

    url: str
    env: dict[str, str]


async def run_daemon(test: TestCase, server: dict[str, object]) -> Daemon:
    """A real daemon passing C{server} (a servers entry) through as C{conformance}."""
    if not in_private_netns():
        test.fail("run the interop tests in a private network namespace (tests/isolated)")
    state_dir = tempfile.mkdtemp(prefix="mcpx-ix-")
    config_home = tempfile.mkdtemp(prefix="mcpx-ixc-")
    test.addCleanup(shutil.rmtree, state_dir, True)
    test.addCleanup(shutil.rmtree, config_home, True)
    config = Path(config_home) / "config.json"
    config.write_text(json.dumps({"servers": {UPSTREAM: server}}), encoding="utf-8")
    port = free_tcp_port()
    argv = [
        sys.executable,
        "-m",
        "mcpx",
        "daemon",
        "--passthrough",
        UPSTREAM,
        "--daemon-listen",
        f"tcp:{port}:interface=127.0.0.1",
    ]
    env = daemon_environ(config, state_dir, config_home)
    child = spawn(argv, env=env, cwd=str(REPO))
    test.addCleanup(kill_on_cleanup, child)

    async def stop() -> None:
        child.signal("TERM")
        await child.ended()

    test.addCleanup(stop)
    await child.wait_for(rb"listening on http://127\.0\.0\.1:\d+")
    return Daemon(f"http://127.0.0.1:{port}/mcp", env)


async def start_daemon(test: TestCase, script: Path, transport: Transport) -> str:
    """
    A real daemon passing C{script} through as C{conformance} (started by the test over
    HTTP, by the daemon over stdio); the daemon's C{/mcp} URL.
    """
    if transport == "http":
        server: dict[str, object] = {"url": await start_fixture(test, script)}
    else:
        argv = fixture_argv(script, "stdio")
        server = {"command": argv[0], "args": argv[1:], "cwd": str(PEERS)}
    return (await run_daemon(test, server)).url
