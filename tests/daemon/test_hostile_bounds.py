"""
What a hostile upstream can make a real daemon hold, with a real hostile stdio server
(L{tests.fixtures.hostile_upstream}): log messages flooded at a host that stopped
reading, events queued for an C{/v1/events} reader that does not read, and thousands of
questions asked in one call.  Each costs the daemon a bounded amount, whatever the
upstream sends.
"""

from __future__ import annotations

import json
import select
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from mcpx.questions.broker import MAX_PENDING_PER_CALL
from tests.support.daemons import daemon_argv, daemon_environ, reap_on_cleanup, rss_bytes
from tests.support.http import TestClient
from tests.support.processes import ChildProcess, free_tcp_port, reactor, spawn

HOSTILE = str(Path(__file__).resolve().parents[1] / "fixtures" / "hostile_upstream.py")

MB = 1000 * 1000
MiB = 1024 * 1024

#: How many 1 MB log lines the upstream floods, and how much of them the daemon may keep.
FLOOD = 400
GROWTH = 150 * MiB
#: How many list changes the upstream storms.
STORM = 50_000


async def pause(seconds: float = 0.05) -> None:
    await deferLater(reactor, seconds, lambda: None)


def small_buffer(s: socket.socket) -> None:
    """As little kernel buffering as the kernel allows: a reader that stops, stops."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)


class Reader:
    """The bytes one socket received, read without blocking the test's reactor."""

    def __init__(self, s: socket.socket) -> None:
        s.setblocking(False)
        self.socket = s
        self.data = bytearray()

    def read_now(self) -> bool:
        """Read what has arrived; C{False} once the other side has closed."""
        while select.select([self.socket], [], [], 0)[0]:
            try:
                chunk = self.socket.recv(4 * MiB)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not chunk:
                return False
            self.data.extend(chunk)
        return True

    async def until(self, needle: bytes, count: int = 1, timeout: float = 120) -> None:
        """Read until C{needle} has arrived C{count} times."""
        waited = 0.0
        while self.data.count(needle) < count:
            if not self.read_now():
                raise AssertionError(f"closed before {needle!r}: {bytes(self.data[-500:])!r}")
            if waited > timeout:
                raise AssertionError(f"no {needle!r} after {timeout}s: {bytes(self.data[-500:])!r}")
            await pause()
            waited += 0.05


class StdioHost(Reader):
    """A host on the daemon's MCP socket, as C{mcpx serve} connects it."""

    def __init__(self, path: str, *, small: bool = False) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if small:
            small_buffer(s)
        s.connect(path)
        super().__init__(s)
        self.next_id = 0

    def send(self, message: dict[str, Any]) -> None:
        self.socket.setblocking(True)
        self.socket.sendall(json.dumps(message).encode() + b"\n")
        self.socket.setblocking(False)

    def request(self, method: str, params: dict[str, Any]) -> int:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        return self.next_id

    def call(self, tool: str, arguments: dict[str, Any]) -> int:
        return self.request(
            "tools/call",
            {
                "name": "mcpx_call",
                "arguments": {"server": "hostile", "tool": tool, "arguments": arguments},
            },
        )

    def messages(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in bytes(self.data).splitlines() if line.strip()]

    async def answer(self, request_id: int) -> dict[str, Any]:
        needle = b'"id":%d,' % request_id
        while True:
            for message in self.messages():
                if message.get("id") == request_id and "method" not in message:
                    return message
            await self.until(needle, self.data.count(needle) + 1)

    async def open(self, capabilities: dict[str, Any] | None = None) -> None:
        asked = self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": capabilities or {},
                "clientInfo": {"name": "stops-reading", "version": "1"},
            },
        )
        await self.answer(asked)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})


def text_of(answer: dict[str, Any]) -> str:
    text: str = answer["result"]["content"][0]["text"]
    return text


class HostileUpstreamBoundsTests(TestCase):
    timeout = 300

    def setUp(self) -> None:
        self.state_dir = tempfile.mkdtemp(prefix="mcpx-state-")
        self.config_home = tempfile.mkdtemp(prefix="mcpx-cfg-")
        self.addCleanup(shutil.rmtree, self.state_dir, True)
        self.addCleanup(shutil.rmtree, self.config_home, True)
        (Path(self.config_home) / "mcpx").mkdir()
        servers = {"hostile": {"command": sys.executable, "args": [HOSTILE]}}
        (Path(self.config_home) / "mcpx" / "config.json").write_text(
            json.dumps({"servers": servers})
        )
        self.api = str(Path(self.state_dir) / "mcpx.sock")
        self.mcp = str(Path(self.state_dir) / "mcpx-mcp.sock")
        self.port = free_tcp_port()

    async def start(self) -> int:
        env = daemon_environ(self.state_dir, self.config_home)
        # The questions a hostile upstream asks wait in the broker for these tests, which
        # are about the bounds on them, not refused for want of a watcher.
        env["MCPX_PROTO_BROKER_WHEN_UNWATCHED"] = "wait"
        child = spawn(daemon_argv(self.port), env=env)
        reap_on_cleanup(self, child)
        await child.wait_for(rb"listening on http://127\.0\.0\.1:\d+")
        self.child: ChildProcess = child
        assert child.transport is not None and child.transport.pid
        return int(child.transport.pid)

    def events(self, query: str, *, small: bool = False) -> Reader:
        """A C{GET /v1/events?...} stream on the daemon's unix socket."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if small:
            small_buffer(s)
        s.connect(self.api)
        self.addCleanup(s.close)
        s.sendall(f"GET /v1/events?{query} HTTP/1.1\r\nHost: mcpx\r\n\r\n".encode())
        return Reader(s)

    async def host(self, *, small: bool = False, log_level: str | None = None) -> StdioHost:
        host = StdioHost(self.mcp, small=small)
        self.addCleanup(host.socket.close)
        await host.open()
        if log_level is not None:
            await host.answer(host.request("logging/setLevel", {"level": log_level}))
        # The upstream started and listed, so that what it costs is already counted.
        answer = await host.answer(host.call("echo", {"text": "warm"}))
        self.assertEqual(text_of(answer), "warm")
        return host

    async def test_a_host_that_stops_reading_is_held_a_bounded_amount_of_log(self) -> None:
        """
        The upstream floods 400 log lines of 1 MB at a host (stdio, legacy, logging
        level info) that has stopped reading: the daemon's memory grows by far less
        than the flood, and when the host reads again it gets what was held, a message
        saying how many were dropped, and the answer.
        """
        pid = await self.start()
        host = await self.host(small=True, log_level="info")
        finished = self.events("kind=call.finished")
        await finished.until(b"subscribed")
        before = rss_bytes(pid)
        flood = host.call("flood", {"count": FLOOD, "size": MB})
        # Every line went through the daemon once its call has finished.
        await finished.until(b"event: call.finished")
        grown = rss_bytes(pid) - before
        self.assertLess(grown, GROWTH, f"the daemon grew by {grown // MiB} MiB")
        answer = await host.answer(flood)
        self.assertEqual(text_of(answer), "flooded")
        logs = [m["params"] for m in host.messages() if m.get("method") == "notifications/message"]
        passed = [params for params in logs if params.get("logger") == "flood"]
        notices = [params for params in logs if params.get("logger") == "mcpx"]
        self.assertEqual(len(notices), 1, notices)
        self.assertEqual(notices[0]["level"], "info")
        dropped = int(notices[0]["data"].split("dropped ")[1].split()[0])
        self.assertEqual(len(passed) + dropped, FLOOD)
        self.assertLess(len(passed), FLOOD // 2)
        # The host is served as before.
        again = await host.answer(host.call("echo", {"text": "still here"}))
        self.assertEqual(text_of(again), "still here")

    def post(self, body: dict[str, Any], headers: dict[str, str], *, small: bool = False) -> Reader:
        """A POST to C{/mcp} on its own connection, its response read as it comes."""
        s = socket.socket()
        if small:
            small_buffer(s)
        s.connect(("127.0.0.1", self.port))
        self.addCleanup(s.close)
        data = json.dumps(body).encode()
        head = {
            "Host": "127.0.0.1",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Content-Length": str(len(data)),
            **headers,
        }
        lines = "".join(f"{name}: {value}\r\n" for name, value in head.items())
        s.sendall(f"POST /mcp HTTP/1.1\r\n{lines}\r\n".encode() + data)
        return Reader(s)

    async def flood_over_http(self, meta: dict[str, Any], headers: dict[str, str]) -> None:
        """
        The flood at a POST to C{/mcp} that asked for info log messages and then
        stopped reading: the daemon stays small, and the host gets a count of the rest.
        """
        pid = self.pid
        finished = self.events("kind=call.finished")
        await finished.until(b"subscribed")
        arguments = {
            "server": "hostile",
            "tool": "flood",
            "arguments": {"count": FLOOD, "size": MB},
        }
        params: dict[str, Any] = {"name": "mcpx_call", "arguments": arguments}
        if meta:
            params["_meta"] = meta
        before = rss_bytes(pid)
        response = self.post(
            {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params},
            headers,
            small=True,
        )
        await finished.until(b"event: call.finished")
        grown = rss_bytes(pid) - before
        self.assertLess(grown, GROWTH, f"the daemon grew by {grown // MiB} MiB")
        await response.until(b"0\r\n\r\n")
        self.assertIn(b"flooded", response.data)
        self.assertIn(b"log messages while this client was not reading them", response.data)
        self.assertLess(response.data.count(b'"logger":"flood"'), FLOOD // 2)

    async def test_a_modern_http_host_that_stops_reading(self) -> None:
        """The flood at a 2026-07-28 POST that asked for info log messages in C{_meta}."""
        self.pid = await self.start()
        await self.host()
        await self.flood_over_http(
            {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/logLevel": "info",
            },
            {
                "MCP-Protocol-Version": "2026-07-28",
                "Mcp-Method": "tools/call",
                "Mcp-Name": "mcpx_call",
            },
        )

    async def test_a_legacy_http_session_that_stops_reading(self) -> None:
        """
        The flood at a POST of a legacy Streamable HTTP session whose host set the info
        level with C{logging/setLevel}: the messages go on that POST's stream.
        """
        self.pid = await self.start()
        await self.host()
        initialize = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "stops-reading", "version": "1"},
        }
        opened = self.post(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize}, {}
        )
        await opened.until(b"serverInfo")
        head = bytes(opened.data).split(b"\r\n\r\n")[0].decode()
        [session] = [
            line.split(":", 1)[1].strip()
            for line in head.splitlines()
            if line.lower().startswith("mcp-session-id:")
        ]
        headers = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, headers)
        level = self.post(
            {"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "info"}},
            headers,
        )
        await level.until(b'"id":2')
        await self.flood_over_http({}, headers)

    async def test_a_storm_of_list_changes_waits_once_for_a_host_that_stops_reading(
        self,
    ) -> None:
        """
        The upstream sends 50,000 C{notifications/prompts/list_changed} while a host
        (stdio, legacy) has stopped reading: once its stream is backed up one waits for
        it, not every one, and it gets that one when it reads again.
        """
        await self.start()
        host = await self.host(small=True)
        other = await self.host()
        finished = self.events("kind=call.finished")
        await finished.until(b"subscribed")
        storm = other.call("storm", {"count": STORM})
        self.assertEqual(text_of(await other.answer(storm)), "stormed")
        await finished.until(b"event: call.finished")
        # Read all, then one more call: the stream has drained before its answer.
        answer = await host.answer(host.call("echo", {"text": "after"}))
        self.assertEqual(text_of(answer), "after")
        changes = [
            m for m in host.messages() if m.get("method") == "notifications/prompts/list_changed"
        ]
        self.assertGreater(len(changes), 0)
        self.assertLess(len(changes), STORM // 2)

    async def test_an_upstream_that_does_not_read_its_answers(self) -> None:
        """
        The upstream sends 400 requests with a 1 MB method name (each answered with a
        -32601 naming it) and never reads its stdin: the answers that wait for it are
        bounded, the rest are dropped, and the daemon says so in its log.
        """
        pid = await self.start()
        host = await self.host()
        before = rss_bytes(pid)
        deaf = host.call("deaf", {"count": FLOOD, "size": MB})
        self.assertEqual(text_of(await host.answer(deaf)), "deafened")
        grown = rss_bytes(pid) - before
        self.assertLess(grown, GROWTH, f"the daemon grew by {grown // MiB} MiB")
        await self.child.wait_for(rb"does not read its stdin")

    async def test_an_events_reader_that_does_not_read_is_dropped_by_bytes(self) -> None:
        """
        An C{/v1/events} reader that stops reading while the upstream floods 200 log
        lines of 1 MB (fewer events than the count bound) is dropped once its queue
        holds 16 MiB, and the daemon does not keep the flood.
        """
        pid = await self.start()
        host = await self.host()
        finished = self.events("kind=call.finished")
        stuck = self.events("kind=server.log", small=True)
        await finished.until(b"subscribed")
        before = rss_bytes(pid)
        flood = host.call("flood", {"count": 200, "size": MB})
        await finished.until(b"event: call.finished")
        self.assertEqual(text_of(await host.answer(flood)), "flooded")
        grown = rss_bytes(pid) - before
        self.assertLess(grown, 100 * MiB, f"the daemon grew by {grown // MiB} MiB")
        await stuck.until(b"event: dropped")
        self.assertIn(b"bytes of events waited for a slow consumer", stuck.data)
        self.assertLess(stuck.data.count(b"event: server.log"), 100)

    async def test_a_call_that_asks_two_thousand_questions_is_refused_past_the_cap(self) -> None:
        """
        One call asks 2,000 questions at once: the first L{MAX_PENDING_PER_CALL} wait
        in the broker, every other one is answered at once with an error that says why,
        and the host's other calls are served as before.
        """
        await self.start()
        host = await self.host()
        asking = host.call("ask", {"count": 2000})
        summary = json.loads(text_of(await host.answer(asking)))
        self.assertEqual(summary["errors"], 2000 - MAX_PENDING_PER_CALL)
        self.assertIn("too many questions", summary["first_error"]["message"])
        self.assertIn("this call", summary["first_error"]["message"])
        # The host's other calls are served as before.
        other = await host.answer(host.call("echo", {"text": "served"}))
        self.assertEqual(text_of(other), "served")
        api = TestClient(reactor, unix_socket=self.api)
        try:
            code, listed = await api.get_json("http://mcpx/v1/questions?all=true")
        finally:
            await api.close()
        self.assertEqual(code, 200)
        # Only those it was let ask were ever recorded (withdrawn when the call ended).
        self.assertEqual(len(listed["questions"]), MAX_PENDING_PER_CALL)
