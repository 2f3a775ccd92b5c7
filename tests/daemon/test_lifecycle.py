"""
Reloads of a real daemon: a missing or invalid file never replaces the running
configuration, and the operator is told why where they look (log, C{mcpx status}).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from mcp import Client, MCPError
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from mcpx.settings.config import DEFAULT_CONFIG_ORIGIN
from tests.cli.test_real_daemon import RealDaemonCase, children_of, command_line
from tests.server.test_peers import in_thread
from tests.support.processes import (
    REPO,
    ChildProcess,
    free_tcp_port,
    kill_on_cleanup,
    reactor,
    spawn,
)

DEMO = [sys.executable, "-m", "mcpx.demo"]


class ReloadLifecycleTests(RealDaemonCase):
    def config_path(self) -> Path:
        return Path(self.env["MCPX_CONFIG"])

    async def test_missing_file_keeps_configuration(self) -> None:
        """
        The config file moved away: mcpx call still reaches the servers it configured
        after SIGHUP, whose log line says the file is missing; the demo never appears.
        """
        await self.start_daemon({"alpha": DEMO, "beta": DEMO})
        path = self.config_path()
        path.rename(path.with_suffix(".moved"))
        assert self.daemon is not None
        self.daemon.signal("HUP")
        await self.daemon.wait_for(rb"no such file", fd=2, timeout=10)
        servers = json.loads((await self.ok("servers", "--json")).out)
        names = sorted(entry["name"] for entry in servers["servers"])
        self.assertEqual(names, ["alpha", "beta"])
        self.assertNotIn(DEFAULT_CONFIG_ORIGIN, self.daemon.text(2))
        called = await self.ok("call", "beta", "echo", "text=still here")
        self.assertIn("still here", called.out)

    async def test_invalid_file_reason_logged_and_in_status(self) -> None:
        """SIGHUP with a half-written file logs the line and column; mcpx status shows it."""
        await self.start_daemon({"alpha": DEMO})
        self.config_path().write_text('{"servers": {"alpha": {"command": "x\n')
        assert self.daemon is not None
        self.daemon.signal("HUP")
        await self.daemon.wait_for(rb"line 1 column", fd=2, timeout=10)
        status = await self.ok("status")
        self.assertIn("last reload refused", status.err)
        self.assertIn("line 1 column", status.err)


#: What every caller the stop cuts short is told.
SHUTTING_DOWN = "mcpx is shutting down"
MISBEHAVING = [sys.executable, "-m", "tests.fixtures.misbehaving", "--mode"]
#: An upstream that ignores SIGTERM and stays after its stdin closes.
STUBBORN = [*MISBEHAVING, "ignore-term"]
#: A call that stays in flight until the daemon stops.
SLOW = {"steps": 100, "interval": 0.2}


def _raw(
    connection: http.client.HTTPConnection, method: str, path: str, body: Any = None
) -> tuple[int, dict[str, str], Any]:
    """One request on a kept-alive connection: status, headers, JSON body."""
    data = None if body is None else json.dumps(body).encode()
    connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    raw = response.read()
    headers = {k.lower(): v for k, v in response.getheaders()}
    return response.status, headers, json.loads(raw) if raw else None


def _events_until_end(port: int, opened: threading.Event) -> bytes:
    """Read C{/v1/events} until the daemon ends the stream; all of it."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        received = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return received
            received += chunk
            if b"subscribed" in received:
                opened.set()


async def _legacy_slow_call(url: str, started: threading.Event, outcome: list[str]) -> None:
    """
    An SDK legacy session over HTTP whose countdown is in flight as the daemon stops;
    what the call got goes in C{outcome} at once (the session's end may take longer).
    """
    async with Client(url, mode="legacy") as client:

        async def progressed(progress: float, total: float | None, message: str | None) -> None:
            started.set()

        try:
            await client.call_tool(
                "mcpx_call",
                {"server": "demo", "tool": "countdown", "arguments": SLOW},
                progress_callback=progressed,
            )
        except MCPError as e:
            outcome.append(f"error: {e}")
        else:
            outcome.append("answered")


def pid_alive(pid: int) -> bool:
    """Whether C{pid} runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


class DaemonOnPort(TestCase):
    """A real daemon on a loopback TCP port, its config file rewritten at will."""

    timeout = 60

    def write_config(self, servers: dict[str, Any]) -> None:
        entries = {
            name: spec if isinstance(spec, dict) else {"command": spec[0], "args": spec[1:]}
            for name, spec in servers.items()
        }
        self.config.write_text(json.dumps({"servers": entries}))

    async def start(self, servers: dict[str, Any]) -> tuple[ChildProcess, int]:
        state = tempfile.mkdtemp(prefix="mcpx-stop-")
        self.addCleanup(shutil.rmtree, state, True)
        self.config = Path(state) / "servers.json"
        self.write_config(servers)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_")}
        env.update(MCPX_STATE_DIR=state, MCPX_CONFIG=str(self.config), XDG_CONFIG_HOME=state)
        port = free_tcp_port()
        daemon = spawn(
            [
                sys.executable,
                "-m",
                "mcpx",
                "daemon",
                "--daemon-listen",
                f"tcp:{port}:interface=127.0.0.1",
            ],
            env=env,
            cwd=str(REPO),
        )
        self.addCleanup(kill_on_cleanup, daemon)
        await daemon.wait_for(rb"daemon is running", fd=2, timeout=30)
        return daemon, port

    async def until(self, event: threading.Event | list[str], what: str) -> None:
        for _ in range(300):
            if event.is_set() if isinstance(event, threading.Event) else event:
                return
            await deferLater(reactor, 0.05, lambda: None)
        self.fail(f"never happened: {what}")

    async def post(self, port: int, path: str, body: Any) -> tuple[int, Any]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            status, _, answer = await deferToThread(_raw, connection, "POST", path, body)
        finally:
            connection.close()
        return status, answer


class ShutdownLifecycleTests(DaemonOnPort):
    """
    A real daemon stopped with hosts connected and calls in flight: every caller gets
    the shutting-down error, no new work is accepted, open streams end properly, and a
    second signal ends the wait for an upstream that will not leave.
    """

    def upstreams_left(self, daemon: ChildProcess) -> list[str]:
        assert daemon.transport is not None
        return [command_line(pid) for pid in children_of(daemon.transport.pid)]

    async def test_sigterm_then_a_second_sigterm(self) -> None:
        """
        SIGTERM with a legacy SDK session's countdown in flight, an event stream open,
        a keep-alive connection and an upstream that ignores SIGTERM and its stdin:
        the call gets "mcpx is shutting down", the keep-alive connection's next
        requests (a reload among them) get 503 shutting_down, the event stream ends
        with its last frame, and a second SIGTERM ends the stop at once, leaving no
        upstream process and no ReactorNotRunning in the log.
        """
        daemon, port = await self.start({"demo": DEMO, "stubborn": STUBBORN})
        assert daemon.transport is not None
        keep = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        self.addCleanup(keep.close)
        status, _, called = await deferToThread(
            _raw,
            keep,
            "POST",
            "/v1/call",
            {"server": "stubborn", "tool": "echo", "arguments": {"text": "hi"}},
        )
        self.assertEqual(status, 200, called)
        [stubborn_pid] = children_of(daemon.transport.pid)
        opened, started = threading.Event(), threading.Event()
        events = deferToThread(_events_until_end, port, opened)
        outcome: list[str] = []
        legacy = in_thread(
            lambda: _legacy_slow_call(f"http://127.0.0.1:{port}/mcp", started, outcome)
        )
        await self.until(opened, "the event stream opened")
        await self.until(started, "the countdown ran upstream")

        daemon.signal("TERM")
        await daemon.wait_for(rb"stopping: answering", fd=2, timeout=10)
        status, headers, body = await deferToThread(_raw, keep, "POST", "/v1/reload", {})
        self.assertEqual((status, body["error"]["code"]), (503, "shutting_down"))
        self.assertEqual(headers["connection"], "close")
        await self.until(outcome, "the call in flight was answered")
        self.assertIn(SHUTTING_DOWN, outcome[0])
        frames = await events
        self.assertIn(b"event: dropped", frames)
        self.assertIn(b"the daemon is stopping", frames)
        self.assertTrue(frames.endswith(b"0\r\n\r\n"), "the chunked stream was finished")
        self.assertTrue(pid_alive(stubborn_pid), "the stubborn upstream holds the stop")

        stopping_since = time.monotonic()
        daemon.signal("TERM")
        self.assertEqual(await daemon.ended(timeout=10), 0, daemon.text(2))
        self.assertLess(time.monotonic() - stopping_since, 3.0)
        self.assertNotIn("ReactorNotRunning", daemon.text(2))
        self.assertNotIn("reloaded", daemon.text(2))
        for _ in range(40):
            if not pid_alive(stubborn_pid):
                break
            await deferLater(reactor, 0.05, lambda: None)
        self.assertFalse(pid_alive(stubborn_pid), "the stubborn upstream outlived the daemon")
        await legacy

    async def test_sigint(self) -> None:
        """SIGINT (Ctrl-C): the same answer to the call in flight; no upstream left."""
        daemon, port = await self.start({"demo": DEMO})
        assert daemon.transport is not None
        started = threading.Event()
        outcome: list[str] = []
        legacy = in_thread(
            lambda: _legacy_slow_call(f"http://127.0.0.1:{port}/mcp", started, outcome)
        )
        await self.until(started, "the countdown ran upstream")
        children = children_of(daemon.transport.pid)
        self.assertTrue(children)
        daemon.signal("INT")
        await self.until(outcome, "the call in flight was answered")
        self.assertIn(SHUTTING_DOWN, outcome[0])
        self.assertEqual(await daemon.ended(timeout=15), 0, daemon.text(2))
        self.assertEqual([c for c in children if pid_alive(c)], [])
        await legacy


class GrandchildReloadTests(DaemonOnPort):
    async def test_reload_of_a_server_whose_child_forked(self) -> None:
        """
        A server whose child (C{sleep 600}) holds its pipes is changed by a reload: the
        reload does not wait out the 5 s grace, and neither the old server nor the
        grandchild is left.
        """
        fork = [*MISBEHAVING, "fork-grandchild"]
        daemon, port = await self.start({"fg": fork})
        assert daemon.transport is not None
        status, _ = await self.post(
            port, "/v1/call", {"server": "fg", "tool": "echo", "arguments": {"text": "x"}}
        )
        self.assertEqual(status, 200)
        [server] = children_of(daemon.transport.pid)
        [grandchild] = children_of(server)
        self.assertIn("sleep", command_line(grandchild))
        self.write_config({"fg": {"command": fork[0], "args": fork[1:], "env": {"CHANGED": "1"}}})
        began = time.monotonic()
        status, answer = await self.post(port, "/v1/reload", {})
        took = time.monotonic() - began
        self.assertEqual((status, answer["changed"]), (200, ["fg"]), answer)
        self.assertLess(took, 2.0)
        for _ in range(40):
            if not pid_alive(server) and not pid_alive(grandchild):
                break
            await deferLater(reactor, 0.05, lambda: None)
        self.assertEqual([p for p in (server, grandchild) if pid_alive(p)], [])
        daemon.signal("TERM")
        self.assertEqual(await daemon.ended(timeout=15), 0)
